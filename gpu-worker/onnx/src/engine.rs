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
//! One output is read (named, else the graph's first), one row per image
//! (`--task raw` reads several, `raw.rs`):
//! the embedding (scaled to unit length with `--normalize`), or for a
//! classifier the top-k of its softmax, its sigmoids (multi-label) or its
//! raw values. A BGR model (`--channels bgr`) gets the planes reversed.
//!
//! `--model FILE.onnx` opens it in each worker ([`OnnxEngine::for_worker`])
//! from the model the coordinator resolved (`pipeline_core::OnnxModel`),
//! on the CPU with every core, as the CPU engine runs, or on a GPU through
//! ONNX Runtime's CUDA execution provider (untested on a GPU: the machines
//! lent carry ONNX Runtime's CPU build).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use half::f16;
use ort::session::Session;
use pipeline_core::{DeviceSpec, ModelRef, Prediction, SpanTimes, Task, WorkerConfig};

use super::graph::{self, ImageInput, Output};
use super::{feed, raw};
use engine_seam::{Engine, EngineError, InFlight, OpenError, PendingPass, PixelBatch, top_k_of};

pub use pipeline_core::{Channels, Scores};

/// What an ONNX model runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnnxOptions {
    /// The model file.
    pub path: PathBuf,
    /// The output read, by name; `None` for the graph's first.
    pub output: Option<String>,
    /// `--task raw`: the outputs read, in order (empty: every output).
    pub raw: Vec<String>,
    /// An embedding per image, or the top-k classes.
    pub task: Task,
    /// How a classifier's values become scores.
    pub scores: Scores,
    /// ONNX Runtime's intra-op threads (the loader has the other cores).
    pub threads: usize,
    /// The channel order the model takes.
    pub channels: Channels,
    /// Embeddings scaled to unit length.
    pub normalize: bool,
    /// On ONNX Runtime's CUDA provider (the first visible GPU).
    pub cuda: bool,
}

/// A model in an ONNX Runtime session (the CPU, or a GPU through the CUDA
/// provider).
pub struct OnnxEngine {
    /// `Session::run` takes `&mut self`: one pass at a time.
    session: Mutex<Session>,
    /// The image input's values, written in place each pass.
    feed: Mutex<feed::Buffer>,
    input: ImageInput,
    output: Output,
    /// `--task raw`'s outputs, in order.
    raw: Vec<String>,
    task: Task,
    scores: Scores,
    threads: usize,
    channels: Channels,
    normalize: bool,
    cuda: bool,
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
        if is_out_of_memory(&message) {
            EngineError::OutOfMemory {
                batch: rows,
                message,
            }
        } else {
            EngineError::Other(message)
        }
    }
}

/// Whether ONNX Runtime's message is a device's out-of-memory (the CPU's
/// allocator, or the CUDA provider's arena and allocations), which the
/// worker answers by halving the batch.
fn is_out_of_memory(message: &str) -> bool {
    [
        "Failed to allocate memory",
        "bad_alloc",
        "out of memory",
        "CUDNN_STATUS_ALLOC_FAILED",
        "CUBLAS_STATUS_ALLOC_FAILED",
        "Available memory of",
    ]
    .iter()
    .any(|m| message.contains(m))
}

impl OnnxEngine {
    /// The model of `options` in a session on the CPU (or ONNX Runtime's
    /// CUDA provider, `options.cuda`); or why not, in one
    /// line: a file ONNX Runtime does not load, an input the tool cannot
    /// feed, an output that is not there or not floats.
    pub fn open(options: &OnnxOptions) -> Result<Self, String> {
        let session = graph::session_on(&options.path, options.threads, options.cuda)?;
        let graph = graph::graph_of(&session, &options.path)?;
        let listed = || graph::listed(&graph.outputs);
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
        // --task raw reads its own list; the others one float output.
        let raw = if options.task == Task::Raw {
            raw::raw_outputs(&graph.outputs, &graph.input, &options.raw)
                .map_err(|e| format!("{shown}: {e}"))?
                .0
        } else {
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
            Vec::new()
        };
        Ok(Self {
            session: Mutex::new(session),
            feed: Mutex::default(),
            input: graph.input,
            output: output.clone(),
            raw,
            task: options.task,
            scores: options.scores,
            threads: options.threads.max(1),
            channels: options.channels,
            normalize: options.normalize,
            cuda: options.cuda,
        })
    }

    /// The worker's model (`--model FILE.onnx`, as the coordinator
    /// resolved it): on the CPU with every core, as the CPU engine runs
    /// (the decoders beside it at background priority; one worker on the
    /// CPU); on a GPU through ONNX Runtime's CUDA provider, with two CPU
    /// threads for what it leaves on the host.
    pub fn for_worker(config: &WorkerConfig) -> Result<Self, OpenError> {
        let ModelRef::Onnx(model) = &config.model else {
            return Err(OpenError::Model(format!(
                "the ONNX engine runs ONNX models, not {}",
                config.model
            )));
        };
        if let Some(library) = &config.onnx_runtime {
            super::runtime::use_library(library)
                .as_ref()
                .map_err(|e| OpenError::Model(e.clone()))?;
        }
        let (cuda, threads) = match config.device {
            DeviceSpec::Cpu => (
                false,
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
            DeviceSpec::Gpu(_) => (true, 2),
            DeviceSpec::Software => {
                return Err(OpenError::Model(
                    "ONNX models run on the CPU or on NVIDIA GPUs (ONNX Runtime's CUDA \
                     provider), not on Mesa's lavapipe"
                        .to_owned(),
                ));
            }
        };
        let options = OnnxOptions {
            path: model.onnx.clone(),
            output: Some(model.output.clone()),
            raw: model.raw.clone(),
            task: config.task,
            scores: model.scores,
            threads,
            channels: model.channels,
            normalize: model.normalize,
            cuda,
        };
        Self::open(&options).map_err(OpenError::Model)
    }

    /// The image input the model takes.
    pub fn input(&self) -> &ImageInput {
        &self.input
    }

    /// Runs `batch` through the session in runs of the input's batch (the
    /// whole padded batch where it is dynamic), handing `take` each run's
    /// outputs and its size.
    fn each_run(
        &self,
        batch: &PixelBatch<'_>,
        times: &mut SpanTimes,
        mut take: impl FnMut(&ort::session::SessionOutputs<'_>, usize) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
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
        let mut first = 0;
        while first < padded {
            let started = Instant::now();
            let mut buffer = self.feed.lock().unwrap_or_else(|p| p.into_inner());
            let input = feed::tensor(&mut buffer, &self.input, self.channels, batch, first, run)
                .map_err(failed("input", run))?;
            let uploaded = Instant::now();
            times.upload_s += (uploaded - started).as_secs_f64();
            let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
            let outputs = session
                .run(ort::inputs![self.input.name.as_str() => input])
                .map_err(failed("run", padded))?;
            let computed = Instant::now();
            times.compute_s += (computed - uploaded).as_secs_f64();
            take(&outputs, run)?;
            times.readback_s += computed.elapsed().as_secs_f64();
            first += run;
        }
        Ok(())
    }

    /// One pass over `batch`: the chosen output's rows, `width` values
    /// each, for every padded row.
    fn values(
        &self,
        batch: &PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<(Vec<f32>, usize), EngineError> {
        let padded = batch.padded_rows;
        let mut values = Vec::new();
        let mut width = None;
        self.each_run(batch, times, |outputs, run| {
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
            Ok(())
        })?;
        Ok((values, width.unwrap_or(0)))
    }

    /// `--task raw`: each real image's slices of the outputs read.
    fn raw_pass(
        &self,
        batch: &PixelBatch<'_>,
        times: &mut SpanTimes,
    ) -> Result<Vec<Prediction>, EngineError> {
        let mut images = Vec::with_capacity(batch.padded_rows);
        self.each_run(batch, times, |outputs, run| {
            let slices = raw::slices(outputs, &self.raw, run).map_err(EngineError::Other)?;
            images.extend(slices.into_iter().map(Prediction::Outputs));
            Ok(())
        })?;
        images.truncate(batch.rows);
        Ok(images)
    }

    /// The predictions of the first `rows` rows of `values`.
    fn predictions(&self, values: &[f32], width: usize, rows: usize) -> Vec<Prediction> {
        let rows = values.chunks_exact(width.max(1)).take(rows);
        match self.task {
            Task::Embed if self.normalize => rows
                .map(|r| Prediction::Embedding(unit_length(r)))
                .collect(),
            // Raw passes do not come here (`raw_pass`).
            Task::Embed | Task::Raw => rows.map(|r| Prediction::Embedding(r.to_vec())).collect(),
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
        let predictions = if self.task == Task::Raw {
            self.raw_pass(batch, times)?
        } else {
            let (values, width) = self.values(batch, times)?;
            self.predictions(&values, width, batch.rows)
        };
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

/// `row` scaled to unit length (its norm summed in f64); a zero row stays
/// zero.
pub fn unit_length(row: &[f32]) -> Vec<f32> {
    let norm = row
        .iter()
        .map(|&v| f64::from(v).powi(2))
        .sum::<f64>()
        .sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return row.to_vec();
    }
    row.iter().map(|&v| (f64::from(v) / norm) as f32).collect()
}

/// A pass already run (ONNX Runtime's CPU runs it in `launch`).
struct Done(Vec<Prediction>);

impl PendingPass for Done {
    fn finish(self: Box<Self>, _: &mut SpanTimes) -> Result<Vec<Prediction>, EngineError> {
        Ok(self.0)
    }

    fn ended_in_launch(&self) -> bool {
        true
    }
}

impl Engine for OnnxEngine {
    fn device_name(&self) -> String {
        if self.cuda {
            "ONNX Runtime CUDA".to_owned()
        } else {
            format!("ONNX Runtime CPU ({} threads)", self.threads)
        }
    }

    fn default_batch(&self, _: &ModelRef) -> usize {
        self.input.batch.unwrap_or(if self.cuda { 64 } else { 16 })
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
    use super::{Scores, scores, unit_length};

    /// ONNX Runtime's out-of-memory messages, on the CPU and the CUDA
    /// provider, halve the batch; other failures do not.
    #[test]
    fn out_of_memory_messages_are_recognised() {
        for oom in [
            "Failed to allocate memory for requested buffer of size 123",
            "std::bad_alloc",
            "CUDA failure 2: out of memory ; GPU=0",
            "BFCArena: Available memory of 0 is smaller than requested bytes of 4096",
            "CUDNN failure 4: CUDNN_STATUS_ALLOC_FAILED",
        ] {
            assert!(super::is_out_of_memory(oom), "{oom}");
        }
        for other in [
            "Invalid input name: x",
            "Non-zero status code returned while running Conv",
        ] {
            assert!(!super::is_out_of_memory(other), "{other}");
        }
    }

    #[test]
    fn unit_length_rows() {
        assert_eq!(unit_length(&[3.0, -4.0]), vec![0.6, -0.8]);
        assert_eq!(unit_length(&[0.0, 0.0]), vec![0.0, 0.0]);
        let tiny = unit_length(&[1e-30, 1e-30]);
        assert!(
            (tiny[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-7,
            "{tiny:?}"
        );
    }

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
