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

use burn::tensor::module;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{DType, Tensor, activation};
use burn_flex::{Flex, FlexTensor};
use multiversion::multiversion;
use rayon::prelude::*;

/// Elements per parallel task: large enough to amortise the task, small
/// enough that both cores share a ViT's MLP activation.
const CHUNK: usize = 1 << 14;

/// Softmax rows per parallel task.
const ROWS: usize = 64;

/// GELU in its erf form, `x·Φ(x)`. On flex in f32: in place where the
/// tensor is not shared, in parallel, vectorised, with erf as PyTorch's
/// vectorised CPU kernels compute it (Abramowitz & Stegun 7.1.26,
/// |error| ≤ 1.5e-7). Flex evaluates libm's `erff` one element at a time on
/// one thread: about a tenth of a ViT-B/16 pass (BENCHMARKS.md).
pub(crate) fn gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    in_place(x, activation::gelu, gelu_fused, gelu_plain)
}

/// QuickGELU, `x·σ(1.702·x)` (OpenAI CLIP's and open_clip's `-quickgelu`
/// models), as `x / (1 + e^(−1.702·x))` with the vectorised `exp` below.
/// Burn's form on flex took libm's `expf` one element at a time: 9% of a
/// CLIP ViT-B/32 pass (`perf`, BENCHMARKS.md).
pub(crate) fn quick_gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    in_place(
        x,
        |x| x.clone() * activation::sigmoid(x * QUICK_GELU),
        quick_gelu_fused,
        quick_gelu_plain,
    )
}

const QUICK_GELU: f32 = 1.702;

/// SigLIP's GELU, `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`
/// (`gelu_pytorch_tanh`), as `x / (1 + e^(−2u))` (the same value: `1 +
/// tanh(u) = 2 / (1 + e^(−2u))`) with the vectorised `exp` below. Burn's
/// form on flex took libm's `powf`, `tanhf` and `expm1f` one element at a
/// time: 23% of a SigLIP text pass (`perf`, BENCHMARKS.md).
pub(crate) fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    in_place(
        x,
        activation::gelu_approximate,
        gelu_tanh_fused,
        gelu_tanh_plain,
    )
}

/// Applies an element kernel to `x`: on flex in f32 in place where the
/// tensor is not shared, in parallel, the FMA form where the CPU has it;
/// elsewhere `fallback` (burn's ops).
fn in_place<const D: usize>(
    x: Tensor<D>,
    fallback: impl FnOnce(Tensor<D>) -> Tensor<D>,
    fused_kernel: fn(&mut [f32]),
    plain_kernel: fn(&mut [f32]),
) -> Tensor<D> {
    let Some(mut tensor) = flex_f32(&x) else {
        return fallback(x);
    };
    drop(x); // the storage is now ours alone unless something else holds it
    tensor = compact(tensor);
    // Copies first if the storage is shared (copy on write).
    let values = tensor.storage_mut::<f32>();
    let kernel = if fused_multiply_add() {
        fused_kernel
    } else {
        plain_kernel
    };
    values.par_chunks_mut(CHUNK).for_each(kernel);
    Tensor::from_primitive::<Flex>(tensor)
}

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
fn gelu_fused(values: &mut [f32]) {
    for v in values {
        *v = gelu_one::<true>(*v);
    }
}

fn gelu_plain(values: &mut [f32]) {
    for v in values {
        *v = gelu_one::<false>(*v);
    }
}

#[multiversion(targets("x86_64+avx2+fma"))]
fn gelu_tanh_fused(values: &mut [f32]) {
    for v in values {
        *v = gelu_tanh_one::<true>(*v);
    }
}

fn gelu_tanh_plain(values: &mut [f32]) {
    for v in values {
        *v = gelu_tanh_one::<false>(*v);
    }
}

/// `x / (1 + e^(−2u))`, `u = √(2/π)·(x + 0.044715·x³)`: `x` where the
/// exponential vanishes, a zero of `x`'s sign where it saturates.
#[inline(always)]
fn gelu_tanh_one<const FMA: bool>(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let u = SQRT_2_OVER_PI * madd::<FMA>(0.044_715 * x * x, x, x);
    x / (1.0 + exp::<FMA>(-2.0 * u))
}

#[multiversion(targets("x86_64+avx2+fma"))]
fn quick_gelu_fused(values: &mut [f32]) {
    for v in values {
        *v = quick_gelu_one::<true>(*v);
    }
}

fn quick_gelu_plain(values: &mut [f32]) {
    for v in values {
        *v = quick_gelu_one::<false>(*v);
    }
}

/// `x / (1 + e^(−1.702·x))`: `x` where the exponential vanishes, a zero of
/// `x`'s sign where it overflows (`exp` saturates at `e^88`), as PyTorch's
/// `x * sigmoid(1.702 * x)`.
#[inline(always)]
fn quick_gelu_one<const FMA: bool>(x: f32) -> f32 {
    x / (1.0 + exp::<FMA>(-QUICK_GELU * x))
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

/// `0.5·x·(1 + erf(x/√2))`.
#[inline(always)]
pub(crate) fn gelu_one<const FMA: bool>(x: f32) -> f32 {
    0.5 * x * (1.0 + erf::<FMA>(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// erf by Abramowitz & Stegun 7.1.26: `1 − (a1·t + … + a5·t⁵)·e^(−x²)` with
/// `t = 1/(1 + p·|x|)`, sign restored; the form ATen's vectorised `erf` uses.
#[inline(always)]
fn erf<const FMA: bool>(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_8,
        -1.453_152_1,
        1.061_405_4,
    ];
    let a = x.abs();
    let t = 1.0 / madd::<FMA>(P, a, 1.0);
    let mut poly = A[4];
    for &c in A[..4].iter().rev() {
        poly = madd::<FMA>(poly, t, c);
    }
    let y = 1.0 - poly * t * exp::<FMA>(-(a * a));
    // Restore the sign: erf is odd.
    y.copysign(x)
}

/// `e^x`, branch-free so that loops over it vectorise: Cephes' `expf`
/// (Cody–Waite reduction by ln 2, a degree-5 polynomial; about 1 ulp),
/// with 2ⁿ built from the exponent bits. 0 below −87.3 (where `e^x` turns
/// subnormal), `e^88` above 88; NaN stays NaN.
#[inline(always)]
fn exp<const FMA: bool>(x: f32) -> f32 {
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
mod tests {
    use super::*;
    use burn::tensor::TensorData;
    use pipeline_core::DeviceSpec;

    fn reference_quick_gelu(x: f32) -> f32 {
        let x = f64::from(x);
        (x / (1.0 + (-1.702 * x).exp())) as f32
    }

    fn reference_gelu_tanh(x: f32) -> f32 {
        let x = f64::from(x);
        let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
        (0.5 * x * (1.0 + u.tanh())) as f32
    }

    fn reference_gelu(x: f32) -> f32 {
        (0.5 * f64::from(x) * (1.0 + libm::erf(f64::from(x) / std::f64::consts::SQRT_2))) as f32
    }

    /// Both compiled forms: the fused one only where this CPU has FMA.
    fn forms() -> Vec<bool> {
        if fused_multiply_add() {
            vec![true, false]
        } else {
            vec![false]
        }
    }

    #[test]
    fn erf_is_within_the_approximations_bound_everywhere() {
        for fused in forms() {
            let mut worst = 0.0f64;
            for i in -8000..=8000 {
                let x = i as f32 / 1000.0;
                let y = if fused {
                    erf::<true>(x)
                } else {
                    erf::<false>(x)
                };
                worst = worst.max((f64::from(y) - libm::erf(f64::from(x))).abs());
            }
            // 1.5e-7 from the formula, plus f32 rounding near |erf| = 1.
            assert!(worst <= 5e-7, "max |erf error| {worst:e} (fused {fused})");
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
    fn the_vectorised_copies_give_the_bits_of_the_scalar_code() {
        let values: Vec<f32> = (0..4099).map(|i| (i as f32 - 2000.0) / 300.0).collect();
        for fused in forms() {
            let mut got = values.clone();
            let want: Vec<f32> = if fused {
                gelu_fused(&mut got);
                values.iter().map(|&x| gelu_one::<true>(x)).collect()
            } else {
                gelu_plain(&mut got);
                values.iter().map(|&x| gelu_one::<false>(x)).collect()
            };
            assert_eq!(got, want, "fused {fused}");
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

    #[test]
    fn quick_gelu_on_the_cpu_matches_the_definition_and_burns_ops() {
        let device = crate::open(&DeviceSpec::Cpu).expect("the CPU opens");
        // Through both tails of the sigmoid (|1.702·x| past exp's clamps).
        let values: Vec<f32> = (0..3 * 5 * 1097)
            .map(|i| ((i * 7919) % 2001) as f32 / 10.0 - 100.0)
            .chain([0.0, -0.0, f32::MIN_POSITIVE, 1e-30, -1e-30])
            .collect();
        let n = values.len();
        let x = Tensor::<1>::from_data(TensorData::new(values.clone(), [n]), &device);
        let burns = (x.clone() * activation::sigmoid(x.clone() * QUICK_GELU))
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        let got = quick_gelu(x.clone())
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        assert_eq!(x.into_data().try_to_vec::<f32>().expect("f32"), values);
        for ((v, g), b) in values.iter().zip(&got).zip(&burns) {
            let want = reference_quick_gelu(*v);
            let bound = 2e-6 * want.abs().max(1.0);
            assert!(
                (g - want).abs() <= bound,
                "quick_gelu({v}) = {g}, want {want}"
            );
            assert!((g - b).abs() <= bound, "quick_gelu({v}) = {g}, burn {b}");
        }
        for fused in forms() {
            let mut one = values.clone();
            if fused {
                quick_gelu_fused(&mut one);
            } else {
                quick_gelu_plain(&mut one);
            }
            for (g, v) in one.iter().zip(&values) {
                let want = reference_quick_gelu(*v);
                assert!(
                    (g - want).abs() <= 2e-6 * want.abs().max(1.0),
                    "fused {fused}: {v}"
                );
            }
        }
    }

    #[test]
    fn gelu_tanh_on_the_cpu_matches_the_definition_and_burns_op() {
        let device = crate::open(&DeviceSpec::Cpu).expect("the CPU opens");
        // Through both tails, past exp's clamps, and near zero.
        let values: Vec<f32> = (0..3 * 5 * 1097)
            .map(|i| ((i * 7919) % 2001) as f32 / 10.0 - 100.0)
            .chain([0.0, -0.0, f32::MIN_POSITIVE, 1e-30, -1e-30, -5.3, 3.7])
            .collect();
        let n = values.len();
        let x = Tensor::<1>::from_data(TensorData::new(values.clone(), [n]), &device);
        let burns = activation::gelu_approximate(x.clone())
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        let got = gelu_tanh(x.clone())
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        assert_eq!(x.into_data().try_to_vec::<f32>().expect("f32"), values);
        for ((v, g), b) in values.iter().zip(&got).zip(&burns) {
            let want = reference_gelu_tanh(*v);
            let bound = 2e-6 * want.abs().max(1.0);
            assert!(
                (g - want).abs() <= bound,
                "gelu_tanh({v}) = {g}, want {want}"
            );
            assert!((g - b).abs() <= bound, "gelu_tanh({v}) = {g}, burn {b}");
        }
        for fused in forms() {
            let mut one = values.clone();
            if fused {
                gelu_tanh_fused(&mut one);
            } else {
                gelu_tanh_plain(&mut one);
            }
            for (g, v) in one.iter().zip(&values) {
                let want = reference_gelu_tanh(*v);
                assert!(
                    (g - want).abs() <= 2e-6 * want.abs().max(1.0),
                    "fused {fused}: {v}"
                );
            }
        }
    }

    #[test]
    fn gelu_on_the_cpu_matches_the_definition_and_burns_gelu() {
        let device = crate::open(&DeviceSpec::Cpu).expect("the CPU opens");
        // 3·5·1097 elements: the chunks and a ragged tail of lanes.
        let values: Vec<f32> = (0..3 * 5 * 1097)
            .map(|i| ((i * 7919) % 2001) as f32 / 200.0 - 5.0)
            .collect();
        let x = Tensor::<3>::from_data(TensorData::new(values.clone(), [3, 5, 1097]), &device);
        let burns = activation::gelu(x.clone())
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        // `x` is still held: the fast path must not write through it.
        let got = gelu(x.clone())
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        assert_eq!(x.into_data().try_to_vec::<f32>().expect("f32"), values);
        for ((v, g), b) in values.iter().zip(&got).zip(&burns) {
            let want = reference_gelu(*v);
            assert!((g - want).abs() <= 1e-6, "gelu({v}) = {g}, want {want}");
            assert!((g - b).abs() <= 1e-6, "gelu({v}) = {g}, burn {b}");
        }
        // A view (a slice of the last axis) is made compact first.
        let view = Tensor::<3>::from_data(TensorData::new(values.clone(), [3, 5, 1097]), &device)
            .narrow(2, 1, 1000);
        let got = gelu(view.clone())
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        let want = view.into_data().try_to_vec::<f32>().expect("f32");
        assert_eq!(got.len(), want.len());
        for (g, v) in got.iter().zip(&want) {
            assert!((g - reference_gelu(*v)).abs() <= 1e-6);
        }
    }
}
