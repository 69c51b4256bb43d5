//! A GEMM as cuBLASLt is asked for it, apart from cuBLASLt itself: the
//! row-major products the engine makes mapped onto cuBLASLt's column-major
//! call, each operand's real alignment, and the walk over candidate
//! algorithms that passes refused ones over. Pure, and held on the host to
//! cuBLASLt's documented semantics (emulated in the tests).

use super::super::Strided;

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

/// One GEMM, column-major as cuBLASLt speaks: `D = act(alpha·op(A)·B +
/// beta·C (+ bias per row of D))`, A `m × k` (stored `k × m` with
/// `transa`), B `k × n`, C and D `m × n` (C is D unless the caller gives
/// another, in D's layout), each `batch` times at its stride; `act` is
/// ReLU with `relu`, else nothing.
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
    /// ReLU in the epilogue, after the bias and `beta·C`.
    pub(crate) relu: bool,
}

impl Call {
    /// The alignment cuBLASLt may assume of each operand (A, B, D) at
    /// these addresses: what the address, the leading dimension and the
    /// batch stride, in bytes, all share.
    pub(crate) fn alignments(&self, (a, b, d): (u64, u64, u64)) -> [u32; 3] {
        let stride = |i: usize| self.batch.map(|(_, s)| s[i] as u64 * F16);
        [
            alignment(a, self.lda as u64 * F16, stride(0)),
            alignment(b, self.ldb as u64 * F16, stride(1)),
            alignment(d, self.ldd as u64 * F16, stride(2)),
        ]
    }

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
            relu: false,
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
            relu: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What cuBLASLt computes for `call` over host buffers, column-major
    /// as its documentation defines it: `D = alpha·op(A)·B + beta·D` per
    /// batch entry, each operand from its start and at its stride.
    fn emulate(call: &Call, a: (&[f32], usize), b: (&[f32], usize), d: (&mut [f32], usize)) {
        emulate_epilogue(call, a, b, d, None, None);
    }

    /// The same with the epilogue: `D = act(alpha·op(A)·B + beta·C +
    /// bias)`, C read from `c` where given (in D's layout) else from D,
    /// the bias one value per row of D (cuBLASLt's `m`), `act` ReLU with
    /// `call.relu`.
    fn emulate_epilogue(
        call: &Call,
        (a, a0): (&[f32], usize),
        (b, b0): (&[f32], usize),
        (d, d0): (&mut [f32], usize),
        c: Option<&[f32]>,
        bias: Option<&[f32]>,
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
                    let prior = c.map_or(d[at], |c| c[at]);
                    let v = call.alpha * sum + call.beta * prior + bias.map_or(0.0, |b| b[i]);
                    d[at] = if call.relu { v.max(0.0) } else { v };
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

    /// A 1×1 convolution as the CNN pass asks for it (`pointwise_conv`):
    /// `y = relu(x·W + b + residual)` over NHWC rows, the residual as
    /// cuBLASLt's C beside D, bias and ReLU in the epilogue, is what
    /// cuBLASLt computes for the call; without a residual, C is not read.
    #[test]
    fn a_pointwise_convolution_maps_onto_cublaslt_with_its_epilogue() {
        let (rows, k, n) = (6, 4, 3);
        let (x, w, bias) = (values(rows * k, 6), values(k * n, 7), values(n, 8));
        let residual = values(rows * n, 9);
        for with_residual in [false, true] {
            for relu in [false, true] {
                let mut before = vec![0.0f32; rows * n];
                for r in 0..rows {
                    for o in 0..n {
                        let dot: f32 = (0..k).map(|p| x[r * k + p] * w[p * n + o]).sum();
                        let extra = if with_residual {
                            residual[r * n + o]
                        } else {
                            0.0
                        };
                        before[r * n + o] = dot + bias[o] + extra;
                    }
                }
                assert!(
                    before.iter().any(|v| *v < 0.0),
                    "some values for ReLU to cut"
                );
                let want: Vec<f32> = before
                    .iter()
                    .map(|v| if relu { v.max(0.0) } else { *v })
                    .collect();
                let mut call = Call::row_major(rows, k, n, with_residual);
                call.relu = relu;
                // D starts as garbage: only C (the residual) may be read.
                let mut got = vec![1e3f32; rows * n];
                emulate_epilogue(
                    &call,
                    (&w, 0),
                    (&x, 0),
                    (&mut got, 0),
                    Some(&residual),
                    Some(&bias),
                );
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() < 1e-5,
                        "residual {with_residual}, relu {relu}: {got:?} against {want:?}"
                    );
                }
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
