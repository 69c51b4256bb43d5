//! The ResNet family's network: the burn module on every device, and on
//! the CPU backend (flex, f32) its channels-last form (`nhwc/`): a folded
//! ResNet's convolutions packed once, at the first pass, and every block's
//! bias, residual and ReLU in one pass over its last GEMM. flex's NCHW
//! forward spent a third of a ResNet-50 pass outside its GEMMs
//! (BENCHMARKS.md).

use std::sync::OnceLock;

use burn::nn::PaddingConfig2d;
use burn::nn::conv::Conv2d;
use burn::tensor::{FloatDType, Tensor};

use super::cpu::on_flex_f32;
use super::layers::Dense;
use super::network::{Network, cast_module, dense_of};
use super::nhwc::{Nhwc, PackedConv, Then, max_pool_3x3_s2};
use super::resnet::ResNet;

/// A folded ResNet, with its convolutions packed for the CPU at the first
/// pass on flex in f32.
#[derive(Debug)]
pub(crate) struct ResNetNetwork {
    net: ResNet,
    /// `None` inside where they cannot be packed; emptied by every method
    /// that changes the weights.
    packed: OnceLock<Option<PackedResNet>>,
}

impl ResNetNetwork {
    /// `net`, its BatchNorms folded.
    pub(crate) fn new(net: ResNet) -> Self {
        Self {
            net,
            packed: OnceLock::new(),
        }
    }
}

impl Network for ResNetNetwork {
    fn features(&self, x: Tensor<4>) -> Tensor<2> {
        let packed = on_flex_f32(&x)
            .then(|| {
                self.packed
                    .get_or_init(|| PackedResNet::pack(&self.net))
                    .as_ref()
            })
            .flatten();
        match packed {
            Some(packed) => packed.features(x),
            None => self.net.features(x),
        }
    }

    fn classifier(&self) -> Option<Dense> {
        self.net.classifier().map(dense_of)
    }

    fn cast(&mut self, dtype: FloatDType) {
        self.packed = OnceLock::new();
        self.net = cast_module(self.net.clone(), dtype);
    }

    fn convolutions(&mut self) -> Vec<&mut Conv2d> {
        self.packed = OnceLock::new();
        self.net.convolutions()
    }
}

#[derive(Debug)]
struct Block {
    conv1: PackedConv,
    conv2: PackedConv,
    conv3: Option<PackedConv>,
    downsample: Option<PackedConv>,
}

/// A ResNet's convolutions packed for the CPU, made from the folded model.
#[derive(Debug)]
pub(crate) struct PackedResNet {
    stem: PackedConv,
    blocks: Vec<Block>,
}

impl PackedResNet {
    /// `model`'s convolutions packed, or `None` unless its weights are f32
    /// flex tensors with every BatchNorm folded.
    pub(crate) fn pack(model: &ResNet) -> Option<Self> {
        let (stem, blocks) = model.parts()?;
        let stem = pack(stem)?;
        let blocks = blocks
            .into_iter()
            .map(|b| {
                Some(Block {
                    conv1: pack(b.conv1)?,
                    conv2: pack(b.conv2)?,
                    conv3: pack_if_any(b.conv3)?,
                    downsample: pack_if_any(b.downsample)?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self { stem, blocks })
    }

    /// Pooled features `[N, C]` of an NCHW batch, as `ResNet::features`.
    pub(crate) fn features(&self, x: Tensor<4>) -> Tensor<2> {
        let x = Nhwc::from_nchw(x);
        let mut x = max_pool_3x3_s2(&self.stem.run(&x, Then::Relu));
        for block in &self.blocks {
            let identity = match &block.downsample {
                Some(d) => d.run(&x, Then::Bias),
                None => x.clone(),
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
        x.global_mean()
    }
}

/// `Some(None)` for no convolution, `None` for one that does not pack.
fn pack_if_any(conv: Option<&Conv2d>) -> Option<Option<PackedConv>> {
    match conv {
        Some(conv) => pack(conv).map(Some),
        None => Some(None),
    }
}

/// A torchvision ResNet convolution (square, symmetric padding, ungrouped,
/// undilated), packed.
fn pack(conv: &Conv2d) -> Option<PackedConv> {
    let [kh, kw] = conv.kernel_size;
    let [sh, sw] = conv.stride;
    let pad = match conv.padding {
        PaddingConfig2d::Explicit(top, left, bottom, right)
            if top == left && left == bottom && bottom == right =>
        {
            top
        }
        _ => return None,
    };
    if kh != kw || sh != sw || conv.dilation != [1, 1] || conv.groups != 1 {
        return None;
    }
    PackedConv::new(
        conv.weight.val(),
        conv.bias.as_ref().map(|b| b.val()),
        sh,
        pad,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::resnet::ResNetConfig;
    use burn::tensor::Distribution;
    use model_families::resnet::ResNetNames;
    use pipeline_core::DeviceSpec;

    fn flat(t: Tensor<2>) -> Vec<f32> {
        t.into_data().try_to_vec::<f32>().expect("f32")
    }

    /// The channels-last path against burn's own NCHW forward of the same
    /// folded model, on odd image sizes (padding on every edge, stride 2 on
    /// odd widths) and both block types.
    #[test]
    fn the_channels_last_path_matches_the_nchw_forward() {
        let _rng = crate::model::host_rng();
        let device = crate::open(&DeviceSpec::Cpu).expect("the CPU opens");
        device.seed(7);
        // A Hugging Face shape too: other widths, the first stage and the
        // bottlenecks' 1×1 convolutions striding.
        let v1 = ResNetConfig {
            stem: 16,
            widths: [32, 48, 64, 80],
            blocks: [1, 1, 2, 1],
            first_stride: 2,
            stride_in_1x1: true,
            names: ResNetNames::HuggingFace,
            ..ResNetConfig::R50
        };
        for depth in [ResNetConfig::R18, ResNetConfig::R50, v1] {
            let mut model = ResNet::new(
                &ResNetConfig {
                    classes: 10,
                    ..depth
                },
                &device,
            );
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

    /// At 224×224, three images make the stem's im2col large enough to run
    /// in blocks, one image does not: the block boundaries and the GEMMs'
    /// threading differ, the bits may not.
    #[test]
    fn features_alone_and_in_a_batch_are_the_same_bits() {
        let _rng = crate::model::host_rng();
        let device = crate::open(&DeviceSpec::Cpu).expect("the CPU opens");
        device.seed(8);
        let mut model = ResNet::new(
            &ResNetConfig {
                classes: 10,
                ..ResNetConfig::R18
            },
            &device,
        );
        model.fold_batch_norms();
        let packed = PackedResNet::pack(&model).expect("a folded f32 ResNet packs");
        let x = Tensor::<4>::random([3, 3, 224, 224], Distribution::Normal(0.0, 1.0), &device);
        let together = flat(packed.features(x.clone()));
        let width = together.len() / 3;
        for i in 0..3 {
            let alone = flat(packed.features(x.clone().narrow(0, i, 1)));
            assert!(
                alone == together[i * width..(i + 1) * width],
                "image {i} alone differs from its batch"
            );
        }
    }
}
