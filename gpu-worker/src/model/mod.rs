//! The built-in models behind one type: build with seeded random weights or
//! from a weight file, then `features` (the model's embedding) and `head`.
//! The CNNs are burn modules loaded through `burn::store`; the ViT families
//! and ConvNeXt are built from a checkpoint's tensors by canonical name
//! (`families.rs`, `layout.rs`).

pub(crate) mod convnext;
pub(crate) mod cpu;
mod cpu_resnet;
mod efficientnet_lite;
mod families;
mod fold;
pub(crate) mod layers;
pub(crate) mod layout;
pub(crate) mod nhwc;
mod pos_embed;
mod resnet;
pub(crate) mod tensors;
mod tiny;
pub(crate) mod vit;

use std::path::Path;
use std::sync::OnceLock;

use burn::module::{Module, ModuleMapper, Param};
use burn::nn::conv::Conv2d;
use burn::nn::{Linear, PaddingConfig2d};
use burn::tensor::activation::{sigmoid, softmax};
use burn::tensor::ops::PadMode;
use burn::tensor::{Device, Tensor};
use pipeline_core::{CropRounding, ModelKind};

use self::convnext::ConvNext;
use self::cpu_resnet::PackedResNet;
use self::efficientnet_lite::EfficientNetLite;
pub use self::families::{Architecture, checkpoint_layouts};
use self::layers::Dense;
use self::resnet::{ResNet, ResNetDepth};
use self::tiny::Tiny;
use self::vit::Vit;
use crate::weights;
use crate::weights_error::WeightsError;
use crate::zero_shot::{ClassMatrix, LogitParams, Probabilities, ZeroShotError, ZeroShotRule};

/// ImageNet classes of every built-in model.
pub const NUM_CLASSES: usize = 1000;

/// Boxed: the architectures differ a lot in size, and a model is built once.
#[derive(Debug)]
enum Network {
    Tiny(Box<Tiny>),
    ResNet(Box<ResNet>),
    Lite(Box<EfficientNetLite>),
    Vit(Box<Vit>),
    ConvNext(Box<ConvNext>),
}

/// A model on a device, inference only (no autodiff; batch norm uses its
/// running statistics).
#[derive(Debug)]
pub struct Model {
    network: Network,
    /// On Mesa's lavapipe: the transformer and ConvNeXt layers take their
    /// software forms (see `layers.rs`).
    software: bool,
    /// The checkpoint's `logit_scale` / `logit_bias` (or, for seeded
    /// weights, upstream's initial values): zero-shot scoring's.
    logit_params: Option<LogitParams>,
    /// Zero-shot classification's head, replacing the model's own.
    zero_shot: Option<ZeroShotHead>,
    /// A ResNet's convolutions packed for the CPU path (`cpu_resnet.rs`),
    /// at the first pass on flex in f32; `None` inside where they cannot be.
    /// Emptied by every method that changes the weights.
    packed: OnceLock<Option<PackedResNet>>,
}

/// Class text embeddings as a Linear layer over the normalised image
/// embedding: weight `exp(logit_scale) · normalise(rows)ᵀ`, bias
/// `logit_bias`.
#[derive(Debug)]
struct ZeroShotHead {
    dense: Dense,
    probabilities: Probabilities,
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
        Self::random_unfolded(kind, seed, device).with_folded_batch_norms()
    }

    /// [`Model::random`] with each BatchNorm still a module of its own: the
    /// shape a checkpoint loads into.
    pub(crate) fn random_unfolded(kind: ModelKind, seed: u64, device: &Device) -> Self {
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
            _ => {
                let arch = Architecture::of(kind)
                    .expect("every model without a burn module has an architecture");
                let mut model = Self::seeded(&arch, kind.name(), seed, device);
                model.logit_params = ZeroShotRule::of(kind.family()).map(|rule| rule.initial);
                return model;
            }
        };
        Self::of(network)
    }

    fn of(network: Network) -> Self {
        Self {
            network,
            software: false,
            logit_params: None,
            zero_shot: None,
            packed: OnceLock::new(),
        }
    }

    /// `arch` with seeded random weights, the same on every device.
    pub fn seeded(arch: &Architecture, name: &str, seed: u64, device: &Device) -> Self {
        let tensors = tensors::Tensors::seeded(seed, name, arch.tensors(None));
        Self::build(arch, None, &tensors, device)
            .expect("seeded tensors have the shapes the model declares")
    }

    /// Weights from a checkpoint file as its upstream publishes it: the
    /// layout is told from the tensor names (torchvision, OpenCLIP, Hugging
    /// Face, torch hub, `efficientnet-lite-pytorch`).
    pub fn load(kind: ModelKind, path: &Path, device: &Device) -> Result<Self, WeightsError> {
        if let Some(arch) = Architecture::of(kind) {
            return Self::load_architecture(&arch, kind.name(), path, device);
        }
        let mut model = Self::random_unfolded(kind, 0, device);
        let name = kind.name();
        match &mut model.network {
            Network::Tiny(m) => weights::load(m.as_mut(), path, name, &[])?,
            Network::ResNet(m) => weights::load(m.as_mut(), path, name, &RESNET_REMAP)?,
            Network::Lite(m) => weights::load(m.as_mut(), path, name, &[])?,
            Network::Vit(_) | Network::ConvNext(_) => {
                unreachable!("transformer and ConvNeXt models have an architecture")
            }
        }
        Ok(model.with_folded_batch_norms())
    }

    /// Every parameter of the CNNs in `dtype` (they are drawn or loaded on
    /// the host in f32). The transformers and ConvNeXt are built on their
    /// device and so already carry its default float type.
    pub fn with_float_dtype(mut self, dtype: burn::tensor::FloatDType) -> Self {
        self.packed = OnceLock::new();
        let mut cast = CastFloats(dtype);
        self.network = match self.network {
            Network::Tiny(m) => Network::Tiny(Box::new(m.map(&mut cast))),
            Network::ResNet(m) => Network::ResNet(Box::new(m.map(&mut cast))),
            Network::Lite(m) => Network::Lite(Box::new(m.map(&mut cast))),
            other => other,
        };
        self
    }

    /// Folds every eval-mode BatchNorm of the CNNs into the convolution
    /// before it (`fold.rs`); the transformers and ConvNeXt have none.
    fn with_folded_batch_norms(mut self) -> Self {
        self.packed = OnceLock::new();
        match &mut self.network {
            Network::Tiny(m) => m.fold_batch_norms(),
            Network::ResNet(m) => m.fold_batch_norms(),
            Network::Lite(m) => m.fold_batch_norms(),
            Network::Vit(_) | Network::ConvNext(_) => {}
        }
        self
    }

    /// [`Model::load`] for an architecture of any size (tests use small ones).
    pub fn load_architecture(
        arch: &Architecture,
        name: &str,
        path: &Path,
        device: &Device,
    ) -> Result<Self, WeightsError> {
        let checkpoint = crate::checkpoint::Checkpoint::open(path)?;
        let (layout, tensors) = families::check(arch, name, &checkpoint)?;
        let mut model = Self::build(arch, Some(layout), &tensors, device)?;
        model.logit_params = crate::zero_shot::logit_params(&checkpoint)?;
        Ok(model)
    }

    /// Checks that `path` is a checkpoint of `kind` in a layout it accepts,
    /// reading names and shapes only: no device, no tensor data. For a clear
    /// error before any worker starts. Gives how the layout's upstream
    /// rounds its centre crop (torchvision's half to even for the models
    /// without layouts, torchvision's CNNs).
    pub fn check_file(kind: ModelKind, path: &Path) -> Result<CropRounding, WeightsError> {
        match Architecture::of(kind) {
            Some(arch) => {
                let checkpoint = crate::checkpoint::Checkpoint::open(path)?;
                let (layout, _) = families::check(&arch, kind.name(), &checkpoint)?;
                Ok(layout.crop_rounding())
            }
            None => Ok(CropRounding::HalfEven),
        }
    }

    fn build(
        arch: &Architecture,
        layout: Option<layout::Layout>,
        tensors: &tensors::Tensors<'_>,
        device: &Device,
    ) -> Result<Self, WeightsError> {
        let network = match arch {
            Architecture::Vit(config) => Network::Vit(Box::new(Vit::new(
                families::for_layout(config, layout),
                tensors,
                device,
            )?)),
            Architecture::ConvNext(config) => {
                Network::ConvNext(Box::new(ConvNext::new(config, tensors, device)?))
            }
        };
        Ok(Self::of(network))
    }

    /// Pools DINOv2 embeddings as `pooling` says (other models ignore it:
    /// the CLI refuses `--pooling` for them).
    pub fn with_pooling(mut self, pooling: Option<pipeline_core::EmbedPooling>) -> Self {
        if let (Network::Vit(vit), Some(pooling)) = (&mut self.network, pooling) {
            vit.set_pooling(match pooling {
                pipeline_core::EmbedPooling::Cls => vit::Pooling::Class,
                pipeline_core::EmbedPooling::Mean => vit::Pooling::Mean,
                pipeline_core::EmbedPooling::ClsMean => vit::Pooling::ClassAndMean,
            });
        }
        self
    }

    /// Whether the model has a classifier head (`--task classify`): its own
    /// or a zero-shot one.
    pub fn classifies(&self) -> bool {
        match &self.network {
            _ if self.zero_shot.is_some() => true,
            Network::Vit(m) => m.classifier().is_some(),
            _ => true,
        }
    }

    /// Classifies zero-shot against `classes` (CLIP, SigLIP), scored as
    /// `rule` says with the checkpoint's `logit_scale` and `logit_bias`
    /// (see [`crate::zero_shot`]). `name` and `weights` are for the error.
    pub fn with_zero_shot(
        mut self,
        classes: &ClassMatrix,
        rule: &ZeroShotRule,
        name: &str,
        weights: Option<&Path>,
        device: &Device,
    ) -> Result<Self, ZeroShotError> {
        let Some(dim) = (match &self.network {
            Network::Vit(vit) => vit.normalised_embedding(),
            _ => None,
        }) else {
            return Err(ZeroShotError::NoEmbedding {
                model: name.to_owned(),
            });
        };
        if classes.dim() != dim {
            return Err(ZeroShotError::Width {
                rows: classes.dim(),
                model: name.to_owned(),
                dim,
            });
        }
        let params = match weights {
            Some(path) => crate::zero_shot::resolve(name, self.logit_params, rule, path)?,
            None => self.logit_params.unwrap_or(rule.initial),
        };
        let scale = params.log_scale.exp();
        let rows = classes.normalised();
        let k = classes.rows();
        // [D, K] as burn's `linear` wants: the scaled rows, transposed.
        let mut weight = vec![0.0f32; dim * k];
        for (class, row) in rows.chunks_exact(dim).enumerate() {
            for (d, &v) in row.iter().enumerate() {
                weight[d * k + class] = v * scale;
            }
        }
        let bias = params.bias.map(|b| {
            layers::upload(
                crate::checkpoint::HostTensor::new(vec![k], vec![b; k]),
                device,
            )
        });
        self.zero_shot = Some(ZeroShotHead {
            dense: Dense {
                weight: layers::upload(
                    crate::checkpoint::HostTensor::new(vec![dim, k], weight),
                    device,
                ),
                bias,
            },
            probabilities: rule.activation,
        });
        Ok(self)
    }

    /// Logits to probabilities: softmax over the classes, or for SigLIP's
    /// zero-shot scores each class's sigmoid.
    pub fn probabilities(&self, logits: Tensor<2>) -> Tensor<2> {
        match self.zero_shot.as_ref().map(|z| z.probabilities) {
            Some(Probabilities::Sigmoid) => sigmoid(logits),
            _ => softmax(logits, 1),
        }
    }

    /// Rewrites every unpadded 1×1 convolution, once, as the equivalent
    /// 3×1 one (the 1×1 weights between a zero tap above and below, padding
    /// 1 in height): the same sums, three times the work. For Mesa's
    /// lavapipe, where burn's autotune sends 1×1 convolutions to matmul
    /// kernels that crash the driver, while larger kernels take the direct
    /// path, which it runs. The transformers and ConvNeXt take their
    /// software forms instead. Forward code stays as upstream writes it.
    pub fn with_pointwise_as_3x1(mut self, on: bool) -> Self {
        self.software = on;
        self.packed = OnceLock::new();
        if on {
            let convolutions = match &mut self.network {
                Network::Tiny(m) => m.convolutions(),
                Network::ResNet(m) => m.convolutions(),
                Network::Lite(m) => m.convolutions(),
                Network::Vit(_) | Network::ConvNext(_) => Vec::new(),
            };
            for conv in convolutions {
                widen_pointwise(conv);
            }
        }
        self
    }

    /// Pooled penultimate features, `[N, feature_dim]`.
    pub fn features(&self, x: Tensor<4>) -> Tensor<2> {
        match &self.network {
            Network::Tiny(m) => m.features(x),
            Network::ResNet(m) => {
                let packed = (!self.software && cpu::on_flex_f32(&x))
                    .then(|| self.packed.get_or_init(|| PackedResNet::pack(m)).as_ref())
                    .flatten();
                match packed {
                    Some(packed) => packed.features(x),
                    None => m.features(x),
                }
            }
            Network::Lite(m) => m.features(x),
            Network::Vit(m) => m.features(x, self.software),
            Network::ConvNext(m) => m.features(x, self.software),
        }
    }

    /// Class logits from pooled features, `[N, classes]`.
    pub fn head(&self, features: Tensor<2>) -> Tensor<2> {
        if let Some(zero_shot) = &self.zero_shot {
            return zero_shot.dense.forward(features);
        }
        match &self.network {
            Network::Vit(m) => m
                .classifier()
                .expect("the worker refuses classify for models without a classifier head")
                .forward(features),
            Network::ConvNext(m) => m.classifier().forward(features),
            _ => {
                let fc = self.classifier();
                cpu::linear_rows(features, fc.weight.val(), fc.bias.as_ref().map(Param::val))
            }
        }
    }

    /// The same logits without a matmul kernel: a broadcast product summed
    /// over the feature axis (`[N, 1, C] × [1, K, C]`, summed over `C`).
    /// Mesa's lavapipe crashes compiling burn's matmul kernels, while
    /// elementwise ops and `sum_dim` run there. It needs `N × C × K` floats
    /// of scratch, so it is for the software adapter only.
    pub fn head_without_matmul(&self, features: Tensor<2>) -> Tensor<2> {
        let (weight, bias) = match &self.network {
            _ if self.zero_shot.is_some() => {
                let dense = &self.zero_shot.as_ref().expect("checked").dense;
                (dense.weight.clone(), dense.bias.clone())
            }
            Network::Vit(m) => {
                let head = m
                    .classifier()
                    .expect("the worker refuses classify for models without a classifier head");
                (head.weight.clone(), head.bias.clone())
            }
            Network::ConvNext(m) => (m.classifier().weight.clone(), m.classifier().bias.clone()),
            _ => {
                let fc = self.classifier();
                (fc.weight.val(), fc.bias.as_ref().map(Param::val))
            }
        };
        let [n, c] = features.dims();
        let k = weight.dims()[1];
        // Reduced over the last, contiguous axis: lavapipe crashes on the
        // fused kernel of a middle-axis sum followed by softmax.
        let logits = (features.reshape([n, 1, c]) * weight.transpose().reshape([1, k, c]))
            .sum_dim(2)
            .reshape([n, k]);
        match bias {
            Some(bias) => logits + bias.reshape([1, k]),
            None => logits,
        }
    }

    fn classifier(&self) -> &Linear {
        match &self.network {
            Network::Tiny(m) => m.classifier(),
            Network::ResNet(m) => m.classifier(),
            Network::Lite(m) => m.classifier(),
            Network::Vit(_) | Network::ConvNext(_) => {
                unreachable!("ViT and ConvNeXt heads are not burn Linear modules")
            }
        }
    }
}

/// `conv` as a 3×1 convolution if it is an unpadded 1×1 one (see
/// [`Model::with_pointwise_as_3x1`]).
fn widen_pointwise(conv: &mut Conv2d) {
    let unpadded = matches!(
        conv.padding,
        PaddingConfig2d::Valid | PaddingConfig2d::Explicit(0, 0, 0, 0)
    );
    if conv.kernel_size != [1, 1] || !unpadded {
        return;
    }
    conv.weight = conv
        .weight
        .clone()
        .map(|w| w.pad((0, 0, 1, 1), PadMode::Constant(0.0)));
    conv.kernel_size = [3, 1];
    conv.padding = PaddingConfig2d::Explicit(1, 0, 1, 0);
}

/// Moves a module built on the host to `device`. burn initialises parameters
/// lazily and `to_device` moves them uninitialised, so each device would draw
/// its own random numbers; drawing them here, on the host, first keeps the
/// weights identical everywhere.
fn on_device<M: Module>(module: M, device: &Device) -> Box<M> {
    Box::new(module.map(&mut Materialize).to_device(device))
}

/// Casts every float parameter to one type.
struct CastFloats(burn::tensor::FloatDType);

impl ModuleMapper for CastFloats {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let dtype = self.0;
        param.map(move |tensor| tensor.cast(dtype))
    }
}

/// Forces every lazily initialised float parameter to exist.
struct Materialize;

impl ModuleMapper for Materialize {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        param.map(|tensor| tensor)
    }
}

/// Held by every unit test that seeds flex's process-wide random generator
/// or draws from it (`Model::random`, `Tensor::random`): tests run on
/// threads of one process, and a draw between another test's seed and its
/// draws gives that test other weights (two "same-seed" models that differ).
#[cfg(test)]
pub(crate) fn host_rng() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matmul_free_head_computes_the_linear_layer() {
        let _rng = crate::model::host_rng();
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

    #[test]
    fn pointwise_convolutions_rewritten_as_3x1_compute_the_same() {
        let _rng = crate::model::host_rng();
        let device = Device::flex();
        let input = Tensor::<4>::random(
            [2, 3, 64, 64],
            burn::tensor::Distribution::Uniform(-1.0, 1.0),
            &device,
        );
        for kind in [ModelKind::Resnet18, ModelKind::EfficientnetLite0] {
            let plain = Model::random(kind, 5, &device);
            let mut wide = Model::random(kind, 5, &device).with_pointwise_as_3x1(true);
            let kernels: Vec<[usize; 2]> = match &mut wide.network {
                Network::ResNet(m) => m.convolutions().iter().map(|c| c.kernel_size).collect(),
                Network::Lite(m) => m.convolutions().iter().map(|c| c.kernel_size).collect(),
                _ => unreachable!("CNNs"),
            };
            assert!(kernels.contains(&[3, 1]), "{kind}: some 1×1 became 3×1");
            assert!(!kernels.contains(&[1, 1]), "{kind}: no 1×1 is left");
            let want = plain.features(input.clone()).into_data();
            let got = wide.features(input.clone()).into_data();
            let (want, got) = (
                want.try_to_vec::<f32>().expect("f32"),
                got.try_to_vec::<f32>().expect("f32"),
            );
            let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let worst = want
                .iter()
                .zip(&got)
                .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(worst <= 1e-4 * scale.max(1.0), "{kind}: {worst} of {scale}");
        }
    }

    /// On the CPU an image's logits are the same bits alone as in a batch
    /// of any size: no GEMM's path may depend on the rows beside it (the
    /// `gemm` crate sums in other groups for small shapes, and one row is a
    /// matrix-vector product). 32×32 images make the ResNets' last stage one
    /// pixel per image; ResNet-50's and Lite0's heads sum over more than
    /// one block of 512 features.
    #[test]
    fn an_images_logits_do_not_depend_on_its_batch_on_the_cpu() {
        let _rng = crate::model::host_rng();
        let device = Device::flex();
        let batch = Tensor::<4>::random(
            [3, 3, 32, 32],
            burn::tensor::Distribution::Uniform(-1.0, 1.0),
            &device,
        );
        for kind in [
            ModelKind::Tiny,
            ModelKind::Resnet18,
            ModelKind::Resnet50,
            ModelKind::EfficientnetLite0,
        ] {
            let model = Model::random(kind, 9, &device);
            let logits = |x: Tensor<4>| {
                model
                    .head(model.features(x))
                    .into_data()
                    .try_to_vec::<f32>()
                    .expect("f32")
            };
            let together = logits(batch.clone());
            for i in 0..3 {
                let alone = logits(batch.clone().narrow(0, i, 1));
                let row = &together[i * NUM_CLASSES..(i + 1) * NUM_CLASSES];
                assert!(
                    alone == row,
                    "{kind}: image {i} alone differs from its batch"
                );
            }
        }
    }
}
