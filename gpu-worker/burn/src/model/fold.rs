//! Eval-mode BatchNorm folded into the convolution before it, once, after
//! the weights are loaded — as PyTorch's `fuse_conv_bn_eval` and every
//! inference runtime do. `y = γ (conv(x) + b − μ) / √(σ² + ε) + β` is a
//! convolution with weights `w · s` and bias `(b − μ) · s + β`, where
//! `s = γ / √(σ² + ε)` per output channel: exact up to rounding, and four
//! full passes over each activation fewer (subtract, divide, scale, shift).
//!
//! A folded BatchNorm is `None`; the forward code applies [`norm`], which
//! passes `None` through. The checkpoint still loads into the unfolded
//! modules, with upstream's names.

use burn::module::Param;
use burn::nn::BatchNorm;
use burn::nn::conv::Conv2d;
use burn::tensor::{FloatDType, Tensor, TensorData};

/// `bn` of `x`, or `x` where `bn` was folded into the convolution before.
pub(crate) fn norm(bn: &Option<BatchNorm>, x: Tensor<4>) -> Tensor<4> {
    match bn {
        Some(bn) => bn.forward(x),
        None => x,
    }
}

fn host(tensor: Tensor<1>) -> Vec<f32> {
    tensor
        .cast(FloatDType::F32)
        .into_data()
        .try_to_vec::<f32>()
        .expect("batch norm parameters are f32")
}

/// Folds `bn` into `conv` and leaves `None` in its place. A `None` (already
/// folded, or no norm) leaves `conv` as it is.
pub(crate) fn fold(conv: &mut Conv2d, bn: &mut Option<BatchNorm>) {
    let Some(norm) = bn.take() else {
        return;
    };
    let weight = conv.weight.val();
    let (device, dtype) = (weight.device(), weight.dtype());
    let shape = weight.dims();
    let mut w = weight
        .cast(FloatDType::F32)
        .into_data()
        .try_to_vec::<f32>()
        .expect("convolution weights are f32");
    let out = shape[0];
    let gamma = host(norm.gamma.val());
    let beta = host(norm.beta.val());
    let mean = host(norm.running_mean.value());
    let var = host(norm.running_var.value());
    let bias = conv
        .bias
        .as_ref()
        .map_or_else(|| vec![0.0; out], |b| host(b.val()));
    // The scale in f64: one rounding per folded weight, not two.
    let scale: Vec<f64> = (0..out)
        .map(|c| f64::from(gamma[c]) / (f64::from(var[c]) + norm.epsilon).sqrt())
        .collect();
    let per_channel = w.len() / out.max(1);
    for (c, row) in w.chunks_exact_mut(per_channel).enumerate() {
        for v in row {
            *v = (f64::from(*v) * scale[c]) as f32;
        }
    }
    let folded_bias: Vec<f32> = (0..out)
        .map(|c| ((f64::from(bias[c]) - f64::from(mean[c])) * scale[c] + f64::from(beta[c])) as f32)
        .collect();
    // Back in the weights' own type (f16 where the device computes in it).
    conv.weight = Param::from_tensor(Tensor::from_data(
        TensorData::new(w, shape),
        (&device, dtype),
    ));
    conv.bias = Some(Param::from_tensor(Tensor::from_data(
        TensorData::new(folded_bias, [out]),
        (&device, dtype),
    )));
}

#[cfg(test)]
mod tests {
    use burn::module::RunningState;
    use burn::nn::conv::Conv2dConfig;
    use burn::nn::{BatchNormConfig, PaddingConfig2d};
    use burn::tensor::Device;

    use super::*;

    /// Deterministic values in `[lo, hi)`.
    fn values(n: usize, seed: u32, lo: f32, hi: f32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                lo + (hi - lo) * (state as f32 / u32::MAX as f32)
            })
            .collect()
    }

    fn vector(n: usize, seed: u32, lo: f32, hi: f32, device: &Device) -> Tensor<1> {
        Tensor::from_data(TensorData::new(values(n, seed, lo, hi), [n]), device)
    }

    #[test]
    fn a_folded_batch_norm_gives_what_conv_then_batch_norm_gave() {
        let device = Device::flex();
        let (cin, cout) = (3, 5);
        let mut conv = Conv2dConfig::new([cin, cout], [3, 3])
            .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
            .with_bias(true)
            .init(&device);
        conv.weight = Param::from_tensor(Tensor::from_data(
            TensorData::new(values(cout * cin * 9, 1, -0.5, 0.5), [cout, cin, 3, 3]),
            &device,
        ));
        conv.bias = Some(Param::from_tensor(vector(cout, 2, -0.2, 0.2, &device)));
        let mut bn = BatchNormConfig::new(cout).with_epsilon(1e-3).init(&device);
        bn.gamma = Param::from_tensor(vector(cout, 3, 0.5, 2.0, &device));
        bn.beta = Param::from_tensor(vector(cout, 4, -1.0, 1.0, &device));
        bn.running_mean = RunningState::new(vector(cout, 5, -0.3, 0.3, &device));
        bn.running_var = RunningState::new(vector(cout, 6, 0.1, 3.0, &device));
        let x: Tensor<4> = Tensor::from_data(
            TensorData::new(values(2 * cin * 6 * 6, 7, -1.0, 1.0), [2, cin, 6, 6]),
            &device,
        );
        let mut bn = Some(bn);
        let before = norm(&bn, conv.forward(x.clone()));
        fold(&mut conv, &mut bn);
        assert!(bn.is_none(), "the norm is folded away");
        let after = norm(&bn, conv.forward(x));
        let (a, b) = (
            before.into_data().try_to_vec::<f32>().expect("f32"),
            after.into_data().try_to_vec::<f32>().expect("f32"),
        );
        let largest = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let worst = a
            .iter()
            .zip(&b)
            .fold(0.0f32, |m, (p, q)| m.max((p - q).abs()));
        assert!(largest > 0.5, "the test values are not trivial");
        assert!(worst <= 1e-5 * largest, "max |Δ| {worst} of {largest}");
        // Folding again changes nothing.
        let weight = conv.weight.val().into_data();
        fold(&mut conv, &mut bn);
        assert_eq!(conv.weight.val().into_data(), weight);
    }
}
