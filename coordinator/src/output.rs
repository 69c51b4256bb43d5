//! Result records and the three output formats (JSONL, CSV, Parquet).
//!
//! Writers see records strictly in index order (the run's ordered writer
//! guarantees it), and nothing in a record depends on which worker, device
//! batch or retry produced it, so the bytes depend only on the inputs, the
//! model and the flags that change results.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use arrow_array::builder::{ArrayBuilder, Float32Builder, StringBuilder, UInt32Builder};
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float16Array, Float32Array, ListArray, RecordBatch,
    StringArray, StructArray, UInt32Array, UInt64Array,
};
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields, Schema};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use pipeline_core::{ClassLabels, ItemError, ItemIndex, Prediction, Task};

/// One line of output: an item and what became of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Index in the manifest.
    pub index: ItemIndex,
    /// Path relative to `--data` (lossy UTF-8).
    pub path: String,
    /// `--keep-columns`: each kept column and its value as JSON text
    /// (`None`: null).
    pub kept: Vec<(String, Option<String>)>,
    /// The prediction, or why there is none.
    pub result: Result<Prediction, ItemError>,
}

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

/// Writes records in order; `finish` flushes and closes.
pub(crate) trait RecordSink {
    fn write(&mut self, record: &Record) -> io::Result<()>;
    fn finish(self: Box<Self>) -> io::Result<()>;
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

/// A sink writing `spec.format` to `path` (a folder for a sharded
/// layout), `rows` records in all.
pub(crate) fn open_sink(
    path: &Path,
    spec: &OutputSpec,
    rows: u64,
) -> io::Result<Box<dyn RecordSink>> {
    if spec.layout.is_folder(spec.format) {
        return Ok(Box::new(crate::folder_out::Shards::new(path, spec, rows)?));
    }
    let file = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let labels = spec.labels.clone();
    Ok(match spec.format {
        OutputFormat::Jsonl => Box::new(JsonlSink { out: file, labels }),
        OutputFormat::Csv => Box::new(CsvSink::new(file, spec, labels)?),
        OutputFormat::Parquet | OutputFormat::Npy => {
            Box::new(ParquetSink::new(file, spec, labels, true)?)
        }
    })
}

struct JsonlSink<W: Write> {
    out: W,
    labels: ClassLabels,
}

impl<W: Write> RecordSink for JsonlSink<W> {
    fn write(&mut self, record: &Record) -> io::Result<()> {
        crate::part_file::encode_jsonl(record, &self.labels, &mut self.out)
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.out.flush()
    }
}

/// One row per item. Classification: `class_1,label_1,prob_1,…` up to
/// `top_k`; embedding: `f_0…f_{d-1}`; then `error_kind,error_message`.
struct CsvSink<W: Write> {
    out: csv::Writer<W>,
    width: usize,
    kept: usize,
    row: Vec<String>,
    labels: ClassLabels,
}

impl<W: Write> CsvSink<W> {
    fn new(out: W, spec: &OutputSpec, labels: ClassLabels) -> io::Result<Self> {
        let mut header = vec!["index".to_owned(), "path".to_owned()];
        header.extend(spec.kept.iter().cloned());
        let feature_dim = spec.feature_dim;
        let width = match spec.task {
            Task::Classify { top_k } => {
                for rank in 1..=top_k {
                    header.extend([
                        format!("class_{rank}"),
                        format!("label_{rank}"),
                        format!("prob_{rank}"),
                    ]);
                }
                3 * top_k
            }
            Task::Embed => {
                header.extend((0..feature_dim).map(|i| format!("f_{i}")));
                feature_dim
            }
        };
        header.extend(["error_kind".to_owned(), "error_message".to_owned()]);
        let mut out = csv::Writer::from_writer(out);
        out.write_record(&header).map_err(io::Error::other)?;
        Ok(Self {
            out,
            width,
            kept: spec.kept.len(),
            row: Vec::with_capacity(header.len()),
            labels,
        })
    }
}

impl<W: Write> RecordSink for CsvSink<W> {
    fn write(&mut self, record: &Record) -> io::Result<()> {
        let row = &mut self.row;
        row.clear();
        row.push(record.index.to_string());
        row.push(record.path.clone());
        row.extend(record.kept.iter().map(|(_, v)| kept_text(v.as_deref())));
        match &record.result {
            Ok(Prediction::TopK(scores)) => {
                for s in scores {
                    row.extend([
                        s.class.to_string(),
                        self.labels.get(s.class).to_owned(),
                        s.prob.to_string(),
                    ]);
                }
            }
            Ok(Prediction::Embedding(values)) => row.extend(values.iter().map(f32::to_string)),
            Err(_) => {}
        }
        row.resize(2 + self.kept + self.width, String::new());
        match &record.result {
            Err(e) => row.extend([e.kind.to_string(), e.message.clone()]),
            Ok(_) => row.extend([String::new(), String::new()]),
        }
        self.out.write_record(&*row).map_err(io::Error::other)
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.out.flush()
    }
}

/// A kept value (JSON text) as a CSV or Parquet cell: a string's text, or
/// the JSON of anything else; empty for null.
fn kept_text(json: Option<&str>) -> String {
    match json.map(serde_json::from_str::<serde_json::Value>) {
        Some(Ok(serde_json::Value::String(s))) => s,
        Some(_) => json.unwrap_or_default().to_owned(),
        None => String::new(),
    }
}

/// Rows per Parquet row group.
const PARQUET_ROWS_PER_GROUP: usize = 8192;

/// Columns `index, path`, the kept columns (text), `top_k:
/// list<struct<class, label, prob>>` (or `embedding:
/// fixed_size_list<float32|float16>`), `error_kind, error_message`; the
/// result column is null for failed items and the error columns null
/// otherwise. Without the result column: npy's metadata.
pub(crate) struct ParquetSink<W: Write + Send> {
    writer: ArrowWriter<W>,
    schema: Arc<Schema>,
    task: Task,
    labels: ClassLabels,
    /// Whether the result column is written.
    result: bool,
    dim: usize,
    dtype: EmbeddingDtype,
    pending: Vec<Record>,
}

/// Rows per row group: about 128 MiB of data each (readers fetch and
/// decode a row group at a time), between 8,192 and 1,048,576 rows.
fn rows_per_group(row_bytes: usize) -> usize {
    ((128usize << 20) / row_bytes.max(1)).clamp(PARQUET_ROWS_PER_GROUP, 1 << 20)
}

fn class_fields() -> Fields {
    Fields::from(vec![
        Field::new("class", DataType::UInt32, false),
        Field::new("label", DataType::Utf8, false),
        Field::new("prob", DataType::Float32, false),
    ])
}

impl<W: Write + Send> ParquetSink<W> {
    pub(crate) fn new(
        out: W,
        spec: &OutputSpec,
        labels: ClassLabels,
        with_result: bool,
    ) -> io::Result<Self> {
        let task = spec.task;
        let dim = spec.feature_dim;
        let dtype = spec.layout.embedding_dtype;
        let value_type = match dtype {
            EmbeddingDtype::F32 => DataType::Float32,
            EmbeddingDtype::F16 => DataType::Float16,
        };
        let result = match task {
            Task::Classify { .. } => Field::new(
                "top_k",
                DataType::List(Arc::new(Field::new(
                    "item",
                    DataType::Struct(class_fields()),
                    false,
                ))),
                true,
            ),
            Task::Embed => Field::new(
                "embedding",
                DataType::FixedSizeList(
                    Arc::new(Field::new("item", value_type, false)),
                    dim as i32,
                ),
                true,
            ),
        };
        let mut fields = vec![
            Field::new("index", DataType::UInt64, false),
            Field::new("path", DataType::Utf8, false),
        ];
        fields.extend(
            spec.kept
                .iter()
                .map(|c| Field::new(c, DataType::Utf8, true)),
        );
        if with_result {
            fields.push(result);
        }
        fields.extend([
            Field::new("error_kind", DataType::Utf8, true),
            Field::new("error_message", DataType::Utf8, true),
        ]);
        let schema = Arc::new(Schema::new(fields));
        let row_bytes = 64
            + match task {
                Task::Embed if with_result => {
                    dim * if dtype == EmbeddingDtype::F16 { 2 } else { 4 }
                }
                _ => 0,
            };
        let props = WriterProperties::builder()
            .set_compression(match spec.layout.compression {
                Compression::Zstd => parquet::basic::Compression::ZSTD(Default::default()),
                Compression::Snappy => parquet::basic::Compression::SNAPPY,
                Compression::None => parquet::basic::Compression::UNCOMPRESSED,
            })
            .set_max_row_group_size(rows_per_group(row_bytes))
            .build();
        let writer =
            ArrowWriter::try_new(out, schema.clone(), Some(props)).map_err(io::Error::other)?;
        Ok(Self {
            writer,
            schema,
            task,
            labels,
            result: with_result,
            dim,
            dtype,
            pending: Vec::with_capacity(PARQUET_ROWS_PER_GROUP),
        })
    }

    /// Closes the file and returns the writer it wrote to.
    pub(crate) fn close(mut self) -> io::Result<W> {
        self.flush_rows()?;
        self.writer.into_inner().map_err(io::Error::other)
    }

    fn flush_rows(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.pending);
        let index = UInt64Array::from_iter_values(rows.iter().map(|r| r.index));
        let path = StringArray::from_iter_values(rows.iter().map(|r| r.path.as_str()));
        let result = match self.task {
            Task::Classify { .. } => top_k_column(&rows, &self.labels),
            Task::Embed => embedding_column(&rows, self.dim, self.dtype)?,
        };
        let error_kind: StringArray = rows
            .iter()
            .map(|r| r.result.as_ref().err().map(|e| e.kind.as_str()))
            .collect();
        let error_message: StringArray = rows
            .iter()
            .map(|r| r.result.as_ref().err().map(|e| e.message.as_str()))
            .collect();
        let mut columns: Vec<ArrayRef> = vec![Arc::new(index), Arc::new(path)];
        let kept = rows.first().map_or(0, |r| r.kept.len());
        for k in 0..kept {
            let values: StringArray = rows
                .iter()
                .map(|r| r.kept[k].1.as_deref().map(|v| kept_text(Some(v))))
                .collect();
            columns.push(Arc::new(values));
        }
        if self.result {
            columns.push(result);
        }
        columns.extend([
            Arc::new(error_kind) as ArrayRef,
            Arc::new(error_message) as ArrayRef,
        ]);
        let batch = RecordBatch::try_new(self.schema.clone(), columns).map_err(io::Error::other)?;
        self.writer.write(&batch).map_err(io::Error::other)?;
        self.pending = rows;
        self.pending.clear();
        Ok(())
    }
}

/// `fixed_size_list<float32|float16>[dim]` per row, null (over zeros)
/// for failed items.
fn embedding_column(rows: &[Record], dim: usize, dtype: EmbeddingDtype) -> io::Result<ArrayRef> {
    let mut values = Vec::with_capacity(rows.len() * dim);
    let mut valid = Vec::with_capacity(rows.len());
    for r in rows {
        match &r.result {
            Ok(Prediction::Embedding(v)) if v.len() == dim => values.extend_from_slice(v),
            Ok(Prediction::Embedding(v)) => {
                return Err(io::Error::other(format!(
                    "item {} has {} features where {dim} were expected",
                    r.index,
                    v.len()
                )));
            }
            _ => values.resize(values.len() + dim, 0.0),
        }
        valid.push(r.result.is_ok());
    }
    let (item_type, values): (DataType, ArrayRef) = match dtype {
        EmbeddingDtype::F32 => (DataType::Float32, Arc::new(Float32Array::from(values))),
        EmbeddingDtype::F16 => (
            DataType::Float16,
            Arc::new(Float16Array::from_iter_values(
                values.into_iter().map(half::f16::from_f32),
            )),
        ),
    };
    let field = Arc::new(Field::new("item", item_type, false));
    Ok(Arc::new(
        FixedSizeListArray::try_new(field, dim as i32, values, Some(valid.into()))
            .map_err(io::Error::other)?,
    ))
}

/// `list<struct<class, label, prob>>` per row, null for failed items.
fn top_k_column(rows: &[Record], labels: &ClassLabels) -> ArrayRef {
    let (mut class, mut label_b, mut prob) = (
        UInt32Builder::new(),
        StringBuilder::new(),
        Float32Builder::new(),
    );
    let mut offsets = vec![0i32];
    let mut valid = Vec::with_capacity(rows.len());
    for r in rows {
        if let Ok(Prediction::TopK(scores)) = &r.result {
            for s in scores {
                class.append_value(s.class);
                label_b.append_value(labels.get(s.class));
                prob.append_value(s.prob);
            }
        }
        valid.push(r.result.is_ok());
        offsets.push(class.len() as i32);
    }
    let class: UInt32Array = class.finish();
    let label_a: StringArray = label_b.finish();
    let prob: Float32Array = prob.finish();
    let entries = StructArray::new(
        class_fields(),
        vec![Arc::new(class), Arc::new(label_a), Arc::new(prob)],
        None,
    );
    let field = Arc::new(Field::new("item", entries.data_type().clone(), false));
    Arc::new(ListArray::new(
        field,
        OffsetBuffer::new(ScalarBuffer::from(offsets)),
        Arc::new(entries) as ArrayRef,
        Some(valid.into()),
    ))
}

impl<W: Write + Send> RecordSink for ParquetSink<W> {
    fn write(&mut self, record: &Record) -> io::Result<()> {
        self.pending.push(record.clone());
        if self.pending.len() >= PARQUET_ROWS_PER_GROUP {
            self.flush_rows()?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.flush_rows()?;
        self.writer.close().map_err(io::Error::other)?;
        Ok(())
    }
}

/// Where the output goes while the run is in progress: the final name
/// appears only when the file is complete.
pub(crate) fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    out.with_file_name(name)
}
