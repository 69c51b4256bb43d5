//! The ONNX Runtime engine (#41): a user's model file run by ONNX
//! Runtime's CPU execution provider behind the [`Engine`] seam.
//!
//! Each pass feeds the graph's one image input (`graph.rs`) the batch's
//! `u8` pixels as the input takes them: normalised `f32` or `f16` (the
//! batch's mean and std, in pixel units), or the bytes themselves for a
//! `u8` input (such a model normalises itself); NCHW or NHWC. Every pass
//! has the same shape, the batch padded with zero images to the worker's
//! padded size (or run in runs of the graph's fixed batch, the last one
//! padded), so an image's bytes do not depend on the images beside it
//! (an out-of-memory backoff to a smaller batch may change them, as on the
//! other engines).
//! One output is read (named, else the graph's first), one row per image:
//! the embedding, or for a classifier the top-k of its softmax, its
//! sigmoids (multi-label) or its raw values.
//!
//! `--model FILE.onnx` opens it in each worker ([`OnnxEngine::for_worker`])
//! from the model the coordinator resolved (`pipeline_core::OnnxModel`),
//! on the CPU with every core, as the CPU engine runs. The CUDA execution
//! provider is not built.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use half::f16;
use ort::session::Session;
use ort::value::Tensor;
use pipeline_core::{DeviceSpec, ModelRef, Prediction, SpanTimes, Task, WorkerConfig};

use super::graph::{self, ImageInput, Layout, Output, PixelType};
use crate::engine::{Engine, EngineError, InFlight, OpenError, PendingPass, PixelBatch, top_k_of};

pub use pipeline_core::Scores;

/// What an ONNX model runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnnxOptions {
    /// The model file.
    pub path: PathBuf,
    /// The output read, by name; `None` for the graph's first.
    pub output: Option<String>,
    /// An embedding per image, or the top-k classes.
    pub task: Task,
    /// How a classifier's values become scores.
    pub scores: Scores,
    /// ONNX Runtime's intra-op threads (the loader has the other cores).
    pub threads: usize,
}

/// A model in an ONNX Runtime session on the CPU.
pub struct OnnxEngine {
    /// `Session::run` takes `&mut self`: one pass at a time.
    session: Mutex<Session>,
    input: ImageInput,
    output: Output,
    task: Task,
    scores: Scores,
    threads: usize,
}

/// A pass that is not a device's out-of-memory: ONNX Runtime's message.
fn failed(what: &str, rows: usize) -> impl FnOnce(ort::Error) -> EngineError + '_ {
    move |e| {
        // ONNX Runtime's messages span lines: one line here.
        let said = e.to_string();
        let message = format!(
            "ONNX Runtime {what}: {}",
            said.split_whitespace().collect::<Vec<_>>().join(" ")
        );
        if message.contains("Failed to allocate memory") || message.contains("bad_alloc") {
            EngineError::OutOfMemory {
                batch: rows,
                message,
            }
        } else {
            EngineError::Other(message)
        }
    }
}

impl OnnxEngine {
    /// The model of `options` in a session on the CPU; or why not, in one
    /// line: a file ONNX Runtime does not load, an input the tool cannot
    /// feed, an output that is not there or not floats.
    pub fn open(options: &OnnxOptions) -> Result<Self, String> {
        let session = graph::session(&options.path, options.threads)?;
        let graph = graph::graph_of(&session, &options.path)?;
        let listed = || {
            graph
                .outputs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let shown = options.path.display();
        let output = match &options.output {
            Some(name) => graph
                .outputs
                .iter()
                .find(|o| &o.name == name)
                .ok_or_else(|| {
                    format!("{shown}: no output named {name}; its outputs: {}", listed())
                })?,
            None => graph
                .outputs
                .first()
                .ok_or_else(|| format!("{shown}: the model has no output"))?,
        };
        if output.element != "Float32" && output.element != "Float16" {
            return Err(format!(
                "{shown}: output {output} is not floats; the tool reads Float32 or Float16 \
                 outputs (its outputs: {})",
                listed()
            ));
        }
        if output.shape.is_empty() {
            return Err(format!(
                "{shown}: output {output} has no batch axis; the tool reads one row per image"
            ));
        }
        Ok(Self {
            session: Mutex::new(session),
            input: graph.input,
            output: output.clone(),
            task: options.task,
            scores: options.scores,
            threads: options.threads.max(1),
        })
    }

    /// The worker's model (`--model FILE.onnx`, as the coordinator
    /// resolved it) on the CPU with every core, as the CPU engine runs (the
    /// decoders beside it at background priority; one worker on the CPU).
    pub(crate) fn for_worker(config: &WorkerConfig) -> Result<Self, OpenError> {
        let ModelRef::Onnx(model) = &config.model else {
            return Err(OpenError::Model(format!(
                "the ONNX engine runs ONNX models, not {}",
                config.model
            )));
        };
        if config.device != DeviceSpec::Cpu {
            return Err(OpenError::Model(format!(
                "ONNX models run on the CPU (ONNX Runtime's CPU provider), not {}: its CUDA \
                 provider is not built yet",
                config.device
            )));
        }
        let options = OnnxOptions {
            path: model.onnx.clone(),
            output: Some(model.output.clone()),
            task: config.task,
            scores: model.scores,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        Self::open(&options).map_err(OpenError::Model)
    }

    /// The image input the model takes.
    pub fn input(&self) -> &ImageInput {
        &self.input
    }

    /// `batch`'s images as the input takes them, `run` images from `first`
    /// (zero images past the batch's real rows).
    fn tensor(
        &self,
        batch: &PixelBatch<'_>,
        first: usize,
        run: usize,
    ) -> Result<ort::value::DynValue, EngineError> {
        let side = batch.side;
        let plane = side * side;
        let image = 3 * plane;
        let shape = match self.input.layout {
            Layout::Nchw => [run, 3, side, side],
            Layout::Nhwc => [run, side, side, 3],
        };
        // Where value `c, y, x` of image `i` of the run goes.
        let at = |i: usize, c: usize, p: usize| match self.input.layout {
            Layout::Nchw => i * image + c * plane + p,
            Layout::Nhwc => i * image + p * 3 + c,
        };
        let pixel = |i: usize, c: usize, p: usize| {
            let row = first + i;
            if row < batch.rows {
                batch.pixels[row * image + c * plane + p]
            } else {
                0
            }
        };
        let n = batch.normalize;
        let normalised = |i, c, p| (f32::from(pixel(i, c, p)) - n.mean[c]) / n.std[c];
        let fill = |put: &mut dyn FnMut(usize, usize, usize)| {
            for i in 0..run {
                for c in 0..3 {
                    for p in 0..plane {
                        put(i, c, p);
                    }
                }
            }
        };
        let made = match self.input.pixels {
            PixelType::F32 => {
                let mut values = vec![0f32; run * image];
                fill(&mut |i, c, p| values[at(i, c, p)] = normalised(i, c, p));
                Tensor::from_array((shape, values)).map(Tensor::into_dyn)
            }
            PixelType::F16 => {
                let mut values = vec![f16::ZERO; run * image];
                fill(&mut |i, c, p| values[at(i, c, p)] = f16::from_f32(normalised(i, c, p)));
                Tensor::from_array((shape, values)).map(Tensor::into_dyn)
            }
            PixelType::U8 => {
                let mut values = vec![0u8; run * image];
                fill(&mut |i, c, p| values[at(i, c, p)] = pixel(i, c, p));
                Tensor::from_array((shape, values)).map(Tensor::into_dyn)
            }
        };
        made.map_err(failed("input", run))
    }

    /// One pass over `batch`: the chosen output's rows, `width` values
    /// each, for every padded row.
    fn values(
        &self,
        batch: &PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<(Vec<f32>, usize), EngineError> {
        if let Some((h, w)) = self.input.size
            && (h, w) != (batch.side, batch.side)
        {
            return Err(EngineError::Other(format!(
                "the model's input {} takes {h}×{w} images, not {side}×{side}",
                self.input.name,
                side = batch.side
            )));
        }
        let padded = batch.padded_rows;
        // A fixed batch runs in runs of its size, the last one padded.
        let run = self.input.batch.unwrap_or(padded).max(1);
        let mut values = Vec::new();
        let mut width = None;
        let mut first = 0;
        while first < padded {
            let started = Instant::now();
            let input = self.tensor(batch, first, run)?;
            let uploaded = Instant::now();
            times.upload_s += (uploaded - started).as_secs_f64();
            let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
            let outputs = session
                .run(ort::inputs![self.input.name.as_str() => input])
                .map_err(failed("run", padded))?;
            let computed = Instant::now();
            times.compute_s += (computed - uploaded).as_secs_f64();
            let value = &outputs[self.output.name.as_str()];
            let (shape, row_values): (Vec<i64>, Vec<f32>) = if self.output.element == "Float16" {
                let (shape, v) = value
                    .try_extract_tensor::<f16>()
                    .map_err(failed("output", padded))?;
                (shape.to_vec(), v.iter().map(|x| x.to_f32()).collect())
            } else {
                let (shape, v) = value
                    .try_extract_tensor::<f32>()
                    .map_err(failed("output", padded))?;
                (shape.to_vec(), v.to_vec())
            };
            if shape.first().copied() != i64::try_from(run).ok() {
                return Err(EngineError::Other(format!(
                    "output {} has shape {shape:?} for a batch of {run}: not one row per image",
                    self.output.name
                )));
            }
            let w = row_values.len() / run;
            if *width.get_or_insert(w) != w {
                return Err(EngineError::Other(format!(
                    "output {} changed width between passes ({w})",
                    self.output.name
                )));
            }
            values.extend(row_values);
            times.readback_s += computed.elapsed().as_secs_f64();
            first += run;
        }
        Ok((values, width.unwrap_or(0)))
    }

    /// The predictions of the first `rows` rows of `values`.
    fn predictions(&self, values: &[f32], width: usize, rows: usize) -> Vec<Prediction> {
        let rows = values.chunks_exact(width.max(1)).take(rows);
        match self.task {
            Task::Embed => rows.map(|r| Prediction::Embedding(r.to_vec())).collect(),
            Task::Classify { top_k } => rows
                .map(|r| Prediction::TopK(top_k_of(&scores(r, self.scores), top_k)))
                .collect(),
        }
    }

    fn pass(
        &self,
        batch: &PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<Vec<Prediction>, EngineError> {
        let started = Instant::now();
        let (values, width) = self.values(batch, times)?;
        let predictions = self.predictions(&values, width, batch.rows);
        times.batch_s.push(started.elapsed().as_secs_f64());
        Ok(predictions)
    }
}

/// A classifier row's scores: softmax (in f64, then f32), each value's
/// sigmoid, or the values.
pub fn scores(row: &[f32], how: Scores) -> Vec<f32> {
    match how {
        Scores::Raw => row.to_vec(),
        Scores::Sigmoid => row
            .iter()
            .map(|&v| (1.0 / (1.0 + (-f64::from(v)).exp())) as f32)
            .collect(),
        Scores::Softmax => {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let exps: Vec<f64> = row.iter().map(|&v| f64::from(v - max).exp()).collect();
            let sum: f64 = exps.iter().sum();
            exps.iter().map(|&e| (e / sum) as f32).collect()
        }
    }
}

/// A pass already run (ONNX Runtime's CPU runs it in `launch`).
struct Done(Vec<Prediction>);

impl PendingPass for Done {
    fn finish(self: Box<Self>, _: &mut SpanTimes) -> Result<Vec<Prediction>, EngineError> {
        Ok(self.0)
    }
}

impl Engine for OnnxEngine {
    fn device_name(&self) -> String {
        format!("ONNX Runtime CPU ({} threads)", self.threads)
    }

    fn default_batch(&self, _: &ModelRef) -> usize {
        self.input.batch.unwrap_or(16)
    }

    fn infer_timed(
        &self,
        batch: &PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<Vec<Prediction>, EngineError> {
        self.pass(batch, times)
    }

    fn launch<'a>(
        &'a self,
        batch: &PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<InFlight<'a>, EngineError> {
        Ok(Box::new(Done(self.pass(batch, times)?)))
    }

    fn release_cached_memory(&self) {}
}

#[cfg(test)]
mod tests {
    use super::{Scores, scores};

    #[test]
    fn softmax_sigmoid_and_raw_scores() {
        let row = [1.0f32, 2.0, 3.0, 1000.0];
        let soft = scores(&row, Scores::Softmax);
        assert!((soft.iter().sum::<f32>() - 1.0).abs() < 1e-6, "{soft:?}");
        assert!((soft[3] - 1.0).abs() < 1e-6 && soft[0] < 1e-6, "{soft:?}");
        let small = scores(&[0.0, 0.0], Scores::Softmax);
        assert_eq!(small, vec![0.5, 0.5]);
        let sig = scores(&[0.0, 100.0, -100.0], Scores::Sigmoid);
        assert_eq!(sig[0], 0.5);
        assert!(sig[1] > 0.999_999 && sig[2] < 1e-6, "{sig:?}");
        assert_eq!(scores(&row, Scores::Raw), row.to_vec());
    }
}
