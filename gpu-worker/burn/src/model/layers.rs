//! The layers the ViT and ConvNeXt share (LayerNorm, Linear, attention),
//! each with the form it takes where the burn engine says a device needs
//! software forms ([`crate::device::takes_software_forms`]: Mesa's
//! lavapipe, whose shader compiler crashes on burn's matmul, `layer_norm`
//! and fused reduce-then-elementwise kernels): Linear layers and means
//! become 3×1 convolutions, attention broadcast products summed over the
//! last axis. The families above call one form and never ask which.

use burn::tensor::activation::softmax;
use burn::tensor::module::{conv2d, layer_norm, linear};
use burn::tensor::ops::{ConvOptions, PadMode};
use burn::tensor::{Device, Tensor, TensorData};

use model_families::checkpoint::HostTensor;

/// Whether `x`'s device takes the software forms.
fn software<const D: usize>(x: &Tensor<D>) -> bool {
    crate::device::takes_software_forms(&x.device())
}

/// A host tensor on `device`.
pub(crate) fn upload<const D: usize>(t: HostTensor, device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(t.values, t.shape), device)
}

/// A LayerNorm's parameters.
#[derive(Debug)]
pub(crate) struct Norm {
    pub(crate) gamma: Tensor<1>,
    pub(crate) beta: Tensor<1>,
    pub(crate) eps: f64,
}

impl Norm {
    pub(crate) fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        layer_norm(x, self.gamma.clone(), Some(self.beta.clone()), self.eps)
    }

    /// [`Norm::forward`], or on Mesa's lavapipe, whose compiler crashes on
    /// the fused kernels burn makes of a last-axis reduction and the
    /// elementwise ops around it, with both means taken as convolutions
    /// ([`last_axis_mean`]).
    pub(crate) fn run<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        if !software(&x) {
            return self.forward(x);
        }
        let d = self.gamma.dims()[0];
        let mut shape = [1; D];
        shape[D - 1] = d;
        let centred = x.clone() - mean_as_convolution(x);
        let var = mean_as_convolution(centred.clone() * centred.clone());
        centred / (var + self.eps).sqrt() * self.gamma.clone().reshape(shape)
            + self.beta.clone().reshape(shape)
    }
}

/// The mean over the last axis, kept as an axis of 1. On lavapipe as
/// [`mean_as_convolution`].
pub(crate) fn last_axis_mean<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    if software(&x) {
        mean_as_convolution(x)
    } else {
        x.mean_dim(D - 1)
    }
}

/// The mean over the last axis as a [`last_axis_conv`] with weights `1/D`,
/// which lavapipe compiles where burn's fused reductions crash it.
fn mean_as_convolution<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let d = x.dims()[D - 1];
    let weight = Tensor::<2>::full([1, d], 1.0 / d as f64, &x.device());
    last_axis_conv(x, weight, None)
}

/// `x · weightᵀ + bias` over the last axis (`weight` is `[out, in]`) as a
/// 3×1 convolution: the weights between a zero tap above and below, the
/// rows of `x` along the height. Burn's direct convolution path, the one
/// Mesa's lavapipe compiles (its 1×1 and matmul kernels crash the driver).
fn last_axis_conv<const D: usize>(
    x: Tensor<D>,
    weight: Tensor<2>,
    bias: Option<Tensor<1>>,
) -> Tensor<D> {
    let dims = x.dims();
    let d_in = dims[D - 1];
    let rows = dims[..D - 1].iter().product::<usize>();
    let [d_out, _] = weight.dims();
    let weight = weight
        .reshape([d_out, d_in, 1, 1])
        .pad((0, 0, 1, 1), PadMode::Constant(0.0));
    let input = x
        .reshape([rows, d_in])
        .transpose()
        .reshape([1, d_in, rows, 1]);
    let out = conv2d(
        input,
        weight,
        bias,
        ConvOptions::new([1, 1], [1, 0], [1, 1], 1),
    );
    let mut shape = dims;
    shape[D - 1] = d_out;
    out.reshape([d_out, rows]).transpose().reshape(shape)
}

/// A Linear layer, weight stored `[in, out]` as burn's `linear` wants.
#[derive(Debug, Clone)]
pub(crate) struct Dense {
    pub(crate) weight: Tensor<2>,
    pub(crate) bias: Option<Tensor<1>>,
}

impl Dense {
    /// The layer on `[..., in]`. On `[rows, in]` (a head over a batch's
    /// features), and on the CPU for any rank, through
    /// [`crate::model::cpu::linear_rows`]: every leading axis folded into
    /// the rows of one GEMM, so that the logits do not depend on the batch
    /// size and the weight is packed once per call. Burn's `linear` keeps a
    /// batched product, the weight packed again for every sample, when the
    /// tokens per sample are a multiple of 32 (SigLIP's 64-token texts:
    /// 17% of their pass went to packing).
    pub(crate) fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        if D == 2 || crate::model::cpu::on_flex_f32(&x) {
            let dims = x.dims();
            let features = dims[D - 1];
            let rows = dims[..D - 1].iter().product::<usize>();
            let out = self.weight.dims()[1];
            let y = crate::model::cpu::linear_rows(
                x.reshape([rows, features]),
                self.weight.clone(),
                self.bias.clone(),
            );
            return y.reshape(std::array::from_fn(
                |i| {
                    if i == D - 1 { out } else { dims[i] }
                },
            ));
        }
        linear(x, self.weight.clone(), self.bias.clone())
    }

    /// [`Dense::forward`], or on Mesa's lavapipe, whose compiler crashes on
    /// burn's matmul kernels, as a [`last_axis_conv`].
    pub(crate) fn run<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        if software(&x) {
            last_axis_conv(x, self.weight.clone().transpose(), self.bias.clone())
        } else {
            self.forward(x)
        }
    }
}

/// `softmax(q·kᵀ/√d)·v` per head (`[N, H, T, Dh]`), each query seeing only
/// the keys up to its own position where `causal`: burn's attention op (on
/// the CPU, [`crate::model::cpu::attention`]), or on lavapipe, where its
/// matmul kernels crash the driver, as broadcast products summed over the
/// last axis (`N·H·Tq·Tk·Dh` floats of scratch: small models only).
pub(crate) fn scaled_dot_product(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    causal: bool,
) -> Tensor<4> {
    if !software(&q) {
        return crate::model::cpu::attention(q, k, v, causal);
    }
    let [n, h, tq, dh] = q.dims();
    let tk = k.dims()[2];
    let scale = 1.0 / (dh as f64).sqrt();
    // The scale goes on q: a sum followed by a multiply and softmax fuses
    // into a kernel lavapipe's compiler crashes on.
    let scores = ((q * scale).reshape([n * h, tq, 1, dh]) * k.reshape([n * h, 1, tk, dh]))
        .sum_dim(3)
        .reshape([n * h, tq, tk]);
    let scores = if causal {
        // -1e30 above the diagonal: e^(x − max) underflows to exactly 0.
        let mask: Vec<f32> = (0..tq * tk)
            .map(|i| if i % tk > i / tk { -1e30 } else { 0.0 })
            .collect();
        let mask = Tensor::<3>::from_data(TensorData::new(mask, [1, tq, tk]), &scores.device());
        scores + mask
    } else {
        scores
    };
    let weights = softmax(scores, 2);
    let vt = v.swap_dims(2, 3).reshape([n * h, 1, dh, tk]);
    (weights.reshape([n * h, tq, 1, tk]) * vt)
        .sum_dim(3)
        .reshape([n, h, tq, dh])
}
