//! torchvision's ResNet-18/34/50/101/152, field for field, so a torchvision
//! `state_dict` loads by name (`layer1.0.conv1.weight`, …). The only renamed
//! keys are `downsample.0`/`downsample.1` (a `Sequential` in torchvision),
//! which become `downsample.conv`/`downsample.bn` here.
//!
//! transformers' `ResNetForImageClassification` (#42) is the same network
//! at the widths, depths and strides of its `ResNetConfig`, its names
//! renamed into these ([`ResNetConfig::remap`]).

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};

use super::fold::{fold, norm};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};

pub(crate) use model_families::resnet::ResNetConfig;

fn conv(cin: usize, cout: usize, kernel: usize, stride: usize, device: &Device) -> Conv2d {
    let pad = kernel / 2;
    Conv2dConfig::new([cin, cout], [kernel, kernel])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
        .with_bias(false)
        .init(device)
}

fn bn(features: usize, device: &Device) -> BatchNorm {
    BatchNormConfig::new(features).init(device)
}

/// torchvision's `downsample = Sequential(conv1x1, BatchNorm2d)`.
#[derive(Module, Debug)]
pub(crate) struct Downsample {
    conv: Conv2d,
    bn: Option<BatchNorm>,
}

/// A `BasicBlock` (conv3 = None) or a `Bottleneck` (conv3 = Some).
#[derive(Module, Debug)]
pub(crate) struct Block {
    conv1: Conv2d,
    bn1: Option<BatchNorm>,
    conv2: Conv2d,
    bn2: Option<BatchNorm>,
    conv3: Option<Conv2d>,
    bn3: Option<BatchNorm>,
    downsample: Option<Downsample>,
}

impl Block {
    /// A block from `cin` to `cout` channels, striding by `stride` (in a
    /// bottleneck's 3×3 convolution, or its first 1×1 where
    /// `stride_in_1x1`).
    fn new(cin: usize, cout: usize, stride: usize, config: &ResNetConfig, device: &Device) -> Self {
        let downsample = (stride != 1 || cin != cout).then(|| Downsample {
            conv: conv(cin, cout, 1, stride, device),
            bn: Some(bn(cout, device)),
        });
        if config.bottleneck {
            // torchvision (v1.5) puts the stride on the 3x3 convolution.
            let planes = cout / 4;
            let (s1, s3) = if config.stride_in_1x1 {
                (stride, 1)
            } else {
                (1, stride)
            };
            Self {
                conv1: conv(cin, planes, 1, s1, device),
                bn1: Some(bn(planes, device)),
                conv2: conv(planes, planes, 3, s3, device),
                bn2: Some(bn(planes, device)),
                conv3: Some(conv(planes, cout, 1, 1, device)),
                bn3: Some(bn(cout, device)),
                downsample,
            }
        } else {
            Self {
                conv1: conv(cin, cout, 3, stride, device),
                bn1: Some(bn(cout, device)),
                conv2: conv(cout, cout, 3, 1, device),
                bn2: Some(bn(cout, device)),
                conv3: None,
                bn3: None,
                downsample,
            }
        }
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let identity = match &self.downsample {
            Some(d) => norm(&d.bn, d.conv.forward(x.clone())),
            None => x.clone(),
        };
        let mut out = relu(norm(&self.bn1, self.conv1.forward(x)));
        out = norm(&self.bn2, self.conv2.forward(out));
        if let Some(conv3) = &self.conv3 {
            out = norm(&self.bn3, conv3.forward(relu(out)));
        }
        relu(out + identity)
    }
}

/// One residual block's convolutions, in forward order.
pub(crate) struct BlockConvs<'a> {
    pub(crate) conv1: &'a Conv2d,
    pub(crate) conv2: &'a Conv2d,
    /// A bottleneck's third convolution.
    pub(crate) conv3: Option<&'a Conv2d>,
    pub(crate) downsample: Option<&'a Conv2d>,
}

/// torchvision `ResNet`.
#[derive(Module, Debug)]
pub(crate) struct ResNet {
    conv1: Conv2d,
    bn1: Option<BatchNorm>,
    maxpool: MaxPool2d,
    layer1: Vec<Block>,
    layer2: Vec<Block>,
    layer3: Vec<Block>,
    layer4: Vec<Block>,
    /// The classifier; `None` for a checkpoint without its head (a
    /// transformers `ResNetModel`), which embeds.
    fc: Option<Linear>,
}

impl ResNet {
    pub(crate) fn new(config: &ResNetConfig, device: &Device) -> Self {
        let mut cin = config.stem;
        let mut stage = |s: usize, stride: usize| -> Vec<Block> {
            let cout = config.widths[s];
            (0..config.blocks[s])
                .map(|i| {
                    let block =
                        Block::new(cin, cout, if i == 0 { stride } else { 1 }, config, device);
                    cin = cout;
                    block
                })
                .collect()
        };
        let layer1 = stage(0, config.first_stride);
        let layer2 = stage(1, 2);
        let layer3 = stage(2, 2);
        let layer4 = stage(3, 2);
        Self {
            conv1: Conv2dConfig::new([3, config.stem], [7, 7])
                .with_stride([2, 2])
                .with_padding(PaddingConfig2d::Explicit(3, 3, 3, 3))
                .with_bias(false)
                .init(device),
            bn1: Some(bn(config.stem, device)),
            maxpool: MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(),
            layer1,
            layer2,
            layer3,
            layer4,
            fc: (config.classes > 0)
                .then(|| LinearConfig::new(config.widths[3], config.classes).init(device)),
        }
    }

    /// Pooled penultimate features, `[N, last stage's width]`.
    pub(crate) fn features(&self, x: Tensor<4>) -> Tensor<2> {
        let mut x = self
            .maxpool
            .forward(relu(norm(&self.bn1, self.conv1.forward(x))));
        for block in self
            .layer1
            .iter()
            .chain(&self.layer2)
            .chain(&self.layer3)
            .chain(&self.layer4)
        {
            x = block.forward(x);
        }
        global_avg_pool(x)
    }

    /// Class logits from pooled features, where it has a head.
    pub(crate) fn classifier(&self) -> Option<&Linear> {
        self.fc.as_ref()
    }

    /// The stem convolution with its norm, and every residual block in order.
    fn layers_mut(
        &mut self,
    ) -> (
        &mut Conv2d,
        &mut Option<BatchNorm>,
        impl Iterator<Item = &mut Block>,
    ) {
        let blocks = self
            .layer1
            .iter_mut()
            .chain(&mut self.layer2)
            .chain(&mut self.layer3)
            .chain(&mut self.layer4);
        (&mut self.conv1, &mut self.bn1, blocks)
    }

    /// Folds every BatchNorm into its convolution (see `fold.rs`).
    pub(crate) fn fold_batch_norms(&mut self) {
        let (conv1, bn1, blocks) = self.layers_mut();
        fold(conv1, bn1);
        for block in blocks {
            fold(&mut block.conv1, &mut block.bn1);
            fold(&mut block.conv2, &mut block.bn2);
            if let Some(conv3) = &mut block.conv3 {
                fold(conv3, &mut block.bn3);
            }
            if let Some(d) = &mut block.downsample {
                fold(&mut d.conv, &mut d.bn);
            }
        }
    }

    /// The stem convolution and each block's convolutions, or `None` while
    /// a BatchNorm is not folded.
    pub(crate) fn parts(&self) -> Option<(&Conv2d, Vec<BlockConvs<'_>>)> {
        let blocks = self
            .layer1
            .iter()
            .chain(&self.layer2)
            .chain(&self.layer3)
            .chain(&self.layer4);
        let mut parts = Vec::new();
        for b in blocks {
            let folded = b.bn1.is_none()
                && b.bn2.is_none()
                && b.bn3.is_none()
                && b.downsample.as_ref().is_none_or(|d| d.bn.is_none());
            if !folded {
                return None;
            }
            parts.push(BlockConvs {
                conv1: &b.conv1,
                conv2: &b.conv2,
                conv3: b.conv3.as_ref(),
                downsample: b.downsample.as_ref().map(|d| &d.conv),
            });
        }
        self.bn1.is_none().then_some((&self.conv1, parts))
    }

    /// Every convolution, for an engine's rewrite at construction.
    pub(crate) fn convolutions(&mut self) -> Vec<&mut Conv2d> {
        let (conv1, _, blocks) = self.layers_mut();
        let mut all = vec![conv1];
        for block in blocks {
            all.push(&mut block.conv1);
            all.push(&mut block.conv2);
            all.extend(block.conv3.as_mut());
            all.extend(block.downsample.as_mut().map(|d| &mut d.conv));
        }
        all
    }
}

/// `[N, C, H, W]` → `[N, C]` mean over the spatial axes, with `mean_dim`
/// (which lavapipe runs; a full reduction does not compile there).
pub(crate) fn global_avg_pool(x: Tensor<4>) -> Tensor<2> {
    let [n, c, h, w] = x.dims();
    x.reshape([n, c, h * w]).mean_dim(2).reshape([n, c])
}
