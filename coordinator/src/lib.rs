//! One run's life: scan the dataset, plan chunks, spawn one `pipeline worker`
//! process per device, hand chunks out as workers ask for them, survive dead
//! and hung workers, commit each finished chunk as a part file (so an
//! interrupted run resumes), and write every item's record exactly once, in
//! input order, as JSONL, CSV, Parquet or npy shards — with progress on the terminal and
//! a JSON report.
//!
//! This crate never links burn: workers are separate processes, so a driver
//! crash or a broken allocator costs one worker, not the run.

#![deny(missing_docs)]

mod assemble;
mod book;
mod cluster;
mod config;
mod failpoints;
mod identity;
mod output;
mod parts;
mod readback;
mod report;
mod run;
mod run_error;
mod scheduler;
mod signals;
mod slot;
mod stats;
mod summary;
mod update;
mod visible;
mod workers;

pub use book::{BadOutcomes, ISOLATED_FAILURES, check_outcomes};
pub use cluster::{
    Env, GivenGpus, ShardChoice, choose_shard, process_env, scheduler_gpus, scheduler_gpus_source,
};
pub use config::{
    DEFAULT_GRACE, Existing, MAX_RESTARTS, Patience, RunConfig, Sharding, Update, choose_format,
};
pub use identity::{ClassFile, Inputs, PARTS_LAYOUT, RunIdentity, Weights};
pub use output::{
    Compression, DEFAULT_SHARD_ROWS, EmbeddingDtype, OutputFormat, OutputLayout, Record,
    TextEmbeddings, TextFormat, TextWriter, UnknownFormat, encode_part, write_text_embeddings,
};
pub use parts::{PartStore, PartsError, failures_path, keys_path, parts_dir};
pub use report::{Report, Silent};
pub use run::{COMMIT_THREADS, merge, run};
pub use run_error::RunError;
pub use stats::{Stages, SteadyWindow};
pub use summary::{ChunkCounts, Records, Recovery, RunSummary, Times, WorkerReport};
pub use update::{UpdateCounts, UpdateError};
pub use visible::{DeviceOrder, ListEnd, NvidiaDevice, Visible, cuda_visible, names_an_index};
pub use workers::describe_exit;
