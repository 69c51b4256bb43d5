//! Channels-last convolutional networks on the CPU backend (flex, f32).
//! flex runs each NCHW convolution as: the input copied to NHWC by a scalar
//! loop on one thread, the weights re-laid out on every call, im2col and a
//! GEMM per tile of 512 pixels, each tile's result scattered back to NCHW
//! one float at a time, then bias, activation and residual as passes of
//! their own; its max pool and depthwise convolution are scalar. Here
//! activations stay NHWC, as `[pixels, channels]` matrices ([`Nhwc`]), so
//! that:
//! - a 1×1 convolution or a Linear layer is one GEMM on the activation as
//!   it is, a k×k convolution one GEMM on an im2col whose rows are copied as
//!   runs of `k·C` contiguous floats, in parallel;
//! - weights are packed once, as `[k·k·Cin, Cout]` ([`PackedConv`]);
//! - bias, residual and activation are one pass over the GEMM's output
//!   ([`Then`]);
//! - a depthwise convolution and the max pool work on channel vectors.
//!
//! The GEMMs are flex's `matmul` (the `gemm` crate); the element loops are
//! compiled again for AVX2 + FMA and picked at run time, as in `cpu.rs`.
//! The same sums as PyTorch's, in another order: equal up to rounding.

use burn::tensor::{DType, Tensor};
use burn_flex::{Flex, FlexTensor, Layout};
use burn_std::{Bytes, Shape};
use multiversion::multiversion;
use rayon::prelude::*;

use super::cpu::{self, compact_values, flex_f32, fused_multiply_add, madd};

mod epilogue;

pub(crate) use self::epilogue::Then;
use self::epilogue::{epilogue, epilogue_in_place};

/// A channels-last activation: `[N·H·W, C]` on flex, with its image shape.
#[derive(Debug, Clone)]
pub(crate) struct Nhwc {
    pub(crate) data: Tensor<2>,
    pub(crate) n: usize,
    pub(crate) h: usize,
    pub(crate) w: usize,
}

impl Nhwc {
    /// An NCHW batch, channels-last.
    pub(crate) fn from_nchw(x: Tensor<4>) -> Self {
        let [n, c, h, w] = x.dims();
        let data = x.permute([0, 2, 3, 1]).reshape([n * h * w, c]);
        Self { data, n, h, w }
    }

    pub(crate) fn channels(&self) -> usize {
        self.data.dims()[1]
    }

    /// The same image shape with other values (`[N·H·W, C']`).
    pub(crate) fn with(&self, data: Tensor<2>) -> Self {
        Self {
            data,
            n: self.n,
            h: self.h,
            w: self.w,
        }
    }

    /// `[N, C]`: the mean over each image's pixels.
    pub(crate) fn global_mean(self) -> Tensor<2> {
        let c = self.channels();
        self.data
            .reshape([self.n, self.h * self.w, c])
            .mean_dim(1)
            .reshape([self.n, c])
    }
}

/// A convolution with its weights packed for [`Nhwc`] inputs.
#[derive(Debug)]
pub(crate) struct PackedConv {
    /// `[k·k·Cin, Cout]`, rows in (ky, kx, cin) order: an im2col row's.
    weight: Tensor<2>,
    bias: Vec<f32>,
    kernel: usize,
    stride: usize,
    pad: usize,
}

impl PackedConv {
    /// A square, ungrouped, undilated convolution's `[Cout, Cin, k, k]`
    /// weights and bias, or `None` unless they are f32 on flex.
    pub(crate) fn new(
        weight: Tensor<4>,
        bias: Option<Tensor<1>>,
        stride: usize,
        pad: usize,
    ) -> Option<Self> {
        flex_f32(&weight)?;
        let [cout, cin, kh, kw] = weight.dims();
        if kh != kw {
            return None;
        }
        let bias = match bias {
            Some(b) => b.into_data().try_to_vec::<f32>().ok()?,
            None => vec![0.0; cout],
        };
        Some(Self {
            weight: weight.permute([2, 3, 1, 0]).reshape([kh * kw * cin, cout]),
            bias,
            kernel: kh,
            stride,
            pad,
        })
    }

    /// The convolution of `x`, then `then`.
    pub(crate) fn run(&self, x: &Nhwc, then: Then<'_>) -> Nhwc {
        let (k, s, p) = (self.kernel, self.stride, self.pad);
        let ho = (x.h + 2 * p - k) / s + 1;
        let wo = (x.w + 2 * p - k) / s + 1;
        let window = Window { k, s, p, ho, wo };
        let pixels = x.n * ho * wo;
        let row = k * k * x.channels();
        let data = if k == 1 && s == 1 && p == 0 {
            dense(x.data.clone(), &self.weight, &self.bias, then)
        } else if pixels * row * size_of::<f32>() <= IM2COL_WHOLE {
            let source = compact_values(&x.data);
            let col = im2col(x, &source, &window, 0, pixels);
            dense(matrix(col, pixels, row), &self.weight, &self.bias, then)
        } else {
            self.run_in_blocks(x, &window, then)
        };
        Nhwc {
            data,
            n: x.n,
            h: ho,
            w: wo,
        }
    }

    /// [`PackedConv::run`] a block of output pixels at a time: each block's
    /// im2col stays in cache, and none of the whole is ever allocated (or
    /// zeroed, or faulted in).
    fn run_in_blocks(&self, x: &Nhwc, window: &Window, then: Then<'_>) -> Tensor<2> {
        let pixels = x.n * window.ho * window.wo;
        let row = window.k * window.k * x.channels();
        let cout = self.bias.len();
        let block = (IM2COL_BLOCK / (row * size_of::<f32>())).max(MIN_BLOCK_PIXELS);
        let source = compact_values(&x.data);
        let (residual, activation) = then.parts(pixels, cout);
        let residual = residual
            .as_ref()
            .map(|r| r.as_slice::<f32>().expect("compact"));
        let mut out = vec![0.0f32; pixels * cout];
        for (i, out) in out.chunks_mut(block * cout).enumerate() {
            let (first, rows) = (i * block, out.len() / cout);
            let col = im2col(x, &source, window, first, rows);
            let product = compact_values(&cpu::matmul_rows(
                matrix(col, rows, row),
                self.weight.clone(),
            ));
            out.copy_from_slice(product.as_slice::<f32>().expect("compact"));
            let residual = residual.map(|r| &r[first * cout..(first + rows) * cout]);
            epilogue_in_place(out, &self.bias, residual, activation);
        }
        matrix(out, pixels, cout)
    }
}

/// An im2col at most this large is built whole; a larger one a block of
/// output pixels at a time, each block about [`IM2COL_BLOCK`] bytes (at
/// least [`MIN_BLOCK_PIXELS`] pixels, so that each GEMM stays large).
const IM2COL_WHOLE: usize = 16 << 20;
const IM2COL_BLOCK: usize = 4 << 20;
const MIN_BLOCK_PIXELS: usize = 256;

/// A convolution's window over the input, and the output's size.
struct Window {
    k: usize,
    s: usize,
    p: usize,
    ho: usize,
    wo: usize,
}

/// `x·weight`, then `then`: a Linear layer on `[rows, Cin]`.
pub(crate) fn dense(x: Tensor<2>, weight: &Tensor<2>, bias: &[f32], then: Then<'_>) -> Tensor<2> {
    epilogue(cpu::matmul_rows(x, weight.clone()), bias, then)
}

/// A `[rows, cols]` flex tensor of `values`, without copying them.
pub(crate) fn matrix(values: Vec<f32>, rows: usize, cols: usize) -> Tensor<2> {
    Tensor::from_primitive::<Flex>(FlexTensor::new(
        Bytes::from_elems(values),
        Layout::contiguous(Shape::from(vec![rows, cols])),
        DType::F32,
    ))
}

/// Output pixels `first..first + count` (in N, Ho, Wo order) of the
/// im2col of `x` (whose compact values are `source`), `[count, k·k·C]`:
/// each pixel's window, zero where it overhangs the image. For each window
/// row (ky) the taps are `k·C` contiguous floats of the input, copied as
/// one run.
fn im2col(x: &Nhwc, source: &FlexTensor, window: &Window, first: usize, count: usize) -> Vec<f32> {
    const PIXELS_PER_TASK: usize = 32;
    let Window { k, s, p, ho, wo } = *window;
    let c = x.channels();
    let input = source.as_slice::<f32>().expect("compact");
    let row = k * k * c;
    let mut col = vec![0.0f32; count * row];
    col.par_chunks_mut(PIXELS_PER_TASK * row)
        .enumerate()
        .for_each(|(task, windows)| {
            for (j, window) in windows.chunks_exact_mut(row).enumerate() {
                let pixel = first + task * PIXELS_PER_TASK + j;
                let (b, at) = (pixel / (ho * wo), pixel % (ho * wo));
                let (oy, ox) = (at / wo, at % wo);
                // Taps kx in [first_tap, last_tap) fall inside the image.
                let left = (ox * s) as isize - p as isize;
                let first_tap = (-left).max(0) as usize;
                let last_tap = k.min((x.w as isize - left).max(0) as usize);
                if first_tap >= last_tap {
                    continue;
                }
                for ky in 0..k {
                    let Some(iy) = (oy * s + ky).checked_sub(p).filter(|&iy| iy < x.h) else {
                        continue;
                    };
                    let ix = (left + first_tap as isize) as usize;
                    let from = ((b * x.h + iy) * x.w + ix) * c;
                    let len = (last_tap - first_tap) * c;
                    window[(ky * k + first_tap) * c..][..len]
                        .copy_from_slice(&input[from..from + len]);
                }
            }
        });
    col
}

/// A depthwise k×k convolution, stride 1, padding k/2, of `x` with
/// `weight` as `[k, k, C]` and its bias: each output pixel the bias plus
/// each tap's input vector times its weight vector.
pub(crate) fn depthwise(x: &Nhwc, weight: &[f32], bias: &[f32], k: usize) -> Nhwc {
    let c = x.channels();
    assert_eq!(weight.len(), k * k * c, "one k×k filter per channel");
    assert_eq!(bias.len(), c, "one bias per channel");
    let p = k / 2;
    let source = compact_values(&x.data);
    let input = source.as_slice::<f32>().expect("compact");
    let mut out = vec![0.0f32; x.n * x.h * x.w * c];
    let fused = fused_multiply_add();
    out.par_chunks_mut(x.w * c)
        .enumerate()
        .for_each(|(image_row, out)| {
            let (b, oy) = (image_row / x.h, image_row % x.h);
            for pixel in out.chunks_exact_mut(c) {
                pixel.copy_from_slice(bias);
            }
            for ky in 0..k {
                let Some(iy) = (oy + ky).checked_sub(p).filter(|&iy| iy < x.h) else {
                    continue;
                };
                let from = (b * x.h + iy) * x.w * c;
                let row = &input[from..from + x.w * c];
                let taps = &weight[ky * k * c..(ky + 1) * k * c];
                if fused {
                    depthwise_row_fused(out, row, taps, c)
                } else {
                    depthwise_row::<false>(out, row, taps, c)
                }
            }
        });
    x.with(matrix(out, x.n * x.h * x.w, c))
}

#[multiversion(targets("x86_64+avx2+fma"))]
fn depthwise_row_fused(out: &mut [f32], row: &[f32], taps: &[f32], c: usize) {
    depthwise_row::<true>(out, row, taps, c)
}

/// One window row's taps (`[k, C]`) added into an output row from the
/// input row they read.
#[inline(always)]
fn depthwise_row<const FMA: bool>(out: &mut [f32], row: &[f32], taps: &[f32], c: usize) {
    let w = out.len() / c;
    let k = taps.len() / c;
    let p = k / 2;
    for (kx, tap) in taps.chunks_exact(c).enumerate() {
        // Output pixels whose input pixel `ox + kx − p` is inside the row.
        let start = p.saturating_sub(kx);
        let end = (w + p).saturating_sub(kx).min(w);
        for ox in start..end {
            let ix = ox + kx - p;
            let o = &mut out[ox * c..(ox + 1) * c];
            let i = &row[ix * c..(ix + 1) * c];
            for ((o, &i), &t) in o.iter_mut().zip(i).zip(tap) {
                *o = madd::<FMA>(i, t, *o);
            }
        }
    }
}

/// torchvision's ResNet stem pool: 3×3, stride 2, padding 1 (padding never
/// wins; NaN does, as in PyTorch).
pub(crate) fn max_pool_3x3_s2(x: &Nhwc) -> Nhwc {
    let c = x.channels();
    let ho = (x.h - 1) / 2 + 1;
    let wo = (x.w - 1) / 2 + 1;
    let source = compact_values(&x.data);
    let input = source.as_slice::<f32>().expect("compact");
    let mut out = vec![f32::NEG_INFINITY; x.n * ho * wo * c];
    let fused = fused_multiply_add();
    out.par_chunks_mut(wo * c)
        .enumerate()
        .for_each(|(image_row, out)| {
            let (b, oy) = (image_row / ho, image_row % ho);
            // The input rows this output row's windows cover.
            let rows: Vec<&[f32]> = (0..3)
                .filter_map(|ky| {
                    let iy = (oy * 2 + ky).checked_sub(1).filter(|&iy| iy < x.h)?;
                    let from = (b * x.h + iy) * x.w * c;
                    Some(&input[from..from + x.w * c])
                })
                .collect();
            if fused {
                pool_row_fused(out, &rows, c)
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
fn pool_row_fused(out: &mut [f32], rows: &[&[f32]], c: usize) {
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
    use burn::tensor::module::conv2d;
    use burn::tensor::ops::ConvOptions;
    use burn::tensor::{Distribution, TensorData};
    use pipeline_core::DeviceSpec;

    fn flat<const D: usize>(t: Tensor<D>) -> Vec<f32> {
        t.into_data().try_to_vec::<f32>().expect("f32")
    }

    fn assert_close(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        let scale = want.iter().fold(1.0f32, |m, v| m.max(v.abs()));
        let worst = got
            .iter()
            .zip(want)
            .fold(0.0f32, |m, (g, w)| m.max((g - w).abs()));
        assert!(worst <= 1e-5 * scale, "{what}: max |difference| {worst:e}");
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

    /// Convolutions of every shape the ResNets and ConvNeXts use, against
    /// burn's NCHW `conv2d`, on odd sizes (padding on every edge, strides
    /// that do not divide the image).
    #[test]
    fn packed_and_depthwise_convolutions_match_burns() {
        let _rng = crate::model::host_rng();
        let device = crate::open(&DeviceSpec::Cpu).expect("the CPU opens");
        device.seed(3);
        let normal = Distribution::Normal(0.0, 1.0);
        // (cin, cout, k, stride, pad, depthwise)
        let cases = [
            (3, 8, 7, 2, 3, false),
            (5, 6, 3, 1, 1, false),
            (5, 6, 3, 2, 1, false),
            (6, 4, 1, 2, 0, false),
            (6, 4, 1, 1, 0, false),
            (3, 8, 4, 4, 0, false),
            (4, 6, 2, 2, 0, false),
            (12, 12, 7, 1, 3, true),
        ];
        for (cin, cout, k, s, p, dw) in cases {
            let x = Tensor::<4>::random([2, cin, 13, 11], normal, &device);
            let groups = if dw { cin } else { 1 };
            let weight = Tensor::<4>::random([cout, cin / groups, k, k], normal, &device);
            let bias = Tensor::<1>::random([cout], normal, &device);
            let options = ConvOptions::new([s, s], [p, p], [1, 1], groups);
            let want = conv2d(x.clone(), weight.clone(), Some(bias.clone()), options)
                .permute([0, 2, 3, 1]);
            let [_, ho, wo, _] = want.dims();
            let x = Nhwc::from_nchw(x);
            let got = if dw {
                let taps = flat(weight.permute([2, 3, 1, 0]));
                depthwise(&x, &taps, &flat(bias), k)
            } else {
                PackedConv::new(weight, Some(bias), s, p)
                    .expect("f32 on flex packs")
                    .run(&x, Then::Bias)
            };
            assert_eq!((got.h, got.w), (ho, wo));
            assert_close(
                &flat(got.data),
                &flat(want),
                &format!("{cin}→{cout} {k}×{k} /{s} pad {p} dw {dw}"),
            );
        }
    }

    /// An im2col above [`IM2COL_WHOLE`] runs in blocks; the last one
    /// partial, each with its slice of the residual.
    #[test]
    fn a_large_convolution_runs_in_blocks_with_the_same_result() {
        let _rng = crate::model::host_rng();
        let device = crate::open(&DeviceSpec::Cpu).expect("the CPU opens");
        device.seed(4);
        let normal = Distribution::Normal(0.0, 1.0);
        let (c, side) = (32, 130);
        let pixels = side * side;
        assert!(pixels * 9 * c * size_of::<f32>() > IM2COL_WHOLE);
        assert!(pixels % (IM2COL_BLOCK / (9 * c * size_of::<f32>())) != 0);
        let x = Tensor::<4>::random([1, c, side, side], normal, &device);
        let weight = Tensor::<4>::random([c, c, 3, 3], normal, &device);
        let bias = Tensor::<1>::random([c], normal, &device);
        let residual = Tensor::<4>::random([1, c, side, side], normal, &device);
        let options = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
        let want = burn::tensor::activation::relu(
            conv2d(x.clone(), weight.clone(), Some(bias.clone()), options) + residual.clone(),
        )
        .permute([0, 2, 3, 1]);
        let residual = Nhwc::from_nchw(residual).data;
        let got = PackedConv::new(weight, Some(bias), 1, 1)
            .expect("f32 on flex packs")
            .run(&Nhwc::from_nchw(x), Then::AddRelu(&residual));
        assert_close(&flat(got.data), &flat(want), "3×3 in blocks");
    }
}
