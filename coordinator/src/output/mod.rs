//! Result records and the output formats: JSONL, CSV, Parquet (one file,
//! or a folder of shards) and npy shards, one writer per file.
//!
//! Writers see records strictly in index order (the run's ordered writer
//! guarantees it), and nothing in a record depends on which worker, device
//! batch or retry produced it, so the bytes depend only on the inputs, the
//! model and the flags that change results.

mod csv_sink;
mod format;
mod jsonl;
mod parquet_sink;
mod raw_column;
mod record;
mod sharded;
mod text;

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;

use self::csv_sink::CsvSink;
pub use self::format::{
    Compression, DEFAULT_SHARD_ROWS, EmbeddingDtype, OutputFormat, OutputLayout, UnknownFormat,
};
pub(crate) use self::format::{OutputSpec, partial_path};
use self::jsonl::JsonlSink;
pub use self::jsonl::encode_part;
pub(crate) use self::jsonl::{decode_jsonl, encode_jsonl, jsonl_error, line_index};
use self::parquet_sink::ParquetSink;
pub(crate) use self::raw_column::raw_arrays;
pub use self::record::Record;
pub(crate) use self::record::RecordSink;
use self::sharded::Shards;
pub use self::text::{TextEmbeddings, TextFormat, TextWriter, write_text_embeddings};

/// A sink writing `spec.format` to `path` (a folder for a sharded
/// layout), `rows` records in all.
pub(crate) fn open_sink(
    path: &Path,
    spec: &OutputSpec,
    rows: u64,
) -> io::Result<Box<dyn RecordSink>> {
    if spec.layout.is_folder(spec.format) {
        return Ok(Box::new(Shards::new(path, spec, rows)?));
    }
    let file = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let labels = spec.labels.clone();
    Ok(match spec.format {
        OutputFormat::Jsonl => Box::new(JsonlSink::new(file, labels)),
        OutputFormat::Csv => Box::new(CsvSink::new(file, spec, labels)?),
        OutputFormat::Parquet | OutputFormat::Npy => {
            Box::new(ParquetSink::new(file, spec, labels, true)?)
        }
    })
}
