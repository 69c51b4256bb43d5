//! torchvision's ResNet-18/34/50/101/152, field for field, so a torchvision
//! `state_dict` loads by name (`layer1.0.conv1.weight`, …). The only renamed
//! keys are `downsample.0`/`downsample.1` (a `Sequential` in torchvision),
//! which become `downsample.conv`/`downsample.bn` here.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};

use super::fold::{fold, norm};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};

/// A torchvision ResNet's block type and blocks per stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResNetDepth {
    bottleneck: bool,
    blocks: [usize; 4],
}

impl ResNetDepth {
    /// ResNet-18.
    pub const R18: Self = Self {
        bottleneck: false,
        blocks: [2, 2, 2, 2],
    };
    /// ResNet-34.
    pub const R34: Self = Self {
        bottleneck: false,
        blocks: [3, 4, 6, 3],
    };
    /// ResNet-50.
    pub const R50: Self = Self {
        bottleneck: true,
        blocks: [3, 4, 6, 3],
    };
    /// ResNet-101.
    pub const R101: Self = Self {
        bottleneck: true,
        blocks: [3, 4, 23, 3],
    };
    /// ResNet-152.
    pub const R152: Self = Self {
        bottleneck: true,
        blocks: [3, 8, 36, 3],
    };

    /// Width of the pooled features: 512 per stage-4 block output, four
    /// times that through bottlenecks.
    pub(crate) fn feature_dim(&self) -> usize {
        if self.bottleneck { 2048 } else { 512 }
    }
}

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
    fn new(cin: usize, planes: usize, stride: usize, bottleneck: bool, device: &Device) -> Self {
        let expansion = if bottleneck { 4 } else { 1 };
        let cout = planes * expansion;
        let downsample = (stride != 1 || cin != cout).then(|| Downsample {
            conv: conv(cin, cout, 1, stride, device),
            bn: Some(bn(cout, device)),
        });
        if bottleneck {
            // torchvision (v1.5) puts the stride on the 3x3 convolution.
            Self {
                conv1: conv(cin, planes, 1, 1, device),
                bn1: Some(bn(planes, device)),
                conv2: conv(planes, planes, 3, stride, device),
                bn2: Some(bn(planes, device)),
                conv3: Some(conv(planes, cout, 1, 1, device)),
                bn3: Some(bn(cout, device)),
                downsample,
            }
        } else {
            Self {
                conv1: conv(cin, planes, 3, stride, device),
                bn1: Some(bn(planes, device)),
                conv2: conv(planes, planes, 3, 1, device),
                bn2: Some(bn(planes, device)),
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
    fc: Linear,
}

impl ResNet {
    pub(crate) fn new(depth: ResNetDepth, classes: usize, device: &Device) -> Self {
        let expansion = if depth.bottleneck { 4 } else { 1 };
        let mut cin = 64;
        let mut stage = |planes: usize, blocks: usize, stride: usize| -> Vec<Block> {
            (0..blocks)
                .map(|i| {
                    let block = Block::new(
                        cin,
                        planes,
                        if i == 0 { stride } else { 1 },
                        depth.bottleneck,
                        device,
                    );
                    cin = planes * expansion;
                    block
                })
                .collect()
        };
        let layer1 = stage(64, depth.blocks[0], 1);
        let layer2 = stage(128, depth.blocks[1], 2);
        let layer3 = stage(256, depth.blocks[2], 2);
        let layer4 = stage(512, depth.blocks[3], 2);
        Self {
            conv1: Conv2dConfig::new([3, 64], [7, 7])
                .with_stride([2, 2])
                .with_padding(PaddingConfig2d::Explicit(3, 3, 3, 3))
                .with_bias(false)
                .init(device),
            bn1: Some(bn(64, device)),
            maxpool: MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(),
            layer1,
            layer2,
            layer3,
            layer4,
            fc: LinearConfig::new(512 * expansion, classes).init(device),
        }
    }

    /// Pooled penultimate features, `[N, 512 × expansion]`.
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

    /// Class logits from pooled features.
    pub(crate) fn classifier(&self) -> &Linear {
        &self.fc
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
