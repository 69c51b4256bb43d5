//! torchvision's ResNet-18/34/50/101/152 and transformers'
//! `ResNetForImageClassification` ([`ResNetConfig`]): depths, widths,
//! strides, how a checkpoint names its tensors, and the renames into
//! torchvision's names ([`ResNetConfig::remap`]).

/// How a ResNet checkpoint names its tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResNetNames {
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
    /// Bottleneck blocks (ResNet-50 and deeper), else basic blocks.
    pub bottleneck: bool,
    /// Blocks of each of the four stages.
    pub blocks: [usize; 4],
    /// The stem convolution's width (64).
    pub stem: usize,
    /// Each stage's output width (a bottleneck's inner width is a quarter).
    pub widths: [usize; 4],
    /// The first stage's stride: 1, or 2 where the first stage downsamples
    /// (transformers' `downsample_in_first_stage`).
    pub first_stride: usize,
    /// A bottleneck strides in its first 1×1 convolution (ResNet v1,
    /// transformers' `downsample_in_bottleneck`), not in its 3×3 (v1.5,
    /// torchvision's).
    pub stride_in_1x1: bool,
    /// Classes of the classifier; 0 for a checkpoint without its head.
    pub classes: usize,
    /// How its checkpoint names its tensors.
    pub names: ResNetNames,
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
    pub fn hub(shape: &pipeline_core::HubShape) -> Self {
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

    /// The renaming of its checkpoint's names into the module's, applied
    /// in order (regex, replacement).
    pub fn remap(&self) -> &'static [(&'static str, &'static str)] {
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
    pub fn file_tensors(&self) -> Vec<(String, Vec<usize>)> {
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
    pub fn feature_dim(&self) -> usize {
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
