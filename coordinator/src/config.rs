//! What a run is given ([`RunConfig`], validated by the front end) and
//! how it can fail ([`RunError`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use pipeline_core::{DataSpec, DeviceSpec, Shard, WorkerConfig};

use crate::output::{OutputFormat, OutputLayout, UnknownFormat};
use crate::parts::PartsError;
use crate::signals::signal_name;
use crate::update::{Update, UpdateError};

/// Everything one run needs, validated by the front end.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The dataset: `--data` and the flags that say how to read it.
    pub data: DataSpec,
    /// One entry per worker process: its device. The same device may appear
    /// several times (`--workers-per-gpu`).
    pub devices: Vec<DeviceSpec>,
    /// The worker setup shared by all workers (name and device are set per
    /// worker).
    pub worker: WorkerConfig,
    /// Items per chunk.
    pub chunk_size: u64,
    /// Output file.
    pub out: PathBuf,
    /// Output format.
    pub format: OutputFormat,
    /// Embedding dtype, compression and shards of the output.
    pub layout: OutputLayout,
    /// What to do with an earlier run's output or parts.
    pub existing: Existing,
    /// `--update` / `--retry-failed`: bring a complete output up to date.
    pub update: Update,
    /// How long workers get, and how often they may die.
    pub patience: Patience,
    /// This process's part of the run.
    pub sharding: Sharding,
    /// The `pipeline` executable to spawn workers from.
    pub exe: PathBuf,
}

/// What a run does with what an earlier run left at `out`. Parts of an
/// interrupted run are always resumed unless `Overwrite`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Existing {
    /// A complete `out` is an error (the default).
    #[default]
    Refuse,
    /// A complete `out` is accepted as done (`--resume`).
    Resume,
    /// Start afresh: delete the parts of an earlier run, replace `out`
    /// (`--overwrite`).
    Overwrite,
}

/// How long workers get, and how often they may die.
#[derive(Debug, Clone)]
pub struct Patience {
    /// Deaths in a row (without a finished span between them, and not
    /// explained by an isolated suspect) before a worker slot is given up.
    pub max_restarts: u32,
    /// A worker with work in flight and no message for this long is killed
    /// as hung; `None`: 120 s + 2 s per image of its batch.
    pub hang_timeout: Option<Duration>,
    /// After SIGINT/SIGTERM, how long spans in flight may take to finish.
    pub grace: Duration,
}

impl Default for Patience {
    fn default() -> Self {
        Self {
            max_restarts: MAX_RESTARTS,
            hang_timeout: None,
            grace: DEFAULT_GRACE,
        }
    }
}

/// This process's part of a run split over several (cluster array tasks).
#[derive(Debug, Clone)]
pub struct Sharding {
    /// The part of the chunks this process runs ([`Shard::ALL`] on one
    /// machine); shards share `out`'s part folder.
    pub shard: Shard,
    /// Where the shard came from (`--shard`, `SLURM_ARRAY_TASK_ID=1 of 3 tasks`).
    pub source: Option<String>,
    /// With several shards: assemble the output if this shard finds every
    /// chunk committed when it ends (`infer --merge`).
    pub merge: bool,
}

impl Default for Sharding {
    fn default() -> Self {
        Self {
            shard: Shard::ALL,
            source: None,
            merge: false,
        }
    }
}

/// Deaths in a row (not explained by an isolated suspect) before a worker
/// slot is given up.
pub const MAX_RESTARTS: u32 = 3;

/// After SIGINT/SIGTERM, how long spans in flight may take by default.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(20);

impl RunConfig {
    /// A run of `worker` on `devices` over `data` into `out`, with every
    /// other setting at its default: refuse a complete `out`, the default
    /// [`Patience`], one shard. `infer` and `bench` both start here and set
    /// what their flags change, so a new setting gets its default in one
    /// place.
    pub fn new(
        data: DataSpec,
        devices: Vec<DeviceSpec>,
        worker: WorkerConfig,
        chunk_size: u64,
        out: PathBuf,
        format: OutputFormat,
        exe: PathBuf,
    ) -> Self {
        Self {
            data,
            devices,
            worker,
            chunk_size,
            out,
            format,
            layout: OutputLayout::default(),
            existing: Existing::Refuse,
            update: Update::No,
            patience: Patience::default(),
            sharding: Sharding::default(),
            exe,
        }
    }

    /// Feature width, for CSV headers of `--task embed`.
    pub fn feature_dim(&self) -> usize {
        self.worker.model.embedding_dim(self.worker.pooling)
    }
}

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
    #[error("{flag} {path}: {source}")]
    Fingerprint {
        /// `--weights` or `--classes`.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
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

/// The output format implied by `--format`, else the file extension, else JSONL.
pub fn choose_format(flag: Option<&str>, out: &Path) -> Result<OutputFormat, UnknownFormat> {
    match flag {
        Some(f) => f.parse(),
        None => Ok(OutputFormat::from_path(out).unwrap_or(OutputFormat::Jsonl)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_follows_the_flag_then_the_extension() {
        let csv = Path::new("out/p.csv");
        assert_eq!(choose_format(None, csv), Ok(OutputFormat::Csv));
        assert_eq!(
            choose_format(Some("parquet"), csv),
            Ok(OutputFormat::Parquet)
        );
        assert_eq!(
            choose_format(None, Path::new("p.PARQUET")),
            Ok(OutputFormat::Parquet)
        );
        assert_eq!(choose_format(None, Path::new("p")), Ok(OutputFormat::Jsonl));
        assert_eq!(
            choose_format(None, Path::new("p.txt")),
            Ok(OutputFormat::Jsonl)
        );
        assert!(choose_format(Some("xml"), csv).is_err());
    }
}
