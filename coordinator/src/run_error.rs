//! How a run can fail ([`RunError`]): one variant per thing the user can
//! fix, each a one-line message saying what and how.

use std::path::PathBuf;

use crate::identity::FingerprintError;
use crate::parts::PartsError;
use crate::signals::signal_name;
use crate::update::UpdateError;

/// A run that could not complete its output.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// `--data` is not usable.
    #[error(transparent)]
    Source(#[from] loader::source::SourceError),
    /// The output could not be written.
    #[error("cannot write {path}: {source}")]
    Output {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A finished chunk could not be committed (a full disk, say).
    #[error(
        "cannot write a part to {dir}: {source}; the parts committed so far are kept: fix \
         that and run the same command again to finish"
    )]
    Commit {
        /// The part folder.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The output exists and the run was not told what to do with it.
    #[error(
        "--out {0} already exists; pass --overwrite to replace it, or --resume to keep it \
         as the finished result"
    )]
    OutputExists(PathBuf),
    /// The part folder cannot be used or assembled.
    #[error(transparent)]
    Parts(#[from] PartsError),
    /// The output layout flags do not fit the format or task.
    #[error("{0}")]
    Layout(String),
    /// `--update` cannot work on this output.
    #[error(transparent)]
    Update(#[from] UpdateError),
    /// `pipeline merge` found neither parts nor an output.
    #[error("{0} does not exist: no shard has committed anything for this output yet")]
    NothingToMerge(PathBuf),
    /// `--overwrite` would delete the parts other shards committed.
    #[error(
        "--overwrite with shards would delete the parts the other shards commit; delete \
         {0} once before starting the shards instead"
    )]
    OverwriteShards(PathBuf),
    /// The weight or class file could not be read for the run's
    /// fingerprint.
    #[error(transparent)]
    Fingerprint(#[from] FingerprintError),
    /// The worker executable could not be started.
    #[error("cannot start a worker ({exe}): {source}")]
    Spawn {
        /// What was run.
        exe: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Every worker failed; the message is the first worker's.
    #[error("{0}")]
    WorkersFailed(String),
    /// SIGINT or SIGTERM stopped the run; what finished is committed.
    #[error(
        "stopped by {}: {committed} of {total} chunks are committed in {}; \
         run the same command again to finish",
        signal_name(*signal),
        dir.display()
    )]
    Interrupted {
        /// The signal.
        signal: i32,
        /// Chunks committed.
        committed: u64,
        /// Chunks in the run.
        total: u64,
        /// The part folder.
        dir: PathBuf,
    },
}
