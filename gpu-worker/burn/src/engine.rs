//! The burn engine: the model families of `model/` on a burn device (`flex`
//! for the CPU, the wgpu runtime on Vulkan for GPUs and for Mesa's
//! lavapipe), behind [`engine_seam::Engine`]. Device quirks live here and
//! in `device.rs`: on lavapipe 1×1 convolutions run as 3×1 ones, the
//! classifier runs without a matmul, and the layers take their software
//! forms ([`device::takes_software_forms`]).
//!
//! One batched forward pass: upload `u8` pixels, normalise on the device,
//! run the model, and read back only what the task needs — class
//! probabilities (`classify`: softmax, or sigmoid for SigLIP's zero-shot
//! scores) or pooled features (`embed`). Top-k is taken on the host from
//! the read-back probabilities: burn's `topk` (and a full `sum`) segfault
//! inside Mesa's lavapipe while it compiles the kernel, and 1000 floats per
//! image is a small read-back.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use burn::tensor::{DType, Device, FloatDType, Int, Tensor, TensorData};
use pipeline_core::{DeviceSpec, Normalize, Prediction, SpanTimes, Task, WorkerConfig};

use crate::device::{open_with, takes_software_forms};
use crate::model::Model;
use engine_seam::{Engine, EngineError, InFlight, OpenError, PendingPass, PixelBatch, predictions};

/// A model on a burn device, ready to run batches.
#[derive(Debug)]
pub struct BurnEngine {
    device: Device,
    /// What the device is, for its name and starting batch.
    spec: DeviceSpec,
    model: Model,
    task: Task,
    matmul_free_head: bool,
    /// What the model computes in; the input is normalised in f32 and
    /// cast to it, the outputs are cast back to f32.
    dtype: FloatDType,
    /// Passes launched and not yet finished.
    in_flight: AtomicUsize,
}

impl BurnEngine {
    /// Opens `config`'s device, builds or loads its model, with the
    /// zero-shot head of `--classes` and the precision the device runs.
    pub fn open(config: &WorkerConfig) -> Result<Self, OpenError> {
        let (device, dtype) = open_with(&config.device, config.precision)?;
        let net = crate::model::network(config).map_err(OpenError::Model)?;
        let mut model = match net.weights {
            Some(path) => Model::open(&net.arch, net.name, path, net.resolved, &device)?,
            None => Model::random_of(&net.arch, net.name, net.family, config.seed, &device),
        }
        .with_pooling(config.pooling);
        if net.scores == pipeline_core::Scores::Sigmoid {
            model = model.with_sigmoid_scores();
        }
        if let Some(classes) = &config.classes {
            model = with_classes(model, config, classes, &device)?;
        }
        if matches!(config.task, Task::Classify { .. }) && !model.classifies() {
            return Err(OpenError::NoClassifier(net.name.to_owned()));
        }
        Ok(Self::for_device(&config.device, device, model, config.task).with_float_dtype(dtype))
    }

    /// An engine running `model` for `task` on `device`, which `spec`
    /// names, with that device's workarounds: on Mesa's lavapipe, 1×1 convolutions run as 3×1 ones and
    /// the classifier without a matmul (see [`Model::with_pointwise_as_3x1`]
    /// and [`Model::head_without_matmul`]).
    pub fn for_device(spec: &DeviceSpec, device: Device, model: Model, task: Task) -> Self {
        let software = takes_software_forms(&device);
        Self {
            model: model.with_pointwise_as_3x1(software),
            device,
            spec: spec.clone(),
            task,
            matmul_free_head: software,
            dtype: FloatDType::F32,
            in_flight: AtomicUsize::new(0),
        }
    }

    /// The model computes in `dtype`: its parameters are cast to it (see
    /// [`Model::with_float_dtype`]); the device must have been opened in it
    /// ([`crate::open_with`]). Softmax and the read-back stay f32.
    pub fn with_float_dtype(mut self, dtype: FloatDType) -> Self {
        self.model = self.model.with_float_dtype(dtype);
        self.dtype = dtype;
        self
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    fn forward(
        &self,
        batch: &PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<Vec<Prediction>, String> {
        engine_seam::failpoints::inject_oom(batch.padded_rows)?;
        let started = Instant::now();
        let input = self.input(batch);
        let uploaded = self.sync(started, &mut times.upload_s)?;
        let output = self.output(input)?;
        let width = output.dims()[1];
        let computed = self.sync(uploaded, &mut times.compute_s)?;
        let values = output
            .try_into_data()
            .map_err(|e| e.to_string())?
            .try_to_vec::<f32>()
            .map_err(|e| format!("{e:?}"))?;
        // Read-back includes the host's share of it: top-k or the copy out.
        let predictions = predictions(self.task, &values, batch.rows, width);
        let done = Instant::now();
        times.readback_s += (done - computed).as_secs_f64();
        times.batch_s.push((done - started).as_secs_f64());
        Ok(predictions)
    }

    /// The batch's `u8` pixels, padded with zero images to its padded
    /// size, on the device and normalised (in f32), in the model's type.
    fn input(&self, batch: &PixelBatch<'_>) -> Tensor<4> {
        let (padded_rows, side) = (batch.padded_rows, batch.side);
        let mut data = Vec::with_capacity(padded_rows * 3 * side * side);
        data.extend_from_slice(batch.pixels);
        data.resize(padded_rows * 3 * side * side, 0);
        let input = Tensor::<4, Int>::from_data(
            TensorData::new(data, [padded_rows, 3, side, side]),
            (&self.device, DType::U8),
        )
        .float()
        .cast(FloatDType::F32);
        let f32_vector = |values: [f32; 3]| {
            Tensor::<1>::from_data(TensorData::from(values), (&self.device, DType::F32))
                .reshape([1, 3, 1, 1])
        };
        let normalize: &Normalize = batch.normalize;
        let (mean, std) = (f32_vector(normalize.mean), f32_vector(normalize.std));
        ((input - mean) / std).cast(self.dtype)
    }

    /// What the task reads back, `[padded_rows, width]` in f32: pooled
    /// features (`embed`), or class probabilities (`classify`).
    fn output(&self, input: Tensor<4>) -> Result<Tensor<2>, String> {
        let features = self.model.features(input);
        let Task::Classify { .. } = self.task else {
            return Ok(features.cast(FloatDType::F32));
        };
        let logits = if self.matmul_free_head {
            // Each step through the host and back: lavapipe also crashes
            // compiling the kernels burn's fusion makes of pooling + this
            // head and of this head + softmax, and a fresh leaf tensor ends
            // the fused graph. Only [N, C] and [N, K] floats make the trip.
            let features = self.round_trip(features)?;
            self.round_trip(self.model.head_without_matmul(features))?
        } else {
            self.model.head(features)
        };
        Ok(self.model.probabilities(logits.cast(FloatDType::F32)))
    }

    /// Waits for the device, adds the seconds since `since` to `stage`, and
    /// returns the end of that stage.
    fn sync(&self, since: Instant, stage: &mut f64) -> Result<Instant, String> {
        self.device.sync().map_err(|e| format!("{e:?}"))?;
        let now = Instant::now();
        *stage += (now - since).as_secs_f64();
        Ok(now)
    }

    /// Reads `tensor` back and uploads it again as a new leaf tensor.
    fn round_trip(&self, tensor: Tensor<2>) -> Result<Tensor<2>, String> {
        let data = tensor.try_into_data().map_err(|e| e.to_string())?;
        Ok(Tensor::from_data(data, &self.device))
    }
}

impl Engine for BurnEngine {
    fn device_name(&self) -> String {
        match &self.spec {
            DeviceSpec::Cpu => "burn flex".into(),
            DeviceSpec::Software => "Mesa lavapipe".into(),
            DeviceSpec::Gpu(i) => format!("Vulkan GPU {i}"),
        }
    }

    /// From the GPU's free memory where NVML knows it, else 64 on a GPU;
    /// the CPU and lavapipe gain little beyond 16 and 8 (BENCHMARKS.md).
    fn default_batch(&self, model: &pipeline_core::ModelRef) -> usize {
        match &self.spec {
            DeviceSpec::Cpu => 16,
            DeviceSpec::Software => 8,
            DeviceSpec::Gpu(i) => crate::device::gpus()
                .get(*i)
                .and_then(|gpu| gpu.memory)
                .zip(model.builtin())
                .map_or(64, |((_, free), kind)| {
                    engine_seam::batch::start_batch(free, kind)
                }),
        }
    }

    fn infer_timed(
        &self,
        batch: &PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<Vec<Prediction>, EngineError> {
        guarded(batch.padded_rows, || self.forward(batch, times))
    }

    fn launch<'a>(
        &'a self,
        batch: &PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<InFlight<'a>, EngineError> {
        let run = || -> Result<InFlight<'a>, String> {
            engine_seam::failpoints::inject_oom(batch.padded_rows)?;
            engine_seam::failpoints::inject_overlap_oom(self.in_flight.load(Ordering::Relaxed))?;
            let started = Instant::now();
            let input = self.input(batch);
            let queued = Instant::now();
            times.upload_s += (queued - started).as_secs_f64();
            let output = self.output(input)?;
            let width = output.dims()[1];
            let mut read: PendingRead =
                Box::pin(async move { output.into_data_async().await.map_err(|e| e.to_string()) });
            // One poll submits what is queued and the copy of the results;
            // the device's process-wide setting makes that copy start now
            // (see `device::open_with`). On the CPU it completes.
            let ready =
                futures_lite::future::block_on(futures_lite::future::poll_once(read.as_mut()));
            times.compute_s += queued.elapsed().as_secs_f64();
            self.in_flight.fetch_add(1, Ordering::Relaxed);
            Ok(Box::new(BurnPass {
                engine: self,
                read,
                ready,
                rows: batch.rows,
                padded_rows: batch.padded_rows,
                width,
                started,
            }))
        };
        guarded(batch.padded_rows, run)
    }

    fn release_cached_memory(&self) {
        self.device.memory_cleanup();
    }
}

/// A read-back on its way; its first poll has queued it.
type PendingRead = Pin<Box<dyn Future<Output = Result<TensorData, String>> + Send>>;

/// A pass [`BurnEngine`] queued.
struct BurnPass<'a> {
    engine: &'a BurnEngine,
    read: PendingRead,
    /// The results, where the first poll already had them (the CPU).
    ready: Option<Result<TensorData, String>>,
    rows: usize,
    padded_rows: usize,
    width: usize,
    started: Instant,
}

impl PendingPass for BurnPass<'_> {
    fn finish(self: Box<Self>, times: &mut SpanTimes) -> Result<Vec<Prediction>, EngineError> {
        let BurnPass {
            engine,
            read,
            ready,
            rows,
            padded_rows,
            width,
            started,
        } = *self;
        engine.in_flight.fetch_sub(1, Ordering::Relaxed);
        let waiting = Instant::now();
        let run = || -> Result<Vec<Prediction>, String> {
            let data = match ready {
                Some(data) => data,
                None => futures_lite::future::block_on(read),
            }?;
            let arrived = Instant::now();
            times.compute_s += (arrived - waiting).as_secs_f64();
            let values = data.try_to_vec::<f32>().map_err(|e| format!("{e:?}"))?;
            let predictions = predictions(engine.task, &values, rows, width);
            let done = Instant::now();
            times.readback_s += (done - arrived).as_secs_f64();
            times.batch_s.push((done - started).as_secs_f64());
            Ok(predictions)
        };
        guarded(padded_rows, run)
    }

    fn ended_in_launch(&self) -> bool {
        self.ready.is_some()
    }
}

/// Runs `run`, turning its error or panic (wgpu's error handler panics)
/// into an [`EngineError`] for a pass of `batch` images.
fn guarded<T>(batch: usize, run: impl FnOnce() -> Result<T, String>) -> Result<T, EngineError> {
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(result) => result.map_err(|message| classify_error(message, batch)),
        Err(payload) => Err(classify_error(
            pipeline_core::panic_message(payload.as_ref()),
            batch,
        )),
    }
}

/// Classifies what burn, cubecl and wgpu said (an error or a panic
/// message) once, here at the burn boundary: their errors carry these
/// conditions only as text.
fn classify_error(message: String, batch: usize) -> EngineError {
    let lower = message.to_ascii_lowercase();
    let says = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
    if says(&[
        "out of memory",
        "outofmemory",
        "out_of_memory",
        "failed to allocate",
    ]) {
        EngineError::OutOfMemory { batch, message }
    } else if says(&["device lost", "devicelost", "lost device", "device_lost"]) {
        EngineError::DeviceLost(message)
    } else {
        EngineError::Other(message)
    }
}

/// `model` classifying zero-shot against `classes`, with the scale (and
/// bias) of `config`'s weights: a built-in model's or a hub repo's.
fn with_classes(
    model: Model,
    config: &WorkerConfig,
    classes: &pipeline_core::ZeroShotClasses,
    device: &Device,
) -> Result<Model, OpenError> {
    let (family, name, weights) = engine_seam::zero_shot_model(config)?;
    let (rule, matrix) = engine_seam::open_classes((family, &name), classes)?;
    Ok(model.with_zero_shot(&matrix, &rule, &name, weights, device)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_is_recognised() {
        assert!(matches!(
            classify_error("Out of memory: cannot allocate 2 GiB".into(), 8),
            EngineError::OutOfMemory { batch: 8, .. }
        ));
        assert!(matches!(
            classify_error("shader failed".into(), 8),
            EngineError::Other(_)
        ));
        let lost = classify_error("Vulkan: ERROR_DEVICE_LOST (DeviceLost)".into(), 8);
        assert!(matches!(lost, EngineError::DeviceLost(_)) && lost.device_is_gone());
        assert!(!classify_error("shader failed".into(), 8).device_is_gone());
    }

    /// The engine builds the network from what the coordinator resolved
    /// (#42 item 7) and reads nothing else: a worker given the weights
    /// unresolved refuses them rather than detect their layout itself, and
    /// one told another activation than the `config.json` beside the
    /// weights names runs that one (it never reads the config).
    #[test]
    fn the_engine_builds_from_the_resolved_weights_alone() {
        use pipeline_core::{
            DecodeLimits, EngineKind, HubActivation, HubModel, ModelRef, Precision, PreprocessSpec,
            ResolvedWeights, WorkerConfig,
        };
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../cli/tests/hub_repos/tiny-org--clip-small");
        let text = std::fs::read_to_string(repo.join("config.json")).expect("config.json");
        let hub = pipeline_core::hub_config(&text).expect("a CLIP config");
        let weights = repo.join("model.safetensors");
        let resolved = Model::resolve_hub_file(&hub.shape, "clip-small", &weights)
            .expect("the fixture resolves");
        assert!(resolved.layout.is_some(), "{resolved:?}");
        assert_eq!(resolved.activation, Some(HubActivation::QuickGelu));
        assert!(resolved.logit.is_some(), "a CLIPModel's logit_scale");
        let side = hub.shape.image;
        let config = WorkerConfig {
            name: "cpu#0".into(),
            device: DeviceSpec::Cpu,
            model: ModelRef::Hub(HubModel {
                repo: "tiny-org/clip-small".into(),
                revision: "0".repeat(40),
                weights,
                shape: hub.shape,
                labels: hub.labels,
                scores: hub.scores,
            }),
            weights: None,
            resolved,
            seed: 0,
            task: Task::Embed,
            pooling: None,
            classes: None,
            precision: Precision::F32,
            engine: EngineKind::Burn,
            batch_size: Some(2),
            loader_threads: 1,
            preprocess: PreprocessSpec::IMAGENET,
            limits: DecodeLimits::default(),
            remote: Default::default(),
            cuda_uuids: Default::default(),
            onnx_runtime: None,
        };
        let pixels: Vec<u8> = (0..2 * 3 * side * side)
            .map(|i| ((i * 7 + i / 97) % 251) as u8)
            .collect();
        let normalize = PreprocessSpec::IMAGENET.normalize;
        let batch = PixelBatch::new(&pixels, 2, 2, side, &normalize);
        let run = |config: &WorkerConfig| {
            BurnEngine::open(config)
                .map(|engine| engine.infer(&batch).expect("a pass"))
                .map_err(|e| e.to_string())
        };
        let quick = run(&config).expect("resolved weights open");
        let unresolved = WorkerConfig {
            resolved: ResolvedWeights::default(),
            ..config.clone()
        };
        let error = run(&unresolved).expect_err("unresolved weights");
        assert!(
            error.contains("its layout was not resolved before the worker started"),
            "{error}"
        );
        let gelu = WorkerConfig {
            resolved: ResolvedWeights {
                activation: Some(HubActivation::Gelu),
                ..resolved
            },
            ..config
        };
        let exact = run(&gelu).expect("opens");
        assert_eq!(exact.len(), 2);
        assert_ne!(exact, quick, "the resolved activation is the one run");
    }
}
