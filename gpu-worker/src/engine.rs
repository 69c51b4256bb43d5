//! One batched forward pass: upload `u8` pixels, normalise on the device,
//! run the model, and read back only what the task needs — class
//! probabilities (`classify`: softmax, or sigmoid for SigLIP's zero-shot
//! scores) or pooled features (`embed`).
//!
//! Top-k is taken on the host from the read-back probabilities: burn's
//! `topk` (and a full `sum`) segfault inside Mesa's lavapipe while it
//! compiles the kernel, and 1000 floats per image is a small read-back.
//! Batch shapes stay fixed: a short batch is padded with zeros and the
//! padding's results are dropped, so autotuned kernels are reused.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use burn::tensor::{DType, Device, FloatDType, Int, Tensor, TensorData};
use pipeline_core::{ClassScore, DeviceSpec, Normalize, Prediction, SpanTimes, Task};

use crate::model::Model;

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

/// A model on its device, ready to run batches.
#[derive(Debug)]
pub struct Engine {
    device: Device,
    model: Model,
    task: Task,
    matmul_free_head: bool,
    /// What the model computes in; the input is normalised in f32 and
    /// cast to it, the outputs are cast back to f32.
    dtype: FloatDType,
    /// Passes launched and not yet finished.
    in_flight: AtomicUsize,
}

impl Engine {
    /// An engine running `model` on `device` for `task`.
    pub fn new(device: Device, model: Model, task: Task) -> Self {
        Self {
            device,
            model,
            task,
            matmul_free_head: false,
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

    /// An engine for `model` on the device `spec` names, with that device's
    /// workarounds: on Mesa's lavapipe, 1×1 convolutions run as 3×1 ones and
    /// the classifier without a matmul (see [`Model::with_pointwise_as_3x1`]
    /// and [`Engine::with_matmul_free_head`]).
    pub fn for_device(spec: &DeviceSpec, device: Device, model: Model, task: Task) -> Self {
        let software = *spec == DeviceSpec::Software;
        Self::new(device, model.with_pointwise_as_3x1(software), task)
            .with_matmul_free_head(software)
    }

    /// Computes the class logits without a matmul kernel (see
    /// [`Model::head_without_matmul`]); for Mesa's lavapipe.
    pub fn with_matmul_free_head(mut self, on: bool) -> Self {
        self.matmul_free_head = on;
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

    /// Runs `rows` images (`u8` NCHW, `side × side`) padded to `padded_rows`
    /// and returns one prediction per real row.
    pub fn infer(
        &self,
        pixels: &[u8],
        rows: usize,
        padded_rows: usize,
        side: usize,
        normalize: &Normalize,
    ) -> Result<Vec<Prediction>, EngineError> {
        let mut times = SpanTimes::default();
        self.infer_timed(pixels, rows, padded_rows, side, normalize, &mut times)
    }

    /// [`Engine::infer`], adding the pass's upload, compute and read-back
    /// seconds and its latency to `times`. A device sync ends the upload and
    /// the compute, so the three do not overlap.
    pub fn infer_timed(
        &self,
        pixels: &[u8],
        rows: usize,
        padded_rows: usize,
        side: usize,
        normalize: &Normalize,
        times: &mut SpanTimes,
    ) -> Result<Vec<Prediction>, EngineError> {
        assert_batch(pixels, rows, padded_rows, side);
        let run = || self.forward(pixels, rows, padded_rows, side, normalize, times);
        guarded(padded_rows, run)
    }

    fn forward(
        &self,
        pixels: &[u8],
        rows: usize,
        padded_rows: usize,
        side: usize,
        normalize: &Normalize,
        times: &mut SpanTimes,
    ) -> Result<Vec<Prediction>, String> {
        crate::failpoints::inject_oom(padded_rows)?;
        let started = Instant::now();
        let input = self.input(pixels, padded_rows, side, normalize);
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
        let predictions = self.predictions(&values, rows, width);
        let done = Instant::now();
        times.readback_s += (done - computed).as_secs_f64();
        times.batch_s.push((done - started).as_secs_f64());
        Ok(predictions)
    }

    /// Queues one pass without waiting for the device: the upload, the
    /// model, and the read-back of its results, in that order on the
    /// device's queue. Launch batch n+1 before [`Engine::finish`]ing batch
    /// n and the device works on n+1 while the host turns n's results into
    /// predictions and prepares n+2: the device never waits on the host.
    ///
    /// Its stage times are the host's: upload is building and handing
    /// over the input, compute is queuing the model here plus waiting for
    /// the results in `finish`, read-back is turning them into predictions.
    pub fn launch(
        &self,
        pixels: &[u8],
        rows: usize,
        padded_rows: usize,
        side: usize,
        normalize: &Normalize,
        times: &mut SpanTimes,
    ) -> Result<InFlight, EngineError> {
        assert_batch(pixels, rows, padded_rows, side);
        let run = || -> Result<InFlight, String> {
            crate::failpoints::inject_oom(padded_rows)?;
            crate::failpoints::inject_overlap_oom(self.in_flight.load(Ordering::Relaxed))?;
            let started = Instant::now();
            let input = self.input(pixels, padded_rows, side, normalize);
            let queued = Instant::now();
            times.upload_s += (queued - started).as_secs_f64();
            let output = self.output(input)?;
            let width = output.dims()[1];
            let mut read: PendingRead =
                Box::pin(async move { output.into_data_async().await.map_err(|e| e.to_string()) });
            // One poll submits what is queued and the copy of the results;
            // the device's process-wide setting makes that copy start now
            // (see `crate::device::open_with`). On the CPU it completes.
            let ready =
                futures_lite::future::block_on(futures_lite::future::poll_once(read.as_mut()));
            times.compute_s += queued.elapsed().as_secs_f64();
            self.in_flight.fetch_add(1, Ordering::Relaxed);
            Ok(InFlight {
                read,
                ready,
                rows,
                padded_rows,
                width,
                started,
            })
        };
        guarded(padded_rows, run)
    }

    /// Waits for a launched pass and returns one prediction per real row.
    pub fn finish(
        &self,
        in_flight: InFlight,
        times: &mut SpanTimes,
    ) -> Result<Vec<Prediction>, EngineError> {
        let InFlight {
            read,
            ready,
            rows,
            padded_rows,
            width,
            started,
        } = in_flight;
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        let waiting = Instant::now();
        let run = || -> Result<Vec<Prediction>, String> {
            let data = match ready {
                Some(data) => data,
                None => futures_lite::future::block_on(read),
            }?;
            let arrived = Instant::now();
            times.compute_s += (arrived - waiting).as_secs_f64();
            let values = data.try_to_vec::<f32>().map_err(|e| format!("{e:?}"))?;
            let predictions = self.predictions(&values, rows, width);
            let done = Instant::now();
            times.readback_s += (done - arrived).as_secs_f64();
            times.batch_s.push((done - started).as_secs_f64());
            Ok(predictions)
        };
        guarded(padded_rows, run)
    }

    /// The batch's `u8` pixels, padded with zero images to `padded_rows`,
    /// on the device and normalised (in f32), in the model's type.
    fn input(
        &self,
        pixels: &[u8],
        padded_rows: usize,
        side: usize,
        normalize: &Normalize,
    ) -> Tensor<4> {
        let mut data = Vec::with_capacity(padded_rows * 3 * side * side);
        data.extend_from_slice(pixels);
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

    /// One prediction for each of the first `rows` rows of `values`
    /// (`width` floats a row): the embedding, or the task's top-k.
    fn predictions(&self, values: &[f32], rows: usize, width: usize) -> Vec<Prediction> {
        let rows = values.chunks_exact(width).take(rows);
        match self.task {
            Task::Embed => rows
                .map(|row| Prediction::Embedding(row.to_vec()))
                .collect(),
            Task::Classify { top_k } => rows
                .map(|row| Prediction::TopK(top_k_of(row, top_k)))
                .collect(),
        }
    }
}

/// A read-back on its way; its first poll has queued it.
type PendingRead = Pin<Box<dyn Future<Output = Result<TensorData, String>> + Send>>;

/// A pass [`Engine::launch`] queued, for [`Engine::finish`].
pub struct InFlight {
    read: PendingRead,
    /// The results, where the first poll already had them (the CPU).
    ready: Option<Result<TensorData, String>>,
    rows: usize,
    padded_rows: usize,
    width: usize,
    started: Instant,
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight")
            .field("rows", &self.rows)
            .field("padded_rows", &self.padded_rows)
            .field("ready", &self.ready.is_some())
            .finish_non_exhaustive()
    }
}

impl Engine {
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

/// The `k` largest probabilities, largest first; ties go to the lower class
/// so the result does not depend on the sort's stability.
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

/// A batch's pixels hold exactly `rows` images of `side × side`, and its
/// padding does not drop any.
fn assert_batch(pixels: &[u8], rows: usize, padded_rows: usize, side: usize) {
    assert_eq!(
        pixels.len(),
        rows * 3 * side * side,
        "pixels must hold exactly `rows` images"
    );
    assert!(padded_rows >= rows, "padding cannot drop rows");
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
}
