//! One NVIDIA GPU as the CUDA engine drives it (#28): its context and
//! stream, the engine's kernels (`kernels/*.cu`) compiled by NVRTC to a
//! cubin for its exact architecture (PTX only for a GPU newer than NVRTC)
//! and loaded once, and f16 GEMMs through cuBLASLt (f32
//! accumulation, bias in the epilogue). The kernels' launches are in
//! `transformer.rs` and `cnn.rs`; how a family's pass is run, in
//! `tower.rs`. The family code
//! (`encoder_run.rs`, `vit_run.rs`, `text_run.rs`, `cnn_run.rs`,
//! `convnext_run.rs`) speaks to it in row-major matrices and NHWC
//! tensors.
//!
//! Written without a GPU; first run on an H100 on 2026-11-26, where every
//! family passed. `tests/cuda_gpu.rs` (`scripts/cuda-kit.sh`) compares what runs on it
//! with the plans' f32 references wherever a GPU is present
//! (`PIPELINE_REQUIRE_GPU=1` makes its absence a failure).
//!
//! With `cudnn.rs`, the engine's `unsafe` modules: kernel launches
//! and cuBLASLt take raw device pointers. Every entry point checks the sizes
//! of the buffers it is given against the shapes it is told
//! ([`check_len`]) before it launches.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr,
    LaunchConfig,
};
use half::f16;

use super::kernels::{Compiled, SOURCES, compile_cached, supported_archs, target_for};
use super::libs::cuda_libraries;

mod blas;
mod cnn;
mod host;
mod tower;
mod transformer;

pub use host::Download;
pub use tower::{DeviceOutputs, Images, PendingRead, Tower};

/// What went wrong on the GPU, in one line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct GpuError(pub String);

fn driver(what: &str) -> impl FnOnce(cudarc::driver::DriverError) -> GpuError + '_ {
    move |e| GpuError(format!("{what}: {e}"))
}

/// A matrix of f16 on the device.
pub type Buf = CudaSlice<f16>;

/// A GEMM's weights on the device: `[k, n]` row-major and its bias.
pub struct DeviceGemm {
    /// Inner size.
    pub k: usize,
    /// Output width.
    pub n: usize,
    w: Buf,
    bias: Option<Buf>,
}

/// A LayerNorm's weight and bias on the device, f32.
pub struct DeviceNorm {
    weight: CudaSlice<f32>,
    bias: CudaSlice<f32>,
}

/// `(x - mean) / std` per channel, as the kernels take it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Norm3 {
    mean: [f32; 3],
    inv_std: [f32; 3],
}

// SAFETY: plain `f32`s, `#[repr(C)]`, the layout of the kernels' `Norm3`
// and `PatchNorm` structs.
unsafe impl DeviceRepr for Norm3 {}

impl Norm3 {
    /// From the model's mean and std on 0..255.
    pub fn new(mean: [f32; 3], std: [f32; 3]) -> Self {
        Self {
            mean,
            inv_std: std.map(|s| 1.0 / s),
        }
    }
}

/// A row-major operand of a batched GEMM: where it starts in its buffer,
/// its leading dimension, and the stride between batch entries.
#[derive(Debug, Clone, Copy)]
pub struct Strided {
    /// Offset of the first entry, in elements.
    pub offset: usize,
    /// Elements between rows.
    pub ld: usize,
    /// Elements between batch entries.
    pub stride: usize,
}

/// Panics unless `buf` holds at least `needed` elements: the check before
/// every launch that reads or writes it.
fn check_len<T>(buf: &CudaSlice<T>, needed: usize, what: &str) {
    assert!(
        buf.len() >= needed,
        "{what}: {} elements on the device, {needed} needed",
        buf.len()
    );
}

/// One GPU, opened.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: blas::Blas,
    kernels: HashMap<&'static str, CudaFunction>,
    host: host::HostBuffers,
}

const THREADS: u32 = 256;
const ROW_THREADS: u32 = 256;

fn elementwise(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(THREADS as usize).clamp(1, 1 << 20) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn per_row(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (u32::try_from(rows).expect("rows fit a grid"), 1, 1),
        block_dim: (ROW_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn int(v: usize) -> i32 {
    i32::try_from(v).expect("a size the kernels index with int")
}

impl Gpu {
    /// GPU `ordinal` (CUDA's numbering), its kernels compiled and loaded;
    /// or why not, in one line (a missing library with its fix first).
    pub fn open(ordinal: usize) -> Result<Self, GpuError> {
        if let Some(missing) = cuda_libraries().missing_line() {
            return Err(GpuError(missing));
        }
        let ctx = CudaContext::new(ordinal).map_err(driver("opening the GPU"))?;
        let capability = ctx
            .compute_capability()
            .map_err(driver("its compute capability"))?;
        let (min_major, min_minor) = super::MIN_COMPUTE_CAPABILITY;
        if capability < super::MIN_COMPUTE_CAPABILITY {
            return Err(GpuError(format!(
                "compute capability {}.{}: the CUDA engine needs {min_major}.{min_minor} or \
                 newer; use --engine vulkan",
                capability.0, capability.1
            )));
        }
        let arch = target_for(capability, &supported_archs()).ok_or_else(|| {
            GpuError(format!(
                "NVRTC compiles for no architecture at or below this GPU's {}.{}; \
                 use --engine vulkan",
                capability.0, capability.1
            ))
        })?;
        // A created stream, not the legacy NULL stream, which waits for
        // (and holds up) all other work on the device.
        let stream = ctx.new_stream().map_err(driver("creating a stream"))?;
        // SAFETY: every buffer of this GPU is made, used and freed on this
        // one stream, so cudarc's per-buffer events, which order work
        // across streams, would order nothing and cost an event record per
        // launch argument.
        unsafe { ctx.disable_event_tracking() };
        pool::keep(&ctx);
        // Compiled (or read from the kernel cache) side by side, loaded in
        // turn.
        let compiled: Vec<Result<Compiled, String>> = {
            use rayon::prelude::*;
            SOURCES
                .par_iter()
                .map(|source| compile_cached(source, &arch))
                .collect()
        };
        let mut kernels = HashMap::new();
        for (source, image) in SOURCES.iter().zip(compiled) {
            let module = ctx
                .load_module(image.map_err(GpuError)?.into_image())
                .map_err(driver(source.file))?;
            for entry in source.entries {
                let f = module.load_function(entry).map_err(driver(entry))?;
                kernels.insert(*entry, f);
            }
        }
        let blas = blas::Blas::new(stream.clone(), capability.0)?;
        Ok(Self {
            ctx,
            stream,
            blas,
            kernels,
            host: host::HostBuffers::default(),
        })
    }

    /// The GPU's name, as the driver gives it.
    pub fn name(&self) -> String {
        self.ctx.name().unwrap_or_else(|e| format!("? ({e})"))
    }

    fn kernel(&self, name: &str) -> &CudaFunction {
        &self.kernels[name]
    }

    /// `values` in f16 on the device.
    pub fn upload(&self, values: &[f32]) -> Result<Buf, GpuError> {
        let half: Vec<f16> = values.iter().map(|v| f16::from_f32(*v)).collect();
        self.stream
            .clone_htod(&half)
            .map_err(driver("uploading weights"))
    }

    /// `values` in f32 on the device.
    pub fn upload_f32(&self, values: &[f32]) -> Result<CudaSlice<f32>, GpuError> {
        self.stream
            .clone_htod(values)
            .map_err(driver("uploading weights"))
    }

    /// `n` f16 zeros.
    pub fn zeros(&self, n: usize) -> Result<Buf, GpuError> {
        self.stream
            .alloc_zeros::<f16>(n)
            .map_err(driver("allocating activations"))
    }

    /// The first `n` values of `buf`, as f32 on the host (waits for the
    /// stream).
    pub fn download(&self, buf: &Buf, n: usize) -> Result<Vec<f32>, GpuError> {
        check_len(buf, n, "download");
        let half = self
            .stream
            .clone_dtoh(&buf.slice(..n))
            .map_err(driver("reading results back"))?;
        Ok(half.iter().map(|v| v.to_f32()).collect())
    }

    /// A plan's GEMM on the device.
    pub fn gemm_weights(&self, g: &super::plan::Gemm) -> Result<DeviceGemm, GpuError> {
        Ok(DeviceGemm {
            k: g.k,
            n: g.n,
            w: self.upload(&g.weight)?,
            bias: g.bias.as_deref().map(|b| self.upload(b)).transpose()?,
        })
    }

    /// A plan's LayerNorm on the device.
    pub fn norm_weights(&self, ln: &super::plan::LayerNorm) -> Result<DeviceNorm, GpuError> {
        Ok(DeviceNorm {
            weight: self.upload_f32(&ln.weight)?,
            bias: self.upload_f32(&ln.bias)?,
        })
    }

    /// `y = x·W + b`, or with `accumulate` `y += x·W + b` (a residual),
    /// for `x: [rows, k]`, `y: [rows, n]`, row-major.
    pub fn gemm(
        &self,
        x: &Buf,
        rows: usize,
        g: &DeviceGemm,
        y: &mut Buf,
        accumulate: bool,
    ) -> Result<(), GpuError> {
        check_len(x, rows * g.k, "GEMM input");
        check_len(y, rows * g.n, "GEMM output");
        let call = blas::Call::row_major(rows, g.k, g.n, accumulate);
        let (w, _w) = g.w.device_ptr(&self.stream);
        let (xp, _x) = x.device_ptr(&self.stream);
        let bias = g.bias.as_ref().map(|b| b.device_ptr(&self.stream));
        let (yp, _y) = y.device_ptr_mut(&self.stream);
        // SAFETY: the sizes were checked above; cuBLASLt reads `n × k`
        // weights, `k × rows` inputs and `n` biases, writes `n × rows`.
        unsafe {
            self.blas
                .matmul(&call, (w, xp, yp), bias.as_ref().map(|(b, _)| *b), None)
        }
    }

    /// A 1×1 convolution of stride 1 as one GEMM over NHWC rows:
    /// `y = act(x·W + b + residual)` for `x: [rows, k]`, `y` and the
    /// optional `residual: [rows, n]`, `act` ReLU with `relu`. cuBLASLt's
    /// epilogue adds the bias and applies the ReLU after `β·C` (C the
    /// residual), as cuDNN's fused convolution does; the setup is kept per
    /// shape like every GEMM's, where cuDNN's legacy call builds a
    /// cuBLASLt plan for such a layer on every call.
    pub fn pointwise_conv(
        &self,
        x: &Buf,
        rows: usize,
        g: &DeviceGemm,
        y: &mut Buf,
        residual: Option<&Buf>,
        relu: bool,
    ) -> Result<(), GpuError> {
        check_len(x, rows * g.k, "1×1 convolution input");
        check_len(y, rows * g.n, "1×1 convolution output");
        if let Some(r) = residual {
            check_len(r, rows * g.n, "1×1 convolution residual");
        }
        let mut call = blas::Call::row_major(rows, g.k, g.n, residual.is_some());
        call.relu = relu;
        let (w, _w) = g.w.device_ptr(&self.stream);
        let (xp, _x) = x.device_ptr(&self.stream);
        let bias = g.bias.as_ref().map(|b| b.device_ptr(&self.stream));
        let residual = residual.map(|r| r.device_ptr(&self.stream));
        let (yp, _y) = y.device_ptr_mut(&self.stream);
        // SAFETY: the sizes were checked above; cuBLASLt reads `n × k`
        // weights, `k × rows` inputs, `n` biases and `n × rows` residual
        // values, writes `n × rows`.
        unsafe {
            self.blas.matmul(
                &call,
                (w, xp, yp),
                bias.as_ref().map(|(b, _)| *b),
                residual.as_ref().map(|(r, _)| *r),
            )
        }
    }

    /// Batched row-major `C[b] = alpha · A[b]·op(B[b])` over `batch`
    /// entries: `A[b]` is `m × k`; `B[b]` is `k × n`, or with `b_transposed`
    /// stored `n × k`; `C[b]` is `m × n`. Attention's two products.
    #[allow(clippy::too_many_arguments)]
    pub fn batched_gemm(
        &self,
        (m, n, k): (usize, usize, usize),
        alpha: f32,
        a: (&Buf, Strided),
        b: (&Buf, Strided),
        b_transposed: bool,
        c: (&mut Buf, Strided),
        batch: usize,
    ) -> Result<(), GpuError> {
        let extent = |s: &Strided, rows: usize, cols: usize| {
            s.offset + (batch - 1) * s.stride + (rows - 1) * s.ld + cols
        };
        check_len(a.0, extent(&a.1, m, k), "batched GEMM A");
        let (b_rows, b_cols) = if b_transposed { (n, k) } else { (k, n) };
        check_len(b.0, extent(&b.1, b_rows, b_cols), "batched GEMM B");
        check_len(c.0, extent(&c.1, m, n), "batched GEMM C");
        let call =
            blas::Call::row_major_batched((m, n, k), alpha, (a.1, b.1, c.1), b_transposed, batch);
        // cuBLASLt's A operand is row-major B, its B operand row-major A
        // (`Call::row_major_batched`), each from its offset.
        let at = |base: u64, s: &Strided| base + (s.offset * size_of::<f16>()) as u64;
        let (bp, _b) = b.0.device_ptr(&self.stream);
        let (ap, _a) = a.0.device_ptr(&self.stream);
        let c_at = at(0, &c.1);
        let (cp, _c) = c.0.device_ptr_mut(&self.stream);
        // SAFETY: every batch entry's last element was checked above to lie
        // inside its buffer.
        unsafe {
            self.blas
                .matmul(&call, (at(bp, &b.1), at(ap, &a.1), cp + c_at), None, None)
        }
    }

    /// The engine's stream (cuDNN is bound to it).
    pub(super) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Waits for everything queued.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.stream.synchronize().map_err(driver("synchronising"))
    }

    /// Returns the memory the stream-ordered pool keeps to the device
    /// (after an out-of-memory error, before a smaller batch).
    pub fn release_cached_memory(&self) {
        if self.synchronize().is_ok() {
            pool::trim(&self.ctx);
        }
    }

    /// Free and total device memory, in bytes.
    pub fn memory(&self) -> Result<(usize, usize), GpuError> {
        self.ctx.mem_get_info().map_err(driver("memory info"))
    }
}

/// The device's stream-ordered memory pool (which cudarc's allocations
/// come from), the one `unsafe` of its own here.
mod pool {
    use cudarc::driver::CudaContext;
    use cudarc::driver::result::device;
    use cudarc::driver::sys::{self, CUmemPool_attribute};

    /// Keeps freed memory in the pool: by default it returns everything
    /// above 0 bytes to the device at each synchronisation, so every pass
    /// would allocate from the driver again. A failure costs speed only.
    pub(super) fn keep(ctx: &CudaContext) {
        // SAFETY: the device's own default pool; the attribute is a u64.
        unsafe {
            if let Ok(pool) = device::get_default_mem_pool(ctx.cu_device()) {
                let mut threshold = u64::MAX;
                let _ = sys::cuMemPoolSetAttribute(
                    pool,
                    CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                    (&raw mut threshold).cast(),
                );
            }
        }
    }

    /// Returns what the pool keeps unused to the device.
    pub(super) fn trim(ctx: &CudaContext) {
        // SAFETY: the device's own default pool, after a synchronisation.
        unsafe {
            if let Ok(pool) = device::get_default_mem_pool(ctx.cu_device()) {
                let _ = sys::cuMemPoolTrimTo(pool, 0);
            }
        }
    }
}
