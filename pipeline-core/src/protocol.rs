//! Every message between the coordinator and a worker process, and how they
//! are framed on the worker's stdin and stdout.
//!
//! A frame is a little-endian `u32` byte length followed by that many bytes
//! of body: JSON for every message but [`FromWorker::SpanDone`], whose
//! results are the bulk of the traffic and go in a compact binary layout
//! (see [`Frame`]): decoding JSON floats cost the coordinator more than
//! everything else it does per record. The first frame each way is the handshake — [`ToWorker::Hello`]
//! then [`FromWorker::Ready`] (or [`FromWorker::Failed`]) — and both carry
//! [`PROTOCOL_VERSION`], so a coordinator and a worker from different builds
//! refuse each other with a clear message instead of misreading frames.
//!
//! Work is pulled: the worker states in `Ready` how many spans it wants
//! queued (`prefetch`), and every `SpanDone` asks for one more. A *span* is
//! the coordinator's unit of work: a whole chunk, or a piece of one it
//! split to find an image that kills workers; its id is the coordinator's
//! to interpret.
//!
//! Besides the messages, the worker's exit code speaks:
//! [`WORKER_EXIT_DEVICE_LOST`] says its device ran out of memory or was lost.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::device::DeviceSpec;
use crate::item::{ItemError, ItemIndex};
use crate::labels::ZeroShotClasses;
use crate::model::{
    ArrayValues, ClassScore, EmbedPooling, OutputArray, Precision, Prediction, Task,
};
use crate::model_ref::ModelRef;
use crate::preprocess::{DecodeLimits, PreprocessSpec};
use crate::registry::EngineKind;
use crate::resolved::ResolvedWeights;
use crate::source::{Location, RemoteSpec};
use crate::span_times::SpanTimes;

/// Bumped whenever a message changes shape.
pub const PROTOCOL_VERSION: u32 = 12;

/// Exit code of a worker whose device ran out of memory in a way it could
/// not back off from in the process, or was lost: the coordinator respawns
/// it with half the batch and runs its work again, blaming no image.
pub const WORKER_EXIT_DEVICE_LOST: i32 = 3;

/// Exit code of a worker whose coordinator went away (its stdin closed
/// without `Finish`): it stops at once instead of finishing work nobody
/// will read.
pub const WORKER_EXIT_ORPHANED: i32 = 4;

/// Frames larger than this are refused as corrupt (an embedding chunk of
/// 4096 items × 2048 floats is about 100 MB of JSON).
pub const MAX_FRAME_BYTES: usize = 1 << 30;

/// Everything a worker needs to set itself up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerConfig {
    /// Name shown in logs and progress, e.g. `software#1`.
    pub name: String,
    /// The device to open.
    pub device: DeviceSpec,
    /// The model: a built-in architecture, or a user's ONNX file.
    pub model: ModelRef,
    /// Weight file; `None` means seeded random weights.
    pub weights: Option<PathBuf>,
    /// What the coordinator read from the weight file (its layout, the
    /// activation a config beside it names), which every engine builds
    /// the network from without reading it again.
    #[serde(default, skip_serializing_if = "is_default")]
    pub resolved: ResolvedWeights,
    /// Seed of the random weights.
    pub seed: u64,
    /// What the output is.
    pub task: Task,
    /// Which tokens make a DINOv2 embedding (`None`: the model's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooling: Option<EmbedPooling>,
    /// Zero-shot classification's class matrix and labels (CLIP, SigLIP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<ZeroShotClasses>,
    /// The float type to compute in.
    #[serde(default)]
    pub precision: Precision,
    /// The engine to open (one of the model's registry row).
    #[serde(default)]
    pub engine: EngineKind,
    /// Images per forward pass; `None` lets the worker choose.
    pub batch_size: Option<usize>,
    /// Decoder threads.
    pub loader_threads: usize,
    /// Resize, crop and normalisation.
    pub preprocess: PreprocessSpec,
    /// Decompression-bomb guards.
    pub limits: DecodeLimits,
    /// How remote items are read.
    #[serde(default)]
    pub remote: RemoteSpec,
    /// The NVIDIA GPUs' UUIDs by `gpu:N` index: a worker on GPU N gets its
    /// UUID as `CUDA_VISIBLE_DEVICES` (CUDA's own numbering is not PCI bus
    /// order unless `CUDA_DEVICE_ORDER` says so), and the CUDA engine opens
    /// the GPU by it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cuda_uuids: BTreeMap<usize, String>,
    /// The ONNX Runtime library the coordinator loaded (a file, or the
    /// name the system's loader found), for an ONNX model: the worker loads
    /// it without searching again. `None`: the worker searches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onnx_runtime: Option<String>,
}

fn is_default(resolved: &ResolvedWeights) -> bool {
    *resolved == ResolvedWeights::default()
}

/// One image to process: its stable index and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkItemSpec {
    /// Index in the manifest.
    pub index: ItemIndex,
    /// A file, a URL, a range of either, or a Parquet cell.
    pub location: Location,
}

/// Coordinator → worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToWorker {
    /// First frame: who the worker is and what to run.
    Hello {
        /// Must equal the worker's [`PROTOCOL_VERSION`].
        version: u32,
        /// The worker's setup.
        config: Box<WorkerConfig>,
    },
    /// A span to run; results come back in one `SpanDone`.
    Span {
        /// The coordinator's span id.
        id: u64,
        /// Its items, in index order.
        items: Vec<WorkItemSpec>,
    },
    /// No more work: finish queued spans and exit.
    Finish,
}

/// One item's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemOutcome {
    /// Index in the manifest.
    pub index: ItemIndex,
    /// What the device computed, or why the item failed.
    pub result: Result<Prediction, ItemError>,
}

/// Worker → coordinator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FromWorker {
    /// Handshake answer: the device is open and the model loaded.
    Ready {
        /// The worker's [`PROTOCOL_VERSION`].
        version: u32,
        /// The adapter's own name (e.g. `llvmpipe (LLVM 15.0.6, 256 bits)`).
        device: String,
        /// Starting batch size.
        batch_size: usize,
        /// Chunks the worker wants queued at any time.
        prefetch: usize,
    },
    /// The worker could not start or cannot go on; it exits after this.
    Failed {
        /// One line for the user.
        message: String,
    },
    /// Memory ran out and the batch size went down.
    BatchSize {
        /// Size that did not fit.
        from: usize,
        /// Size used from now on.
        to: usize,
        /// What the device said.
        reason: String,
    },
    /// Items of a span finished so far (for progress bars and the steady
    /// window).
    Progress {
        /// Span id.
        span: u64,
        /// Items finished in this span since the last `Progress`.
        items: u64,
        /// Seconds between the batch's pass ending and this frame: see
        /// `SpanDone::held_s`.
        held_s: f64,
    },
    /// A span is complete: one outcome per item, in index order.
    SpanDone {
        /// Span id.
        span: u64,
        /// Every item of the span.
        outcomes: Vec<ItemOutcome>,
        /// Where the time went.
        times: SpanTimes,
        /// Seconds between the last batch's pass ending and this frame. A
        /// worker keeps a finished pass while it launches the next one (on
        /// the CPU, runs it whole), so a frame can arrive a pass after its
        /// work ended; the coordinator's steady window dates the work by
        /// this, not by the frame.
        held_s: f64,
    },
}

/// A message's body on the wire.
pub trait Frame: Sized {
    /// Appends the body to `out`.
    fn encode(&self, out: &mut Vec<u8>) -> io::Result<()>;
    /// Reads a whole body.
    fn decode(body: &[u8]) -> io::Result<Self>;
}

impl Frame for ToWorker {
    fn encode(&self, out: &mut Vec<u8>) -> io::Result<()> {
        serde_json::to_writer(out, self).map_err(io::Error::other)
    }

    fn decode(body: &[u8]) -> io::Result<Self> {
        serde_json::from_slice(body).map_err(invalid)
    }
}

/// First body byte of a binary `SpanDone` (a JSON body starts with `{` or
/// `"`).
const BINARY_SPAN_DONE: u8 = 0;

impl Frame for FromWorker {
    /// `SpanDone` is binary, little-endian: the tag byte `0`, `span: u64`,
    /// `held_s` as `f64` bits, the times as length-prefixed (`u32`) JSON,
    /// `n: u32` outcomes, then per
    /// outcome `index: u64` and one of: `0`, `k: u32`, k × (`class: u32`,
    /// `prob: f32`); `1`, `d: u32`, d × `f32`; `2`, the error as
    /// length-prefixed JSON; `3`, `m: u32` arrays, each its name as
    /// length-prefixed JSON, `r: u32`, r × `dim: u32`, `v: u32`, then `0`
    /// and v × `f32` or `1` and v × `i64`. Floats travel as their bits,
    /// exactly.
    fn encode(&self, out: &mut Vec<u8>) -> io::Result<()> {
        let FromWorker::SpanDone {
            span,
            outcomes,
            times,
            held_s,
        } = self
        else {
            return serde_json::to_writer(out, self).map_err(io::Error::other);
        };
        out.push(BINARY_SPAN_DONE);
        out.extend_from_slice(&span.to_le_bytes());
        out.extend_from_slice(&held_s.to_bits().to_le_bytes());
        put_json(out, times)?;
        put_len(out, outcomes.len())?;
        for outcome in outcomes {
            out.extend_from_slice(&outcome.index.to_le_bytes());
            match &outcome.result {
                Ok(Prediction::TopK(scores)) => {
                    out.push(0);
                    put_len(out, scores.len())?;
                    for s in scores {
                        out.extend_from_slice(&s.class.to_le_bytes());
                        out.extend_from_slice(&s.prob.to_bits().to_le_bytes());
                    }
                }
                Ok(Prediction::Embedding(values)) => {
                    out.push(1);
                    put_len(out, values.len())?;
                    for v in values {
                        out.extend_from_slice(&v.to_bits().to_le_bytes());
                    }
                }
                Err(error) => {
                    out.push(2);
                    put_json(out, error)?;
                }
                Ok(Prediction::Outputs(arrays)) => {
                    out.push(3);
                    put_len(out, arrays.len())?;
                    for array in arrays {
                        put_json(out, &array.name)?;
                        put_len(out, array.shape.len())?;
                        for d in &array.shape {
                            out.extend_from_slice(&d.to_le_bytes());
                        }
                        put_len(out, array.values.len())?;
                        match &array.values {
                            ArrayValues::F32(v) => {
                                out.push(0);
                                for x in v {
                                    out.extend_from_slice(&x.to_bits().to_le_bytes());
                                }
                            }
                            ArrayValues::I64(v) => {
                                out.push(1);
                                for x in v {
                                    out.extend_from_slice(&x.to_le_bytes());
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn decode(body: &[u8]) -> io::Result<Self> {
        if body.first() != Some(&BINARY_SPAN_DONE) {
            return serde_json::from_slice(body).map_err(invalid);
        }
        let mut r = Reader(&body[1..]);
        let span = r.u64()?;
        let held_s = f64::from_bits(r.u64()?);
        let times = r.json()?;
        // Each outcome takes at least 9 bytes: a corrupt count cannot make
        // this allocate more than the frame's own size.
        let n = r.len(9)?;
        let mut outcomes = Vec::with_capacity(n);
        for _ in 0..n {
            let index = r.u64()?;
            let result = match r.u8()? {
                0 => {
                    let k = r.len(8)?;
                    let mut scores = Vec::with_capacity(k);
                    for _ in 0..k {
                        let class = r.u32()?;
                        let prob = f32::from_bits(r.u32()?);
                        scores.push(ClassScore { class, prob });
                    }
                    Ok(Prediction::TopK(scores))
                }
                1 => {
                    let d = r.len(4)?;
                    let mut values = Vec::with_capacity(d);
                    for _ in 0..d {
                        values.push(f32::from_bits(r.u32()?));
                    }
                    Ok(Prediction::Embedding(values))
                }
                2 => Err(r.json()?),
                3 => Ok(Prediction::Outputs(r.arrays()?)),
                tag => return Err(invalid(format!("unknown outcome tag {tag}"))),
            };
            outcomes.push(ItemOutcome { index, result });
        }
        if !r.0.is_empty() {
            return Err(invalid(format!("{} bytes after the outcomes", r.0.len())));
        }
        Ok(FromWorker::SpanDone {
            span,
            outcomes,
            times,
            held_s,
        })
    }
}

fn invalid<E: Into<Box<dyn std::error::Error + Send + Sync>>>(e: E) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

fn put_len(out: &mut Vec<u8>, len: usize) -> io::Result<()> {
    let len = u32::try_from(len).map_err(|_| io::Error::other("a list too long for a frame"))?;
    out.extend_from_slice(&len.to_le_bytes());
    Ok(())
}

fn put_json<T: Serialize>(out: &mut Vec<u8>, value: &T) -> io::Result<()> {
    let json = serde_json::to_vec(value).map_err(io::Error::other)?;
    put_len(out, json.len())?;
    out.extend_from_slice(&json);
    Ok(())
}

/// A bounds-checked cursor over a binary body.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(invalid("the binary frame ends early"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> io::Result<u32> {
        let mut b = [0; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> io::Result<u64> {
        let mut b = [0; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    /// A `u32` count of items of at least `min_bytes` each, checked against
    /// what is left.
    fn len(&mut self, min_bytes: usize) -> io::Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_bytes) > self.0.len() {
            return Err(invalid(format!("a count of {n} does not fit in the frame")));
        }
        Ok(n)
    }

    /// `--task raw`'s arrays of one outcome (see `FromWorker::encode`).
    fn arrays(&mut self) -> io::Result<Vec<OutputArray>> {
        // Each array takes at least 13 bytes (an empty name, no dims, no
        // values, its type).
        let m = self.len(13)?;
        // Capacity by what the frame can hold, not by a count it claims.
        let mut arrays = Vec::with_capacity(m.min(64));
        for _ in 0..m {
            let name = self.json()?;
            let rank = self.len(4)?;
            let shape = (0..rank)
                .map(|_| self.u32())
                .collect::<io::Result<Vec<_>>>()?;
            let count = self.u32()? as usize;
            let dtype = self.u8()?;
            let size = match dtype {
                0 => 4,
                1 => 8,
                other => return Err(invalid(format!("unknown array type {other}"))),
            };
            if count.saturating_mul(size) > self.0.len() {
                return Err(invalid(format!("{count} values do not fit in the frame")));
            }
            let values = if dtype == 0 {
                ArrayValues::F32(
                    (0..count)
                        .map(|_| self.u32().map(f32::from_bits))
                        .collect::<io::Result<_>>()?,
                )
            } else {
                ArrayValues::I64(
                    (0..count)
                        .map(|_| self.u64().map(|v| v as i64))
                        .collect::<io::Result<_>>()?,
                )
            };
            let product = shape
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d as usize));
            if product != Some(count) {
                return Err(invalid(format!(
                    "an array of shape {shape:?} holds {count} values"
                )));
            }
            arrays.push(OutputArray {
                name,
                shape,
                values,
            });
        }
        Ok(arrays)
    }

    fn json<T: DeserializeOwned>(&mut self) -> io::Result<T> {
        let n = self.len(1)?;
        serde_json::from_slice(self.take(n)?).map_err(invalid)
    }
}

/// Writes one frame and flushes it.
pub fn write_frame<W: Write + ?Sized, M: Frame>(out: &mut W, message: &M) -> io::Result<()> {
    let mut frame = vec![0u8; 4];
    message.encode(&mut frame)?;
    let body_len = frame.len() - 4;
    let len = u32::try_from(body_len)
        .ok()
        .filter(|&n| n as usize <= MAX_FRAME_BYTES)
        .ok_or_else(|| io::Error::other(format!("frame of {body_len} bytes is too large")))?;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    out.write_all(&frame)?;
    out.flush()
}

/// Reads one frame; `Ok(None)` at a clean end of stream (between frames).
pub fn read_frame<R: Read + ?Sized, M: Frame>(input: &mut R) -> io::Result<Option<M>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < len.len() {
        match input.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is larger than the protocol allows"),
        ));
    }
    let mut body = vec![0u8; len];
    input.read_exact(&mut body)?;
    M::decode(&body).map(Some)
}

#[cfg(test)]
mod tests;
