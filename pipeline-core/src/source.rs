//! Where a dataset comes from (`--data` and the flags that read it) and
//! where one item's bytes are.
//!
//! The coordinator turns a [`DataSpec`] into a [`crate::Manifest`] whose
//! entries each carry a [`Location`]; the worker's loader fetches a
//! location's bytes. Neither needs to know how the other reads.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How `--data` is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputFormat {
    /// A folder (or an `s3://bucket/prefix/`) of image files, in sorted order.
    Folder,
    /// A text file, one path or URL per line.
    List,
    /// A CSV table with a header row.
    Csv,
    /// A tab-separated table with a header row.
    Tsv,
    /// One JSON object per line.
    Jsonl,
    /// An Apache Parquet table: paths/URLs in a column, or the image bytes.
    Parquet,
    /// WebDataset tar shards.
    Webdataset,
}

impl InputFormat {
    /// Every format, for help and error texts.
    pub const ALL: [InputFormat; 7] = [
        Self::Folder,
        Self::List,
        Self::Csv,
        Self::Tsv,
        Self::Jsonl,
        Self::Parquet,
        Self::Webdataset,
    ];

    /// The flag value (`folder`, `list`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Folder => "folder",
            Self::List => "list",
            Self::Csv => "csv",
            Self::Tsv => "tsv",
            Self::Jsonl => "jsonl",
            Self::Parquet => "parquet",
            Self::Webdataset => "webdataset",
        }
    }

    /// The format a file name implies by its extension (`None`: no hint).
    pub fn from_name(name: &str) -> Option<Self> {
        let name = name.split(['?', '#']).next().unwrap_or(name);
        let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
        match ext.as_str() {
            "txt" | "lst" | "list" => Some(Self::List),
            "csv" => Some(Self::Csv),
            "tsv" => Some(Self::Tsv),
            "jsonl" | "ndjson" => Some(Self::Jsonl),
            "parquet" | "pq" => Some(Self::Parquet),
            "tar" => Some(Self::Webdataset),
            _ => None,
        }
    }
}

impl fmt::Display for InputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An `--input-format` value that names no format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown input format `{0}`; expected folder, list, csv, tsv, jsonl, parquet or webdataset"
)]
pub struct UnknownInputFormat(pub String);

impl FromStr for InputFormat {
    type Err = UnknownInputFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        match lower.as_str() {
            "ndjson" => Ok(Self::Jsonl),
            "wds" | "tar" => Ok(Self::Webdataset),
            "txt" => Ok(Self::List),
            _ => Self::ALL
                .into_iter()
                .find(|f| f.as_str() == lower)
                .ok_or_else(|| UnknownInputFormat(s.to_owned())),
        }
    }
}

/// What `--data` and its companion flags say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataSpec {
    /// The argument: a local path, a brace pattern of shards, or an
    /// `s3://` / `http(s)://` URL.
    pub data: String,
    /// `--input-format`; `None` detects it from `data`.
    pub format: Option<InputFormat>,
    /// `--path-column`; `None` takes the first of `path`, `url`,
    /// `image_path` the table has.
    pub path_column: Option<String>,
    /// `--image-column`: a Parquet column holding the image bytes.
    pub image_column: Option<String>,
    /// `--keep-columns`: table columns (or WebDataset member extensions)
    /// carried into the output; `*` keeps every one but the image's.
    pub keep_columns: Vec<String>,
}

impl DataSpec {
    /// `data` with everything detected.
    pub fn new(data: impl Into<String>) -> Self {
        Self {
            data: data.into(),
            format: None,
            path_column: None,
            image_column: None,
            keep_columns: Vec::new(),
        }
    }

    /// Whether `data` names something in object storage or on a web server.
    pub fn is_remote(&self) -> bool {
        is_url(&self.data)
    }
}

/// Whether `s` is an `s3://`, `http://` or `https://` URL.
pub fn is_url(s: &str) -> bool {
    let lower = s.get(..8).unwrap_or(s).to_ascii_lowercase();
    lower.starts_with("s3://") || lower.starts_with("http://") || lower.starts_with("https://")
}

/// A byte range of a file or object (a tar member's body).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ByteRange {
    /// First byte.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

impl ByteRange {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// Where one item's bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Location {
    /// A local file (its path as OS bytes: paths need not be UTF-8), whole
    /// or a byte range of it.
    File {
        /// Absolute path.
        path: Vec<u8>,
        /// A part of the file (a tar member); `None`: all of it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        range: Option<ByteRange>,
    },
    /// An object behind an `s3://` or `http(s)://` URL, whole or a range.
    Url {
        /// The URL.
        url: String,
        /// A part of the object (a tar member); `None`: all of it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        range: Option<ByteRange>,
    },
    /// A cell of a binary (or `struct{bytes, path}`) column of a local
    /// Parquet file.
    Cell {
        /// Absolute path of the Parquet file.
        file: Vec<u8>,
        /// The column.
        column: String,
        /// Row number in the file.
        row: u64,
    },
}

impl fmt::Display for Location {
    /// The file or URL (lossy UTF-8; a URL without its credentials,
    /// `redact_url`), with `@offset+len` for a range and `#row` for a
    /// cell: for messages and logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let range = |f: &mut fmt::Formatter<'_>, range: &Option<ByteRange>| match range {
            Some(r) => write!(f, "@{}+{}", r.offset, r.len),
            None => Ok(()),
        };
        match self {
            Self::File { path, range: r } => {
                f.write_str(&String::from_utf8_lossy(path))?;
                range(f, r)
            }
            Self::Url { url, range: r } => {
                // Messages and logs never show a credential.
                f.write_str(&crate::redact::redact_url(url))?;
                range(f, r)
            }
            Self::Cell { file, column, row } => {
                write!(f, "{}:{column}#{row}", String::from_utf8_lossy(file))
            }
        }
    }
}

/// How workers read remote items (`--io-concurrency`, `--io-timeout`,
/// `--io-retries`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RemoteSpec {
    /// Requests in flight per worker.
    pub concurrency: usize,
    /// Seconds one request may take, body included (or, where
    /// `idle_only`, may go without a byte arriving).
    pub timeout_s: f64,
    /// Retries of a request that failed in a way worth retrying (timeouts,
    /// resets, 5xx, 429).
    pub retries: u32,
    /// `timeout_s` limits only a silence, not a whole body: for a large
    /// object (a model's file) that may take longer than any total limit
    /// and still be arriving steadily.
    #[serde(default)]
    pub idle_only: bool,
}

impl RemoteSpec {
    /// The per-request timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_s.max(0.001))
    }
}

impl Default for RemoteSpec {
    fn default() -> Self {
        Self {
            concurrency: 32,
            timeout_s: 30.0,
            retries: 5,
            idle_only: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_from_flags_and_names() {
        for f in InputFormat::ALL {
            assert_eq!(f.as_str().parse::<InputFormat>(), Ok(f));
        }
        assert_eq!("WDS".parse::<InputFormat>(), Ok(InputFormat::Webdataset));
        assert!("zip".parse::<InputFormat>().is_err());
        assert_eq!(
            InputFormat::from_name("a/b.PARQUET"),
            Some(InputFormat::Parquet)
        );
        assert_eq!(
            InputFormat::from_name("s3://b/x.csv?v=1"),
            Some(InputFormat::Csv)
        );
        assert_eq!(
            InputFormat::from_name("shards/{0..9}.tar"),
            Some(InputFormat::Webdataset)
        );
        assert_eq!(InputFormat::from_name("images"), None);
    }

    #[test]
    fn urls_are_told_from_paths() {
        assert!(is_url("s3://bucket/x"));
        assert!(is_url("HTTPS://host/x"));
        assert!(!is_url("s3:/bucket"));
        assert!(!is_url("./http://x"));
    }
}
