//! A small CNN for fast tests: four strided 3×3 convolutions with batch norm,
//! global average pooling and a 1000-class linear head. Same key style as
//! torchvision (`features.N.*`, `fc.*`) so it loads from `.pth` like the others.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::{Device, FloatDType, Tensor};

use super::fold::{fold, norm};
use super::layers::Dense;
use super::network::{Network, cast_module, dense_of};
use super::resnet::global_avg_pool;

/// Conv → BatchNorm → ReLU.
#[derive(Module, Debug)]
pub(crate) struct ConvBn {
    conv: Conv2d,
    bn: Option<BatchNorm>,
}

/// The tiny model.
#[derive(Module, Debug)]
pub(crate) struct Tiny {
    features: Vec<ConvBn>,
    fc: Linear,
}

impl Tiny {
    pub(crate) const WIDTHS: [usize; 4] = model_families::architecture::TINY_WIDTHS;

    pub(crate) fn new(classes: usize, device: &Device) -> Self {
        let mut cin = 3;
        let features = Self::WIDTHS
            .iter()
            .map(|&cout| {
                let layer = ConvBn {
                    conv: Conv2dConfig::new([cin, cout], [3, 3])
                        .with_stride([2, 2])
                        .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                        .with_bias(false)
                        .init(device),
                    bn: Some(BatchNormConfig::new(cout).init(device)),
                };
                cin = cout;
                layer
            })
            .collect();
        Self {
            features,
            fc: LinearConfig::new(cin, classes).init(device),
        }
    }

    /// Folds every BatchNorm into its convolution (see `fold.rs`).
    pub(crate) fn fold_batch_norms(&mut self) {
        for layer in &mut self.features {
            fold(&mut layer.conv, &mut layer.bn);
        }
    }
}

impl Network for Tiny {
    fn features(&self, mut x: Tensor<4>) -> Tensor<2> {
        for layer in &self.features {
            x = relu(norm(&layer.bn, layer.conv.forward(x)));
        }
        global_avg_pool(x)
    }

    fn classifier(&self) -> Option<Dense> {
        Some(dense_of(&self.fc))
    }

    fn cast(&mut self, dtype: FloatDType) {
        *self = cast_module(self.clone(), dtype);
    }

    fn convolutions(&mut self) -> Vec<&mut Conv2d> {
        self.features.iter_mut().map(|l| &mut l.conv).collect()
    }
}
