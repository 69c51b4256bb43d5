//! The CUDA engine behind the worker's seam (#28), for every image family:
//! the ViT image towers of torchvision, CLIP, SigLIP and DINOv2
//! (`vit_run.rs`), torchvision's ResNets and EfficientNet-Lite0 on cuDNN
//! (`cnn_run.rs`) and ConvNeXt (`convnext_run.rs`); embeddings and
//! ImageNet classification. DINOv2's `--pooling` and zero-shot `--classes`
//! are refused at open in one line.
//!
//! **Not yet run on a GPU** (see `gpu.rs`). Until a GPU session has held
//! it to the burn engine and PyTorch, every open checks it: one image run
//! on the GPU against the plan's f32 reference on the host, refused below
//! cosine 0.999, so a wrong kernel is an error at start, never wrong
//! records.

use std::time::Instant;

use pipeline_core::{DeviceSpec, ModelKind, Prediction, SpanTimes, Task, WorkerConfig};

use super::cnn_run::CudaCnn;
use super::convnext_run::CudaConvNext;
use super::gpu::{Gpu, GpuError, Norm3};
use super::plan::{
    CnnPlan, ConvNextPlan, VitPlan, cnn_plan, cnn_plan_seeded, convnext_plan, convnext_plan_seeded,
    vit_plan, vit_plan_seeded,
};
use super::vit_run::CudaVit;
use crate::engine::{DeviceError, Engine, EngineError, InFlight, OpenError, PendingPass};
use crate::model::Architecture;

/// The lowest cosine between the GPU's and the reference's embedding of
/// the start-up check image.
const SELF_CHECK_COSINE: f32 = 0.999;

/// A model on one NVIDIA GPU.
pub struct CudaEngine {
    gpu: Gpu,
    model: OnGpu,
    task: Task,
    spec: DeviceSpec,
    feature_dim: usize,
}

/// A family's plan: its weights packed on the host, with the f32
/// reference the start-up check compares with.
enum Plan {
    Vit(Box<VitPlan>),
    Cnn(CnnPlan),
    ConvNext(ConvNextPlan),
}

impl Plan {
    /// The configured model's plan, from its checkpoint or seeded.
    fn load(config: &WorkerConfig) -> Result<Self, OpenError> {
        let arch = Architecture::of(config.model);
        let name = config.model.name();
        let path = config.weights.as_deref();
        Ok(match &arch {
            Architecture::Vit(_) => Self::Vit(Box::new(match path {
                Some(path) => vit_plan(&arch, name, path)?,
                None => vit_plan_seeded(&arch, name, config.seed)?,
            })),
            Architecture::ConvNext(_) => Self::ConvNext(match path {
                Some(path) => convnext_plan(&arch, name, path)?,
                None => convnext_plan_seeded(&arch, name, config.seed)?,
            }),
            Architecture::ResNet(_) | Architecture::EfficientNetLite0 | Architecture::Tiny => {
                Self::Cnn(match path {
                    Some(path) => cnn_plan(&arch, name, path)?,
                    None => cnn_plan_seeded(&arch, name, config.seed)?,
                })
            }
        })
    }

    fn has_classifier(&self) -> bool {
        match self {
            Self::Vit(plan) => plan.head.is_some(),
            Self::Cnn(_) | Self::ConvNext(_) => true,
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
    fn forward(
        &self,
        gpu: &Gpu,
        images: &[u8],
        padded: usize,
        side: usize,
        norm: Norm3,
    ) -> Result<Outputs, GpuError> {
        match self {
            Self::Vit(m) => m.forward(gpu, images, padded, side, norm),
            Self::Cnn(m) => m
                .forward(gpu, images, padded, side, norm)
                .map(|(f, l)| (f, Some(l))),
            Self::ConvNext(m) => m
                .forward(gpu, images, padded, side, norm)
                .map(|(f, l)| (f, Some(l))),
        }
    }
}

fn device_error(spec: &DeviceSpec, e: GpuError) -> OpenError {
    OpenError::Device(DeviceError {
        spec: spec.clone(),
        message: e.to_string(),
    })
}

fn refuse(spec: &DeviceSpec, what: &str) -> OpenError {
    device_error(
        spec,
        GpuError(format!("the CUDA engine does not run {what} yet (#28)")),
    )
}

impl CudaEngine {
    /// The configured model on the configured GPU, checked at start.
    pub fn open(config: &WorkerConfig) -> Result<Self, OpenError> {
        let spec = &config.device;
        let DeviceSpec::Gpu(index) = spec else {
            return Err(refuse(
                spec,
                "on the CPU or lavapipe (--engine cpu, vulkan)",
            ));
        };
        if config.classes.is_some() {
            return Err(refuse(spec, "zero-shot --classes"));
        }
        if config.pooling.is_some() {
            return Err(refuse(spec, "--pooling"));
        }
        let plan = Plan::load(config)?;
        if matches!(config.task, Task::Classify { .. }) && !plan.has_classifier() {
            return Err(OpenError::NoClassifier(config.model));
        }
        let pci = crate::gpus()
            .get(*index)
            .and_then(|g| g.pci_bus_id.clone())
            .ok_or_else(|| {
                device_error(
                    spec,
                    GpuError(
                        "its Vulkan driver gives no PCI bus id, so its CUDA device cannot be \
                         found"
                            .to_owned(),
                    ),
                )
            })?;
        let gpu = Gpu::ordinal_at(&pci)
            .and_then(Gpu::open)
            .map_err(|e| device_error(spec, e))?;
        let model = plan.upload(&gpu).map_err(|e| device_error(spec, e))?;
        let engine = Self {
            feature_dim: plan.feature_dim(),
            gpu,
            model,
            task: config.task,
            spec: spec.clone(),
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
        let norm = Norm3::new(normalize.mean, normalize.std);
        let (got, _) = self
            .model
            .forward(&self.gpu, &image, 1, side, norm)
            .map_err(|e| device_error(&self.spec, e))?;
        let want = plan.reference(&image, side, normalize.mean, normalize.std);
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

    fn run(&self, batch: &crate::PixelBatch<'_>) -> Result<Vec<Prediction>, EngineError> {
        let norm = Norm3::new(batch.normalize.mean, batch.normalize.std);
        let (features, logits) = self
            .model
            .forward(&self.gpu, batch.pixels, batch.padded_rows, batch.side, norm)
            .map_err(|e| engine_error(e, batch.padded_rows))?;
        Ok(match (self.task, logits) {
            (Task::Classify { .. }, Some(logits)) => {
                let classes = logits.len() / batch.padded_rows;
                let mut probs = logits;
                probs
                    .chunks_exact_mut(classes)
                    .for_each(super::plan::softmax);
                crate::predictions(self.task, &probs, batch.rows, classes)
            }
            _ => crate::predictions(Task::Embed, &features, batch.rows, self.feature_dim),
        })
    }
}

/// A GPU error as the backoff and the coordinator act on it: out of
/// memory (the driver's or cuBLASLt's allocation failure) halves the batch.
fn engine_error(e: GpuError, batch: usize) -> EngineError {
    let message = e.to_string();
    if message.contains("OUT_OF_MEMORY") || message.contains("ALLOC_FAILED") {
        EngineError::OutOfMemory { batch, message }
    } else if message.contains("LAUNCH_FAILED") || message.contains("ILLEGAL_ADDRESS") {
        EngineError::DeviceLost(message)
    } else {
        EngineError::Other(message)
    }
}

/// A pass already computed: the GPU layer waits for its results (the
/// overlap of passes is not built for this engine yet).
struct Done(Vec<Prediction>);

impl PendingPass for Done {
    fn finish(self: Box<Self>, _: &mut SpanTimes) -> Result<Vec<Prediction>, EngineError> {
        Ok(self.0)
    }
}

impl Engine for CudaEngine {
    fn device_name(&self) -> String {
        format!("{} (CUDA)", self.gpu.name())
    }

    fn default_batch(&self, model: ModelKind) -> usize {
        self.gpu.memory().map_or(64, |(free, _)| {
            crate::start_batch(u64::try_from(free).unwrap_or(u64::MAX), model)
        })
    }

    fn infer_timed(
        &self,
        batch: &crate::PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<Vec<Prediction>, EngineError> {
        let started = Instant::now();
        let out = self.run(batch);
        times.compute_s += started.elapsed().as_secs_f64();
        out
    }

    fn launch<'a>(
        &'a self,
        batch: &crate::PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<InFlight<'a>, EngineError> {
        Ok(Box::new(Done(self.infer_timed(batch, times)?)))
    }

    fn release_cached_memory(&self) {}
}
