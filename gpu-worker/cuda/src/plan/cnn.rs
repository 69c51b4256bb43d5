//! The CNN families' plan (torchvision's ResNets, EfficientNet-Lite0):
//! [`CnnPlan`], channels last throughout, each convolution one cuDNN
//! convolution with its bias, residual and activation fused
//! (`cudnnConvolutionBiasActivationForward`'s `act(conv(x) + z + b)`).

use std::path::Path;

use rayon::prelude::*;

use super::ops::{Gemm, gemm, not_this};
use model_families::Architecture;
use model_families::WeightsError;
use model_families::lowered::{CnnGraph, CnnOp, ConvActivation, HostConv};

/// One convolution as cuDNN will run it, NHWC.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvLayer {
    /// Output channels.
    pub cout: usize,
    /// Input channels (all groups).
    pub cin: usize,
    /// Square kernel side.
    pub kernel: usize,
    /// Both axes' stride.
    pub stride: usize,
    /// Zero padding: top, left, bottom, right. An asymmetric one (Lite0's
    /// TensorFlow "SAME" at stride 2) is cuDNN's separate pre- and
    /// post-padding (`CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS`, `…_POST_…`).
    pub padding: [usize; 4],
    /// Groups (`cin` for a depthwise convolution).
    pub groups: usize,
    /// `[cout, kernel, kernel, cin / groups]`: cuDNN's NHWC filter layout
    /// (KRSC).
    pub filter: Vec<f32>,
    /// `[cout]`.
    pub bias: Vec<f32>,
}

impl ConvLayer {
    /// An ungrouped layer's filter as a GEMM over im2col rows (`[taps,
    /// cout]`, taps in (row, column, channel) order) with its bias: the
    /// reference's convolution, and on the GPU a 1×1 layer's whole
    /// (`cnn_run.rs`).
    pub fn as_gemm(&self) -> Gemm {
        let taps = self.kernel * self.kernel * self.cin / self.groups;
        let mut weight = vec![0.0; taps * self.cout];
        for (o, row) in self.filter.chunks_exact(taps).enumerate() {
            for (t, w) in row.iter().enumerate() {
                weight[t * self.cout + o] = *w;
            }
        }
        Gemm {
            k: taps,
            n: self.cout,
            weight,
            bias: Some(self.bias.clone()),
        }
    }

    fn pack(conv: &HostConv) -> Self {
        let (k, cg) = (conv.kernel, conv.cin / conv.groups);
        let mut filter = vec![0.0; conv.weight.len()];
        for o in 0..conv.cout {
            for c in 0..cg {
                for tap in 0..k * k {
                    filter[(o * k * k + tap) * cg + c] = conv.weight[(o * cg + c) * k * k + tap];
                }
            }
        }
        Self {
            cout: conv.cout,
            cin: conv.cin,
            kernel: k,
            stride: conv.stride,
            padding: conv.padding,
            groups: conv.groups,
            filter,
            bias: conv.bias.clone(),
        }
    }

    /// The output side of a `side × side` input.
    pub fn out_side(&self, side: usize) -> usize {
        let [top, _, bottom, _] = self.padding;
        (side + top + bottom - self.kernel) / self.stride + 1
    }
}

/// One op; value 0 is the normalised NHWC input, op `i` makes value
/// `i + 1`.
#[derive(Debug, Clone, PartialEq)]
pub enum CnnStep {
    /// `activation(conv(input) + bias + residual)`.
    Conv {
        /// The value convolved.
        input: usize,
        /// The convolution.
        layer: ConvLayer,
        /// A value of the output's shape added before the activation.
        residual: Option<usize>,
        /// After the sum.
        activation: ConvActivation,
    },
    /// 3×3, stride 2, padding 1 max pool (cuDNN's `MAX`, padding never
    /// wins).
    MaxPool3x3S2 {
        /// The value pooled.
        input: usize,
    },
}

/// A ResNet or EfficientNet-Lite0 as the CUDA engine will run it.
#[derive(Debug, Clone, PartialEq)]
pub struct CnnPlan {
    /// In order; each reads earlier values only.
    pub steps: Vec<CnnStep>,
    /// For each value, the last step that reads it (`steps.len()` for the
    /// last value, which the pooling reads): when its buffer can be reused.
    pub last_use: Vec<usize>,
    /// The pooled width.
    pub features: usize,
    /// The classifier, `[features, classes]`; `None` for a checkpoint
    /// without its head (a `ResNetModel`), which embeds.
    pub classifier: Option<Gemm>,
}

/// How a CNN checkpoint becomes host data: `(arch, name, weights, seed)`
/// to its folded graph, `None` for an architecture that is not a CNN; with
/// no weights, the seeded ones the burn engine draws from `seed`. The
/// worker passes the burn engine's loader (`engine::Wiring`).
pub type LowerCnn =
    fn(&Architecture, &str, Option<&Path>, u64) -> Result<Option<CnnGraph>, WeightsError>;

/// The plan of a ResNet or EfficientNet-Lite0 checkpoint, loaded, checked
/// and folded on the host by `lower` (the burn engine's own code).
pub fn cnn_plan(
    lower: LowerCnn,
    arch: &Architecture,
    name: &str,
    path: &Path,
) -> Result<CnnPlan, WeightsError> {
    match lower(arch, name, Some(path), 0)? {
        Some(graph) => Ok(CnnPlan::pack(graph)),
        None => Err(not_this(path, name, "not a ResNet or EfficientNet-Lite0")),
    }
}

/// The plan of the seeded weights the burn engine draws for `name` from
/// `seed` (benchmarks, and runs without `--weights`).
pub fn cnn_plan_seeded(
    lower: LowerCnn,
    arch: &Architecture,
    name: &str,
    seed: u64,
) -> Result<CnnPlan, WeightsError> {
    match lower(arch, name, None, seed)? {
        Some(graph) => Ok(CnnPlan::pack(graph)),
        None => Err(not_this(
            Path::new(""),
            name,
            "not a ResNet or EfficientNet-Lite0",
        )),
    }
}

impl CnnPlan {
    fn pack(graph: CnnGraph) -> Self {
        let steps: Vec<CnnStep> = graph
            .ops
            .iter()
            .map(|op| match op {
                CnnOp::Conv {
                    input,
                    conv,
                    residual,
                    activation,
                } => CnnStep::Conv {
                    input: *input,
                    layer: ConvLayer::pack(conv),
                    residual: *residual,
                    activation: *activation,
                },
                CnnOp::MaxPool3x3S2 { input } => CnnStep::MaxPool3x3S2 { input: *input },
            })
            .collect();
        let mut last_use = vec![0; steps.len() + 1];
        for (i, step) in steps.iter().enumerate() {
            let (input, residual) = match step {
                CnnStep::Conv {
                    input, residual, ..
                } => (*input, *residual),
                CnnStep::MaxPool3x3S2 { input } => (*input, None),
            };
            last_use[input] = i;
            if let Some(r) = residual {
                last_use[r] = i;
            }
        }
        last_use[steps.len()] = steps.len();
        Self {
            steps,
            last_use,
            features: graph.features,
            classifier: graph.classifier.map(|(weight, bias)| Gemm {
                k: graph.features,
                n: bias.len(),
                weight,
                bias: Some(bias),
            }),
        }
    }

    /// The pooled features and the logits (none without a head) of
    /// `images` (`u8` NCHW,
    /// `side × side`, normalised as `(x − mean) / std` on 0..255) on the
    /// CPU in plain f32, NHWC, step by step as the GPU will run them.
    pub fn reference(
        &self,
        images: &[u8],
        side: usize,
        mean: [f32; 3],
        std: [f32; 3],
    ) -> (Vec<f32>, Vec<f32>) {
        let n = images.len() / (3 * side * side);
        let plane = side * side;
        let mut input = vec![0.0f32; n * plane * 3];
        for img in 0..n {
            for p in 0..plane {
                for c in 0..3 {
                    let v = images[(img * 3 + c) * plane + p];
                    input[(img * plane + p) * 3 + c] = (f32::from(v) - mean[c]) / std[c];
                }
            }
        }
        // Each value's data and side, dropped after its last reader.
        let mut values: Vec<Option<(Vec<f32>, usize)>> = vec![None; self.steps.len() + 1];
        values[0] = Some((input, side));
        for (i, step) in self.steps.iter().enumerate() {
            let get = |v: usize| {
                values[v]
                    .as_ref()
                    .expect("a value is read before it is dropped")
            };
            let out = match step {
                CnnStep::Conv {
                    input,
                    layer,
                    residual,
                    activation,
                } => {
                    let (x, s) = get(*input);
                    let (mut y, out_side) = convolve(x, n, *s, layer);
                    if let Some(r) = residual {
                        y.iter_mut().zip(&get(*r).0).for_each(|(a, b)| *a += b);
                    }
                    activate(&mut y, *activation);
                    (y, out_side)
                }
                CnnStep::MaxPool3x3S2 { input } => {
                    let (x, s) = get(*input);
                    max_pool_3x3_s2(x, n, *s)
                }
            };
            values[i + 1] = Some(out);
            for (v, last) in self.last_use.iter().enumerate().take(i + 1) {
                if *last == i {
                    values[v] = None;
                }
            }
        }
        let (last, s) = values[self.steps.len()]
            .take()
            .expect("the last value is kept");
        let c = self.features;
        let mut pooled = vec![0.0f32; n * c];
        for img in 0..n {
            let out = &mut pooled[img * c..(img + 1) * c];
            for p in 0..s * s {
                let px = &last[(img * s * s + p) * c..][..c];
                out.iter_mut().zip(px).for_each(|(o, v)| *o += v);
            }
            out.iter_mut().for_each(|o| *o /= (s * s) as f32);
        }
        let logits = self
            .classifier
            .as_ref()
            .map_or_else(Vec::new, |head| gemm(&pooled, head));
        (pooled, logits)
    }
}

/// `layer` over `x` (NHWC, `n` images of `side × side`): the output with
/// its bias, and its side.
fn convolve(x: &[f32], n: usize, side: usize, layer: &ConvLayer) -> (Vec<f32>, usize) {
    let (k, cin, cout) = (layer.kernel, layer.cin, layer.cout);
    let out_side = layer.out_side(side);
    let [top, left, _, _] = layer.padding;
    let cg = cin / layer.groups;
    let og = cout / layer.groups;
    let taps = k * k * cg;
    // The input pixel a tap of an output pixel reads, if inside.
    let at = |img: usize, oy: usize, ox: usize, ky: usize, kx: usize| {
        let (y, x) = (oy * layer.stride + ky, ox * layer.stride + kx);
        (y >= top && x >= left && y - top < side && x - left < side)
            .then(|| ((img * side + y - top) * side + x - left) * cin)
    };
    let pixels = n * out_side * out_side;
    let mut y = vec![0.0f32; pixels * cout];
    if layer.groups == 1 {
        // im2col rows over (row, column, channel), times the filter as
        // `[taps, cout]`.
        let g = layer.as_gemm();
        y.par_chunks_mut(out_side * cout)
            .enumerate()
            .for_each(|(row, out)| {
                let (img, oy) = (row / out_side, row % out_side);
                let mut cols = vec![0.0f32; out_side * taps];
                for ox in 0..out_side {
                    for ky in 0..k {
                        for kx in 0..k {
                            if let Some(p) = at(img, oy, ox, ky, kx) {
                                let c0 = (ox * k * k + ky * k + kx) * cin;
                                cols[c0..c0 + cin].copy_from_slice(&x[p..p + cin]);
                            }
                        }
                    }
                }
                out.copy_from_slice(&gemm(&cols, &g));
            });
    } else {
        y.par_chunks_mut(cout).enumerate().for_each(|(pixel, out)| {
            let (img, rest) = (pixel / (out_side * out_side), pixel % (out_side * out_side));
            let (oy, ox) = (rest / out_side, rest % out_side);
            for (o, v) in out.iter_mut().enumerate() {
                let group = o / og;
                let mut sum = layer.bias[o];
                for ky in 0..k {
                    for kx in 0..k {
                        if let Some(p) = at(img, oy, ox, ky, kx) {
                            let filter = &layer.filter[(o * k * k + ky * k + kx) * cg..][..cg];
                            let input = &x[p + group * cg..][..cg];
                            sum += input.iter().zip(filter).map(|(a, b)| a * b).sum::<f32>();
                        }
                    }
                }
                *v = sum;
            }
        });
    }
    (y, out_side)
}

fn activate(y: &mut [f32], activation: ConvActivation) {
    match activation {
        ConvActivation::Identity => {}
        ConvActivation::Relu => y.iter_mut().for_each(|v| *v = v.max(0.0)),
        ConvActivation::Relu6 => y.iter_mut().for_each(|v| *v = v.clamp(0.0, 6.0)),
    }
}

/// 3×3, stride 2, padding 1 max pool of NHWC `x`; padding never wins.
fn max_pool_3x3_s2(x: &[f32], n: usize, side: usize) -> (Vec<f32>, usize) {
    let c = x.len() / (n * side * side);
    let out_side = (side - 1) / 2 + 1;
    let mut y = vec![f32::NEG_INFINITY; n * out_side * out_side * c];
    for img in 0..n {
        for oy in 0..out_side {
            for ox in 0..out_side {
                let out = &mut y[((img * out_side + oy) * out_side + ox) * c..][..c];
                for ky in 0..3 {
                    for kx in 0..3 {
                        let (yy, xx) = (2 * oy + ky, 2 * ox + kx);
                        if yy == 0 || xx == 0 || yy > side || xx > side {
                            continue;
                        }
                        let p = &x[((img * side + yy - 1) * side + xx - 1) * c..][..c];
                        out.iter_mut().zip(p).for_each(|(o, v)| *o = o.max(*v));
                    }
                }
            }
        }
    }
    (y, out_side)
}
