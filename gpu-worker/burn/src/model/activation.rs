//! The MLPs' activations on the CPU backend (burn flex, f32): GELU (erf),
//! its tanh form (SigLIP) and QuickGELU (OpenAI CLIP), each one
//! vectorised kernel run in place, in parallel, where burn's flex forms
//! evaluate libm one element at a time. The kernels are compiled twice,
//! with and without FMA, as `cpu.rs` describes; every function falls back
//! to burn's op on other devices and types.

use burn::tensor::{Tensor, activation};
use burn_flex::Flex;
use multiversion::multiversion;
use rayon::prelude::*;

use super::cpu::{compact, exp, flex_f32, fused_multiply_add, madd};

/// Elements per parallel task: large enough to amortise the task, small
/// enough that both cores share a ViT's MLP activation.
const CHUNK: usize = 1 << 14;

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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;
    use pipeline_core::DeviceSpec;

    use crate::model::cpu::tests::forms;

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

    /// `fast` on flex against `reference` (in f64) and burn's own form,
    /// through both tails (past exp's clamps) and near zero, without
    /// writing through the input it was given; then each compiled kernel.
    fn check_exp_form(
        name: &str,
        fast: fn(Tensor<1>) -> Tensor<1>,
        burns: fn(Tensor<1>) -> Tensor<1>,
        reference: fn(f32) -> f32,
        kernels: [fn(&mut [f32]); 2],
    ) {
        let device = crate::open(&DeviceSpec::Cpu).expect("the CPU opens");
        let values: Vec<f32> = (0..3 * 5 * 1097)
            .map(|i| ((i * 7919) % 2001) as f32 / 10.0 - 100.0)
            .chain([0.0, -0.0, f32::MIN_POSITIVE, 1e-30, -1e-30, -5.3, 3.7])
            .collect();
        let n = values.len();
        let x = Tensor::<1>::from_data(TensorData::new(values.clone(), [n]), &device);
        let want_burn = burns(x.clone())
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        let got = fast(x.clone())
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        assert_eq!(x.into_data().try_to_vec::<f32>().expect("f32"), values);
        for ((v, g), b) in values.iter().zip(&got).zip(&want_burn) {
            let want = reference(*v);
            let bound = 2e-6 * want.abs().max(1.0);
            assert!((g - want).abs() <= bound, "{name}({v}) = {g}, want {want}");
            assert!((g - b).abs() <= bound, "{name}({v}) = {g}, burn {b}");
        }
        let [fused_kernel, plain_kernel] = kernels;
        for fused in forms() {
            let mut one = values.clone();
            if fused {
                fused_kernel(&mut one);
            } else {
                plain_kernel(&mut one);
            }
            for (g, v) in one.iter().zip(&values) {
                let want = reference(*v);
                assert!(
                    (g - want).abs() <= 2e-6 * want.abs().max(1.0),
                    "{name}, fused {fused}: {v}"
                );
            }
        }
    }

    #[test]
    fn quick_gelu_on_the_cpu_matches_the_definition_and_burns_ops() {
        check_exp_form(
            "quick_gelu",
            quick_gelu,
            |x| x.clone() * activation::sigmoid(x * QUICK_GELU),
            reference_quick_gelu,
            [quick_gelu_fused, quick_gelu_plain],
        );
    }

    #[test]
    fn gelu_tanh_on_the_cpu_matches_the_definition_and_burns_op() {
        check_exp_form(
            "gelu_tanh",
            gelu_tanh,
            activation::gelu_approximate,
            reference_gelu_tanh,
            [gelu_tanh_fused, gelu_tanh_plain],
        );
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
