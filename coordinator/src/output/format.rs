//! What the user asks an output to be: its format, how embeddings are
//! stored, compression, sharding (each checked against the task), and
//! where a file lives until it is complete.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use pipeline_core::{ClassLabels, Task};

/// The output file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// One JSON object per line (the default).
    Jsonl,
    /// Comma-separated, one row per item, top-k or features in columns.
    Csv,
    /// Apache Parquet, readable by pyarrow, pandas, polars and DuckDB.
    Parquet,
    /// A folder in clip-retrieval's layout (`--task embed`):
    /// `img_emb/img_emb_{n}.npy` beside `metadata/metadata_{n}.parquet`.
    Npy,
}

/// How binary outputs store embeddings (`--embedding-dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmbeddingDtype {
    /// 32-bit floats: the values as computed.
    #[default]
    F32,
    /// IEEE half precision, rounded to nearest (relative error ≤ 2⁻¹¹).
    F16,
}

impl FromStr for EmbeddingDtype {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(Self::F32),
            "f16" | "float16" => Ok(Self::F16),
            _ => Err(format!("unknown dtype `{s}`; expected f32 or f16")),
        }
    }
}

/// Parquet compression (`--compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// zstd at its default level: the smallest files readers take fast.
    #[default]
    Zstd,
    /// Snappy: faster to write, larger.
    Snappy,
    /// Uncompressed.
    None,
}

impl FromStr for Compression {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "zstd" => Ok(Self::Zstd),
            "snappy" => Ok(Self::Snappy),
            "none" | "uncompressed" => Ok(Self::None),
            _ => Err(format!(
                "unknown compression `{s}`; expected zstd, snappy or none"
            )),
        }
    }
}

/// Rows per shard of `npy` output when `--shard-rows` is not given.
pub const DEFAULT_SHARD_ROWS: u64 = 1_000_000;

/// How the output is laid out beyond its format. None of it changes a
/// record, so none of it is in the run identity: parts written under one
/// layout assemble under another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutputLayout {
    /// `--embedding-dtype` (npy and Parquet).
    pub embedding_dtype: EmbeddingDtype,
    /// `--compression` (Parquet, and npy's metadata).
    pub compression: Compression,
    /// `--shard-rows`: rows per file. `npy` is always sharded (default
    /// [`DEFAULT_SHARD_ROWS`]); Parquet only when given, into a folder.
    pub shard_rows: Option<u64>,
}

impl OutputLayout {
    /// The one-line reason this layout does not fit `format` and `task`.
    pub fn check(&self, format: OutputFormat, task: Task) -> Result<(), String> {
        let binary = matches!(format, OutputFormat::Parquet | OutputFormat::Npy);
        if format == OutputFormat::Npy && task != Task::Embed {
            return Err(
                "--format npy holds embeddings: add --task embed (or choose jsonl, csv or parquet)"
                    .to_owned(),
            );
        }
        if task == Task::Raw && !matches!(format, OutputFormat::Jsonl | OutputFormat::Parquet) {
            return Err(
                "--task raw writes JSONL or Parquet (each output's name, shape, dtype and \
                 values); its CSV and npy forms are not built"
                    .to_owned(),
            );
        }
        if self.embedding_dtype != EmbeddingDtype::F32 && !(binary && task == Task::Embed) {
            return Err(
                "--embedding-dtype applies to embeddings in npy or parquet output; \
                 JSONL and CSV keep every float exactly"
                    .to_owned(),
            );
        }
        if self.shard_rows.is_some() && !binary {
            return Err("--shard-rows applies to npy and parquet output".to_owned());
        }
        if self.compression != Compression::default() && !binary {
            return Err("--compression applies to parquet and npy output".to_owned());
        }
        Ok(())
    }

    /// Whether `format` under this layout writes a folder, not a file.
    pub fn is_folder(&self, format: OutputFormat) -> bool {
        format == OutputFormat::Npy
            || (format == OutputFormat::Parquet && self.shard_rows.is_some())
    }
}

impl OutputFormat {
    /// The format a file name implies, by extension.
    pub fn from_path(path: &Path) -> Option<Self> {
        path.extension()?.to_str()?.parse().ok()
    }
}

/// A `--format` value that names no format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown format `{0}`; expected jsonl, csv, parquet or npy")]
pub struct UnknownFormat(pub String);

impl FromStr for OutputFormat {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "jsonl" | "ndjson" => Ok(Self::Jsonl),
            "csv" => Ok(Self::Csv),
            "parquet" | "pq" => Ok(Self::Parquet),
            "npy" => Ok(Self::Npy),
            _ => Err(UnknownFormat(s.to_owned())),
        }
    }
}

/// What an output file holds and how its columns are named.
#[derive(Debug, Clone)]
pub(crate) struct OutputSpec {
    pub(crate) format: OutputFormat,
    pub(crate) task: Task,
    /// Feature width, for CSV headers of `--task embed`.
    pub(crate) feature_dim: usize,
    /// Class names (ImageNet's, or a zero-shot run's own).
    pub(crate) labels: ClassLabels,
    /// `--keep-columns`, as the source resolved them.
    pub(crate) kept: Vec<String>,
    /// Dtype, compression, shards.
    pub(crate) layout: OutputLayout,
}

/// Where the output goes while the run is in progress: the final name
/// appears only when the file is complete.
pub(crate) fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    out.with_file_name(name)
}
