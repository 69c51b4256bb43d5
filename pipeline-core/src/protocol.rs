//! Every message between the coordinator and a worker process, and how they
//! are framed on the worker's stdin and stdout.
//!
//! A frame is a little-endian `u32` byte length followed by that many bytes
//! of JSON. The first frame each way is the handshake — [`ToWorker::Hello`]
//! then [`FromWorker::Ready`] (or [`FromWorker::Failed`]) — and both carry
//! [`PROTOCOL_VERSION`], so a coordinator and a worker from different builds
//! refuse each other with a clear message instead of misreading frames.
//!
//! Work is pulled: the worker states in `Ready` how many chunks it wants
//! queued (`prefetch`), and every `ChunkDone` asks for one more. A "chunk"
//! on the wire is the coordinator's unit of work: a whole chunk, or a piece
//! of one it split to find an image that kills workers; its id is the
//! coordinator's to interpret.
//!
//! Besides the messages, the worker's exit code speaks:
//! [`WORKER_EXIT_DEVICE_LOST`] says its device ran out of memory or was lost.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::device::DeviceSpec;
use crate::item::{ItemError, ItemIndex};
use crate::model::{ModelKind, Prediction, Task};
use crate::preprocess::{DecodeLimits, PreprocessSpec};

/// Bumped whenever a message changes shape.
pub const PROTOCOL_VERSION: u32 = 1;

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
    /// Architecture.
    pub model: ModelKind,
    /// Weight file; `None` means seeded random weights.
    pub weights: Option<PathBuf>,
    /// Seed of the random weights.
    pub seed: u64,
    /// What the output is.
    pub task: Task,
    /// Images per forward pass; `None` lets the worker choose.
    pub batch_size: Option<usize>,
    /// Decoder threads.
    pub loader_threads: usize,
    /// Resize, crop and normalisation.
    pub preprocess: PreprocessSpec,
    /// Decompression-bomb guards.
    pub limits: DecodeLimits,
}

/// One image to process: its stable index and its path as raw bytes (paths
/// need not be UTF-8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkItemSpec {
    /// Index in the manifest.
    pub index: ItemIndex,
    /// Absolute path, as OS bytes.
    pub path: Vec<u8>,
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
    /// A chunk to run; results come back in one `ChunkDone`.
    Chunk {
        /// Stable chunk id.
        id: u64,
        /// Its items, in index order.
        items: Vec<WorkItemSpec>,
    },
    /// No more work: finish queued chunks and exit.
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

/// Where a chunk's time went inside the worker, stage by stage.
///
/// The loader's stages are thread-seconds summed over its decoder threads;
/// the device's stages are seconds of the device thread, and each is closed
/// by a device sync, so they do not overlap.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChunkTimes {
    /// Seconds the device thread waited for the loader.
    pub wait_loader_s: f64,
    /// Seconds in forward passes, including upload and read-back.
    pub infer_s: f64,
    /// Loader thread-seconds reading files.
    pub read_s: f64,
    /// Loader thread-seconds decoding and preprocessing.
    pub decode_s: f64,
    /// Device seconds copying `u8` pixels up and normalising them.
    pub upload_s: f64,
    /// Device seconds running the model.
    pub compute_s: f64,
    /// Device seconds reading results back to the host.
    pub readback_s: f64,
    /// Each forward pass's seconds, upload to read-back (batch latency).
    pub batch_s: Vec<f64>,
}

impl ChunkTimes {
    /// Adds `other`'s times to these.
    pub fn add(&mut self, other: &ChunkTimes) {
        self.wait_loader_s += other.wait_loader_s;
        self.infer_s += other.infer_s;
        self.read_s += other.read_s;
        self.decode_s += other.decode_s;
        self.upload_s += other.upload_s;
        self.compute_s += other.compute_s;
        self.readback_s += other.readback_s;
        self.batch_s.extend_from_slice(&other.batch_s);
    }

    /// Device seconds: upload, compute and read-back.
    pub fn device_s(&self) -> f64 {
        self.upload_s + self.compute_s + self.readback_s
    }
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
    /// Items of a chunk finished so far (for progress bars).
    Progress {
        /// Chunk id.
        chunk: u64,
        /// Items finished in this chunk since the last `Progress`.
        items: u64,
    },
    /// A chunk is complete: one outcome per item, in index order.
    ChunkDone {
        /// Chunk id.
        chunk: u64,
        /// Every item of the chunk.
        outcomes: Vec<ItemOutcome>,
        /// Where the time went.
        times: ChunkTimes,
    },
}

/// Writes one frame and flushes it.
pub fn write_frame<W: Write + ?Sized, M: Serialize>(out: &mut W, message: &M) -> io::Result<()> {
    let body = serde_json::to_vec(message).map_err(io::Error::other)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&n| n as usize <= MAX_FRAME_BYTES)
        .ok_or_else(|| io::Error::other(format!("frame of {} bytes is too large", body.len())))?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(&body)?;
    out.flush()
}

/// Reads one frame; `Ok(None)` at a clean end of stream (between frames).
pub fn read_frame<R: Read + ?Sized, M: DeserializeOwned>(input: &mut R) -> io::Result<Option<M>> {
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
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::ItemErrorKind;
    use crate::model::ClassScore;

    #[test]
    fn frames_round_trip_and_end_cleanly() {
        let messages = vec![
            FromWorker::Ready {
                version: PROTOCOL_VERSION,
                device: "cpu".into(),
                batch_size: 8,
                prefetch: 2,
            },
            FromWorker::ChunkDone {
                chunk: 3,
                outcomes: vec![
                    ItemOutcome {
                        index: 7,
                        result: Ok(Prediction::TopK(vec![ClassScore {
                            class: 281,
                            prob: 0.5,
                        }])),
                    },
                    ItemOutcome {
                        index: 8,
                        result: Err(ItemError::new(ItemErrorKind::Decode, "bad")),
                    },
                ],
                times: ChunkTimes::default(),
            },
        ];
        let mut wire = Vec::new();
        for m in &messages {
            write_frame(&mut wire, m).expect("write to a Vec");
        }
        let mut input = wire.as_slice();
        let mut back = Vec::new();
        while let Some(m) = read_frame::<_, FromWorker>(&mut input).expect("valid frames") {
            back.push(m);
        }
        assert_eq!(back, messages);
    }

    #[test]
    fn a_cut_frame_is_an_error_not_an_end() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &ToWorker::Finish).expect("write to a Vec");
        wire.pop();
        let err = read_frame::<_, ToWorker>(&mut wire.as_slice()).expect_err("cut frame");
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        let mut header_only = &wire[..2];
        assert!(read_frame::<_, ToWorker>(&mut header_only).is_err());
    }

    #[test]
    fn an_oversized_length_is_refused() {
        let wire = u32::MAX.to_le_bytes();
        let err = read_frame::<_, ToWorker>(&mut wire.as_slice()).expect_err("too large");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
