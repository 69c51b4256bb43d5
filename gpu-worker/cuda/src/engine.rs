//! The CUDA engine behind the worker's seam, for every image family:
//! the ViT image towers of torchvision, CLIP, SigLIP and DINOv2
//! (`vit_run.rs`), torchvision's ResNets and EfficientNet-Lite0 on cuDNN
//! (`cnn_run.rs`) and ConvNeXt (`convnext_run.rs`), the ViTs and ConvNeXt
//! also as hub repos of any size (#42); embeddings (DINOv2's
//! `--pooling` too), ImageNet classification, and CLIP's and SigLIP's
//! zero-shot `--classes`, scored on the host from the GPU's embeddings as
//! the burn engine scores them (`zero_shot.rs`).
//!
//! Run on an H100 (2026-11-26: every family passed `tests/cuda_gpu.rs`),
//! and `--engine auto` takes it on NVIDIA GPUs. Every open still checks
//! it: one image run on the GPU against the plan's f32 reference on the
//! host, refused below cosine 0.999, so a wrong kernel on another GPU or
//! library version is an error at start, never wrong records.

use std::time::Instant;

use pipeline_core::{DeviceSpec, EmbedPooling, Prediction, SpanTimes, Task, WorkerConfig};

use super::cnn_run::CudaCnn;
use super::convnext_run::CudaConvNext;
use super::gpu::{Gpu, GpuError, Images, Norm3, PendingRead, Tower};
use super::plan::{
    CnnPlan, ConvNextPlan, LowerCnn, VitPlan, cnn_plan, cnn_plan_seeded, convnext_plan_resolved,
    convnext_plan_seeded, vit_plan_resolved, vit_plan_seeded,
};
use super::vit_run::CudaVit;
use super::zero_shot_head::ZeroShotHead;
use engine_seam::{DeviceError, Engine, EngineError, InFlight, OpenError, PendingPass};
use model_families::Architecture;
use model_families::vit::Pooling;

/// The lowest cosine between the GPU's and the reference's embedding of
/// the start-up check image.
const SELF_CHECK_COSINE: f32 = 0.999;

/// Seeded weights whose reference features all lie below this are not
/// checked at start (f16's smallest normal value is 6.1e-5).
const SEEDED_FLOOR: f32 = 1e-3;

/// What the worker hands the CUDA engine beside the run's config: the two
/// things this crate must not reach up for. It lists no GPUs (the
/// worker's device list joins Vulkan's and NVIDIA's) and loads no CNN
/// module (the burn engine's loader lowers a ResNet or EfficientNet-Lite0
/// checkpoint, so every checkpoint loads one way).
#[derive(Clone, Copy)]
pub struct Wiring {
    /// The UUID and PCI bus id of the machine's `gpu:N` (`pipeline
    /// devices`' list), `None` past its end.
    pub gpu_address: fn(usize) -> Option<GpuAddress>,
    /// A CNN checkpoint (or seeded weights) lowered to host data.
    pub lower_cnn: LowerCnn,
}

/// Where one GPU of the machine's list is, as the driver can find it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuAddress {
    /// `GPU-…`, where known.
    pub uuid: Option<String>,
    /// `domain:bus:device.function`, where known.
    pub pci_bus_id: Option<String>,
}

/// A model on one NVIDIA GPU.
pub struct CudaEngine {
    gpu: Gpu,
    model: OnGpu,
    zero_shot: Option<ZeroShotHead>,
    task: Task,
    spec: DeviceSpec,
    feature_dim: usize,
    /// A classifier's scores: a sigmoid per class (a hub model's
    /// multi-label or single-logit head), else softmax.
    sigmoid: bool,
}

/// A family's plan: its weights packed on the host, with the f32
/// reference the start-up check compares with.
enum Plan {
    Vit(Box<VitPlan>),
    Cnn(CnnPlan),
    ConvNext(ConvNextPlan),
}

/// `plan` with `--pooling` laid over its own, as the burn engine's
/// `set_pooling` applies it (SigLIP's attention pooling stays).
fn with_pooling(mut plan: VitPlan, pooling: Option<EmbedPooling>) -> VitPlan {
    if let Some(pooling) = pooling
        && plan.config.pooling != Pooling::Map
    {
        plan.config.pooling = match pooling {
            EmbedPooling::Cls => Pooling::Class,
            EmbedPooling::Mean => Pooling::Mean,
            EmbedPooling::ClsMean => Pooling::ClassAndMean,
        };
    }
    plan
}

impl Plan {
    /// The configured model's plan, from its checkpoint or seeded: a
    /// built-in name's, or a hub repo's ViT, ConvNeXt or ResNet of the sizes
    /// its config gives (`Architecture::of_hub`, through the layouts the burn
    /// engine reads it with).
    fn load(config: &WorkerConfig, lower: LowerCnn) -> Result<Self, OpenError> {
        let net = model_families::architecture::network(config).map_err(OpenError::Model)?;
        let (arch, name, path, resolved) = (&net.arch, net.name, net.weights, net.resolved);
        Ok(match arch {
            Architecture::Vit(_) => {
                let plan = match path {
                    Some(path) => vit_plan_resolved(arch, name, path, resolved)?,
                    None => vit_plan_seeded(arch, name, config.seed)?,
                };
                Self::Vit(Box::new(with_pooling(plan, config.pooling)))
            }
            Architecture::ConvNext(_) => Self::ConvNext(match path {
                Some(path) => convnext_plan_resolved(arch, name, path, resolved)?,
                None => convnext_plan_seeded(arch, name, config.seed)?,
            }),
            Architecture::ResNet(_) | Architecture::EfficientNetLite0 | Architecture::Tiny => {
                Self::Cnn(match path {
                    Some(path) => cnn_plan(lower, arch, name, path)?,
                    None => cnn_plan_seeded(lower, arch, name, config.seed)?,
                })
            }
        })
    }

    /// Whether its weights were drawn from a seed (no checkpoint).
    fn seeded(config: &WorkerConfig) -> bool {
        config.weights.is_none() && !matches!(config.model, pipeline_core::ModelRef::Hub(_))
    }

    /// Whether its embedding is L2-normalised (CLIP's and SigLIP's
    /// towers): what a zero-shot head scores.
    fn normalised(&self) -> bool {
        matches!(self, Self::Vit(plan) if plan.config.normalize)
    }

    fn has_classifier(&self) -> bool {
        match self {
            Self::Vit(plan) => plan.head.is_some(),
            Self::Cnn(plan) => plan.classifier.is_some(),
            Self::ConvNext(plan) => plan.classifier.is_some(),
        }
    }

    fn feature_dim(&self) -> usize {
        match self {
            Self::Vit(plan) => plan.config.feature_dim(),
            Self::Cnn(plan) => plan.features,
            Self::ConvNext(plan) => plan.config.dims.last().copied().unwrap_or(0),
        }
    }

    /// The features of `image` in f32 on the host.
    fn reference(&self, image: &[u8], side: usize, mean: [f32; 3], std: [f32; 3]) -> Vec<f32> {
        match self {
            Self::Vit(plan) => plan.reference(image, side, mean, std).0,
            Self::Cnn(plan) => plan.reference(image, side, mean, std).0,
            Self::ConvNext(plan) => plan.reference(image, side, mean, std).0,
        }
    }

    fn upload(&self, gpu: &Gpu) -> Result<OnGpu, GpuError> {
        Ok(match self {
            Self::Vit(plan) => OnGpu::Vit(Box::new(CudaVit::new(gpu, plan)?)),
            Self::Cnn(plan) => OnGpu::Cnn(CudaCnn::new(gpu, plan)?),
            Self::ConvNext(plan) => OnGpu::ConvNext(Box::new(CudaConvNext::new(gpu, plan)?)),
        })
    }
}

/// A family's weights on the GPU.
enum OnGpu {
    Vit(Box<CudaVit>),
    Cnn(CudaCnn),
    ConvNext(Box<CudaConvNext>),
}

/// Features and, where the model has a classifier, logits.
type Outputs = (Vec<f32>, Option<Vec<f32>>);

impl OnGpu {
    fn tower(&self) -> &dyn Tower {
        match self {
            Self::Vit(m) => m.as_ref(),
            Self::Cnn(m) => m,
            Self::ConvNext(m) => m.as_ref(),
        }
    }
}

fn device_error(spec: &DeviceSpec, e: GpuError) -> OpenError {
    OpenError::Device(DeviceError {
        spec: spec.clone(),
        message: e.to_string(),
    })
}

/// The CUDA device of the run's GPU `index` (`gpu:N`, PCI bus order),
/// opened: by `uuid` when the coordinator gave it (a worker, whose
/// `CUDA_VISIBLE_DEVICES` holds that GPU alone), else by the UUID or PCI
/// bus id the machine's GPU list has at `index` (`gpu_address`). No
/// context is made on any other GPU, and Vulkan is not needed.
pub(crate) fn open_gpu(
    index: usize,
    uuid: Option<&str>,
    gpu_address: fn(usize) -> Option<GpuAddress>,
) -> Result<Gpu, GpuError> {
    let ordinal = match uuid {
        Some(uuid) => crate::nvidia::cuda_ordinal(Some(uuid), None),
        None => match gpu_address(index) {
            Some(gpu) => {
                crate::nvidia::cuda_ordinal(gpu.uuid.as_deref(), gpu.pci_bus_id.as_deref())
            }
            None => Err(format!(
                "this machine has no gpu:{index} (see `pipeline devices`)"
            )),
        },
    };
    let ordinal = ordinal.map_err(|e| GpuError(format!("{e}; use --engine vulkan")))?;
    Gpu::open(ordinal)
}

impl CudaEngine {
    /// The configured model on the configured GPU, checked at start.
    pub fn open(config: &WorkerConfig, wiring: Wiring) -> Result<Self, OpenError> {
        let spec = &config.device;
        let DeviceSpec::Gpu(index) = spec else {
            return Err(device_error(
                spec,
                GpuError(
                    "the CUDA engine runs on NVIDIA GPUs only (the CPU and lavapipe run \
                     --engine cpu or vulkan)"
                        .to_owned(),
                ),
            ));
        };
        let plan = Plan::load(config, wiring.lower_cnn)?;
        if config.classes.is_some() && !plan.normalised() {
            // As the burn engine refuses it (`Model::with_zero_shot`).
            return Err(model_families::zero_shot::ZeroShotError::NoEmbedding {
                model: config.model.to_string(),
            }
            .into());
        }
        let zero_shot = config
            .classes
            .as_ref()
            .map(|classes| ZeroShotHead::open(config, classes, plan.feature_dim()))
            .transpose()?;
        if matches!(config.task, Task::Classify { .. })
            && !plan.has_classifier()
            && zero_shot.is_none()
        {
            return Err(OpenError::NoClassifier(config.model.to_string()));
        }
        let sigmoid = model_families::architecture::network(config)
            .map_err(OpenError::Model)?
            .scores
            == pipeline_core::Scores::Sigmoid;
        let uuid = config.cuda_uuids.get(index).map(String::as_str);
        let gpu = open_gpu(*index, uuid, wiring.gpu_address).map_err(|e| device_error(spec, e))?;
        let model = plan.upload(&gpu).map_err(|e| device_error(spec, e))?;
        let engine = Self {
            feature_dim: plan.feature_dim(),
            gpu,
            model,
            zero_shot,
            task: config.task,
            spec: spec.clone(),
            sigmoid,
        };
        engine.self_check(&plan, config)?;
        Ok(engine)
    }

    /// One image on the GPU against the plan's f32 reference on the host.
    fn self_check(&self, plan: &Plan, config: &WorkerConfig) -> Result<(), OpenError> {
        let side = config.preprocess.crop as usize;
        let normalize = &config.preprocess.normalize;
        // A smooth colour ramp with some texture: every patch different.
        let image: Vec<u8> = (0..3 * side * side)
            .map(|i| {
                let (c, y, x) = (i / (side * side), (i / side) % side, i % side);
                ((x * 3 + y * 5 + c * 70 + (x * y) % 17) % 256) as u8
            })
            .collect();
        let images = Images {
            pixels: &image,
            padded: 1,
            side,
            norm: Norm3::new(normalize.mean, normalize.std),
        };
        let (got, _) = self
            .model
            .tower()
            .forward(&self.gpu, images)
            .map_err(|e| device_error(&self.spec, e))?;
        let want = plan.reference(&image, side, normalize.mean, normalize.std);
        // Seeded weights whose features fade below what f16 holds (Lite0's
        // draw: about 1e-8 after its 16 blocks) cannot be compared; they
        // mean nothing either, so the run goes on unchecked.
        let largest = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        if Plan::seeded(config) && largest < SEEDED_FLOOR {
            return Ok(());
        }
        let dot: f32 = got.iter().zip(&want).map(|(a, b)| a * b).sum();
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        let cosine = dot / (norm(&got) * norm(&want)).max(1e-30);
        if cosine.is_nan() || cosine < SELF_CHECK_COSINE {
            return Err(device_error(
                &self.spec,
                GpuError(format!(
                    "the CUDA engine's start-up check failed: cosine {cosine:.6} to the \
                     f32 reference (needs {SELF_CHECK_COSINE}); use --engine vulkan"
                )),
            ));
        }
        Ok(())
    }

    /// A batch queued on the GPU: its pixels handed over (upload), the
    /// model queued (compute).
    fn queue(
        &self,
        batch: &engine_seam::PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<Queued<'_>, EngineError> {
        let started = Instant::now();
        let images = Images {
            pixels: batch.pixels,
            padded: batch.padded_rows,
            side: batch.side,
            norm: Norm3::new(batch.normalize.mean, batch.normalize.std),
        };
        let outputs = self
            .model
            .tower()
            .launch(&self.gpu, images)
            .and_then(|outputs| outputs.queue_read(&self.gpu))
            .map_err(|e| engine_error(e, batch.padded_rows))?;
        times.compute_s += started.elapsed().as_secs_f64();
        Ok(Queued {
            engine: self,
            outputs,
            rows: batch.rows,
            started,
        })
    }

    /// One prediction for each of the first `rows` rows of a pass's
    /// features and logits.
    fn predictions(
        &self,
        (features, logits): Outputs,
        rows: usize,
        padded: usize,
    ) -> Vec<Prediction> {
        match (self.task, logits) {
            (Task::Classify { .. }, _) if self.zero_shot.is_some() => {
                let zero_shot = self.zero_shot.as_ref().expect("checked");
                let probs = zero_shot.probabilities(&features);
                engine_seam::predictions(self.task, &probs, rows, zero_shot.classes())
            }
            (Task::Classify { .. }, Some(logits)) => {
                let classes = logits.len() / padded;
                let mut probs = logits;
                if self.sigmoid {
                    probs
                        .iter_mut()
                        .for_each(|v| *v = 1.0 / (1.0 + (-*v).exp()));
                } else {
                    probs
                        .chunks_exact_mut(classes)
                        .for_each(super::plan::softmax);
                }
                engine_seam::predictions(self.task, &probs, rows, classes)
            }
            _ => engine_seam::predictions(Task::Embed, &features, rows, self.feature_dim),
        }
    }
}

/// A pass queued on the GPU ([`Engine::launch`]): the device works on it
/// while the worker prepares the next batch; [`PendingPass::finish`]
/// reads it back.
struct Queued<'a> {
    engine: &'a CudaEngine,
    outputs: PendingRead,
    rows: usize,
    started: Instant,
}

impl PendingPass for Queued<'_> {
    fn finish(self: Box<Self>, times: &mut SpanTimes) -> Result<Vec<Prediction>, EngineError> {
        let started = Instant::now();
        let padded = self.outputs.rows;
        let outputs = self
            .outputs
            .wait(&self.engine.gpu)
            .map_err(|e| engine_error(e, padded))?;
        let arrived = Instant::now();
        times.compute_s += (arrived - started).as_secs_f64();
        let predictions = self.engine.predictions(outputs, self.rows, padded);
        times.readback_s += arrived.elapsed().as_secs_f64();
        times.batch_s.push(self.started.elapsed().as_secs_f64());
        Ok(predictions)
    }
}

/// A GPU error as the backoff and the coordinator act on it: out of
/// memory (the driver's or cuBLASLt's allocation failure) halves the batch.
fn engine_error(e: GpuError, batch: usize) -> EngineError {
    let message = e.to_string();
    // cuDNN 8 says ALLOC_FAILED, cuDNN 9 INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED.
    if message.contains("OUT_OF_MEMORY")
        || message.contains("ALLOC_FAILED")
        || message.contains("ALLOCATION_FAILED")
    {
        EngineError::OutOfMemory { batch, message }
    } else if message.contains("LAUNCH_FAILED") || message.contains("ILLEGAL_ADDRESS") {
        EngineError::DeviceLost(message)
    } else {
        EngineError::Other(message)
    }
}

impl Engine for CudaEngine {
    fn device_name(&self) -> String {
        format!("{} (CUDA)", self.gpu.name())
    }

    fn default_batch(&self, model: &pipeline_core::ModelRef) -> usize {
        self.gpu
            .memory()
            .ok()
            .zip(model.builtin())
            .map_or(64, |((free, _), kind)| {
                engine_seam::batch::start_batch(u64::try_from(free).unwrap_or(u64::MAX), kind)
            })
    }

    fn infer_timed(
        &self,
        batch: &engine_seam::PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<Vec<Prediction>, EngineError> {
        Box::new(self.queue(batch, times)?).finish(times)
    }

    fn launch<'a>(
        &'a self,
        batch: &engine_seam::PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<InFlight<'a>, EngineError> {
        Ok(Box::new(self.queue(batch, times)?))
    }

    fn release_cached_memory(&self) {
        self.gpu.release_cached_memory();
    }
}
