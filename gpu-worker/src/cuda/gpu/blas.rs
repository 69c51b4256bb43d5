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
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::sync::{Arc, Mutex};

use cudarc::cublaslt::result::{self, CublasError};
use cudarc::cublaslt::sys::{
    self, cublasComputeType_t, cublasLtEpilogue_t, cublasLtMatmulAlgo_t,
    cublasLtMatmulDescAttributes_t as Desc, cublasLtMatmulHeuristicResult_t,
    cublasLtMatmulPreferenceAttributes_t as Pref, cublasLtMatrixLayoutAttribute_t as Layout,
    cublasStatus_t, cudaDataType_t,
};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use super::{GpuError, Strided};

/// How many candidates the heuristic is asked for.
const CANDIDATES: usize = 8;

/// Bytes in an f16.
const F16: u64 = 2;

/// The largest power of two, at most 256, dividing every value: the
/// alignment cuBLASLt may assume of an operand that starts at `address`
/// and whose rows (and batch entries) start `ld` (and `stride`) bytes
/// apart.
pub(crate) fn alignment(address: u64, ld_bytes: u64, stride_bytes: Option<u64>) -> u32 {
    let all = address | ld_bytes | stride_bytes.unwrap_or(0) | 256;
    1 << all.trailing_zeros()
}

/// Tries `candidates` from `first` on, wrapping around, until `run`
/// accepts one: the index that ran, or the last refusal (or `None` with no
/// candidates). An error that is not a refusal stops at once.
pub(crate) fn first_accepted<E>(
    candidates: usize,
    first: usize,
    refused: impl Fn(&E) -> bool,
    mut run: impl FnMut(usize) -> Result<(), E>,
) -> Result<usize, Option<E>> {
    let mut last = None;
    for i in 0..candidates {
        let index = (first + i) % candidates;
        match run(index) {
            Ok(()) => return Ok(index),
            Err(e) if refused(&e) => last = Some(e),
            Err(e) => return Err(Some(e)),
        }
    }
    Err(last)
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

/// One GEMM, column-major as cuBLASLt speaks: `D = alpha·op(A)·B + beta·D
/// (+ bias per row of D)`, A `m × k` (stored `k × m` with `transa`), B
/// `k × n`, D `m × n`, each `batch` times at its stride.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call {
    pub(crate) transa: bool,
    pub(crate) m: u64,
    pub(crate) n: u64,
    pub(crate) k: u64,
    pub(crate) alpha: f32,
    pub(crate) beta: f32,
    pub(crate) lda: i64,
    pub(crate) ldb: i64,
    pub(crate) ldd: i64,
    /// Batch count and each operand's stride (A, B, D), in elements.
    pub(crate) batch: Option<(i32, [i64; 3])>,
}

impl Call {
    /// Row-major `y = x·W (+ y)` for `x: [rows, k]`, `W: [k, n]`,
    /// `y: [rows, n]`: column-major `yᵀ = Wᵀ·xᵀ`, so cuBLASLt's A is W
    /// (`n × k`, ld n), its B is x (`k × rows`, ld k), D is y.
    pub(crate) fn row_major(rows: usize, k: usize, n: usize, accumulate: bool) -> Self {
        Self {
            transa: false,
            m: n as u64,
            n: rows as u64,
            k: k as u64,
            alpha: 1.0,
            beta: if accumulate { 1.0 } else { 0.0 },
            lda: n as i64,
            ldb: k as i64,
            ldd: n as i64,
            batch: None,
        }
    }

    /// Batched row-major `C[b] = alpha · A[b]·op(B[b])`: `A[b]` `m × k`,
    /// `B[b]` `k × n` (stored `n × k` with `b_transposed`), `C[b]` `m × n`.
    /// Column-major `Cᵀ = op(B)ᵀ·Aᵀ`: cuBLASLt's A operand is B
    /// (transposed where it is stored `n × k`), its B operand is A.
    pub(crate) fn row_major_batched(
        (m, n, k): (usize, usize, usize),
        alpha: f32,
        (a, b, c): (Strided, Strided, Strided),
        b_transposed: bool,
        batch: usize,
    ) -> Self {
        Self {
            transa: b_transposed,
            m: n as u64,
            n: m as u64,
            k: k as u64,
            alpha,
            beta: 0.0,
            lda: b.ld as i64,
            ldb: a.ld as i64,
            ldd: c.ld as i64,
            batch: Some((
                i32::try_from(batch).expect("a batch count cuBLASLt takes"),
                [b.stride as i64, a.stride as i64, c.stride as i64],
            )),
        }
    }
}

/// What a GEMM's setup depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    transa: bool,
    shape: (u64, u64, u64),
    ld: [i64; 3],
    batch: Option<(i32, [i64; 3])>,
    bias: bool,
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
        // SAFETY: made by cuBLASLt in `Blas::setup`, destroyed once here.
        unsafe {
            let _ = result::destroy_matmul_desc(self.desc);
            for layout in self.layouts.into_iter().filter(|l| !l.is_null()) {
                let _ = result::destroy_matrix_layout(layout);
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
        // SAFETY: made in `new`, destroyed once, after its setups.
        let _ = unsafe { result::destroy_handle(self.handle) };
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
        let handle = result::create_handle().map_err(lt("handle"))?;
        Ok(Self {
            handle,
            stream,
            workspace,
            setups: Mutex::new(HashMap::new()),
        })
    }

    /// Queues `call` on the stream over device pointers `a`, `b`, `d` and
    /// the optional `bias` (the caller checked their extents).
    ///
    /// # Safety
    /// Every operand must hold what `call` reads or writes of it.
    pub(crate) unsafe fn matmul(
        &self,
        call: &Call,
        (a, b, d): (u64, u64, u64),
        bias: Option<u64>,
    ) -> Result<(), GpuError> {
        let strides = call.batch.map(|(_, s)| s);
        let bytes = |i: usize| strides.map(|s| s[i] as u64 * F16);
        let key = Key {
            transa: call.transa,
            shape: (call.m, call.n, call.k),
            ld: [call.lda, call.ldb, call.ldd],
            batch: call.batch,
            bias: bias.is_some(),
            align: [
                alignment(a, call.lda as u64 * F16, bytes(0)),
                alignment(b, call.ldb as u64 * F16, bytes(1)),
                alignment(d, call.ldd as u64 * F16, bytes(2)),
            ],
        };
        let mut setups = self.setups.lock().unwrap_or_else(|e| e.into_inner());
        let setup = match setups.entry(key) {
            std::collections::hash_map::Entry::Occupied(found) => found.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => slot.insert(self.setup(call, &key)?),
        };
        if let Some(bias) = bias {
            // SAFETY: the descriptor is ours; the attribute is a pointer.
            unsafe {
                result::set_matmul_desc_attribute(
                    setup.desc,
                    Desc::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    (&raw const bias).cast(),
                    size_of::<u64>(),
                )
            }
            .map_err(lt("bias"))?;
        }
        let (workspace, _w) = self.workspace.device_ptr(&self.stream);
        let [la, lb, ld] = setup.layouts;
        let ran = first_accepted(setup.algos.len(), setup.last, refused, |i| {
            // SAFETY: the operands hold what the layouts describe (the
            // caller's contract); the algorithm came from the heuristic
            // for this descriptor and these layouts.
            unsafe {
                result::matmul(
                    self.handle,
                    setup.desc,
                    (&raw const call.alpha).cast(),
                    (&raw const call.beta).cast(),
                    a as *const c_void,
                    la,
                    b as *const c_void,
                    lb,
                    d as *const c_void,
                    ld,
                    d as *mut c_void,
                    ld,
                    &raw const setup.algos[i],
                    workspace as *mut c_void,
                    self.workspace.len(),
                    self.stream.cu_stream() as _,
                )
            }
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
        let desc = result::create_matmul_desc(
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cudaDataType_t::CUDA_R_32F,
        )
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
            setup.layouts[i] =
                result::create_matrix_layout(cudaDataType_t::CUDA_R_16F, rows, cols, ld)
                    .map_err(lt("layout"))?;
        }
        let layouts = setup.layouts;
        let transa = i32::from(call.transa);
        let epilogue = if key.bias {
            cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS
        } else {
            cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT
        };
        // SAFETY: attributes of descriptors made above, each of its size.
        unsafe {
            result::set_matmul_desc_attribute(
                desc,
                Desc::CUBLASLT_MATMUL_DESC_TRANSA,
                (&raw const transa).cast(),
                size_of::<i32>(),
            )
            .map_err(lt("transpose"))?;
            result::set_matmul_desc_attribute(
                desc,
                Desc::CUBLASLT_MATMUL_DESC_EPILOGUE,
                (&raw const epilogue).cast(),
                size_of::<cublasLtEpilogue_t>(),
            )
            .map_err(lt("epilogue"))?;
            if let Some((count, strides)) = call.batch {
                for (layout, stride) in layouts.iter().zip(strides) {
                    result::set_matrix_layout_attribute(
                        *layout,
                        Layout::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                        (&raw const count).cast(),
                        size_of::<c_int>(),
                    )
                    .map_err(lt("batch"))?;
                    result::set_matrix_layout_attribute(
                        *layout,
                        Layout::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                        (&raw const stride).cast(),
                        size_of::<i64>(),
                    )
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
        let pref = result::create_matmul_pref().map_err(lt("preference"))?;
        let workspace = self.workspace.len() as u64;
        let [a, b, d] = key.align;
        let found = (|| {
            // SAFETY: attributes of a preference made above, each of its
            // size; the heuristic writes at most `CANDIDATES` results.
            unsafe {
                result::set_matmul_pref_attribute(
                    pref,
                    Pref::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    (&raw const workspace).cast(),
                    size_of::<u64>(),
                )?;
                for (attr, bytes) in [
                    (Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, a),
                    (Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, b),
                    (Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, d),
                    (Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, d),
                ] {
                    result::set_matmul_pref_attribute(
                        pref,
                        attr,
                        (&raw const bytes).cast(),
                        size_of::<u32>(),
                    )?;
                }
                let mut results: Vec<cublasLtMatmulHeuristicResult_t> =
                    vec![std::mem::zeroed(); CANDIDATES];
                let mut count: c_int = 0;
                let [la, lb, ld] = setup.layouts;
                sys::cublasLtMatmulAlgoGetHeuristic(
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
        let _ = unsafe { result::destroy_matmul_pref(pref) };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What cuBLASLt computes for `call` over host buffers, column-major
    /// as its documentation defines it: `D = alpha·op(A)·B + beta·D` per
    /// batch entry, each operand from its start and at its stride.
    fn emulate(
        call: &Call,
        (a, a0): (&[f32], usize),
        (b, b0): (&[f32], usize),
        (d, d0): (&mut [f32], usize),
    ) {
        let (m, n, k) = (call.m as usize, call.n as usize, call.k as usize);
        let (count, [sa, sb, sd]) = call.batch.map_or((1, [0; 3]), |(c, s)| (c as usize, s));
        let (lda, ldb, ldd) = (call.lda as usize, call.ldb as usize, call.ldd as usize);
        for e in 0..count {
            let (ea, eb, ed) = (
                a0 + e * sa as usize,
                b0 + e * sb as usize,
                d0 + e * sd as usize,
            );
            for j in 0..n {
                for i in 0..m {
                    let mut sum = 0.0;
                    for p in 0..k {
                        // op(A)[i, p]: A stored `m × k` column-major, or
                        // `k × m` with transa.
                        let av = if call.transa {
                            a[ea + i * lda + p]
                        } else {
                            a[ea + p * lda + i]
                        };
                        sum += av * b[eb + j * ldb + p];
                    }
                    let at = ed + j * ldd + i;
                    d[at] = call.alpha * sum + call.beta * d[at];
                }
            }
        }
    }

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 7 + seed * 13) % 23) as f32 - 11.0) / 7.0)
            .collect()
    }

    /// A row-major GEMM with a residual, as the engine asks for it, is what
    /// cuBLASLt computes for the call made of it.
    #[test]
    fn a_row_major_gemm_maps_onto_cublaslt_column_major() {
        let (rows, k, n) = (5, 3, 4);
        let (x, w, y0) = (values(rows * k, 1), values(k * n, 2), values(rows * n, 3));
        for accumulate in [false, true] {
            let mut want = y0.clone();
            for r in 0..rows {
                for c in 0..n {
                    let dot: f32 = (0..k).map(|p| x[r * k + p] * w[p * n + c]).sum();
                    want[r * n + c] = dot + if accumulate { y0[r * n + c] } else { 0.0 };
                }
            }
            let mut got = y0.clone();
            emulate(
                &Call::row_major(rows, k, n, accumulate),
                (&w, 0),
                (&x, 0),
                (&mut got, 0),
            );
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-5, "{got:?} against {want:?}");
            }
        }
    }

    /// Attention's two batched products as the encoder asks for them
    /// (q·kᵀ scaled, over heads at offsets into one buffer; then the
    /// weights times v), and SigLIP's pooling query shared by every image
    /// (stride 0) with its scores at a head's offset, are what cuBLASLt
    /// computes for the calls made of them, operands from their offsets.
    #[test]
    fn batched_row_major_gemms_map_onto_cublaslt_column_major() {
        let row = |offset, ld, stride| Strided { offset, ld, stride };
        // (m, n, k), A, B, B transposed, C, batch
        let cases = [
            // scores = q·kᵀ: 2 heads of 3 tokens × 2 dims, q at 0, k at 12.
            (
                (3, 3, 2),
                row(0, 2, 6),
                row(12, 2, 6),
                true,
                row(0, 3, 9),
                2,
            ),
            // out = p·v: p [3 × 3] per head, v at 24.
            (
                (3, 2, 3),
                row(0, 3, 9),
                row(24, 2, 6),
                false,
                row(0, 2, 6),
                2,
            ),
            // SigLIP: one query for all, scores of head 1 at offset 3.
            (
                (1, 3, 2),
                row(2, 4, 0),
                row(2, 8, 24),
                true,
                row(3, 3, 6),
                3,
            ),
        ];
        for ((m, n, k), a, b, b_t, c, batch) in cases {
            let (av, bv) = (values(80, 4), values(80, 5));
            let alpha = 0.5;
            let mut want = vec![0.0f32; 64];
            for e in 0..batch {
                for i in 0..m {
                    for j in 0..n {
                        let dot: f32 = (0..k)
                            .map(|p| {
                                let x = av[a.offset + e * a.stride + i * a.ld + p];
                                let y = if b_t {
                                    bv[b.offset + e * b.stride + j * b.ld + p]
                                } else {
                                    bv[b.offset + e * b.stride + p * b.ld + j]
                                };
                                x * y
                            })
                            .sum();
                        want[c.offset + e * c.stride + i * c.ld + j] = alpha * dot;
                    }
                }
            }
            let call = Call::row_major_batched((m, n, k), alpha, (a, b, c), b_t, batch);
            let mut got = vec![0.0f32; 64];
            emulate(
                &call,
                (&bv, b.offset),
                (&av, a.offset),
                (&mut got, c.offset),
            );
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() < 1e-5,
                    "{m}×{n}×{k}, element {i}: {g} against {w}"
                );
            }
        }
    }

    /// An operand's alignment is what its address, its rows and its batch
    /// entries all share, capped at 256 bytes: SigLIP's pooling scores at
    /// a head's offset into a 196-token row are 8-byte aligned, at
    /// So400m's 729 tokens 2-byte aligned.
    #[test]
    fn alignment_is_the_least_of_address_rows_and_batch_entries() {
        let base = 0x7f00_0000_0000u64; // a fresh allocation: 256-aligned
        assert_eq!(alignment(base, 768 * 2, None), 256);
        assert_eq!(alignment(base, 64 * 2, None), 128);
        assert_eq!(alignment(base + 196 * 2, 196 * 2, Some(12 * 196 * 2)), 8);
        assert_eq!(alignment(base + 729 * 2, 729 * 2, Some(16 * 729 * 2)), 2);
        // An odd batch stride (197² scores a head) leaves 2 bytes.
        assert_eq!(alignment(base, 197 * 2, Some(197 * 197 * 2)), 2);
        assert_eq!(alignment(0, 0, None), 256);
    }

    /// Refused candidates are passed over, wrapping around from the last
    /// that ran; an error that is not a refusal stops the search; with
    /// every candidate refused, the last refusal is the answer.
    #[test]
    fn refused_algorithms_fall_through_to_the_next() {
        let refuse = |e: &&str| *e == "refused";
        let mut tried = Vec::new();
        let ran = first_accepted(4, 2, refuse, |i| {
            tried.push(i);
            if i == 0 { Ok(()) } else { Err("refused") }
        });
        assert_eq!(ran, Ok(0));
        assert_eq!(tried, [2, 3, 0]);
        let broken = first_accepted(4, 0, refuse, |i| {
            if i == 1 { Err("fault") } else { Err("refused") }
        });
        assert_eq!(broken, Err(Some("fault")));
        let none = first_accepted(3, 0, refuse, |_| Err("refused"));
        assert_eq!(none, Err(Some("refused")));
        assert_eq!(first_accepted(0, 0, refuse, |_| Ok(())), Err(None));
    }
}
