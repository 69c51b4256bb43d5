//! One run's life: scan the dataset, plan chunks, spawn one `pipeline worker`
//! process per device, hand chunks out as workers ask for them, survive dead
//! workers, and write every item's record exactly once, in input order, as
//! JSONL, CSV or Parquet — with progress on the terminal and a JSON report.
//!
//! This crate never links burn: workers are separate processes, so a driver
//! crash or a broken allocator costs one worker, not the run.

#![deny(missing_docs)]

mod output;
mod progress;
mod run;
mod workers;

pub use output::{OutputFormat, Record};
pub use run::{RunConfig, RunError, RunSummary, WorkerReport, choose_format, run};
