//! Fast paths for the CPU backend (burn flex, f32): ops whose flex form
//! costs a model noticeably more than the same op in PyTorch, computed here
//! on flex's own tensors (`FlexTensor` storage is public). Every function
//! takes any tensor and falls back to burn's op on other devices and types,
//! so the models call them unconditionally.

use burn::tensor::activation;
use burn::tensor::{DType, Tensor};
use burn_flex::{Flex, FlexTensor};
use rayon::prelude::*;
use wide::f32x8;

/// Elements per parallel task: large enough to amortise the task, small
/// enough that both cores share a ViT's MLP activation.
const CHUNK: usize = 1 << 14;

/// GELU in its erf form, `x·Φ(x)`. On flex in f32: in place where the
/// tensor is not shared, in parallel, eight lanes at a time, with erf as
/// PyTorch's vectorised CPU kernels compute it (Abramowitz & Stegun 7.1.26,
/// |error| ≤ 1.5e-7). Flex evaluates libm's `erff` one element at a time on
/// one thread: about a tenth of a ViT-B/16 pass (BENCHMARKS.md).
pub(crate) fn gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    if x.dtype() != DType::F32 {
        return activation::gelu(x);
    }
    let Ok(tensor) = x.clone().try_into_primitive::<Flex>() else {
        return activation::gelu(x);
    };
    drop(x); // the storage is now ours alone unless something else holds it
    Tensor::from_primitive::<Flex>(map_in_place(tensor, gelu_lanes))
}

/// Applies `f` to every element of `tensor`, eight at a time, in parallel:
/// in place if the storage is unshared and exactly the tensor's elements,
/// else on a compact copy.
fn map_in_place(tensor: FlexTensor, f: fn(f32x8) -> f32x8) -> FlexTensor {
    let compact = tensor
        .as_slice::<f32>()
        .is_some_and(|s| s.len() == tensor.storage::<f32>().len());
    let mut tensor = if compact {
        tensor
    } else {
        tensor.to_contiguous()
    };
    // Copies first if the storage is shared (copy on write).
    let values = tensor.storage_mut::<f32>();
    values.par_chunks_mut(CHUNK).for_each(|chunk| {
        let mut lanes = chunk.chunks_exact_mut(8);
        for lane in &mut lanes {
            let out = f(f32x8::from(&lane[..]));
            lane.copy_from_slice(out.as_array());
        }
        let rest = lanes.into_remainder();
        if !rest.is_empty() {
            let mut padded = [0.0; 8];
            padded[..rest.len()].copy_from_slice(rest);
            let out = f(f32x8::from(padded));
            rest.copy_from_slice(&out.as_array()[..rest.len()]);
        }
    });
    tensor
}

/// `0.5·x·(1 + erf(x/√2))` on eight lanes.
fn gelu_lanes(x: f32x8) -> f32x8 {
    let half = f32x8::splat(0.5);
    half * x * (f32x8::ONE + erf(x * f32x8::splat(std::f32::consts::FRAC_1_SQRT_2)))
}

/// erf by Abramowitz & Stegun 7.1.26: `1 − (a1·t + … + a5·t⁵)·e^(−x²)` with
/// `t = 1/(1 + p·|x|)`, sign restored; the form ATen's vectorised `erf` uses.
fn erf(x: f32x8) -> f32x8 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_8,
        -1.453_152_1,
        1.061_405_4,
    ];
    let a = x.abs();
    let t = f32x8::ONE / f32x8::splat(P).mul_add(a, f32x8::ONE);
    let mut poly = f32x8::splat(A[4]);
    for &c in A[..4].iter().rev() {
        poly = poly.mul_add(t, f32x8::splat(c));
    }
    let y = f32x8::ONE - poly * t * (-(a * a)).exp();
    // Restore the sign: erf is odd.
    y.copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;
    use pipeline_core::DeviceSpec;

    fn reference_gelu(x: f32) -> f32 {
        (0.5 * f64::from(x) * (1.0 + libm::erf(f64::from(x) / std::f64::consts::SQRT_2))) as f32
    }

    #[test]
    fn erf_is_within_the_approximations_bound_everywhere() {
        let xs: Vec<f32> = (-8000..=8000).map(|i| i as f32 / 1000.0).collect();
        let mut worst = 0.0f64;
        for chunk in xs.chunks(8) {
            let mut lanes = [0.0; 8];
            lanes[..chunk.len()].copy_from_slice(chunk);
            let got = erf(f32x8::from(lanes));
            for (x, y) in chunk.iter().zip(got.as_array()) {
                worst = worst.max((f64::from(*y) - libm::erf(f64::from(*x))).abs());
            }
        }
        // 1.5e-7 from the formula, plus f32 rounding near |erf| = 1.
        assert!(worst <= 5e-7, "max |erf error| {worst:e}");
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
