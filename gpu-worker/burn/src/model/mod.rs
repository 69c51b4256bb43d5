//! The model families written for burn, behind one type: build with seeded
//! random weights or from a weight file, then `features` (the model's
//! embedding) and `head`. Each family is a type implementing
//! [`network::Network`] in its own file; [`Architecture::of`] says which a
//! model is. The CNNs are burn modules loaded through `burn::store`; the
//! ViT families and ConvNeXt are built from a checkpoint's tensors by
//! canonical name (`model_families::architecture`, `model_families::layout`).

pub(crate) mod activation;
mod check;
pub mod convnext;
pub(crate) mod cpu;
mod cpu_resnet;
mod efficientnet_lite;
mod fold;
pub(crate) mod layers;
pub(crate) mod lowered;
pub(crate) mod network;
pub(crate) mod nhwc;
mod resnet;
pub mod text;
mod tiny;
pub(crate) mod transformer;
pub mod vit;
mod weights;

use std::path::Path;

use burn::module::{Module, ModuleMapper, Param};
use burn::nn::PaddingConfig2d;
use burn::nn::conv::Conv2d;
use burn::store::ModuleSnapshot;
use burn::tensor::activation::{sigmoid, softmax};
use burn::tensor::ops::PadMode;
use burn::tensor::{Device, FloatDType, Tensor};
use pipeline_core::{EmbedPooling, Family, ModelKind, ResolvedWeights};

use self::convnext::ConvNext;
use self::cpu_resnet::ResNetNetwork;
use self::efficientnet_lite::EfficientNetLite;
use self::layers::Dense;
use self::network::Network;
use self::resnet::ResNet;
use self::tiny::Tiny;
use self::vit::Vit;
pub use model_families::architecture::{Architecture, checkpoint_layouts};
pub(crate) use model_families::architecture::{network, resolve, resolved_layout};
use model_families::checkpoint::Checkpoint;
use model_families::layout::Layout;
use model_families::tensors::Tensors;
use model_families::weights_error::WeightsError;
use model_families::zero_shot::{
    ClassMatrix, LogitParams, Probabilities, ZeroShotError, ZeroShotRule,
};

/// ImageNet classes of every built-in model.
pub const NUM_CLASSES: usize = 1000;

/// A model on a device, inference only (no autodiff; batch norm uses its
/// running statistics).
#[derive(Debug)]
pub struct Model {
    /// The family's network (`network.rs`).
    network: Box<dyn Network>,
    /// The checkpoint's `logit_scale` / `logit_bias` (or, for seeded
    /// weights, upstream's initial values): zero-shot scoring's.
    logit_params: Option<LogitParams>,
    /// Zero-shot classification's head, replacing the model's own.
    zero_shot: Option<ZeroShotHead>,
    /// How the model's own head's logits become scores: softmax, or a
    /// sigmoid per class for a multi-label classifier (#42).
    own_scores: Probabilities,
}

/// Class text embeddings as a Linear layer over the normalised image
/// embedding: weight `exp(logit_scale) · normalise(rows)ᵀ`, bias
/// `logit_bias`.
#[derive(Debug)]
struct ZeroShotHead {
    dense: Dense,
    probabilities: Probabilities,
}

/// Where a network's weights come from.
enum Weights<'a> {
    /// Seeded random ones, the same on every device.
    Seeded(u64),
    /// A checkpoint file, read as its upstream publishes it, in the layout
    /// the coordinator resolved.
    File(&'a Path, &'a ResolvedWeights),
}

impl Model {
    /// Seeded random weights (for benchmarks). They are drawn on the host
    /// (the flex backend) and then moved, so every device gets the same ones.
    pub fn random(kind: ModelKind, seed: u64, device: &Device) -> Self {
        Self::random_of(
            &Architecture::of(kind),
            kind.name(),
            kind.family(),
            seed,
            device,
        )
    }

    /// [`Model::random`] for `arch` of `family`: with the family's initial
    /// zero-shot logit parameters where it has a normalised embedding.
    pub(crate) fn random_of(
        arch: &Architecture,
        name: &str,
        family: Family,
        seed: u64,
        device: &Device,
    ) -> Self {
        let mut model = Self::seeded(arch, name, seed, device);
        if model.network.normalised_embedding().is_some() {
            model.logit_params = ZeroShotRule::of(family).map(|rule| rule.initial);
        }
        model
    }

    /// `arch` with seeded random weights, the same on every device.
    pub fn seeded(arch: &Architecture, name: &str, seed: u64, device: &Device) -> Self {
        let (network, _) = build(arch, name, Weights::Seeded(seed), device)
            .expect("seeded weights have the shapes the model declares");
        Self::of(network)
    }

    /// Weights from a checkpoint file as its upstream publishes it: the
    /// layout is told from the tensor names (torchvision, OpenCLIP, Hugging
    /// Face, torch hub, `efficientnet-lite-pytorch`).
    pub fn load(kind: ModelKind, path: &Path, device: &Device) -> Result<Self, WeightsError> {
        Self::load_architecture(&Architecture::of(kind), kind.name(), path, device)
    }

    /// [`Model::load`] for an architecture of any size (tests use small
    /// ones): the file resolved here as the coordinator resolves it, then
    /// opened as an engine opens it.
    pub fn load_architecture(
        arch: &Architecture,
        name: &str,
        path: &Path,
        device: &Device,
    ) -> Result<Self, WeightsError> {
        let resolved = resolve(
            arch,
            name,
            path,
            &[model_families::clip_config::Tower::Image],
        )?;
        Self::open(arch, name, path, &resolved, device)
    }

    /// `arch` with the weights at `path`, in the layout and with the
    /// activation the coordinator resolved (`resolved`): what the engines
    /// open, reading nothing but the tensors.
    pub(crate) fn open(
        arch: &Architecture,
        name: &str,
        path: &Path,
        resolved: &ResolvedWeights,
        device: &Device,
    ) -> Result<Self, WeightsError> {
        let (network, logit_params) = build(arch, name, Weights::File(path, resolved), device)?;
        Ok(Self {
            logit_params,
            ..Self::of(network)
        })
    }

    fn of(network: Box<dyn Network>) -> Self {
        Self {
            network,
            logit_params: None,
            zero_shot: None,
            own_scores: Probabilities::Softmax,
        }
    }

    /// Every parameter in `dtype` (see [`Network::cast`]).
    pub fn with_float_dtype(mut self, dtype: FloatDType) -> Self {
        self.network.cast(dtype);
        self
    }

    /// Pools DINOv2 embeddings as `pooling` says (other models ignore it:
    /// the CLI refuses `--pooling` for them).
    pub fn with_pooling(mut self, pooling: Option<EmbedPooling>) -> Self {
        if let Some(pooling) = pooling {
            self.network.set_pooling(pooling);
        }
        self
    }

    /// Whether the model has a classifier head (`--task classify`): its own
    /// or a zero-shot one.
    pub fn classifies(&self) -> bool {
        self.zero_shot.is_some() || self.network.classifier().is_some()
    }

    /// Classifies zero-shot against `classes` (CLIP, SigLIP), scored as
    /// `rule` says with the checkpoint's `logit_scale` and `logit_bias`
    /// (see [`model_families::zero_shot`]). `name` and `weights` are for the error.
    pub fn with_zero_shot(
        mut self,
        classes: &ClassMatrix,
        rule: &ZeroShotRule,
        name: &str,
        weights: Option<&Path>,
        device: &Device,
    ) -> Result<Self, ZeroShotError> {
        let Some(dim) = self.network.normalised_embedding() else {
            return Err(ZeroShotError::NoEmbedding {
                model: name.to_owned(),
            });
        };
        let params = match weights {
            Some(path) => model_families::zero_shot::resolve(name, self.logit_params, rule, path)?,
            None => self.logit_params.unwrap_or(rule.initial),
        };
        let (weight, bias) = model_families::zero_shot::scaled_head(classes, params, name, dim)?;
        let k = classes.rows();
        let bias = bias.map(|b| {
            layers::upload(
                model_families::checkpoint::HostTensor::new(vec![k], b),
                device,
            )
        });
        self.zero_shot = Some(ZeroShotHead {
            dense: Dense {
                weight: layers::upload(
                    model_families::checkpoint::HostTensor::new(vec![dim, k], weight),
                    device,
                ),
                bias,
            },
            probabilities: rule.activation,
        });
        Ok(self)
    }

    /// Logits to probabilities: softmax over the classes, or each class's
    /// sigmoid for SigLIP's zero-shot scores and multi-label classifiers.
    pub fn probabilities(&self, logits: Tensor<2>) -> Tensor<2> {
        match self
            .zero_shot
            .as_ref()
            .map_or(self.own_scores, |z| z.probabilities)
        {
            Probabilities::Sigmoid => sigmoid(logits),
            Probabilities::Softmax => softmax(logits, 1),
        }
    }

    /// The model's own head scores each class by its sigmoid (a
    /// multi-label classifier's `problem_type`).
    pub fn with_sigmoid_scores(mut self) -> Self {
        self.own_scores = Probabilities::Sigmoid;
        self
    }

    /// Rewrites every unpadded 1×1 convolution, once, as the equivalent
    /// 3×1 one (the 1×1 weights between a zero tap above and below, padding
    /// 1 in height): the same sums, three times the work. For Mesa's
    /// lavapipe, where burn's autotune sends 1×1 convolutions to matmul
    /// kernels that crash the driver, while larger kernels take the direct
    /// path, which it runs. The burn engine asks for it there; forward code
    /// stays as upstream writes it.
    pub fn with_pointwise_as_3x1(mut self, on: bool) -> Self {
        if on {
            for conv in self.network.convolutions() {
                widen_pointwise(conv);
            }
        }
        self
    }

    /// Pooled penultimate features, `[N, feature_dim]`.
    pub fn features(&self, x: Tensor<4>) -> Tensor<2> {
        self.network.features(x)
    }

    /// The head `--task classify` scores with: the zero-shot one, else the
    /// checkpoint's.
    fn head_layer(&self) -> Dense {
        match &self.zero_shot {
            Some(zero_shot) => zero_shot.dense.clone(),
            None => self
                .network
                .classifier()
                .expect("the worker refuses classify for models without a classifier head"),
        }
    }

    /// Class logits from pooled features, `[N, classes]`.
    pub fn head(&self, features: Tensor<2>) -> Tensor<2> {
        self.head_layer().forward(features)
    }

    /// The same logits without a matmul kernel: a broadcast product summed
    /// over the feature axis (`[N, 1, C] × [1, K, C]`, summed over `C`).
    /// Mesa's lavapipe crashes compiling burn's matmul kernels, while
    /// elementwise ops and `sum_dim` run there. It needs `N × C × K` floats
    /// of scratch, so it is for the software adapter only.
    pub fn head_without_matmul(&self, features: Tensor<2>) -> Tensor<2> {
        let Dense { weight, bias } = self.head_layer();
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
}

/// The network of `arch` on `device` with `weights`, and the checkpoint's
/// zero-shot logit parameters if it has them. The CNNs are burn modules:
/// drawn on the host, loaded through `burn::store`, their BatchNorms folded
/// into the convolutions (`fold.rs`). The other families are built from a
/// checkpoint's tensors by canonical name (`model_families::architecture`,
/// `model_families::layout`).
fn build(
    arch: &Architecture,
    name: &str,
    weights: Weights<'_>,
    device: &Device,
) -> Result<(Box<dyn Network>, Option<LogitParams>), WeightsError> {
    let network: Box<dyn Network> = match arch {
        Architecture::Tiny => {
            let mut tiny = cnn(
                |host| Tiny::new(NUM_CLASSES, host),
                name,
                &weights,
                &[],
                device,
            )?;
            tiny.fold_batch_norms();
            tiny
        }
        Architecture::ResNet(config) => {
            let make = |host: &Device| ResNet::new(config, host);
            let mut resnet = cnn(make, name, &weights, config.remap(), device)?;
            resnet.fold_batch_norms();
            Box::new(ResNetNetwork::new(*resnet))
        }
        Architecture::EfficientNetLite0 => {
            let make = |host: &Device| EfficientNetLite::lite0(NUM_CLASSES, host);
            let mut lite = cnn(make, name, &weights, &[], device)?;
            lite.fold_batch_norms();
            lite
        }
        Architecture::Vit(config) => {
            let activation = match &weights {
                Weights::File(_, resolved) => resolved.activation,
                Weights::Seeded(_) => None,
            };
            return by_tensor_name(arch, name, &weights, |layout, tensors| {
                let config =
                    model_families::architecture::vit_config_for(config, layout, activation);
                Ok(Box::new(Vit::new(config, tensors, device)?))
            });
        }
        Architecture::ConvNext(config) => {
            return by_tensor_name(arch, name, &weights, |_, tensors| {
                Ok(Box::new(ConvNext::new(config, tensors, device)?))
            });
        }
    };
    Ok((network, None))
}

/// The CNN `arch` (a ResNet or EfficientNet-Lite0) with `path`'s weights,
/// or without one the seeded weights the burn engine draws from `seed`,
/// loaded and folded on the host exactly as [`Model::load`] loads it, as a
/// graph of plain host data for another engine (`lowered.rs`); `None` for
/// the other architectures.
pub fn lowered_cnn(
    arch: &Architecture,
    name: &str,
    path: Option<&Path>,
    seed: u64,
) -> Result<Option<lowered::CnnGraph>, WeightsError> {
    let host = Device::flex();
    let resolved = ResolvedWeights::default();
    let weights = path.map_or(Weights::Seeded(seed), |path| Weights::File(path, &resolved));
    let graph = match arch {
        Architecture::ResNet(config) => {
            let make = |host: &Device| ResNet::new(config, host);
            let mut resnet = cnn(make, name, &weights, config.remap(), &host)?;
            resnet.fold_batch_norms();
            lowered::resnet_graph(&resnet)
        }
        Architecture::EfficientNetLite0 => {
            let make = |host: &Device| EfficientNetLite::lite0(NUM_CLASSES, host);
            let mut lite = cnn(make, name, &weights, &[], &host)?;
            lite.fold_batch_norms();
            lowered::lite_graph(&lite)
        }
        Architecture::Tiny | Architecture::Vit(_) | Architecture::ConvNext(_) => return Ok(None),
    };
    Ok(Some(graph.expect("a folded CNN lowers")))
}

/// A CNN drawn on the host with `weights`' seed (0 for a file, whose
/// tensors then replace every parameter) and moved to `device`, with the
/// file's tensors loaded by field name after `remap`.
fn cnn<M: Module + ModuleSnapshot>(
    make: impl FnOnce(&Device) -> M,
    name: &str,
    weights: &Weights<'_>,
    remap: &[(&str, &str)],
    device: &Device,
) -> Result<Box<M>, WeightsError> {
    let host = Device::flex();
    // The host backend's random generator is one per process: two draws at
    // once (two models loading on two threads) would interleave and give
    // each other's weights, so a seeded draw holds it to the end.
    static DRAW: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let drawing = DRAW.lock().unwrap_or_else(|p| p.into_inner());
    host.seed(match weights {
        Weights::Seeded(seed) => *seed,
        Weights::File(..) => 0,
    });
    let mut module = on_device(make(&host), device);
    drop(drawing);
    if let Weights::File(path, _) = weights {
        weights::load(module.as_mut(), path, name, remap)?;
    }
    Ok(module)
}

/// A network `make` builds from canonical tensors (the ViTs, ConvNeXt):
/// seeded ones, or a checkpoint's in the layout the coordinator resolved,
/// with its zero-shot logit parameters.
fn by_tensor_name(
    arch: &Architecture,
    name: &str,
    weights: &Weights<'_>,
    make: impl FnOnce(Option<Layout>, &Tensors<'_>) -> Result<Box<dyn Network>, WeightsError>,
) -> Result<(Box<dyn Network>, Option<LogitParams>), WeightsError> {
    match weights {
        Weights::Seeded(seed) => {
            let tensors = Tensors::seeded(*seed, name, arch.tensors(None));
            Ok((make(None, &tensors)?, None))
        }
        Weights::File(path, resolved) => {
            let layout = resolved_layout(resolved, name, path)?;
            let checkpoint = Checkpoint::open(path)?;
            let tensors = model_families::architecture::check_as(arch, name, &checkpoint, layout)?;
            let network = make(Some(layout), &tensors)?;
            Ok((network, resolved.logit))
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
mod tests;
