//! What a run is given ([`RunConfig`], validated by the front end).

use std::path::{Path, PathBuf};
use std::time::Duration;

use pipeline_core::{DataSpec, DeviceSpec, Shard, WorkerConfig};

use crate::output::{OutputFormat, OutputLayout, UnknownFormat};

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

/// What `--update` does with a complete output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Update {
    /// Nothing: a complete output is refused or kept as it is.
    #[default]
    No,
    /// `--update`: compute new and changed items, drop deleted ones.
    Changed,
    /// `--retry-failed`: that, and compute the items that failed.
    AlsoFailed,
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
