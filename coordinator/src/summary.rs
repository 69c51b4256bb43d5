//! What a run did: the summary the CLI prints and writes with `--report`,
//! and each worker's totals.

use std::path::PathBuf;

use serde::Serialize;

use crate::update::UpdateCounts;

use crate::stats::{Stages, SteadyWindow};

/// Per-worker totals for the report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerReport {
    /// e.g. `cpu#0`.
    pub name: String,
    /// The device it ran on.
    pub device: String,
    /// Tasks it finished first.
    pub chunks: u64,
    /// Images in those spans.
    pub images: u64,
    /// Batch size at the end.
    pub batch_size: usize,
    /// Times the batch was halved on memory exhaustion (in the process, or
    /// by a respawn after the process died of it).
    pub oom_backoffs: u64,
    /// Seconds its device waited for its loader.
    pub wait_loader_s: f64,
    /// Seconds in forward passes.
    pub infer_s: f64,
    /// Seconds from spawn to `Ready` (device open, model load).
    pub startup_s: f64,
    /// Seconds from its first process's spawn to that process's first
    /// finished batch: start-up plus kernel compilation or autotuning and
    /// the first pass. What a persisted autotune cache shortens (cold
    /// against warm: BENCHMARKS.md). `None` if it finished none.
    pub first_batch_s: Option<f64>,
    /// Processes that filled this slot and died, and how.
    pub deaths: Vec<String>,
    /// Peak resident memory of its last process (Linux `VmHWM`, read just
    /// before it was told to finish).
    pub peak_rss_bytes: Option<u64>,
}

/// What a run did. The groups are flattened, so `--report`'s JSON is one
/// flat object (`images`, `chunks_resumed`, `wall_s`, `retries`, …).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunSummary {
    /// The records in the output.
    #[serde(flatten)]
    pub records: Records,
    /// Chunks: planned, owned, resumed; shard and merge state.
    #[serde(flatten)]
    pub chunks: ChunkCounts,
    /// Wall time and its parts.
    #[serde(flatten)]
    pub times: Times,
    /// What surviving failures cost.
    #[serde(flatten)]
    pub recovery: Recovery,
    /// Seconds per stage, summed over workers (`write_s`: the commits'
    /// seconds over the committer threads, plus assembly).
    pub stages: Stages,
    /// Between warm-up and run-out: the rate a longer run would hold, for
    /// images whose passes ended inside it. `None` when the run was too
    /// short to have one. Believe it only beside `images_per_s`, the whole
    /// run's (CONVENTIONS.md, rule 13).
    pub steady: Option<SteadyWindow>,
    /// Peak resident memory of this (the coordinator's) process so far.
    pub coordinator_peak_rss_bytes: Option<u64>,
    /// Each forward pass's seconds, upload to read-back, in arrival order.
    #[serde(skip)]
    pub batch_latencies_s: Vec<f64>,
    /// Per worker.
    pub workers: Vec<WorkerReport>,
    /// `--update` / `--retry-failed`: records reused, computed, dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update: Option<UpdateCounts>,
    /// Where the output is.
    pub out: PathBuf,
}

impl RunSummary {
    /// `out` was complete already; nothing ran.
    pub fn already_complete(out: &std::path::Path) -> Self {
        Self {
            chunks: ChunkCounts {
                already_complete: true,
                ..ChunkCounts::default()
            },
            out: out.to_owned(),
            ..Self::default()
        }
    }
}

/// The records in the output.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Records {
    /// Images in the output.
    pub images: u64,
    /// Of which failed.
    pub failures: u64,
    /// Failures by kind.
    pub failures_by_kind: std::collections::BTreeMap<String, u64>,
    /// Scan problems (unreadable folders, symlink loops).
    pub scan_problems: Vec<String>,
}

/// The run's chunks, and what became of its output.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChunkCounts {
    /// Chunks in the run.
    #[serde(rename = "chunks")]
    pub total: u64,
    /// Chunks this shard owns (all of them without shards).
    #[serde(rename = "chunks_owned")]
    pub owned: u64,
    /// Chunks an earlier run had committed (resume).
    #[serde(rename = "chunks_resumed")]
    pub resumed: u64,
    /// This run's shard (`1/3`) when the dataset is split.
    pub shard: Option<String>,
    /// Whether the output file was assembled (by this run). A shard that
    /// ends before the others leaves that to `pipeline merge` or to the
    /// last shard run with `--merge`.
    pub merged: bool,
    /// The output existed and `--resume` accepted it; nothing was run.
    pub already_complete: bool,
}

/// Where the wall time went.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Times {
    /// Seconds from start to the output's rename.
    pub wall_s: f64,
    /// Images computed by this run per second of wall time.
    pub images_per_s: f64,
    /// Images computed by this run (resumed chunks' not included).
    pub images_computed: u64,
    /// Seconds to scan the dataset.
    pub scan_s: f64,
    /// Seconds committing parts (encoding and fsyncs), summed over the
    /// committer threads.
    pub commit_s: f64,
    /// Seconds assembling the output from the parts.
    pub assemble_s: f64,
}

/// What surviving failures cost.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Recovery {
    /// Batch-size halvings over all workers.
    pub oom_backoffs: u64,
    /// Tasks run again after a worker died or hung.
    pub retries: u64,
    /// Tasks split in halves to find an image that kills workers.
    pub splits: u64,
    /// Speculative duplicate runs of slow spans.
    pub speculative: u64,
    /// Worker processes restarted.
    pub restarts: u64,
    /// Workers killed for making no progress.
    pub hangs: u64,
    /// Remote requests (`s3://`, `http(s)://`) sent again, over the workers
    /// and the coordinator's own reads (listings, manifests).
    pub remote_retries: u64,
    /// The same retries, by what went wrong with the request before.
    pub remote_retry_kinds: pipeline_core::RemoteRetries,
}
