//! One NVIDIA GPU as the CUDA engine drives it (#28): its context and
//! stream, the engine's kernels (`kernels/*.cu`) compiled by NVRTC for its
//! architecture and loaded once, and f16 GEMMs through cuBLASLt (f32
//! accumulation, bias in the epilogue). The family code
//! (`encoder_run.rs`, `vit_run.rs`, `text_run.rs`, `cnn_run.rs`,
//! `convnext_run.rs`) speaks to it in row-major matrices and NHWC
//! tensors.
//!
//! **Not yet run on a GPU:** no GPU machine was lent while it was written.
//! `tests/cuda_gpu.rs` (`scripts/cuda-kit.sh`) compares what runs on it
//! with the plans' f32 references wherever a GPU is present
//! (`PIPELINE_REQUIRE_GPU=1` makes its absence a failure).
//!
//! With `cudnn.rs`, the engine's modules with `unsafe`: kernel launches
//! and cuBLASLt take raw device pointers. Every entry point checks the sizes
//! of the buffers it is given against the shapes it is told
//! ([`check_len`]) before it launches.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::cublaslt::{CudaBlasLT, Matmul, MatmulConfig};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, CudaView, DeviceRepr, LaunchConfig,
    PushKernelArg,
};
use half::f16;

use super::kernels::{SOURCES, compile_cached};
use super::libs::cuda_libraries;

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

/// A batch as a model's forward pass takes it: `u8` NCHW images of
/// `side × side`, padded with zero images to `padded` rows (a fixed batch
/// shape: an image's result does not depend on how many came with it),
/// normalised by `norm` on the device.
#[derive(Debug, Clone, Copy)]
pub struct Images<'a> {
    /// The real images.
    pub pixels: &'a [u8],
    /// Rows run.
    pub padded: usize,
    /// Their side.
    pub side: usize,
    /// The model's normalisation.
    pub norm: Norm3,
}

impl Images<'_> {
    /// How many real images (at most `padded`).
    pub fn real(&self) -> usize {
        let real = self.pixels.len() / (3 * self.side * self.side);
        assert!(self.padded >= real, "padding cannot drop rows");
        real
    }
}

/// A family's weights on a GPU, as the engine runs them.
pub trait Tower: Send + Sync {
    /// A pass over `images` queued on the GPU, not waited for.
    fn launch(&self, gpu: &Gpu, images: Images<'_>) -> Result<DeviceOutputs, GpuError>;

    /// A pass over `images`, waited for: `padded` rows of features, and of
    /// logits where the model has a classifier, f32 on the host, as the
    /// plan's `reference` gives them.
    fn forward(
        &self,
        gpu: &Gpu,
        images: Images<'_>,
    ) -> Result<(Vec<f32>, Option<Vec<f32>>), GpuError> {
        self.launch(gpu, images)?.read(gpu)
    }
}

/// A pass's results still on the device, queued: the features (`rows ×
/// width`, L2-normalised on the host when `normalize`) and the logits
/// where the model has a classifier. [`DeviceOutputs::read`] waits for
/// them.
pub struct DeviceOutputs {
    /// `[rows, width]`.
    pub features: Buf,
    /// Rows (the padded batch).
    pub rows: usize,
    /// Feature width.
    pub width: usize,
    /// L2-normalise each feature row once read (the CLIP-like towers).
    pub normalize: bool,
    /// `[rows, classes]` and `classes`.
    pub logits: Option<(Buf, usize)>,
}

impl DeviceOutputs {
    /// The features and logits on the host, once the GPU has them.
    pub fn read(self, gpu: &Gpu) -> Result<(Vec<f32>, Option<Vec<f32>>), GpuError> {
        let logits = match &self.logits {
            Some((buf, classes)) => Some(gpu.download(buf, self.rows * classes)?),
            None => None,
        };
        let mut features = gpu.download(&self.features, self.rows * self.width)?;
        if self.normalize {
            super::plan::l2_normalize_rows(&mut features, self.width);
        }
        Ok((features, logits))
    }
}

/// One GPU, opened.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlasLT,
    kernels: HashMap<&'static str, CudaFunction>,
}

/// The PTX architectures the kernels are compiled for, by compute
/// capability; a newer GPU JIT-compiles the newest.
const ARCHES: [((i32, i32), &str); 6] = [
    ((8, 0), "compute_80"),
    ((8, 6), "compute_86"),
    ((8, 9), "compute_89"),
    ((9, 0), "compute_90"),
    ((10, 0), "compute_100"),
    ((12, 0), "compute_120"),
];

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
        let arch = ARCHES
            .iter()
            .rev()
            .find(|(cc, _)| *cc <= capability)
            .map(|(_, arch)| *arch)
            .ok_or_else(|| {
                GpuError(format!(
                    "compute capability {}.{}: the CUDA engine needs 8.0 (Ampere) or newer",
                    capability.0, capability.1
                ))
            })?;
        let stream = ctx.default_stream();
        // Compiled (or read from the PTX cache) side by side, loaded in turn.
        let compiled: Vec<Result<String, String>> = {
            use rayon::prelude::*;
            SOURCES
                .par_iter()
                .map(|source| compile_cached(source, arch))
                .collect()
        };
        let mut kernels = HashMap::new();
        for (source, ptx) in SOURCES.iter().zip(compiled) {
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_src(ptx.map_err(GpuError)?))
                .map_err(driver(source.file))?;
            for entry in source.entries {
                let f = module.load_function(entry).map_err(driver(entry))?;
                kernels.insert(*entry, f);
            }
        }
        let blas =
            CudaBlasLT::new(stream.clone()).map_err(|e| GpuError(format!("cuBLASLt: {e:?}")))?;
        Ok(Self {
            ctx,
            stream,
            blas,
            kernels,
        })
    }

    /// The CUDA ordinal of the GPU at PCI bus id `pci` (`0000:01:00.0`,
    /// as Vulkan and `nvidia-smi` write it), or why none.
    pub fn ordinal_at(pci: &str) -> Result<usize, GpuError> {
        use cudarc::driver::sys::CUdevice_attribute as A;
        // Loaded by path first, so that cudarc's load by name finds them.
        if let Some(missing) = cuda_libraries().missing_line() {
            return Err(GpuError(missing));
        }
        let count = CudaContext::device_count().map_err(driver("counting CUDA GPUs"))?;
        for ordinal in 0..count.max(0) as usize {
            let ctx = CudaContext::new(ordinal).map_err(driver("opening a GPU"))?;
            let get = |a| ctx.attribute(a).map_err(driver("its PCI bus id"));
            let id = format!(
                "{:04x}:{:02x}:{:02x}.0",
                get(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
                get(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
                get(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?
            );
            if crate::same_pci_bus(&id, pci) {
                return Ok(ordinal);
            }
        }
        Err(GpuError(format!(
            "no CUDA GPU at PCI bus id {pci} ({count} CUDA GPUs)"
        )))
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

    /// `bytes` on the device.
    pub fn upload_u8(&self, bytes: &[u8]) -> Result<CudaSlice<u8>, GpuError> {
        self.stream
            .clone_htod(bytes)
            .map_err(driver("uploading pixels"))
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
        // Row-major `y = x·W` is column-major `yᵀ = Wᵀ·xᵀ`: A = W
        // (`n × k`, ld n), B = x (`k × rows`, ld k), C = y (`n × rows`).
        let cfg = MatmulConfig {
            transa: false,
            transb: false,
            transc: false,
            m: g.n as u64,
            n: rows as u64,
            k: g.k as u64,
            alpha: 1.0,
            lda: g.n as i64,
            ldb: g.k as i64,
            beta: if accumulate { 1.0 } else { 0.0 },
            ldc: g.n as i64,
            stride_a: None,
            stride_b: None,
            stride_c: None,
            stride_bias: None,
            batch_size: None,
        };
        let bias = g.bias.as_ref().map(|b| b.slice(..));
        let mut out = y.slice_mut(..);
        // SAFETY: the sizes were checked above; cuBLASLt reads `n × k`
        // weights, `k × rows` inputs and `n` biases, writes `n × rows`.
        unsafe {
            self.blas.matmul(
                cfg,
                &g.w.slice(..),
                &x.slice(..),
                &mut out,
                bias.as_ref(),
                None,
            )
        }
        .map_err(|e| GpuError(format!("cuBLASLt GEMM: {e:?}")))
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
        // Row-major `C = A·op(B)` is column-major `Cᵀ = op(B)ᵀ·Aᵀ`: the
        // column-major A operand is B (transposed where B is stored
        // `n × k`), the B operand is A.
        let cfg = MatmulConfig {
            transa: b_transposed,
            transb: false,
            transc: false,
            m: n as u64,
            n: m as u64,
            k: k as u64,
            alpha,
            lda: b.1.ld as i64,
            ldb: a.1.ld as i64,
            beta: 0.0,
            ldc: c.1.ld as i64,
            stride_a: Some(b.1.stride as i64),
            stride_b: Some(a.1.stride as i64),
            stride_c: Some(c.1.stride as i64),
            stride_bias: None,
            batch_size: Some(int(batch)),
        };
        let lhs = b.0.slice(b.1.offset..);
        let rhs = a.0.slice(a.1.offset..);
        let mut out = c.0.slice_mut(c.1.offset..);
        // SAFETY: every batch entry's last element was checked above to lie
        // inside its buffer.
        unsafe {
            self.blas
                .matmul(cfg, &lhs, &rhs, &mut out, None::<&CudaView<'_, f16>>, None)
        }
        .map_err(|e| GpuError(format!("cuBLASLt batched GEMM: {e:?}")))
    }

    /// LayerNorm of `rows` rows of `ln`'s width, `x` into `y`.
    pub fn layer_norm(
        &self,
        x: &Buf,
        y: &mut Buf,
        rows: usize,
        ln: &DeviceNorm,
        eps: f64,
    ) -> Result<(), GpuError> {
        let width = ln.weight.len();
        check_len(x, rows * width, "LayerNorm input");
        check_len(y, rows * width, "LayerNorm output");
        let (w, e) = (int(width), eps as f32);
        let mut launch = self.stream.launch_builder(self.kernel("layer_norm_f16"));
        launch
            .arg(x)
            .arg(y)
            .arg(&ln.weight)
            .arg(&ln.bias)
            .arg(&w)
            .arg(&e);
        // SAFETY: `layer_norm_f16(x, y, weight, bias, width, eps)`, one
        // block per row; sizes checked above.
        unsafe { launch.launch(per_row(rows)) }.map_err(driver("layer_norm_f16"))?;
        Ok(())
    }

    /// `softmax(scale · row)` in place over `rows` rows of `width`; with
    /// `causal`, row r of each `queries`-row block sees keys `0..=r`.
    pub fn softmax_rows(
        &self,
        scores: &mut Buf,
        rows: usize,
        width: usize,
        scale: f32,
        causal: bool,
        queries: usize,
    ) -> Result<(), GpuError> {
        check_len(scores, rows * width, "softmax");
        let (w, c, q) = (int(width), i32::from(causal), int(queries));
        let mut launch = self.stream.launch_builder(self.kernel("softmax_rows_f16"));
        launch.arg(scores).arg(&w).arg(&scale).arg(&c).arg(&q);
        // SAFETY: `softmax_rows_f16(scores, width, scale, causal, queries)`,
        // one block per row; size checked above.
        unsafe { launch.launch(per_row(rows)) }.map_err(driver("softmax_rows_f16"))?;
        Ok(())
    }

    /// The MLP activation `kind` (0 GELU, 1 tanh GELU, 2 QuickGELU) in
    /// place over the first `n` values.
    pub fn activation(&self, x: &mut Buf, n: usize, kind: i32) -> Result<(), GpuError> {
        check_len(x, n, "activation");
        let count = n as i64;
        let mut launch = self.stream.launch_builder(self.kernel("activation_f16"));
        launch.arg(x).arg(&count).arg(&kind);
        // SAFETY: `activation_f16(x, n, kind)`, a grid-stride loop over `n`.
        unsafe { launch.launch(elementwise(n)) }.map_err(driver("activation_f16"))?;
        Ok(())
    }

    /// The patch GEMM's input from `rows` u8 NCHW images (`padded` rows
    /// written, the rest the normalised zero pixel).
    pub fn patches(
        &self,
        pixels: &CudaSlice<u8>,
        out: &mut Buf,
        (rows, padded, side, p): (usize, usize, usize, usize),
        norm: Norm3,
    ) -> Result<(), GpuError> {
        check_len(pixels, rows * 3 * side * side, "patches input");
        let total = padded * (side / p) * (side / p) * 3 * p * p;
        check_len(out, total, "patches output");
        let (r, pd, s, pp) = (int(rows), int(padded), int(side), int(p));
        let mut launch = self.stream.launch_builder(self.kernel("patches_f16"));
        launch
            .arg(pixels)
            .arg(out)
            .arg(&r)
            .arg(&pd)
            .arg(&s)
            .arg(&pp)
            .arg(&norm);
        // SAFETY: `patches_f16(src, dst, rows, padded, side, p, norm)`;
        // sizes checked above.
        unsafe { launch.launch(elementwise(total)) }.map_err(driver("patches_f16"))?;
        Ok(())
    }

    /// The token sequence from the patch embeddings, the prefix rows and
    /// the patch positions.
    #[allow(clippy::too_many_arguments)]
    pub fn tokens(
        &self,
        embedded: &Buf,
        tokens: &mut Buf,
        prefix: &CudaSlice<f32>,
        patch_pos: &CudaSlice<f32>,
        (n, prefix_rows, patches, d): (usize, usize, usize, usize),
    ) -> Result<(), GpuError> {
        check_len(embedded, n * patches * d, "tokens input");
        check_len(tokens, n * (prefix_rows + patches) * d, "tokens output");
        check_len(prefix, prefix_rows * d, "prefix");
        check_len(patch_pos, patches * d, "positions");
        let (ni, pr, pa, di) = (int(n), int(prefix_rows), int(patches), int(d));
        let mut launch = self.stream.launch_builder(self.kernel("tokens_f16"));
        launch
            .arg(embedded)
            .arg(tokens)
            .arg(prefix)
            .arg(patch_pos)
            .arg(&ni)
            .arg(&pr)
            .arg(&pa)
            .arg(&di);
        // SAFETY: `tokens_f16(embedded, tokens, prefix, patch_pos, n,
        // prefix_rows, patches, d)`; sizes checked above.
        unsafe { launch.launch(elementwise(n * (prefix_rows + patches) * d)) }
            .map_err(driver("tokens_f16"))?;
        Ok(())
    }

    /// Pooling of normed tokens: mode 0 class, 1 mean, 2 both.
    pub fn pool(
        &self,
        t: &Buf,
        out: &mut Buf,
        (n, tokens, prefix_rows, d): (usize, usize, usize, usize),
        mode: i32,
    ) -> Result<(), GpuError> {
        let width = if mode == 2 { 2 * d } else { d };
        check_len(t, n * tokens * d, "pool input");
        check_len(out, n * width, "pool output");
        let (ni, ti, pr, di) = (int(n), int(tokens), int(prefix_rows), int(d));
        let mut launch = self.stream.launch_builder(self.kernel("pool_f16"));
        launch
            .arg(t)
            .arg(out)
            .arg(&ni)
            .arg(&ti)
            .arg(&pr)
            .arg(&di)
            .arg(&mode);
        // SAFETY: `pool_f16(t, out, n, tokens, prefix_rows, d, mode)`;
        // sizes checked above.
        unsafe { launch.launch(elementwise(n * width)) }.map_err(driver("pool_f16"))?;
        Ok(())
    }

    /// Rows `index[i]` of `src` (`width` wide) into rows `i` of `dst`.
    pub fn gather_rows(
        &self,
        src: &Buf,
        dst: &mut Buf,
        index: &[usize],
        width: usize,
    ) -> Result<(), GpuError> {
        let rows = index.len();
        let last = index.iter().copied().max().unwrap_or(0);
        check_len(src, (last + 1) * width, "gather input");
        check_len(dst, rows * width, "gather output");
        let index: Vec<i32> = index.iter().map(|&i| int(i)).collect();
        let index = self
            .stream
            .clone_htod(&index)
            .map_err(driver("uploading row indices"))?;
        let (r, w) = (int(rows), int(width));
        let mut launch = self.stream.launch_builder(self.kernel("gather_rows_f16"));
        launch.arg(src).arg(dst).arg(&index).arg(&r).arg(&w);
        // SAFETY: `gather_rows_f16(src, dst, index, rows, width)`; every
        // index was checked to lie inside `src`, `dst` holds `rows` rows.
        unsafe { launch.launch(elementwise(rows * width)) }.map_err(driver("gather_rows_f16"))?;
        Ok(())
    }

    /// The engine's stream (cuDNN is bound to it).
    pub(super) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The first layer's input from `rows` u8 NCHW images: normalised,
    /// NHWC, `padded` images (the rest the normalised zero pixel).
    pub fn normalize_nhwc(
        &self,
        pixels: &CudaSlice<u8>,
        out: &mut Buf,
        (rows, padded, side): (usize, usize, usize),
        norm: Norm3,
    ) -> Result<(), GpuError> {
        check_len(pixels, rows * 3 * side * side, "normalize input");
        check_len(out, padded * 3 * side * side, "normalize output");
        let (r, pd, s) = (int(rows), int(padded), int(side));
        let mut launch = self
            .stream
            .launch_builder(self.kernel("normalize_nhwc_f16"));
        launch
            .arg(pixels)
            .arg(out)
            .arg(&r)
            .arg(&pd)
            .arg(&s)
            .arg(&norm);
        // SAFETY: `normalize_nhwc_f16(src, dst, rows, padded, side, norm)`,
        // a thread per pixel; sizes checked above.
        unsafe { launch.launch(elementwise(padded * side * side)) }
            .map_err(driver("normalize_nhwc_f16"))?;
        Ok(())
    }

    /// NHWC `src` (`n` images of `side × side × c`) into `dst` with zero
    /// padding `[top, left, bottom, right]`; the padded side.
    pub fn pad_nhwc(
        &self,
        src: &Buf,
        dst: &mut Buf,
        (n, side, c): (usize, usize, usize),
        [top, left, bottom, right]: [usize; 4],
    ) -> Result<usize, GpuError> {
        assert_eq!(top + bottom, left + right, "square padding");
        let out = side + top + bottom;
        check_len(src, n * side * side * c, "pad input");
        check_len(dst, n * out * out * c, "pad output");
        let (ni, s, ci, t, l, o) = (int(n), int(side), int(c), int(top), int(left), int(out));
        let mut launch = self.stream.launch_builder(self.kernel("pad_nhwc_f16"));
        launch
            .arg(src)
            .arg(dst)
            .arg(&ni)
            .arg(&s)
            .arg(&ci)
            .arg(&t)
            .arg(&l)
            .arg(&o);
        // SAFETY: `pad_nhwc_f16(src, dst, n, side, c, top, left, out)`;
        // sizes checked above.
        unsafe { launch.launch(elementwise(n * out * out * c)) }.map_err(driver("pad_nhwc_f16"))?;
        Ok(out)
    }

    /// The 3×3 stride-2 padding-1 max pool of NHWC `src`; the output side.
    pub fn max_pool_3x3_s2(
        &self,
        src: &Buf,
        dst: &mut Buf,
        (n, side, c): (usize, usize, usize),
    ) -> Result<usize, GpuError> {
        let out = (side - 1) / 2 + 1;
        check_len(src, n * side * side * c, "max pool input");
        check_len(dst, n * out * out * c, "max pool output");
        let (ni, s, ci, o) = (int(n), int(side), int(c), int(out));
        let mut launch = self
            .stream
            .launch_builder(self.kernel("max_pool_3x3_s2_nhwc_f16"));
        launch.arg(src).arg(dst).arg(&ni).arg(&s).arg(&ci).arg(&o);
        // SAFETY: `max_pool_3x3_s2_nhwc_f16(src, dst, n, side, c, out)`;
        // sizes checked above.
        unsafe { launch.launch(elementwise(n * out * out * c)) }
            .map_err(driver("max_pool_3x3_s2_nhwc_f16"))?;
        Ok(out)
    }

    /// `y = act(y + bias + residual)` over the first `total` values of `c`
    /// channels (act 0 none, 1 ReLU, 2 ReLU6).
    pub fn conv_epilogue(
        &self,
        y: &mut Buf,
        bias: &Buf,
        residual: Option<&Buf>,
        total: usize,
        c: usize,
        act: i32,
    ) -> Result<(), GpuError> {
        check_len(y, total, "epilogue");
        check_len(bias, c, "epilogue bias");
        if let Some(r) = residual {
            check_len(r, total, "epilogue residual");
        }
        let (t, ci) = (total as i64, int(c));
        // A null pointer where there is no residual.
        let none: u64 = 0;
        let mut launch = self.stream.launch_builder(self.kernel("conv_epilogue_f16"));
        launch.arg(y).arg(bias);
        match residual {
            Some(r) => launch.arg(r),
            None => launch.arg(&none),
        };
        launch.arg(&t).arg(&ci).arg(&act);
        // SAFETY: `conv_epilogue_f16(y, bias, residual, total, c, act)`;
        // sizes checked above, the residual null or `total` long.
        unsafe { launch.launch(elementwise(total)) }.map_err(driver("conv_epilogue_f16"))?;
        Ok(())
    }

    /// Non-overlapping `p × p` patches of NHWC `src` as GEMM rows in
    /// (row, column, channel) order.
    pub fn patches_nhwc(
        &self,
        src: &Buf,
        dst: &mut Buf,
        (n, side, c, p): (usize, usize, usize, usize),
    ) -> Result<(), GpuError> {
        check_len(src, n * side * side * c, "patches input");
        check_len(dst, n * side * side * c, "patches output");
        let (ni, s, ci, pi) = (int(n), int(side), int(c), int(p));
        let mut launch = self.stream.launch_builder(self.kernel("patches_nhwc_f16"));
        launch.arg(src).arg(dst).arg(&ni).arg(&s).arg(&ci).arg(&pi);
        // SAFETY: `patches_nhwc_f16(src, dst, n, side, c, p)`: as many
        // values out as in; sizes checked above.
        unsafe { launch.launch(elementwise(n * side * side * c)) }
            .map_err(driver("patches_nhwc_f16"))?;
        Ok(())
    }

    /// ConvNeXt's depthwise 7×7 (padding 3) of NHWC `x` into `y`, taps
    /// `[7, 7, c]`.
    pub fn depthwise7(
        &self,
        x: &Buf,
        (taps, bias): (&Buf, &Buf),
        y: &mut Buf,
        (n, side, c): (usize, usize, usize),
    ) -> Result<(), GpuError> {
        let total = n * side * side * c;
        check_len(x, total, "depthwise input");
        check_len(y, total, "depthwise output");
        check_len(taps, 49 * c, "depthwise taps");
        check_len(bias, c, "depthwise bias");
        let (ni, s, ci) = (int(n), int(side), int(c));
        let mut launch = self
            .stream
            .launch_builder(self.kernel("depthwise7_nhwc_f16"));
        launch
            .arg(x)
            .arg(taps)
            .arg(bias)
            .arg(y)
            .arg(&ni)
            .arg(&s)
            .arg(&ci);
        // SAFETY: `depthwise7_nhwc_f16(x, taps, bias, y, n, side, c)`;
        // sizes checked above.
        unsafe { launch.launch(elementwise(total)) }.map_err(driver("depthwise7_nhwc_f16"))?;
        Ok(())
    }

    /// `qkv` (`[n·tokens, 3·heads·dh]`) into `split`
    /// (`[3][n][heads][tokens][dh]`): every (sequence, head) contiguous,
    /// for attention's GEMMs batched over all of them at once.
    pub fn split_heads(
        &self,
        qkv: &Buf,
        split: &mut Buf,
        (n, tokens, heads, dh): (usize, usize, usize, usize),
    ) -> Result<(), GpuError> {
        let total = 3 * n * tokens * heads * dh;
        check_len(qkv, total, "split_heads input");
        check_len(split, total, "split_heads output");
        let (ni, t, h, j) = (int(n), int(tokens), int(heads), int(dh));
        let mut launch = self.stream.launch_builder(self.kernel("split_heads_f16"));
        launch.arg(qkv).arg(split).arg(&ni).arg(&t).arg(&h).arg(&j);
        // SAFETY: `split_heads_f16(qkv, split, n, tokens, heads, dh)`, as
        // many values out as in; sizes checked above.
        unsafe { launch.launch(elementwise(total)) }.map_err(driver("split_heads_f16"))?;
        Ok(())
    }

    /// The inverse for the attended values: `heads_out`
    /// (`[n][heads][tokens][dh]`) into `out` (`[n·tokens, heads·dh]`).
    pub fn merge_heads(
        &self,
        heads_out: &Buf,
        out: &mut Buf,
        (n, tokens, heads, dh): (usize, usize, usize, usize),
    ) -> Result<(), GpuError> {
        let total = n * tokens * heads * dh;
        check_len(heads_out, total, "merge_heads input");
        check_len(out, total, "merge_heads output");
        let (ni, t, h, j) = (int(n), int(tokens), int(heads), int(dh));
        let mut launch = self.stream.launch_builder(self.kernel("merge_heads_f16"));
        launch
            .arg(heads_out)
            .arg(out)
            .arg(&ni)
            .arg(&t)
            .arg(&h)
            .arg(&j);
        // SAFETY: `merge_heads_f16(heads_out, out, n, tokens, heads, dh)`;
        // sizes checked above.
        unsafe { launch.launch(elementwise(total)) }.map_err(driver("merge_heads_f16"))?;
        Ok(())
    }

    /// Waits for everything queued.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.stream.synchronize().map_err(driver("synchronising"))
    }

    /// Free and total device memory, in bytes.
    pub fn memory(&self) -> Result<(usize, usize), GpuError> {
        self.ctx.mem_get_info().map_err(driver("memory info"))
    }
}
