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

/// How a ResNet checkpoint names its tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResNetNames {
    /// torchvision's (`layer1.0.conv1.weight`, `fc.weight`).
    Torchvision,
    /// transformers' `ResNetForImageClassification`
    /// (`resnet.encoder.stages.0.layers.0.layer.0.convolution.weight`,
    /// `classifier.1.weight`).
    HuggingFace,
}

/// A ResNet's shape: block type and blocks per stage, the widths, where
/// the strides are, the head's classes, and its checkpoint's names.
/// torchvision's ResNets are the constants; a Hugging Face `ResNetConfig`
/// may give any widths ([`ResNetConfig::hub`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResNetConfig {
    pub(crate) bottleneck: bool,
    pub(crate) blocks: [usize; 4],
    /// The stem convolution's width (64).
    pub(crate) stem: usize,
    /// Each stage's output width (a bottleneck's inner width is a quarter).
    pub(crate) widths: [usize; 4],
    /// The first stage's stride: 1, or 2 where the first stage downsamples
    /// (transformers' `downsample_in_first_stage`).
    pub(crate) first_stride: usize,
    /// A bottleneck strides in its first 1×1 convolution (ResNet v1,
    /// transformers' `downsample_in_bottleneck`), not in its 3×3 (v1.5,
    /// torchvision's).
    pub(crate) stride_in_1x1: bool,
    pub(crate) classes: usize,
    pub(crate) names: ResNetNames,
}

const fn torchvision(bottleneck: bool, blocks: [usize; 4]) -> ResNetConfig {
    let e = if bottleneck { 4 } else { 1 };
    ResNetConfig {
        bottleneck,
        blocks,
        stem: 64,
        widths: [64 * e, 128 * e, 256 * e, 512 * e],
        first_stride: 1,
        stride_in_1x1: false,
        classes: 1000,
        names: ResNetNames::Torchvision,
    }
}

impl ResNetConfig {
    /// ResNet-18.
    pub const R18: Self = torchvision(false, [2, 2, 2, 2]);
    /// ResNet-34.
    pub const R34: Self = torchvision(false, [3, 4, 6, 3]);
    /// ResNet-50.
    pub const R50: Self = torchvision(true, [3, 4, 6, 3]);
    /// ResNet-101.
    pub const R101: Self = torchvision(true, [3, 4, 23, 3]);
    /// ResNet-152.
    pub const R152: Self = torchvision(true, [3, 8, 36, 3]);

    /// A Hugging Face `ResNetForImageClassification` of `shape`'s sizes
    /// (#42): its stem and stage widths, blocks, strides and classes.
    pub(crate) fn hub(shape: &pipeline_core::HubShape) -> Self {
        let stages = |v: &[usize]| -> [usize; 4] {
            v.try_into()
                .expect("hub_config reads four stages of a ResNet")
        };
        let blocks = shape.resnet.expect("a ResNet's hub shape has its blocks");
        Self {
            bottleneck: blocks.bottleneck,
            blocks: stages(&shape.depths),
            stem: blocks.stem,
            widths: stages(&shape.dims),
            first_stride: if blocks.downsample_in_first_stage {
                2
            } else {
                1
            },
            stride_in_1x1: blocks.downsample_in_bottleneck,
            classes: shape.classes.unwrap_or(0),
            // timm's ResNets are torchvision's, by its names.
            names: if blocks.timm {
                ResNetNames::Torchvision
            } else {
                ResNetNames::HuggingFace
            },
        }
    }

    /// This shape with a head of `classes`.
    #[cfg(test)]
    pub(crate) fn with_classes(self, classes: usize) -> Self {
        Self { classes, ..self }
    }

    /// The renaming of its checkpoint's names into the module's, applied
    /// in order (regex, replacement).
    pub(crate) fn remap(&self) -> &'static [(&'static str, &'static str)] {
        match self.names {
            ResNetNames::Torchvision => &RESNET_REMAP,
            ResNetNames::HuggingFace => &HF_RESNET_REMAP,
        }
    }

    /// Every tensor its checkpoint saves (`num_batches_tracked` aside),
    /// with its shape, in the names of its `names` (transformers'
    /// `ResNetForImageClassification`, or torchvision's, as timm's repos
    /// save them), block by block as [`ResNet::new`] builds them: for a
    /// check by names and shapes before any worker starts, without
    /// loading the weights.
    pub(crate) fn file_tensors(&self) -> Vec<(String, Vec<usize>)> {
        let hf = self.names == ResNetNames::HuggingFace;
        let mut tensors = Vec::new();
        // A convolution (no bias) and its BatchNorm, by their names.
        let mut conv = |(conv, bn): (String, String), cout: usize, cin: usize, kernel: usize| {
            tensors.push((format!("{conv}.weight"), vec![cout, cin, kernel, kernel]));
            for p in ["weight", "bias", "running_mean", "running_var"] {
                tensors.push((format!("{bn}.{p}"), vec![cout]));
            }
        };
        let pair = |base: String, hf_leaf: &str, conv: &str, bn: &str| {
            if hf {
                (
                    format!("{base}{hf_leaf}.convolution"),
                    format!("{base}{hf_leaf}.normalization"),
                )
            } else {
                (format!("{base}{conv}"), format!("{base}{bn}"))
            }
        };
        // A `ResNetModel` (no head) saves its tensors without the prefix.
        let prefix = if hf && self.classes > 0 {
            "resnet."
        } else {
            ""
        };
        conv(
            pair(prefix.to_owned(), "embedder.embedder", "conv1", "bn1"),
            self.stem,
            3,
            7,
        );
        let mut cin = self.stem;
        for (s, (&cout, &blocks)) in self.widths.iter().zip(&self.blocks).enumerate() {
            for j in 0..blocks {
                let base = if hf {
                    format!("{prefix}encoder.stages.{s}.layers.{j}.")
                } else {
                    format!("layer{}.{j}.", s + 1)
                };
                let stride = match (s, j) {
                    (_, 1..) => 1,
                    (0, 0) => self.first_stride,
                    _ => 2,
                };
                if stride != 1 || cin != cout {
                    let shortcut = pair(base.clone(), "shortcut", "downsample.0", "downsample.1");
                    conv(shortcut, cout, cin, 1);
                }
                let layer = |k: usize| {
                    pair(
                        base.clone(),
                        &format!("layer.{k}"),
                        &format!("conv{}", k + 1),
                        &format!("bn{}", k + 1),
                    )
                };
                if self.bottleneck {
                    let planes = cout / 4;
                    conv(layer(0), planes, cin, 1);
                    conv(layer(1), planes, planes, 3);
                    conv(layer(2), cout, planes, 1);
                } else {
                    conv(layer(0), cout, cin, 3);
                    conv(layer(1), cout, cout, 3);
                }
                cin = cout;
            }
        }
        if self.classes > 0 {
            let head = if hf { "classifier.1" } else { "fc" };
            tensors.push((format!("{head}.weight"), vec![self.classes, cin]));
            tensors.push((format!("{head}.bias"), vec![self.classes]));
        }
        tensors
    }

    /// Width of the pooled features: the last stage's.
    pub(crate) fn feature_dim(&self) -> usize {
        self.widths[3]
    }
}

/// torchvision's `Sequential` downsample, named in our struct.
const RESNET_REMAP: [(&str, &str); 2] = [
    (r"downsample\.0\.", "downsample.conv."),
    (r"downsample\.1\.", "downsample.bn."),
];

/// transformers' `ResNetForImageClassification` names (#42), applied in
/// order: its `resnet.` prefix dropped, the stem, the stages, a block's
/// `shortcut` and its `layer.K` convolutions, the head.
const HF_RESNET_REMAP: [(&str, &str); 16] = [
    (r"^resnet\.", ""),
    (r"^embedder\.embedder\.convolution\.", "conv1."),
    (r"^embedder\.embedder\.normalization\.", "bn1."),
    (r"^encoder\.stages\.0\.layers\.", "layer1."),
    (r"^encoder\.stages\.1\.layers\.", "layer2."),
    (r"^encoder\.stages\.2\.layers\.", "layer3."),
    (r"^encoder\.stages\.3\.layers\.", "layer4."),
    (r"\.shortcut\.convolution\.", ".downsample.conv."),
    (r"\.shortcut\.normalization\.", ".downsample.bn."),
    (r"\.layer\.0\.convolution\.", ".conv1."),
    (r"\.layer\.0\.normalization\.", ".bn1."),
    (r"\.layer\.1\.convolution\.", ".conv2."),
    (r"\.layer\.1\.normalization\.", ".bn2."),
    (r"\.layer\.2\.convolution\.", ".conv3."),
    (r"\.layer\.2\.normalization\.", ".bn3."),
    (r"^classifier\.1\.", "fc."),
];

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
