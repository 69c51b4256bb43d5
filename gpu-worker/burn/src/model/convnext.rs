//! torchvision's ConvNeXt (tiny, small, base), named as torchvision names it
//! (`features.S.J.block.N`, `classifier.N`):
//!
//! ```text
//! stem: conv 4×4 stride 4 → LayerNorm over channels
//! stage s: [downsample: LayerNorm over channels → conv 2×2 stride 2]
//!          blocks: x + γ · fc2(gelu(fc1(LN(dwconv7×7(x)))))   (channels last)
//! head: mean over H×W → LayerNorm → Linear (embed stops before the Linear)
//! ```

use std::sync::OnceLock;

use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Tensor};

use crate::model::activation::gelu;
use crate::model::cpu::on_flex_f32;
use crate::model::layers::{Dense, Norm, upload};
use crate::model::network::Network;
use crate::model::nhwc::{self, Nhwc, PackedConv, Then};
use model_families::tensors::Tensors;
use model_families::weights_error::WeightsError;

pub use model_families::convnext::{ConvNextConfig, EPS};

/// A convolution with its bias and geometry.
#[derive(Debug)]
struct Conv {
    weight: Tensor<4>,
    bias: Tensor<1>,
    options: ConvOptions<2>,
}

impl Conv {
    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        conv2d(
            x,
            self.weight.clone(),
            Some(self.bias.clone()),
            self.options.clone(),
        )
    }
}

#[derive(Debug)]
struct Block {
    dw: Conv,
    norm: Norm,
    fc1: Dense,
    fc2: Dense,
    gamma: Tensor<1>,
}

#[derive(Debug)]
struct Stage {
    down: Option<(Norm, Conv)>,
    blocks: Vec<Block>,
}

/// A ConvNeXt on a device.
#[derive(Debug)]
pub(crate) struct ConvNext {
    stem: Conv,
    stem_norm: Norm,
    stages: Vec<Stage>,
    head_norm: Norm,
    /// `None` for a checkpoint without its head (a `ConvNextModel`, or
    /// timm's with `num_classes` 0), which embeds.
    classifier: Option<Dense>,
    /// The convolutions and MLPs packed for the CPU's channels-last path,
    /// at the first pass on flex in f32 (`None` inside where they cannot be).
    packed: OnceLock<Option<Packed>>,
}

/// A block packed for the channels-last path: the depthwise filter as
/// `[7, 7, C]`, and the layer scale γ folded into the second Linear
/// (`γ·(W·x + b) = (γW)·x + γb`, exact up to rounding).
#[derive(Debug)]
struct PackedBlock {
    dw_taps: Vec<f32>,
    dw_bias: Vec<f32>,
    fc1_bias: Vec<f32>,
    fc2_weight: Tensor<2>,
    fc2_bias: Vec<f32>,
}

#[derive(Debug)]
struct Packed {
    stem: PackedConv,
    downs: Vec<Option<PackedConv>>,
    blocks: Vec<Vec<PackedBlock>>,
}

fn host<const D: usize>(t: Tensor<D>) -> Option<Vec<f32>> {
    t.into_data().try_to_vec::<f32>().ok()
}

impl Conv {
    fn packed(&self) -> Option<PackedConv> {
        let [stride, _] = self.options.stride;
        let [(pad, _), _] = self.options.padding;
        PackedConv::new(self.weight.clone(), Some(self.bias.clone()), stride, pad)
    }
}

impl Packed {
    fn new(model: &ConvNext) -> Option<Self> {
        let mut downs = Vec::new();
        let mut blocks = Vec::new();
        for stage in &model.stages {
            downs.push(match &stage.down {
                Some((_, conv)) => Some(conv.packed()?),
                None => None,
            });
            let mut packed = Vec::new();
            for b in &stage.blocks {
                // `[4C, C]`: Dense keeps weights as `[in, out]`.
                let [c4, c] = b.fc2.weight.dims();
                let gamma = host(b.gamma.clone())?;
                let mut fc2 = host(b.fc2.weight.clone())?;
                for row in fc2.chunks_exact_mut(c) {
                    for (w, g) in row.iter_mut().zip(&gamma) {
                        *w *= g;
                    }
                }
                let fc2_bias = host(b.fc2.bias.clone()?)?;
                packed.push(PackedBlock {
                    dw_taps: host(b.dw.weight.clone().permute([2, 3, 1, 0]))?,
                    dw_bias: host(b.dw.bias.clone())?,
                    fc1_bias: host(b.fc1.bias.clone()?)?,
                    fc2_weight: nhwc::matrix(fc2, c4, c),
                    fc2_bias: fc2_bias.iter().zip(&gamma).map(|(b, g)| b * g).collect(),
                });
            }
            blocks.push(packed);
        }
        Some(Self {
            stem: model.stem.packed()?,
            downs,
            blocks,
        })
    }
}

/// LayerNorm over the channels of an NCHW tensor (torchvision's `LayerNorm2d`).
fn norm_channels(norm: &Norm, x: Tensor<4>) -> Tensor<4> {
    norm.run(x.permute([0, 2, 3, 1])).permute([0, 3, 1, 2])
}

impl ConvNext {
    pub(crate) fn new(
        config: &ConvNextConfig,
        tensors: &Tensors<'_>,
        device: &Device,
    ) -> Result<Self, WeightsError> {
        let up1 = |name: &str| -> Result<Tensor<1>, WeightsError> {
            Ok(upload(tensors.take(name)?, device))
        };
        let norm = |prefix: &str| -> Result<Norm, WeightsError> {
            Ok(Norm {
                gamma: up1(&format!("{prefix}.weight"))?,
                beta: up1(&format!("{prefix}.bias"))?,
                eps: EPS,
            })
        };
        let conv = |prefix: &str, options: ConvOptions<2>| -> Result<Conv, WeightsError> {
            Ok(Conv {
                weight: upload(tensors.take(&format!("{prefix}.weight"))?, device),
                bias: up1(&format!("{prefix}.bias"))?,
                options,
            })
        };
        let dense = |prefix: &str| -> Result<Dense, WeightsError> {
            Ok(Dense {
                weight: upload(
                    tensors.take(&format!("{prefix}.weight"))?.transposed(),
                    device,
                ),
                bias: Some(up1(&format!("{prefix}.bias"))?),
            })
        };
        let patchify = |k| ConvOptions::new([k, k], [0, 0], [1, 1], 1);
        let mut stages = Vec::new();
        for (s, (&c, &depth)) in config.dims.iter().zip(&config.depths).enumerate() {
            let down = if s > 0 {
                let f = 2 * s;
                Some((
                    norm(&format!("features.{f}.0"))?,
                    conv(&format!("features.{f}.1"), patchify(2))?,
                ))
            } else {
                None
            };
            let mut blocks = Vec::with_capacity(depth);
            for j in 0..depth {
                let b = format!("features.{}.{j}", 2 * s + 1);
                blocks.push(Block {
                    dw: conv(
                        &format!("{b}.block.0"),
                        ConvOptions::new([1, 1], [3, 3], [1, 1], c),
                    )?,
                    norm: norm(&format!("{b}.block.2"))?,
                    fc1: dense(&format!("{b}.block.3"))?,
                    fc2: dense(&format!("{b}.block.5"))?,
                    gamma: upload::<3>(tensors.take(&format!("{b}.layer_scale"))?, device)
                        .reshape([c]),
                });
            }
            stages.push(Stage { down, blocks });
        }
        Ok(Self {
            stem: conv("features.0.0", patchify(4))?,
            stem_norm: norm("features.0.1")?,
            stages,
            head_norm: Norm {
                eps: config.head_eps,
                ..norm("classifier.0")?
            },
            classifier: (config.classes > 0)
                .then(|| dense("classifier.2"))
                .transpose()?,
            packed: OnceLock::new(),
        })
    }

    /// Pre-logits features, `[N, C]`: the classifier's LayerNorm over the
    /// spatial mean, NCHW (as GPUs run it).
    fn features_nchw(&self, x: Tensor<4>) -> Tensor<2> {
        let mut x = norm_channels(&self.stem_norm, self.stem.forward(x));
        for stage in &self.stages {
            if let Some((norm, conv)) = &stage.down {
                x = conv.forward(norm_channels(norm, x));
            }
            for block in &stage.blocks {
                let h = block.dw.forward(x.clone()).permute([0, 2, 3, 1]);
                let h = block.norm.run(h);
                let h = block.fc2.run(gelu(block.fc1.run(h)));
                let c = block.gamma.dims()[0];
                let h = h * block.gamma.clone().reshape([1, 1, 1, c]);
                x = x + h.permute([0, 3, 1, 2]);
            }
        }
        let [n, c, h, w] = x.dims();
        let pooled = x.reshape([n, c, h * w]).mean_dim(2).reshape([n, c]);
        self.head_norm.run(pooled)
    }

    /// [`ConvNext::features_nchw`] on the CPU, channels-last from the stem to the
    /// pool (`nhwc/`): every LayerNorm over the last axis as it is, each
    /// MLP two GEMMs with GELU in the first one's epilogue and the layer
    /// scale and residual in the second's, no permutes.
    fn features_channels_last(&self, packed: &Packed, x: Tensor<4>) -> Tensor<2> {
        let x = packed.stem.run(&Nhwc::from_nchw(x), Then::Bias);
        let mut x = x.with(self.stem_norm.forward(x.data.clone()));
        for ((stage, down), blocks) in self.stages.iter().zip(&packed.downs).zip(&packed.blocks) {
            if let (Some((norm, _)), Some(conv)) = (&stage.down, down) {
                x = conv.run(&x.with(norm.forward(x.data.clone())), Then::Bias);
            }
            for (block, p) in stage.blocks.iter().zip(blocks) {
                let h = nhwc::depthwise(&x, &p.dw_taps, &p.dw_bias, 7).data;
                let h = nhwc::dense(
                    block.norm.forward(h),
                    &block.fc1.weight,
                    &p.fc1_bias,
                    Then::Gelu,
                );
                x = x.with(nhwc::dense(
                    h,
                    &p.fc2_weight,
                    &p.fc2_bias,
                    Then::Add(&x.data),
                ));
            }
        }
        self.head_norm.forward(x.global_mean())
    }
}

impl Network for ConvNext {
    /// On flex in f32 channels-last, elsewhere NCHW.
    fn features(&self, x: Tensor<4>) -> Tensor<2> {
        let packed = on_flex_f32(&x)
            .then(|| self.packed.get_or_init(|| Packed::new(self)).as_ref())
            .flatten();
        match packed {
            Some(packed) => self.features_channels_last(packed, x),
            None => self.features_nchw(x),
        }
    }

    fn classifier(&self) -> Option<Dense> {
        self.classifier.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Distribution;
    use model_families::tensors::Tensors;
    use pipeline_core::DeviceSpec;

    /// The channels-last path against the NCHW forward (the one GPUs run)
    /// of the same small ConvNeXt, on an image size no stage divides.
    #[test]
    fn the_channels_last_path_matches_the_nchw_forward() {
        let _rng = crate::model::host_rng();
        let device = crate::open(&DeviceSpec::Cpu).expect("the CPU opens");
        device.seed(11);
        let config = ConvNextConfig {
            dims: vec![8, 16, 24, 32],
            depths: vec![1, 1, 2, 1],
            classes: 5,
            head_eps: EPS,
        };
        let tensors = Tensors::seeded(5, "convnext_test", config.tensors());
        let model = ConvNext::new(&config, &tensors, &device).expect("declared shapes");
        let x = Tensor::<4>::random([2, 3, 70, 90], Distribution::Normal(0.0, 1.0), &device);
        let packed = Packed::new(&model).expect("f32 on flex packs");
        let flat = |t: Tensor<2>| t.into_data().try_to_vec::<f32>().expect("f32");
        let got = flat(model.features_channels_last(&packed, x.clone()));
        let want = flat(model.features_nchw(x.clone()));
        let fast = flat(model.features(x));
        assert_eq!(fast, got, "features() takes the channels-last path on flex");
        assert_eq!(got.len(), want.len());
        let worst = got
            .iter()
            .zip(&want)
            .fold(0.0f32, |m, (g, w)| m.max((g - w).abs()));
        assert!(worst <= 1e-4, "max |difference| {worst:e}");
    }
}
