//! The built-in models behind one type: build with seeded random weights or
//! from a weight file, then `features` (pooled penultimate) and `head`.

mod efficientnet_lite;
mod resnet;
mod tiny;

use std::path::Path;

use burn::module::{Module, ModuleMapper, Param};
use burn::nn::conv::Conv2d;
use burn::nn::{Linear, PaddingConfig2d};
use burn::tensor::module::conv2d;
use burn::tensor::ops::{ConvOptions, PadMode};
use burn::tensor::{Device, Tensor};
use pipeline_core::ModelKind;

use self::efficientnet_lite::EfficientNetLite;
use self::resnet::{ResNet, ResNetDepth};
use self::tiny::Tiny;
use crate::weights::{self, WeightsError};

/// ImageNet classes of every built-in model.
pub const NUM_CLASSES: usize = 1000;

/// Boxed: the architectures differ a lot in size, and a model is built once.
#[derive(Debug)]
enum Network {
    Tiny(Box<Tiny>),
    ResNet(Box<ResNet>),
    Lite(Box<EfficientNetLite>),
}

/// A model on a device, inference only (no autodiff; batch norm uses its
/// running statistics).
#[derive(Debug)]
pub struct Model {
    kind: ModelKind,
    network: Network,
    pointwise_as_3x1: bool,
}

/// torchvision's `Sequential` downsample, named in our struct.
const RESNET_REMAP: [(&str, &str); 2] = [
    (r"downsample\.0\.", "downsample.conv."),
    (r"downsample\.1\.", "downsample.bn."),
];

impl Model {
    /// Seeded random weights (for benchmarks). They are drawn on the host
    /// (the flex backend) and then moved, so every device gets the same ones.
    pub fn random(kind: ModelKind, seed: u64, device: &Device) -> Self {
        let host = Device::flex();
        host.seed(seed);
        let resnet =
            |depth| Network::ResNet(on_device(ResNet::new(depth, NUM_CLASSES, &host), device));
        let network = match kind {
            ModelKind::Tiny => Network::Tiny(on_device(Tiny::new(NUM_CLASSES, &host), device)),
            ModelKind::Resnet18 => resnet(ResNetDepth::R18),
            ModelKind::Resnet34 => resnet(ResNetDepth::R34),
            ModelKind::Resnet50 => resnet(ResNetDepth::R50),
            ModelKind::Resnet101 => resnet(ResNetDepth::R101),
            ModelKind::Resnet152 => resnet(ResNetDepth::R152),
            ModelKind::EfficientnetLite0 => Network::Lite(on_device(
                EfficientNetLite::lite0(NUM_CLASSES, &host),
                device,
            )),
        };
        Self {
            kind,
            network,
            pointwise_as_3x1: false,
        }
    }

    /// Weights from a `.pth` or `.safetensors` file with the model's
    /// reference key names (torchvision, or `efficientnet-lite-pytorch`).
    pub fn load(kind: ModelKind, path: &Path, device: &Device) -> Result<Self, WeightsError> {
        let mut model = Self::random(kind, 0, device);
        let name = kind.name();
        match &mut model.network {
            Network::Tiny(m) => weights::load(m.as_mut(), path, name, &[])?,
            Network::ResNet(m) => weights::load(m.as_mut(), path, name, &RESNET_REMAP)?,
            Network::Lite(m) => weights::load(m.as_mut(), path, name, &[])?,
        }
        Ok(model)
    }

    /// Which architecture this is.
    pub fn kind(&self) -> ModelKind {
        self.kind
    }

    /// Runs every 1×1 convolution as the equivalent 3×1 one (the 1×1
    /// weights between a zero tap above and below, padding 1 in height): the
    /// same sums, three times the work. For Mesa's lavapipe, where burn's
    /// autotune sends 1×1 convolutions to matmul kernels that crash the
    /// driver, while larger kernels take the direct path, which it runs.
    pub fn with_pointwise_as_3x1(mut self, on: bool) -> Self {
        self.pointwise_as_3x1 = on;
        self
    }

    /// Pooled penultimate features, `[N, feature_dim]`.
    pub fn features(&self, x: Tensor<4>) -> Tensor<2> {
        let wide = self.pointwise_as_3x1;
        match &self.network {
            Network::Tiny(m) => m.features(x, wide),
            Network::ResNet(m) => m.features(x, wide),
            Network::Lite(m) => m.features(x, wide),
        }
    }

    /// Class logits from pooled features, `[N, NUM_CLASSES]`.
    pub fn head(&self, features: Tensor<2>) -> Tensor<2> {
        self.classifier().forward(features)
    }

    /// The same logits without a matmul kernel: a broadcast product summed
    /// over the feature axis (`[N, 1, C] × [1, K, C]`, summed over `C`).
    /// Mesa's lavapipe crashes compiling burn's matmul kernels, while
    /// elementwise ops and `sum_dim` run there. It needs `N × C × K` floats
    /// of scratch, so it is for the software adapter only.
    pub fn head_without_matmul(&self, features: Tensor<2>) -> Tensor<2> {
        let fc = self.classifier();
        let [n, c] = features.dims();
        let weight = fc.weight.val();
        let k = weight.dims()[1];
        // Reduced over the last, contiguous axis: lavapipe crashes on the
        // fused kernel of a middle-axis sum followed by softmax.
        let logits = (features.reshape([n, 1, c]) * weight.transpose().reshape([1, k, c]))
            .sum_dim(2)
            .reshape([n, k]);
        match &fc.bias {
            Some(bias) => logits + bias.val().reshape([1, k]),
            None => logits,
        }
    }

    fn classifier(&self) -> &Linear {
        match &self.network {
            Network::Tiny(m) => m.classifier(),
            Network::ResNet(m) => m.classifier(),
            Network::Lite(m) => m.classifier(),
        }
    }
}

/// A convolution layer run either as itself or, for 1×1 kernels without
/// padding when `wide` is set, as the equivalent 3×1 convolution.
pub(crate) trait RunConv {
    fn run(&self, x: Tensor<4>, wide: bool) -> Tensor<4>;
}

impl RunConv for Conv2d {
    fn run(&self, x: Tensor<4>, wide: bool) -> Tensor<4> {
        let unpadded = matches!(
            self.padding,
            PaddingConfig2d::Valid | PaddingConfig2d::Explicit(0, 0, 0, 0)
        );
        if !(wide && self.kernel_size == [1, 1] && unpadded) {
            return self.forward(x);
        }
        // A 3×1 kernel (a zero tap above and below, padding 1 in height)
        // is enough to stay off the 1×1 path, at three times the work.
        let weight = self.weight.val().pad((0, 0, 1, 1), PadMode::Constant(0.0));
        conv2d(
            x,
            weight,
            self.bias.as_ref().map(Param::val),
            ConvOptions::new(self.stride, [1, 0], self.dilation, self.groups),
        )
    }
}

/// Moves a module built on the host to `device`. burn initialises parameters
/// lazily and `to_device` moves them uninitialised, so each device would draw
/// its own random numbers; drawing them here, on the host, first keeps the
/// weights identical everywhere.
fn on_device<M: Module>(module: M, device: &Device) -> Box<M> {
    Box::new(module.map(&mut Materialize).to_device(device))
}

/// Forces every lazily initialised float parameter to exist.
struct Materialize;

impl ModuleMapper for Materialize {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        param.map(|tensor| tensor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matmul_free_head_computes_the_linear_layer() {
        let device = Device::flex();
        let model = Model::random(ModelKind::Tiny, 3, &device);
        let features = Tensor::<2>::random(
            [5, 128],
            burn::tensor::Distribution::Uniform(-1.0, 1.0),
            &device,
        );
        let want = model.head(features.clone()).into_data();
        let got = model.head_without_matmul(features).into_data();
        let (want, got) = (
            want.try_to_vec::<f32>().expect("f32 logits"),
            got.try_to_vec::<f32>().expect("f32 logits"),
        );
        assert_eq!(want.len(), 5 * NUM_CLASSES);
        let worst = want
            .iter()
            .zip(&got)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(worst < 1e-5, "largest difference {worst}");
    }
}
