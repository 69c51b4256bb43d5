//! The seam between a worker and what computes: an [`Engine`] takes a
//! batch of `u8` pixels and gives one prediction per image (class
//! probabilities' top-k, or the embedding), reports out-of-memory and a
//! lost device as typed errors, and says how large a batch its device
//! starts with ([`batch::start_batch`]). The worker, the backoff and
//! `--model-only` talk to this trait alone.
//!
//! Each engine is a crate of its own below the worker (`engine-burn`,
//! `engine-cuda`, `engine-onnx`); which engine runs a model is the
//! registry's (`ModelSpec::engines`), and the worker's factory is the one
//! place that names an engine type. This crate may use `pipeline-core` and
//! `model-families`; never an engine, burn, cudarc or ort.

#![deny(missing_docs)]

pub mod batch;
pub mod failpoints;
pub mod python_env;

use pipeline_core::{ClassScore, Family, Normalize, Prediction, SpanTimes, Task, ZeroShotClasses};

use model_families::zero_shot::{ClassMatrix, ZeroShotError, ZeroShotRule};

/// One forward pass's input: `rows` images of `side × side`, `u8` NCHW,
/// run padded with zero images to `padded_rows` (fixed shapes let a device
/// reuse its tuned kernels; the padding's results are dropped).
#[derive(Debug, Clone, Copy)]
pub struct PixelBatch<'a> {
    /// `rows × 3 × side × side` bytes.
    pub pixels: &'a [u8],
    /// Real images.
    pub rows: usize,
    /// Images the pass runs, at least `rows`.
    pub padded_rows: usize,
    /// Side of each image.
    pub side: usize,
    /// Applied on the device before the model.
    pub normalize: &'a Normalize,
}

impl<'a> PixelBatch<'a> {
    /// A batch of `rows` images, checked: the pixels hold exactly `rows`
    /// images and the padding drops none.
    pub fn new(
        pixels: &'a [u8],
        rows: usize,
        padded_rows: usize,
        side: usize,
        normalize: &'a Normalize,
    ) -> Self {
        assert_eq!(
            pixels.len(),
            rows * 3 * side * side,
            "pixels must hold exactly `rows` images"
        );
        assert!(padded_rows >= rows, "padding cannot drop rows");
        Self {
            pixels,
            rows,
            padded_rows,
            side,
            normalize,
        }
    }
}

/// A forward pass that did not produce results.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The device ran out of memory (error or panic from the runtime).
    #[error("device out of memory at batch size {batch}: {message}")]
    OutOfMemory {
        /// Batch size that did not fit.
        batch: usize,
        /// What the runtime said.
        message: String,
    },
    /// The driver lost the device: nothing more runs in this process.
    #[error("device lost: {0}")]
    DeviceLost(String),
    /// Anything else the device reported.
    #[error("device error: {0}")]
    Other(String),
}

impl EngineError {
    /// Whether the device is unusable in this process now (memory beyond
    /// what backoff handles, or lost), so that a fresh process with a
    /// smaller batch is the way on.
    pub fn device_is_gone(&self) -> bool {
        matches!(self, Self::OutOfMemory { .. } | Self::DeviceLost(_))
    }
}

/// A device that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("cannot open device {spec}: {message}")]
pub struct DeviceError {
    /// The device asked for.
    pub spec: pipeline_core::DeviceSpec,
    /// Why it failed.
    pub message: String,
}

/// Why an engine could not open: its device, the weights, or the classes.
/// Its text is what the coordinator shows, one line.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The device did not open.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The weight file did not load.
    #[error(transparent)]
    Weights(#[from] model_families::WeightsError),
    /// The class file did not load.
    #[error(transparent)]
    Classes(#[from] model_families::zero_shot::ClassesError),
    /// The model cannot classify zero-shot against it.
    #[error(transparent)]
    ZeroShot(#[from] model_families::zero_shot::ZeroShotError),
    /// The class file changed after the coordinator checked it.
    #[error("class file {} changed since the run started (its labels differ)", .0.display())]
    ClassesChanged(std::path::PathBuf),
    /// `--task classify` for a model without a classifier (its name).
    #[error("{0} has no classifier head; use --task embed")]
    NoClassifier(String),
    /// The model is not one this engine runs, or did not open.
    #[error("{0}")]
    Model(String),
}

/// The family, name and weights of `config`'s model where it can
/// classify zero-shot: a built-in model or a hub repo (ONNX models have no
/// text tower).
pub fn zero_shot_model(
    config: &pipeline_core::WorkerConfig,
) -> Result<(Family, String, Option<&std::path::Path>), OpenError> {
    match &config.model {
        pipeline_core::ModelRef::Builtin(kind) => Ok((
            kind.family(),
            kind.name().to_owned(),
            config.weights.as_deref(),
        )),
        pipeline_core::ModelRef::Hub(hub) => Ok((
            hub.shape.family,
            hub.repo.clone(),
            Some(hub.weights.as_path()),
        )),
        other => Err(ZeroShotError::NotZeroShot {
            model: other.to_string(),
        }
        .into()),
    }
}

/// `--classes`' matrix for the model `name` of `family`, with its family's
/// zero-shot rule: a CLIP or SigLIP model, and the labels the coordinator
/// checked (the file may have changed since). What both engines open
/// zero-shot heads from.
pub fn open_classes(
    (family, name): (Family, &str),
    classes: &ZeroShotClasses,
) -> Result<(ZeroShotRule, ClassMatrix), OpenError> {
    let rule = ZeroShotRule::of(family).ok_or_else(|| ZeroShotError::NotZeroShot {
        model: name.to_owned(),
    })?;
    let matrix = ClassMatrix::open(&classes.path)?;
    if matrix.labels() != classes.labels.as_slice() {
        return Err(OpenError::ClassesChanged(classes.path.clone()));
    }
    Ok((rule, matrix))
}

/// A pass an engine queued ([`Engine::launch`]), borrowing the engine.
pub type InFlight<'a> = Box<dyn PendingPass + 'a>;

/// A queued pass: its results, once the device has them.
pub trait PendingPass: Send {
    /// Waits for the device and gives one prediction per real row, adding
    /// the wait to `times`' compute and the host's share to its read-back.
    fn finish(self: Box<Self>, times: &mut SpanTimes) -> Result<Vec<Prediction>, EngineError>;

    /// Whether the pass had ended when [`Engine::launch`] returned (an
    /// engine that runs it on the host's cores inside `launch`): its work
    /// is dated by the launch, not by `finish`, which the worker calls only
    /// after the next pass (the coordinator's steady window counts work by
    /// when it ended).
    fn ended_in_launch(&self) -> bool {
        false
    }
}

/// A model on a device, ready to run batches.
pub trait Engine: Send + Sync {
    /// The engine and its device, as the coordinator shows them:
    /// `burn flex`, `burn Vulkan GPU 0`.
    fn device_name(&self) -> String;

    /// The batch size to start with when the user gave none: what the
    /// device's free memory fits of `model`, where the engine can tell.
    fn default_batch(&self, model: &pipeline_core::ModelRef) -> usize;

    /// Runs one pass and waits for it, adding its upload, compute and
    /// read-back seconds (each ended by a device sync, so they do not
    /// overlap) and its latency to `times`.
    fn infer_timed(
        &self,
        batch: &PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<Vec<Prediction>, EngineError>;

    /// Queues one pass without waiting for the device: launch batch n+1
    /// before finishing batch n and the device works on n+1 while the host
    /// turns n's results into predictions and prepares n+2. Its stage
    /// times are the host's: upload is handing over the input, compute is
    /// queuing the model plus, in [`PendingPass::finish`], waiting for it.
    fn launch<'a>(
        &'a self,
        batch: &PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<InFlight<'a>, EngineError>;

    /// Frees what the device caches, after an out-of-memory error.
    fn release_cached_memory(&self);

    /// [`Engine::infer_timed`] without the times.
    fn infer(&self, batch: &PixelBatch<'_>) -> Result<Vec<Prediction>, EngineError> {
        self.infer_timed(batch, &mut SpanTimes::default())
    }

    /// Waits for a launched pass: [`PendingPass::finish`].
    fn finish(
        &self,
        pass: InFlight<'_>,
        times: &mut SpanTimes,
    ) -> Result<Vec<Prediction>, EngineError> {
        pass.finish(times)
    }

    /// One full pass of zero images of `side × side` at `batch`, waited
    /// for: kernel compilation and autotuning happen here, not in the
    /// first timed pass.
    fn warm_up(&self, batch: usize, side: usize, normalize: &Normalize) -> Result<(), EngineError> {
        let pixels = vec![0u8; batch * 3 * side * side];
        let pass = self.launch(
            &PixelBatch::new(&pixels, batch, batch, side, normalize),
            &mut SpanTimes::default(),
        )?;
        pass.finish(&mut SpanTimes::default()).map(drop)
    }
}

/// One prediction for each of the first `rows` rows of `values` (`width`
/// floats a row, f32 as the device read them back): the embedding, or the
/// task's top-k of the class probabilities.
pub fn predictions(task: Task, values: &[f32], rows: usize, width: usize) -> Vec<Prediction> {
    let rows = values.chunks_exact(width).take(rows);
    match task {
        // The built-in models' engines never get --task raw (the factory
        // refuses it): their one output is these rows.
        Task::Embed | Task::Raw => rows
            .map(|row| Prediction::Embedding(row.to_vec()))
            .collect(),
        Task::Classify { top_k } => rows
            .map(|row| Prediction::TopK(top_k_of(row, top_k)))
            .collect(),
    }
}

/// The `k` largest probabilities, largest first; ties go to the lower class
/// so the result does not depend on the sort's stability. On the host: a
/// small read-back, and burn's `topk` crashes Mesa's lavapipe.
pub fn top_k_of(probs: &[f32], k: usize) -> Vec<ClassScore> {
    let mut order: Vec<u32> = (0..probs.len() as u32).collect();
    let key = |&c: &u32| probs[c as usize];
    let k = k.min(order.len());
    let by_prob = |a: &u32, b: &u32| key(b).total_cmp(&key(a)).then(a.cmp(b));
    if k < order.len() && k > 0 {
        order.select_nth_unstable_by(k - 1, by_prob);
    }
    order.truncate(k);
    order.sort_unstable_by(by_prob);
    order
        .into_iter()
        .map(|class| ClassScore {
            class,
            prob: probs[class as usize],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_orders_by_probability_then_class() {
        let probs = [0.1, 0.4, 0.05, 0.4, 0.05];
        let top = top_k_of(&probs, 3);
        let classes: Vec<u32> = top.iter().map(|s| s.class).collect();
        assert_eq!(classes, vec![1, 3, 0]);
        assert_eq!(top_k_of(&probs, 10).len(), 5);
        assert!(top_k_of(&probs, 0).is_empty());
    }

    #[test]
    fn predictions_keep_the_real_rows_only() {
        let values = [0.1, 0.9, 0.7, 0.3, 0.0, 0.0];
        let embed = predictions(Task::Embed, &values, 2, 2);
        assert_eq!(
            embed,
            vec![
                Prediction::Embedding(vec![0.1, 0.9]),
                Prediction::Embedding(vec![0.7, 0.3])
            ]
        );
        let top = predictions(Task::Classify { top_k: 1 }, &values, 2, 2);
        let classes: Vec<u32> = top
            .iter()
            .map(|p| match p {
                Prediction::TopK(scores) => scores[0].class,
                other => panic!("classify gives top-k, not {other:?}"),
            })
            .collect();
        assert_eq!(classes, vec![1, 0]);
    }
}
