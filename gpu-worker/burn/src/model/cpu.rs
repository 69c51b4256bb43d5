//! Fast paths for the CPU backend (burn flex, f32): ops whose flex form
//! costs a model noticeably more than the same op in PyTorch, computed here
//! on flex's own tensors (`FlexTensor` storage is public). Every function
//! takes any tensor and falls back to burn's op on other devices and types,
//! so the models call them unconditionally.
//!
//! The element kernels are plain loops the compiler vectorises; the
//! `multiversion` crate compiles them again for AVX2 + FMA and picks that
//! copy at run time where the CPU has it (the binary itself targets
//! baseline x86-64, so it runs on any x86-64 CPU). Where the CPU fuses
//! multiply-add, the kernels round once per `mul_add`, as ATen's do; on
//! a CPU without FMA they multiply and add (a software `fmaf` per term
//! would cost more than the kernel), so their last bits differ there.
//! The activations' element kernels are in `activation.rs`.

use burn::tensor::module;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{DType, Tensor};
use burn_flex::{Flex, FlexTensor};
use multiversion::multiversion;
use rayon::prelude::*;

/// Softmax rows per parallel task.
const ROWS: usize = 64;

/// `softmax(q·kᵀ/√d)·v` per head (`[N, H, T, Dh]`, views allowed). On flex
/// in f32: both products as batched GEMMs straight on the views (no
/// per-head copies of q, k and v), and the softmax in place on the scores,
/// vectorised, in parallel. Flex's own attention copies q, k and v and
/// takes each score's `exp` from libm, one at a time: the softmax alone was
/// about 5% of a ViT-B/16 pass. Elsewhere, burn's attention op.
pub(crate) fn attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, causal: bool) -> Tensor<4> {
    if flex_f32(&q).is_none() {
        let options = AttentionModuleOptions {
            is_causal: causal,
            ..AttentionModuleOptions::default()
        };
        return module::attention(q, k, v, None, None, options);
    }
    let dh = q.dims()[3];
    let queries = q.dims()[2];
    let scale = (1.0 / (dh as f64).sqrt()) as f32;
    let scores = q.matmul(k.swap_dims(2, 3));
    let tk = scores.dims()[3];
    let Some(mut scores_flex) = flex_f32(&scores) else {
        unreachable!("a product of flex tensors is a flex tensor");
    };
    drop(scores);
    scores_flex = compact(scores_flex);
    let fused = fused_multiply_add();
    scores_flex
        .storage_mut::<f32>()
        .par_chunks_mut(ROWS * tk)
        .enumerate()
        .for_each(|(chunk, rows)| {
            for (i, row) in rows.chunks_exact_mut(tk).enumerate() {
                // Causal: query t sees keys 0..=t; the softmax runs over
                // those and the rest weigh exactly 0, as under a -inf mask.
                let seen = if causal {
                    ((chunk * ROWS + i) % queries + 1).min(tk)
                } else {
                    tk
                };
                let (row, hidden) = row.split_at_mut(seen);
                if fused {
                    softmax_fused(row, scale)
                } else {
                    softmax_plain(row, scale)
                }
                hidden.fill(0.0);
            }
        });
    Tensor::<4>::from_primitive::<Flex>(scores_flex).matmul(v)
}

/// The fewest rows a GEMM on the CPU is given, for `n` columns. Below it
/// the `gemm` crate takes other paths (`m ≤ 64 && n ≤ 64`, `m·n ≤ 256`, a
/// matrix-vector product for one row) that sum each dot product in other
/// groups, so an image's bits would depend on how many rows share its GEMM:
/// on the batch size. At or above it, the grouping depends on `k` alone.
pub(crate) fn min_gemm_rows(n: usize) -> usize {
    65.max(256 / n.max(1) + 1)
}

/// `lhs·rhs` (`[rows, k]·[k, n]`). On flex in f32 with fewer than
/// [`min_gemm_rows`] rows, zero rows are added and their results dropped,
/// so that every row's result is the same whatever the rows beside it.
pub(crate) fn matmul_rows(lhs: Tensor<2>, rhs: Tensor<2>) -> Tensor<2> {
    let [rows, k] = lhs.dims();
    let least = min_gemm_rows(rhs.dims()[1]);
    if rows >= least || !on_flex_f32(&lhs) {
        return lhs.matmul(rhs);
    }
    let padding = Tensor::<2>::zeros([least - rows, k], &lhs.device());
    Tensor::cat(vec![lhs, padding], 0)
        .matmul(rhs)
        .narrow(0, 0, rows)
}

/// A Linear layer on `[rows, in]` with weights `[in, out]`: on flex in f32
/// through [`matmul_rows`] (a batch's logits are the same bits for every
/// batch size), elsewhere burn's `linear`.
pub(crate) fn linear_rows(x: Tensor<2>, weight: Tensor<2>, bias: Option<Tensor<1>>) -> Tensor<2> {
    if !on_flex_f32(&x) {
        return module::linear(x, weight, bias);
    }
    let y = matmul_rows(x, weight);
    match bias {
        Some(bias) => y + bias.unsqueeze(),
        None => y,
    }
}

/// Whether `x` is an f32 tensor on flex (the CPU).
pub(crate) fn on_flex_f32<const D: usize>(x: &Tensor<D>) -> bool {
    flex_f32(x).is_some()
}

/// The f32 flex tensor behind `x`, or `None` on other devices and types.
pub(crate) fn flex_f32<const D: usize>(x: &Tensor<D>) -> Option<FlexTensor> {
    if x.dtype() != DType::F32 {
        return None;
    }
    x.clone().try_into_primitive::<Flex>().ok()
}

/// A flex f32 matrix's values, compact (copied if it is a view).
pub(crate) fn compact_values(t: &Tensor<2>) -> FlexTensor {
    compact(flex_f32(t).expect("the channels-last path runs on flex in f32"))
}

/// `tensor` itself if its storage is exactly its elements in order, else a
/// compact copy: safe to write through `storage_mut` row by row.
pub(crate) fn compact(tensor: FlexTensor) -> FlexTensor {
    let exact = tensor
        .as_slice::<f32>()
        .is_some_and(|s| s.len() == tensor.storage::<f32>().len());
    if exact {
        tensor
    } else {
        tensor.to_contiguous()
    }
}

/// Whether the CPU fuses multiply-add in hardware (and, on x86-64, has the
/// AVX2 the fused kernels are compiled for).
pub(crate) fn fused_multiply_add() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(target_arch = "aarch64")]
    {
        true
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

#[multiversion(targets("x86_64+avx2+fma"))]
fn softmax_fused(row: &mut [f32], scale: f32) {
    softmax_row::<true>(row, scale)
}

fn softmax_plain(row: &mut [f32], scale: f32) {
    softmax_row::<false>(row, scale)
}

/// `a·b + c`: rounded once where the CPU fuses it (`FMA`), else twice.
#[inline(always)]
pub(crate) fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// `e^x`, branch-free so that loops over it vectorise: Cephes' `expf`
/// (Cody–Waite reduction by ln 2, a degree-5 polynomial; about 1 ulp),
/// with 2ⁿ built from the exponent bits. 0 below −87.3 (where `e^x` turns
/// subnormal), `e^88` above 88; NaN stays NaN.
#[inline(always)]
pub(crate) fn exp<const FMA: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 in two parts, the first (0.693359375) with few enough bits that
    // `n·LN2_HI` is exact. Cephes' constants, written as their f32 values.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5·2²³: adding it rounds to an integer, kept in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    const P: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_6e-1,
        0.5,
    ];
    let c = x.clamp(-87.3, 88.0);
    let r = madd::<FMA>(c, LOG2E, ROUND);
    let n = r - ROUND;
    // The integer n, from r's mantissa bits.
    let ni = r.to_bits().wrapping_sub(ROUND.to_bits());
    let g = madd::<FMA>(-n, LN2_HI, c);
    let g = madd::<FMA>(-n, LN2_LO, g);
    let mut p = P[0];
    for &k in &P[1..] {
        p = madd::<FMA>(p, g, k);
    }
    let y = madd::<FMA>(p, g * g, g) + 1.0;
    let two_n = f32::from_bits(ni.wrapping_add(127) << 23);
    let e = y * two_n;
    if x < -87.3 { 0.0 } else { e }
}

/// One softmax row in place, of `scale·row`: the max, then `e^(scale·(x −
/// max))` and their sum in eight fixed lanes (the result does not depend
/// on how rows are split between threads), then the division.
#[inline(always)]
fn softmax_row<const FMA: bool>(row: &mut [f32], scale: f32) {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = row.chunks_exact(8);
    for chunk in &mut chunks {
        for (m, &v) in lanes.iter_mut().zip(chunk) {
            *m = m.max(v);
        }
    }
    let max = chunks
        .remainder()
        .iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    for v in row.iter_mut() {
        *v = exp::<FMA>((*v - max) * scale);
    }
    let mut sums = [0.0f32; 8];
    let mut chunks = row.chunks_exact(8);
    for chunk in &mut chunks {
        for (s, &v) in sums.iter_mut().zip(chunk) {
            *s += v;
        }
    }
    let sum = sums.iter().chain(chunks.remainder()).sum::<f32>();
    let inverse = 1.0 / sum;
    for v in row.iter_mut() {
        *v *= inverse;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use burn::tensor::TensorData;
    use pipeline_core::DeviceSpec;

    /// Both compiled forms: the fused one only where this CPU has FMA.
    pub(crate) fn forms() -> Vec<bool> {
        if fused_multiply_add() {
            vec![true, false]
        } else {
            vec![false]
        }
    }

    #[test]
    fn exp_is_within_two_ulps_and_handles_the_edges() {
        for fused in forms() {
            let e = |x: f32| {
                if fused {
                    exp::<true>(x)
                } else {
                    exp::<false>(x)
                }
            };
            let mut worst = 0.0f64;
            for i in -873_000..=880_000 {
                let x = i as f32 / 10_000.0;
                let want = f64::from(x).exp();
                worst = worst.max((f64::from(e(x)) - want).abs() / want);
            }
            // f32's epsilon is 1.19e-7: two units in the last place.
            assert!(
                worst <= 2.4e-7,
                "max relative error {worst:e} (fused {fused})"
            );
            assert_eq!(e(0.0), 1.0);
            assert_eq!(e(-88.0), 0.0);
            assert_eq!(e(f32::NEG_INFINITY), 0.0);
            assert!(e(f32::NAN).is_nan());
        }
    }

    #[test]
    fn attention_on_the_cpu_matches_burns_on_views_of_a_fused_projection() {
        let device = crate::open(&DeviceSpec::Cpu).expect("the CPU opens");
        // 2 images, 3 heads of 8, 13 tokens (a ragged tail of lanes); q, k
        // and v are views of one [N, T, 3·D] tensor, as a ViT makes them.
        let (n, h, t, dh) = (2, 3, 13, 8);
        let d = h * dh;
        let values: Vec<f32> = (0..n * t * 3 * d)
            .map(|i| ((i * 7919) % 1001) as f32 / 100.0 - 5.0)
            .collect();
        let qkv = Tensor::<3>::from_data(TensorData::new(values, [n, t, 3 * d]), &device);
        let heads = |x: Tensor<3>| x.reshape([n, t, h, dh]).swap_dims(1, 2);
        let q = heads(qkv.clone().narrow(2, 0, d));
        let k = heads(qkv.clone().narrow(2, d, d));
        let v = heads(qkv.narrow(2, 2 * d, d));
        // Causal too: 78 rows of scores, so a parallel chunk of 64 rows
        // ends inside an image and the query index must follow the row.
        for causal in [false, true] {
            let options = AttentionModuleOptions {
                is_causal: causal,
                ..AttentionModuleOptions::default()
            };
            let burns = module::attention(q.clone(), k.clone(), v.clone(), None, None, options)
                .into_data()
                .try_to_vec::<f32>()
                .expect("f32");
            let got = attention(q.clone(), k.clone(), v.clone(), causal);
            assert_eq!(got.dims(), [n, h, t, dh]);
            let got = got.into_data().try_to_vec::<f32>().expect("f32");
            let worst = got
                .iter()
                .zip(&burns)
                .map(|(g, b)| (g - b).abs())
                .fold(0.0f32, f32::max);
            assert!(worst <= 1e-5, "causal {causal}: max |difference| {worst:e}");
        }
    }

    #[test]
    fn softmax_rows_sum_to_one_and_keep_their_order() {
        for fused in forms() {
            let mut row: Vec<f32> = (0..197).map(|i| ((i * 37) % 101) as f32 / 7.0).collect();
            let original = row.clone();
            if fused {
                softmax_fused(&mut row, 0.125)
            } else {
                softmax_plain(&mut row, 0.125)
            }
            let max = original.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let denominator: f64 = original
                .iter()
                .map(|&v| (f64::from(v - max) * 0.125).exp())
                .sum();
            for (p, v) in row.iter().zip(&original) {
                let want = (f64::from(v - max) * 0.125).exp() / denominator;
                assert!((f64::from(*p) - want).abs() <= 1e-7, "{p} against {want}");
            }
        }
    }
}
