//! f16 GEMMs through cuBLASLt, set up as cuBLASLt needs them (#40).
//!
//! cudarc's `CudaBlasLT::matmul` builds the descriptor, the layouts and a
//! heuristic query on every call, sets no alignment preferences (so
//! cuBLASLt assumes 256-byte aligned operands and may pick a kernel that
//! faults on SigLIP's per-head offsets, 8- or 2-byte aligned), and takes
//! the one algorithm the heuristic ranks first. Here:
//! - each operand's alignment is the real one: the largest power of two
//!   (up to 256 bytes) dividing its address, its leading dimension and its
//!   batch stride in bytes, given to the heuristic as
//!   `MIN_ALIGNMENT_{A,B,C,D}_BYTES`, so it offers only kernels that can
//!   run on it;
//! - a GEMM's setup (descriptor, layouts, the heuristic's candidates) is
//!   made once per shape and alignment and kept;
//! - a candidate cuBLASLt refuses at launch (`NOT_SUPPORTED`,
//!   `INVALID_VALUE`, `ARCH_MISMATCH`) is passed over for the next, and
//!   the one that ran is tried first next time.
//!
//! What needs no GPU (the row-major to column-major mapping, alignments,
//! the walk over candidates) is `call.rs`; this file holds cuBLASLt's
//! handle, descriptors and calls.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::sync::{Arc, Mutex};

use cudarc::cublaslt::result::CublasError;
use cudarc::cublaslt::sys::{
    self, cublasComputeType_t, cublasLtEpilogue_t, cublasLtMatmulAlgo_t,
    cublasLtMatmulDescAttributes_t as Desc, cublasLtMatmulHeuristicResult_t,
    cublasLtMatmulPreferenceAttributes_t as Pref, cublasLtMatrixLayoutAttribute_t as Layout,
    cublasStatus_t, cudaDataType_t,
};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use super::GpuError;

mod api;
mod call;

use api::Lt;

pub(crate) use call::Call;
use call::first_accepted;

/// How many candidates the heuristic is asked for.
const CANDIDATES: usize = 8;

/// The bound cuBLASLt (see `api.rs`), or why it is not there.
fn api() -> Result<&'static Lt, GpuError> {
    Lt::get().map_err(GpuError)
}

/// A refusal of this configuration, after which another algorithm may run.
fn refused(e: &CublasError) -> bool {
    matches!(
        e.0,
        cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED
            | cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE
            | cublasStatus_t::CUBLAS_STATUS_ARCH_MISMATCH
    )
}

/// What a GEMM's setup depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    transa: bool,
    shape: (u64, u64, u64),
    ld: [i64; 3],
    batch: Option<(i32, [i64; 3])>,
    bias: bool,
    relu: bool,
    align: [u32; 3],
}

/// A GEMM's setup, kept for its shape and alignment.
struct Setup {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    algos: Vec<cublasLtMatmulAlgo_t>,
    /// The candidate that ran last.
    last: usize,
}

// SAFETY: the handles are cuBLASLt's opaque descriptors, used only under
// the `Blas` mutex.
unsafe impl Send for Setup {}

impl Drop for Setup {
    fn drop(&mut self) {
        let Ok(api) = api() else { return };
        // SAFETY: made by cuBLASLt in `Blas::setup`, destroyed once here.
        unsafe {
            let _ = (api.cublasLtMatmulDescDestroy)(self.desc);
            for layout in self.layouts.into_iter().filter(|l| !l.is_null()) {
                let _ = (api.cublasLtMatrixLayoutDestroy)(layout);
            }
        }
    }
}

/// cuBLASLt on one GPU's stream, with its workspace and the setups made.
pub(crate) struct Blas {
    handle: sys::cublasLtHandle_t,
    stream: Arc<CudaStream>,
    workspace: CudaSlice<u8>,
    setups: Mutex<HashMap<Key, Setup>>,
}

// SAFETY: the handle is used only under the `setups` mutex (every call).
unsafe impl Send for Blas {}
unsafe impl Sync for Blas {}

impl Drop for Blas {
    fn drop(&mut self) {
        if let Ok(setups) = self.setups.get_mut() {
            setups.clear();
        }
        let Ok(api) = api() else { return };
        // SAFETY: made in `new`, destroyed once, after its setups.
        let _ = unsafe { (api.cublasLtDestroy)(self.handle) };
    }
}

fn lt(what: &'static str) -> impl Fn(CublasError) -> GpuError {
    move |e| GpuError(format!("cuBLASLt {what}: {e:?}"))
}

impl Blas {
    /// cuBLASLt on `stream`, with NVIDIA's recommended workspace (32 MiB
    /// from Hopper on, 4 MiB before).
    pub(crate) fn new(stream: Arc<CudaStream>, major: i32) -> Result<Self, GpuError> {
        let size = if major >= 9 { 32 << 20 } else { 4 << 20 };
        // SAFETY: a workspace cuBLASLt writes before it reads.
        let workspace = unsafe { stream.alloc::<u8>(size) }
            .map_err(|e| GpuError(format!("cuBLASLt workspace: {e}")))?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: cuBLASLt writes one handle.
        unsafe { (api()?.cublasLtCreate)(&mut handle) }
            .result()
            .map_err(lt("handle"))?;
        Ok(Self {
            handle,
            stream,
            workspace,
            setups: Mutex::new(HashMap::new()),
        })
    }

    /// Queues `call` on the stream over device pointers `a`, `b`, `d`, the
    /// optional `bias` and the optional `c` (`beta·C` read from there, in
    /// D's layout, instead of from D; the caller checked their extents).
    ///
    /// # Safety
    /// Every operand must hold what `call` reads or writes of it.
    pub(crate) unsafe fn matmul(
        &self,
        call: &Call,
        (a, b, d): (u64, u64, u64),
        bias: Option<u64>,
        c: Option<u64>,
    ) -> Result<(), GpuError> {
        let mut align = call.alignments((a, b, d));
        if let Some(c) = c {
            // C shares D's layout and alignment preference: the lesser.
            align[2] = align[2].min(call.alignments((a, b, c))[2]);
        }
        let key = Key {
            transa: call.transa,
            shape: (call.m, call.n, call.k),
            ld: [call.lda, call.ldb, call.ldd],
            batch: call.batch,
            bias: bias.is_some(),
            relu: call.relu,
            align,
        };
        let mut setups = self.setups.lock().unwrap_or_else(|e| e.into_inner());
        let setup = match setups.entry(key) {
            std::collections::hash_map::Entry::Occupied(found) => found.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => slot.insert(self.setup(call, &key)?),
        };
        let api = api()?;
        if let Some(bias) = bias {
            // SAFETY: the descriptor is ours; the attribute is a pointer.
            unsafe {
                (api.cublasLtMatmulDescSetAttribute)(
                    setup.desc,
                    Desc::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    (&raw const bias).cast(),
                    size_of::<u64>(),
                )
            }
            .result()
            .map_err(lt("bias"))?;
        }
        let (workspace, _w) = self.workspace.device_ptr(&self.stream);
        let [la, lb, ld] = setup.layouts;
        let ran = first_accepted(setup.algos.len(), setup.last, refused, |i| {
            // SAFETY: the operands hold what the layouts describe (the
            // caller's contract); the algorithm came from the heuristic
            // for this descriptor and these layouts.
            unsafe {
                (api.cublasLtMatmul)(
                    self.handle,
                    setup.desc,
                    (&raw const call.alpha).cast(),
                    a as *const c_void,
                    la,
                    b as *const c_void,
                    lb,
                    (&raw const call.beta).cast(),
                    c.unwrap_or(d) as *const c_void,
                    ld,
                    d as *mut c_void,
                    ld,
                    &raw const setup.algos[i],
                    workspace as *mut c_void,
                    self.workspace.len(),
                    self.stream.cu_stream() as _,
                )
            }
            .result()
        });
        match ran {
            Ok(i) => {
                setup.last = i;
                Ok(())
            }
            Err(e) => Err(GpuError(format!(
                "cuBLASLt refused all {} algorithms for a {}×{}×{} GEMM (alignments {:?} \
                 bytes){}",
                setup.algos.len(),
                call.m,
                call.n,
                call.k,
                key.align,
                e.map(|e| format!(": {e:?}")).unwrap_or_default()
            ))),
        }
    }

    /// The descriptor, layouts and the heuristic's candidates for `key`.
    fn setup(&self, call: &Call, key: &Key) -> Result<Setup, GpuError> {
        let api = api()?;
        let mut desc = std::ptr::null_mut();
        // SAFETY: cuBLASLt writes one descriptor.
        unsafe {
            (api.cublasLtMatmulDescCreate)(
                &mut desc,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cudaDataType_t::CUDA_R_32F,
            )
        }
        .result()
        .map_err(lt("descriptor"))?;
        let (a_rows, a_cols) = if call.transa {
            (call.k, call.m)
        } else {
            (call.m, call.k)
        };
        let shapes = [
            (a_rows, a_cols, call.lda),
            (call.k, call.n, call.ldb),
            (call.m, call.n, call.ldd),
        ];
        // Made empty, then filled: dropping `setup` on any error below
        // frees what was made so far.
        let mut setup = Setup {
            desc,
            layouts: [std::ptr::null_mut(); 3],
            algos: Vec::new(),
            last: 0,
        };
        for (i, (rows, cols, ld)) in shapes.into_iter().enumerate() {
            // SAFETY: cuBLASLt writes one layout.
            unsafe {
                (api.cublasLtMatrixLayoutCreate)(
                    &mut setup.layouts[i],
                    cudaDataType_t::CUDA_R_16F,
                    rows,
                    cols,
                    ld,
                )
            }
            .result()
            .map_err(lt("layout"))?;
        }
        let layouts = setup.layouts;
        let transa = i32::from(call.transa);
        let epilogue = match (key.bias, key.relu) {
            (true, true) => cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS,
            (true, false) => cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
            (false, true) => cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU,
            (false, false) => cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT,
        };
        // SAFETY: attributes of descriptors made above, each of its size.
        unsafe {
            (api.cublasLtMatmulDescSetAttribute)(
                desc,
                Desc::CUBLASLT_MATMUL_DESC_TRANSA,
                (&raw const transa).cast(),
                size_of::<i32>(),
            )
            .result()
            .map_err(lt("transpose"))?;
            (api.cublasLtMatmulDescSetAttribute)(
                desc,
                Desc::CUBLASLT_MATMUL_DESC_EPILOGUE,
                (&raw const epilogue).cast(),
                size_of::<cublasLtEpilogue_t>(),
            )
            .result()
            .map_err(lt("epilogue"))?;
            if let Some((count, strides)) = call.batch {
                for (layout, stride) in layouts.iter().zip(strides) {
                    (api.cublasLtMatrixLayoutSetAttribute)(
                        *layout,
                        Layout::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                        (&raw const count).cast(),
                        size_of::<c_int>(),
                    )
                    .result()
                    .map_err(lt("batch"))?;
                    (api.cublasLtMatrixLayoutSetAttribute)(
                        *layout,
                        Layout::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                        (&raw const stride).cast(),
                        size_of::<i64>(),
                    )
                    .result()
                    .map_err(lt("batch stride"))?;
                }
            }
        }
        setup.algos = self.candidates(&setup, key)?;
        Ok(setup)
    }

    /// The heuristic's candidates for `setup` under `key`'s alignments and
    /// the workspace's size, best first.
    fn candidates(&self, setup: &Setup, key: &Key) -> Result<Vec<cublasLtMatmulAlgo_t>, GpuError> {
        let api = api()?;
        let mut pref = std::ptr::null_mut();
        // SAFETY: cuBLASLt writes one preference.
        unsafe { (api.cublasLtMatmulPreferenceCreate)(&mut pref) }
            .result()
            .map_err(lt("preference"))?;
        let workspace = self.workspace.len() as u64;
        let [a, b, d] = key.align;
        let found = (|| {
            // SAFETY: attributes of a preference made above, each of its
            // size; the heuristic writes at most `CANDIDATES` results.
            unsafe {
                (api.cublasLtMatmulPreferenceSetAttribute)(
                    pref,
                    Pref::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    (&raw const workspace).cast(),
                    size_of::<u64>(),
                )
                .result()?;
                for (attr, bytes) in [
                    (Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, a),
                    (Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, b),
                    (Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, d),
                    (Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, d),
                ] {
                    (api.cublasLtMatmulPreferenceSetAttribute)(
                        pref,
                        attr,
                        (&raw const bytes).cast(),
                        size_of::<u32>(),
                    )
                    .result()?;
                }
                let mut results: Vec<cublasLtMatmulHeuristicResult_t> =
                    vec![std::mem::zeroed(); CANDIDATES];
                let mut count: c_int = 0;
                let [la, lb, ld] = setup.layouts;
                (api.cublasLtMatmulAlgoGetHeuristic)(
                    self.handle,
                    setup.desc,
                    la,
                    lb,
                    ld,
                    ld,
                    pref,
                    CANDIDATES as c_int,
                    results.as_mut_ptr(),
                    &mut count,
                )
                .result()?;
                results.truncate(usize::try_from(count).unwrap_or(0));
                Ok::<_, CublasError>(results)
            }
        })();
        // SAFETY: made above, destroyed once.
        let _ = unsafe { (api.cublasLtMatmulPreferenceDestroy)(pref) };
        let algos: Vec<cublasLtMatmulAlgo_t> = found
            .map_err(lt("heuristic"))?
            .into_iter()
            .filter(|r| r.state == cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .map(|r| r.algo)
            .collect();
        if algos.is_empty() {
            return Err(GpuError(format!(
                "cuBLASLt has no algorithm for a {}×{}×{} GEMM with operands aligned to \
                 {:?} bytes",
                key.shape.0, key.shape.1, key.shape.2, key.align
            )));
        }
        Ok(algos)
    }
}
