//! ResNets on the CPU backend (flex, f32), channels-last. flex runs each
//! NCHW convolution as: the input copied to NHWC by a scalar loop on one
//! thread, the weights re-laid out on every call, im2col and a GEMM per
//! tile of 512 pixels, each tile's result scattered back to NCHW one float
//! at a time, then the bias, the ReLU and the residual add as passes of
//! their own; its max pool is scalar. Here the activations stay NHWC as
//! `[pixels, channels]` matrices from the stem to the pool, so that:
//! - a 1×1 convolution is one GEMM on the activation as it is;
//! - a k×k one is one GEMM on an im2col whose rows are copied as runs of
//!   `k·C` contiguous floats, in parallel;
//! - the weights are packed once, at the first pass, as `[k·k·Cin, Cout]`;
//! - bias, residual and ReLU are one vectorised pass over the GEMM's output;
//! - the max pool takes each window's maximum over channel vectors.
//!
//! The GEMMs are flex's `matmul` (the `gemm` crate). The same sums as
//! torchvision's, in another order: equal up to rounding.

use burn::nn::conv::Conv2d;
use burn::tensor::{DType, Tensor};
use burn_flex::{Flex, FlexTensor, Layout};
use burn_std::{Bytes, Shape};
use multiversion::multiversion;
use rayon::prelude::*;

use super::resnet::ResNet;

/// Output rows per parallel task of the epilogue.
const ROWS: usize = 32;

/// A channels-last activation: `[N·H·W, C]` on flex, with its image shape.
struct Nhwc {
    data: Tensor<2>,
    n: usize,
    h: usize,
    w: usize,
}

/// A convolution with its weights packed for [`Nhwc`] inputs.
#[derive(Debug)]
struct Conv {
    /// `[k·k·Cin, Cout]`, rows in (ky, kx, cin) order: an im2col row's.
    weight: Tensor<2>,
    bias: Vec<f32>,
    kernel: usize,
    stride: usize,
    pad: usize,
}

#[derive(Debug)]
struct Block {
    conv1: Conv,
    conv2: Conv,
    conv3: Option<Conv>,
    downsample: Option<Conv>,
}

/// A ResNet's convolutions packed for the CPU, made from the folded model.
#[derive(Debug)]
pub(crate) struct PackedResNet {
    stem: Conv,
    blocks: Vec<Block>,
}

/// What follows a convolution's GEMM, in one pass.
#[derive(Clone, Copy)]
enum Then<'a> {
    /// Bias only.
    Bias,
    /// Bias, then ReLU.
    Relu,
    /// Bias, plus the residual, then ReLU.
    AddRelu(&'a Tensor<2>),
}

impl PackedResNet {
    /// `model`'s convolutions packed, or `None` unless its weights are f32
    /// flex tensors with every BatchNorm folded.
    pub(crate) fn pack(model: &ResNet) -> Option<Self> {
        let (stem, blocks) = model.parts()?;
        let stem = Conv::pack(stem)?;
        let blocks = blocks
            .into_iter()
            .map(|[conv1, conv2, conv3, downsample]| {
                Some(Block {
                    conv1: Conv::pack(conv1?)?,
                    conv2: Conv::pack(conv2?)?,
                    conv3: match conv3 {
                        Some(c) => Some(Conv::pack(c)?),
                        None => None,
                    },
                    downsample: match downsample {
                        Some(c) => Some(Conv::pack(c)?),
                        None => None,
                    },
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self { stem, blocks })
    }

    /// Pooled features `[N, C]` of an NCHW batch, as `ResNet::features`.
    pub(crate) fn features(&self, x: Tensor<4>) -> Tensor<2> {
        let [n, c, h, w] = x.dims();
        let x = x.permute([0, 2, 3, 1]).reshape([n * h * w, c]);
        let x = Nhwc { data: x, n, h, w };
        let x = max_pool_3x3_s2(&self.stem.run(&x, Then::Relu));
        let mut x = x;
        for block in &self.blocks {
            let identity = match &block.downsample {
                Some(d) => d.run(&x, Then::Bias),
                None => x.clone_ref(),
            };
            let out = block.conv1.run(&x, Then::Relu);
            x = match &block.conv3 {
                Some(conv3) => {
                    let out = block.conv2.run(&out, Then::Relu);
                    conv3.run(&out, Then::AddRelu(&identity.data))
                }
                None => block.conv2.run(&out, Then::AddRelu(&identity.data)),
            };
        }
        let channels = x.data.dims()[1];
        x.data
            .reshape([x.n, x.h * x.w, channels])
            .mean_dim(1)
            .reshape([x.n, channels])
    }
}

impl Nhwc {
    fn clone_ref(&self) -> Self {
        Self {
            data: self.data.clone(),
            n: self.n,
            h: self.h,
            w: self.w,
        }
    }

    fn channels(&self) -> usize {
        self.data.dims()[1]
    }
}

impl Conv {
    fn pack(conv: &Conv2d) -> Option<Self> {
        let weight = conv.weight.val();
        if weight.dtype() != DType::F32 {
            return None;
        }
        weight.clone().try_into_primitive::<Flex>().ok()?;
        let [cout, cin, kh, kw] = weight.dims();
        let [sh, sw] = conv.stride;
        let [dh, dw] = conv.dilation;
        let pad = match conv.padding {
            burn::nn::PaddingConfig2d::Explicit(top, left, bottom, right)
                if top == left && left == bottom && bottom == right =>
            {
                top
            }
            _ => return None,
        };
        if kh != kw || sh != sw || dh != 1 || dw != 1 || conv.groups != 1 {
            return None;
        }
        let bias = match &conv.bias {
            Some(b) => b.val().into_data().try_to_vec::<f32>().ok()?,
            None => vec![0.0; cout],
        };
        Some(Self {
            weight: weight.permute([2, 3, 1, 0]).reshape([kh * kw * cin, cout]),
            bias,
            kernel: kh,
            stride: sh,
            pad,
        })
    }

    /// The convolution of `x`, then `then`.
    fn run(&self, x: &Nhwc, then: Then<'_>) -> Nhwc {
        let (k, s, p) = (self.kernel, self.stride, self.pad);
        let ho = (x.h + 2 * p - k) / s + 1;
        let wo = (x.w + 2 * p - k) / s + 1;
        let lhs = if k == 1 && s == 1 && p == 0 {
            x.data.clone()
        } else {
            im2col(x, k, s, p, ho, wo)
        };
        let out = lhs.matmul(self.weight.clone());
        let out = epilogue(out, &self.bias, then);
        Nhwc {
            data: out,
            n: x.n,
            h: ho,
            w: wo,
        }
    }
}

/// The contiguous f32 values of a flex tensor (a compact copy if needed).
fn values(t: &Tensor<2>) -> FlexTensor {
    let flex = t
        .clone()
        .try_into_primitive::<Flex>()
        .expect("the CPU path runs on flex");
    if flex.as_slice::<f32>().is_some() {
        flex
    } else {
        flex.to_contiguous()
    }
}

fn matrix(values: Vec<f32>, rows: usize, cols: usize) -> Tensor<2> {
    Tensor::from_primitive::<Flex>(FlexTensor::new(
        Bytes::from_elems(values),
        Layout::contiguous(Shape::from(vec![rows, cols])),
        DType::F32,
    ))
}

/// `[N·Ho·Wo, k·k·C]`: each output pixel's window, zero where it overhangs
/// the image. For each window row (ky) the taps are `k·C` contiguous floats
/// of the input, copied as one run.
fn im2col(x: &Nhwc, k: usize, s: usize, p: usize, ho: usize, wo: usize) -> Tensor<2> {
    let c = x.channels();
    let source = values(&x.data);
    let input = source.as_slice::<f32>().expect("compact");
    let row = k * k * c;
    let mut col = vec![0.0f32; x.n * ho * wo * row];
    col.par_chunks_mut(wo * row)
        .enumerate()
        .for_each(|(image_row, out)| {
            let (b, oy) = (image_row / ho, image_row % ho);
            for (ox, window) in out.chunks_exact_mut(row).enumerate() {
                // Taps kx in [first, last) fall inside the image.
                let left = (ox * s) as isize - p as isize;
                let first = (-left).max(0) as usize;
                let last = k.min((x.w as isize - left).max(0) as usize);
                if first >= last {
                    continue;
                }
                for ky in 0..k {
                    let iy = (oy * s + ky) as isize - p as isize;
                    if iy < 0 || iy >= x.h as isize {
                        continue;
                    }
                    let ix = (left + first as isize) as usize;
                    let from = ((b * x.h + iy as usize) * x.w + ix) * c;
                    let len = (last - first) * c;
                    window[(ky * k + first) * c..][..len].copy_from_slice(&input[from..from + len]);
                }
            }
        });
    matrix(col, x.n * ho * wo, row)
}

/// `then` applied to a GEMM's output in place: `[rows, Cout]`.
fn epilogue(out: Tensor<2>, bias: &[f32], then: Then<'_>) -> Tensor<2> {
    let [rows, cout] = out.dims();
    let mut flex = values(&out);
    drop(out);
    let residual = match then {
        Then::AddRelu(r) => {
            assert_eq!(r.dims(), [rows, cout], "the residual matches the output");
            Some(values(r))
        }
        _ => None,
    };
    let residual = residual
        .as_ref()
        .map(|r| r.as_slice::<f32>().expect("compact"));
    let relu = !matches!(then, Then::Bias);
    let fused = super::cpu::fused_multiply_add();
    let chunk = ROWS * cout;
    flex.storage_mut::<f32>()
        .par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(i, out)| {
            let res = residual.map(|r| &r[i * chunk..i * chunk + out.len()]);
            if fused {
                epilogue_avx2(out, bias, res, relu)
            } else {
                epilogue_rows(out, bias, res, relu)
            }
        });
    Tensor::from_primitive::<Flex>(flex)
}

#[multiversion(targets("x86_64+avx2+fma"))]
fn epilogue_avx2(out: &mut [f32], bias: &[f32], residual: Option<&[f32]>, relu: bool) {
    epilogue_rows(out, bias, residual, relu)
}

#[inline(always)]
fn epilogue_rows(out: &mut [f32], bias: &[f32], residual: Option<&[f32]>, relu: bool) {
    let width = bias.len();
    match residual {
        Some(res) => {
            for (row, res) in out.chunks_exact_mut(width).zip(res.chunks_exact(width)) {
                for ((v, b), r) in row.iter_mut().zip(bias).zip(res) {
                    *v = relu_of(*v + b + r, relu);
                }
            }
        }
        None => {
            for row in out.chunks_exact_mut(width) {
                for (v, b) in row.iter_mut().zip(bias) {
                    *v = relu_of(*v + b, relu);
                }
            }
        }
    }
}

/// `max(v, 0)` with NaN kept, as PyTorch's ReLU.
#[inline(always)]
fn relu_of(v: f32, on: bool) -> f32 {
    if on && v < 0.0 { 0.0 } else { v }
}

/// torchvision's stem pool: 3×3, stride 2, padding 1 (padding never wins;
/// NaN does, as in PyTorch).
fn max_pool_3x3_s2(x: &Nhwc) -> Nhwc {
    let (k, s, p) = (3usize, 2usize, 1usize);
    let c = x.channels();
    let ho = (x.h + 2 * p - k) / s + 1;
    let wo = (x.w + 2 * p - k) / s + 1;
    let source = values(&x.data);
    let input = source.as_slice::<f32>().expect("compact");
    let mut out = vec![f32::NEG_INFINITY; x.n * ho * wo * c];
    let fused = super::cpu::fused_multiply_add();
    out.par_chunks_mut(wo * c)
        .enumerate()
        .for_each(|(image_row, out)| {
            let (b, oy) = (image_row / ho, image_row % ho);
            // The input rows this output row's windows cover.
            let rows: Vec<&[f32]> = (0..k)
                .filter_map(|ky| {
                    let iy = (oy * s + ky).checked_sub(p).filter(|&iy| iy < x.h)?;
                    let from = (b * x.h + iy) * x.w * c;
                    Some(&input[from..from + x.w * c])
                })
                .collect();
            if fused {
                pool_row_avx2(out, &rows, c)
            } else {
                pool_row(out, &rows, c)
            }
        });
    Nhwc {
        data: matrix(out, x.n * ho * wo, c),
        n: x.n,
        h: ho,
        w: wo,
    }
}

#[multiversion(targets("x86_64+avx2+fma"))]
fn pool_row_avx2(out: &mut [f32], rows: &[&[f32]], c: usize) {
    pool_row(out, rows, c)
}

/// One output row of the 3×3, stride 2, padding 1 pool from the input rows
/// its windows cover.
#[inline(always)]
fn pool_row(out: &mut [f32], rows: &[&[f32]], c: usize) {
    let w = rows.first().map_or(0, |r| r.len() / c);
    for (ox, pixel) in out.chunks_exact_mut(c).enumerate() {
        for ix in (2 * ox).saturating_sub(1)..(2 * ox + 2).min(w) {
            for row in rows {
                for (a, &v) in pixel.iter_mut().zip(&row[ix * c..(ix + 1) * c]) {
                    if v > *a || v.is_nan() {
                        *a = v;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::resnet::ResNetDepth;
    use burn::tensor::{Distribution, TensorData};
    use pipeline_core::DeviceSpec;

    fn flat(t: Tensor<2>) -> Vec<f32> {
        t.into_data().try_to_vec::<f32>().expect("f32")
    }

    /// The channels-last path against burn's own NCHW forward of the same
    /// folded model, on odd image sizes (padding on every edge, stride 2 on
    /// odd widths) and both block types.
    #[test]
    fn the_channels_last_path_matches_the_nchw_forward() {
        let device = crate::open(&DeviceSpec::Cpu).expect("the CPU opens");
        device.seed(7);
        for depth in [ResNetDepth::R18, ResNetDepth::R50] {
            let mut model = ResNet::new(depth, 10, &device);
            assert!(
                PackedResNet::pack(&model).is_none(),
                "unfolded BatchNorms are refused"
            );
            model.fold_batch_norms();
            let packed = PackedResNet::pack(&model).expect("a folded f32 ResNet packs");
            for [h, w] in [[37, 45], [64, 64]] {
                let x = Tensor::<4>::random([2, 3, h, w], Distribution::Normal(0.0, 1.0), &device);
                let want = flat(model.features(x.clone()));
                let got = flat(packed.features(x));
                assert_eq!(got.len(), want.len());
                let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let worst = got
                    .iter()
                    .zip(&want)
                    .fold(0.0f32, |m, (g, w)| m.max((g - w).abs()));
                assert!(
                    worst <= 1e-4 * scale.max(1.0),
                    "{depth:?} at {h}×{w}: max |difference| {worst:e}, scale {scale}"
                );
            }
        }
    }

    #[test]
    fn the_pool_keeps_nan_and_ignores_padding() {
        let device = crate::open(&DeviceSpec::Cpu).expect("the CPU opens");
        // One image, 3×3, two channels: channel 0 all negative, channel 1
        // with a NaN in the corner.
        let mut values = Vec::new();
        for i in 0..9 {
            values.push(-1.0 - i as f32);
            values.push(if i == 0 { f32::NAN } else { i as f32 });
        }
        let x = Nhwc {
            data: Tensor::from_data(TensorData::new(values, [9, 2]), &device),
            n: 1,
            h: 3,
            w: 3,
        };
        let pooled = max_pool_3x3_s2(&x);
        assert_eq!((pooled.h, pooled.w), (2, 2));
        let got = flat(pooled.data);
        // Output (0,0) covers inputs (0..2, 0..2): max of channel 0 is -1,
        // channel 1 sees the NaN.
        assert_eq!(got[0], -1.0);
        assert!(got[1].is_nan());
        // Output (1,1) covers inputs (1..3, 1..3): -5 and 8.
        assert_eq!(&got[6..8], &[-5.0, 8.0]);
    }
}
