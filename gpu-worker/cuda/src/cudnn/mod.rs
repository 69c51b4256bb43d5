//! cuDNN's convolutions for the CNN families (#28), NHWC f16 with f32
//! accumulation, through its legacy API as PyTorch calls it:
//! `cudnnConvolutionBiasActivationForward` (`act(conv(x) + z + b)`, one
//! pass) where cuDNN fuses the layer's epilogue, and
//! `cudnnConvolutionForward` followed by the engine's `conv_epilogue_f16`
//! kernel where it does not: ReLU6 (cuDNN fuses only ReLU and identity,
//! the latter with `IMPLICIT_PRECOMP_GEMM` only), or any layer whose fused
//! call cuDNN refuses, found at its first call and remembered.
//!
//! **Algorithms are chosen per layer and batch size** (#40), at the first
//! call of that shape, from every deterministic candidate cuDNN's
//! heuristics rank (as many as `cudnnGetConvolutionForwardAlgorithmMaxCount`
//! says there are): the fused call first where the layer's epilogue fuses,
//! then unfused; the layer's first choice first at every other batch size,
//! so that an image's result stays the same when the OOM backoff halves
//! the batch wherever cuDNN runs it there. A candidate cuDNN refuses at
//! that shape (not supported, a bad parameter, a workspace that does not
//! fit in memory) is passed over for the next; only when every one is
//! refused is it an error, an out-of-memory one if a workspace did not
//! fit (so the backoff halves the batch). That order and what counts as
//! a refusal are `choice.rs`, which needs no GPU.
//!
//! Run on an H100 (2026-11-26): the ResNets pass `tests/cuda_gpu.rs`
//! (cosine ≥ 0.999998 to the plan's reference), which holds it to the
//! reference wherever a GPU is present; the engine checks it at every
//! start.
//!
//! Raw cuDNN descriptors, so the second module of the engine with
//! `unsafe` (after `gpu/`): cudarc's safe descriptors cannot let the
//! fused call's `z` alias its output, as cuDNN allows.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

use cudarc::cudnn::{result, sys};

use api::Cudnn;
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};

use super::gpu::{Buf, Gpu, GpuError};
use super::plan::{ConvActivation, ConvLayer};

mod api;
mod choice;

use choice::{Choice, Choices, Launch, candidates, refusal, refused_all};

fn cudnn(what: &str) -> impl FnOnce(result::CudnnError) -> GpuError + '_ {
    move |e| GpuError(format!("cuDNN {what}: {:?}", e.0))
}

/// What a fused call's error names.
const FUSED_CALL: &str = "fused convolution";

/// The largest workspace an algorithm may ask for: faster ones that need
/// more (FFT's can take gigabytes) would take memory from the batch.
const WORKSPACE_LIMIT: usize = 1 << 30;

/// The bound cuDNN (see `api.rs`), or why it is not there.
fn api() -> Result<&'static Cudnn, GpuError> {
    Cudnn::get().map_err(GpuError)
}

/// A descriptor or handle cuDNN creates into `out`.
fn create<T>(
    what: &str,
    call: unsafe extern "C" fn(*mut T) -> sys::cudnnStatus_t,
) -> Result<T, GpuError> {
    let mut out = std::mem::MaybeUninit::uninit();
    // SAFETY: cuDNN's `cudnnCreate*` write one handle on success.
    unsafe { call(out.as_mut_ptr()) }
        .result()
        .map_err(cudnn(what))?;
    // SAFETY: written, as cuDNN returned success.
    Ok(unsafe { out.assume_init() })
}

fn int(v: usize) -> c_int {
    c_int::try_from(v).expect("a size cuDNN takes as int")
}

/// A cuDNN handle on the engine's stream, used by one thread at a time.
struct Handle(sys::cudnnHandle_t);

// SAFETY: a cuDNN handle may move between threads; `Convolutions` holds
// it in a `Mutex`, so no two threads use it at once.
unsafe impl Send for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created by `cudnnCreate`, destroyed once; the table was
        // bound when it was.
        if let Ok(api) = api() {
            let _ = unsafe { (api.cudnnDestroy)(self.0) };
        }
    }
}

macro_rules! descriptor {
    ($name:ident, $raw:ty, $destroy:ident) => {
        /// A cuDNN descriptor: host memory only, set once, read after.
        struct $name($raw);
        // SAFETY: a descriptor is a host struct, never changed after it
        // is set; cuDNN only reads it.
        unsafe impl Send for $name {}
        // SAFETY: as above.
        unsafe impl Sync for $name {}
        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: created once, destroyed once; the table was
                // bound when it was created.
                if let Ok(api) = api() {
                    let _ = unsafe { (api.$destroy)(self.0) };
                }
            }
        }
    };
}

descriptor!(
    TensorDesc,
    sys::cudnnTensorDescriptor_t,
    cudnnDestroyTensorDescriptor
);
descriptor!(
    FilterDesc,
    sys::cudnnFilterDescriptor_t,
    cudnnDestroyFilterDescriptor
);
descriptor!(
    ConvDesc,
    sys::cudnnConvolutionDescriptor_t,
    cudnnDestroyConvolutionDescriptor
);
descriptor!(
    ActDesc,
    sys::cudnnActivationDescriptor_t,
    cudnnDestroyActivationDescriptor
);

/// An NHWC f16 tensor `[n, c, h, w]` (cuDNN takes the dims in NCHW order).
fn tensor(n: usize, c: usize, h: usize, w: usize) -> Result<TensorDesc, GpuError> {
    let api = api()?;
    let desc = TensorDesc(create("tensor", api.cudnnCreateTensorDescriptor)?);
    // SAFETY: a fresh descriptor.
    unsafe {
        (api.cudnnSetTensor4dDescriptor)(
            desc.0,
            sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC,
            sys::cudnnDataType_t::CUDNN_DATA_HALF,
            int(n),
            int(c),
            int(h),
            int(w),
        )
    }
    .result()
    .map_err(cudnn("tensor"))?;
    Ok(desc)
}

/// One convolution's filter, bias and descriptors on the device.
pub(super) struct DeviceConv {
    /// Output channels.
    pub(super) cout: usize,
    /// Input channels.
    pub(super) cin: usize,
    kernel: usize,
    stride: usize,
    /// Padding cuDNN applies (symmetric), per axis.
    symmetric: usize,
    /// Padding the engine applies first, top, left, bottom, right, where
    /// the layer's is asymmetric (cuDNN then pads nothing).
    pub(super) explicit: Option<[usize; 4]>,
    activation: ConvActivation,
    filter: Buf,
    bias: Buf,
    filter_desc: FilterDesc,
    conv_desc: ConvDesc,
    bias_desc: TensorDesc,
    act_desc: ActDesc,
    /// What ran, by batch size, and the first choice of all.
    choices: Mutex<Choices>,
}

impl DeviceConv {
    /// `layer`'s weights on `gpu` in f16, its descriptors set.
    pub(super) fn new(
        gpu: &Gpu,
        layer: &ConvLayer,
        activation: ConvActivation,
    ) -> Result<Self, GpuError> {
        let [top, left, bottom, right] = layer.padding;
        let (symmetric, explicit) = if top == bottom && left == right && top == left {
            (top, None)
        } else {
            (0, Some(layer.padding))
        };
        let api = api()?;
        let filter_desc = FilterDesc(create("filter", api.cudnnCreateFilterDescriptor)?);
        let cg = layer.cin / layer.groups;
        // SAFETY: a fresh descriptor; KRSC is cuDNN's NHWC filter layout.
        unsafe {
            (api.cudnnSetFilter4dDescriptor)(
                filter_desc.0,
                sys::cudnnDataType_t::CUDNN_DATA_HALF,
                sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC,
                int(layer.cout),
                int(cg),
                int(layer.kernel),
                int(layer.kernel),
            )
        }
        .result()
        .map_err(cudnn("filter"))?;
        let conv_desc = ConvDesc(create("convolution", api.cudnnCreateConvolutionDescriptor)?);
        let (pad, stride) = (int(symmetric), int(layer.stride));
        // SAFETY: a fresh descriptor. f32 accumulation (PSEUDO_HALF), tensor
        // cores allowed, the layer's groups.
        unsafe {
            (api.cudnnSetConvolution2dDescriptor)(
                conv_desc.0,
                pad,
                pad,
                stride,
                stride,
                1,
                1,
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
            )
            .result()
            .and_then(|()| {
                (api.cudnnSetConvolutionMathType)(
                    conv_desc.0,
                    sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
                )
                .result()
            })
            .and_then(|()| {
                (api.cudnnSetConvolutionGroupCount)(conv_desc.0, int(layer.groups)).result()
            })
        }
        .map_err(cudnn("convolution"))?;
        let act_desc = ActDesc(create("activation", api.cudnnCreateActivationDescriptor)?);
        let mode = match activation {
            ConvActivation::Identity => sys::cudnnActivationMode_t::CUDNN_ACTIVATION_IDENTITY,
            ConvActivation::Relu | ConvActivation::Relu6 => {
                sys::cudnnActivationMode_t::CUDNN_ACTIVATION_RELU
            }
        };
        // SAFETY: a fresh descriptor.
        unsafe {
            (api.cudnnSetActivationDescriptor)(
                act_desc.0,
                mode,
                sys::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
                0.0,
            )
        }
        .result()
        .map_err(cudnn("activation"))?;
        Ok(Self {
            cout: layer.cout,
            cin: layer.cin,
            kernel: layer.kernel,
            stride: layer.stride,
            symmetric,
            explicit,
            activation,
            filter: gpu.upload(&layer.filter)?,
            bias: gpu.upload(&layer.bias)?,
            filter_desc,
            conv_desc,
            bias_desc: tensor(1, layer.cout, 1, 1)?,
            act_desc,
            choices: Mutex::new(Choices::default()),
        })
    }

    /// The output side of a `side × side` input (after any explicit
    /// padding was applied to it).
    pub(super) fn out_side(&self, side: usize) -> usize {
        (side + 2 * self.symmetric - self.kernel) / self.stride + 1
    }
}

/// The engine's cuDNN.
pub(super) struct Convolutions {
    handle: Mutex<Handle>,
    stream: Arc<CudaStream>,
}

impl Convolutions {
    /// A cuDNN handle on `gpu`'s stream.
    pub(super) fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        let stream = gpu.stream().clone();
        let api = api()?;
        let handle = Handle(create("handle", api.cudnnCreate)?);
        // SAFETY: a fresh handle, the engine's stream, which outlives it
        // (`stream` is kept beside it).
        unsafe { (api.cudnnSetStream)(handle.0, stream.cu_stream() as *mut _) }
            .result()
            .map_err(cudnn("stream"))?;
        Ok(Self {
            handle: Mutex::new(handle),
            stream,
        })
    }

    /// `y = act(conv(x) + bias + residual)` for `n` NHWC images of
    /// `side × side` (already explicitly padded where `conv.explicit`);
    /// `y` holds the output, `residual` its shape.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
        &self,
        gpu: &Gpu,
        conv: &DeviceConv,
        x: &Buf,
        n: usize,
        side: usize,
        y: &mut Buf,
        residual: Option<&Buf>,
    ) -> Result<(), GpuError> {
        let out = conv.out_side(side);
        let (in_len, out_len) = (n * side * side * conv.cin, n * out * out * conv.cout);
        assert!(
            x.len() >= in_len,
            "convolution input: {} < {in_len}",
            x.len()
        );
        assert!(
            y.len() >= out_len,
            "convolution output: {} < {out_len}",
            y.len()
        );
        if let Some(r) = residual {
            assert!(r.len() >= out_len, "residual: {} < {out_len}", r.len());
        }
        let x_desc = tensor(n, conv.cin, side, side)?;
        let y_desc = tensor(n, conv.cout, out, out)?;
        let handle = self.handle.lock().unwrap_or_else(|p| p.into_inner());
        let mut choices = conv.choices.lock().unwrap_or_else(|p| p.into_inner());
        let known = choices.by_batch.get(&n).copied();
        let mut launch =
            |c: Choice| self.launch(&handle, conv, c, (x, &x_desc), (&mut *y, &y_desc), residual);
        let ran = match known.map(&mut launch) {
            Some(Ok(())) => known,
            Some(Err(Launch::Failed(e))) => return Err(e),
            // Refused now (a workspace that no longer fits): choose again.
            Some(Err(Launch::Refused(_))) | None => None,
        };
        let used = match ran {
            Some(c) => c,
            None => {
                let algos = self.algorithms(&handle, conv, &x_desc, &y_desc)?;
                let candidates = candidates(&algos, conv.activation, choices.first);
                let mut refusals = Vec::new();
                let mut used = None;
                for c in candidates {
                    match launch(c) {
                        Ok(()) => {
                            used = Some(c);
                            break;
                        }
                        Err(Launch::Refused(e)) => refusals.push(e),
                        Err(Launch::Failed(e)) => return Err(e),
                    }
                }
                used.ok_or_else(|| {
                    let what = format!(
                        "cuDNN runs no algorithm for a {k}×{k} convolution of {} → {} channels \
                         at batch {n}",
                        conv.cin,
                        conv.cout,
                        k = conv.kernel
                    );
                    refused_all(&what, refusals)
                })?
            }
        };
        choices.by_batch.insert(n, used);
        choices.first.get_or_insert(used);
        drop(choices);
        drop(handle);
        if !used.fused {
            let act = match conv.activation {
                ConvActivation::Identity => 0,
                ConvActivation::Relu => 1,
                ConvActivation::Relu6 => 2,
            };
            gpu.conv_epilogue(y, &conv.bias, residual, out_len, conv.cout, act)?;
        }
        Ok(())
    }

    /// cuDNN's deterministic algorithms for this shape, best first, of
    /// those within [`WORKSPACE_LIMIT`].
    fn algorithms(
        &self,
        handle: &Handle,
        conv: &DeviceConv,
        x_desc: &TensorDesc,
        y_desc: &TensorDesc,
    ) -> Result<Vec<sys::cudnnConvolutionFwdAlgo_t>, GpuError> {
        let api = api()?;
        let mut count: c_int = 0;
        // SAFETY: cuDNN writes one int.
        unsafe { (api.cudnnGetConvolutionForwardAlgorithmMaxCount)(handle.0, &mut count) }
            .result()
            .map_err(cudnn("algorithm count"))?;
        let count = usize::try_from(count).unwrap_or(0).max(1);
        let mut returned: c_int = 0;
        // SAFETY: `count` zeroed plain-data results for cuDNN to fill.
        let mut perf: Vec<sys::cudnnConvolutionFwdAlgoPerf_t> =
            vec![unsafe { std::mem::zeroed() }; count];
        // SAFETY: valid descriptors; cuDNN writes at most `count` results.
        unsafe {
            (api.cudnnGetConvolutionForwardAlgorithm_v7)(
                handle.0,
                x_desc.0,
                conv.filter_desc.0,
                conv.conv_desc.0,
                y_desc.0,
                int(count),
                &mut returned,
                perf.as_mut_ptr(),
            )
        }
        .result()
        .map_err(cudnn("algorithm heuristics"))?;
        let algos: Vec<_> = perf[..usize::try_from(returned).unwrap_or(0).min(count)]
            .iter()
            .filter(|p| {
                p.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS
                    && p.determinism == sys::cudnnDeterminism_t::CUDNN_DETERMINISTIC
                    && p.memory <= WORKSPACE_LIMIT
            })
            .map(|p| p.algo)
            .collect();
        if algos.is_empty() {
            return Err(GpuError(format!(
                "cuDNN has no deterministic algorithm for a {}×{} convolution of {} → {} \
                 channels; use --engine vulkan",
                conv.kernel, conv.kernel, conv.cin, conv.cout
            )));
        }
        Ok(algos)
    }

    fn launch(
        &self,
        handle: &Handle,
        conv: &DeviceConv,
        choice: Choice,
        (x, x_desc): (&Buf, &TensorDesc),
        (y, y_desc): (&mut Buf, &TensorDesc),
        residual: Option<&Buf>,
    ) -> Result<(), Launch> {
        let s = &self.stream;
        let api = api().map_err(Launch::Failed)?;
        let mut bytes = 0usize;
        // SAFETY: valid descriptors for this shape; cuDNN writes one size.
        unsafe {
            (api.cudnnGetConvolutionForwardWorkspaceSize)(
                handle.0,
                x_desc.0,
                conv.filter_desc.0,
                conv.conv_desc.0,
                y_desc.0,
                choice.algo,
                &mut bytes,
            )
        }
        .result()
        .map_err(refusal("workspace size"))?;
        // SAFETY: scratch that cuDNN writes before it reads; never read
        // here. One that does not fit refuses this algorithm only; any
        // other error (a sticky fault of an earlier kernel) is a failure.
        let mut workspace = unsafe { s.alloc::<u8>(bytes.max(1)) }.map_err(|e| {
            let error = GpuError(format!("allocating cuDNN's {bytes}-byte workspace: {e}"));
            if error.0.contains("OUT_OF_MEMORY") {
                Launch::Refused(error)
            } else {
                Launch::Failed(error)
            }
        })?;
        let (one, zero) = (1.0f32, 0.0f32);
        let (xp, _rx) = x.device_ptr(s);
        let (wp, _rw) = conv.filter.device_ptr(s);
        let (bp, _rb) = conv.bias.device_ptr(s);
        let (ws, _rws) = workspace.device_ptr_mut(s);
        let residual_ptr = residual.map(|r| r.device_ptr(s));
        let (yp, _ry) = y.device_ptr_mut(s);
        let ptr = |p: u64| p as *const c_void;
        // SAFETY: every buffer was checked against its descriptor's shape
        // in `run`; the workspace holds what cuDNN asked for; the pointers
        // stay valid while their records are held (to the end of this
        // function).
        unsafe {
            if choice.fused {
                // Without a residual, `z` aliases `y` (cuDNN allows it) at
                // weight 0.
                let (zp, alpha2) = match &residual_ptr {
                    Some((r, _)) => (*r, &one),
                    None => (yp, &zero),
                };
                (api.cudnnConvolutionBiasActivationForward)(
                    handle.0,
                    (&one as *const f32).cast(),
                    x_desc.0,
                    ptr(xp),
                    conv.filter_desc.0,
                    ptr(wp),
                    conv.conv_desc.0,
                    choice.algo,
                    ws as *mut c_void,
                    bytes,
                    (alpha2 as *const f32).cast(),
                    y_desc.0,
                    ptr(zp),
                    conv.bias_desc.0,
                    ptr(bp),
                    conv.act_desc.0,
                    y_desc.0,
                    yp as *mut c_void,
                )
                .result()
                .map_err(refusal(FUSED_CALL))
            } else {
                (api.cudnnConvolutionForward)(
                    handle.0,
                    (&one as *const f32).cast(),
                    x_desc.0,
                    ptr(xp),
                    conv.filter_desc.0,
                    ptr(wp),
                    conv.conv_desc.0,
                    choice.algo,
                    ws as *mut c_void,
                    bytes,
                    (&zero as *const f32).cast(),
                    y_desc.0,
                    yp as *mut c_void,
                )
                .result()
                .map_err(refusal("convolution"))
            }
        }
    }
}
