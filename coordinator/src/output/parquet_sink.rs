//! Parquet output, one file; also npy's metadata files.

use std::io::{self, Write};
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
use pipeline_core::{ClassLabels, Prediction, Task};

use super::format::{Compression, EmbeddingDtype, OutputSpec};
use super::record::{Record, RecordSink, kept_text};

/// Rows per Parquet row group.
const PARQUET_ROWS_PER_GROUP: usize = 8192;

/// `--task raw`'s values per row group at most (128 MiB of f32).
const RAW_VALUES_PER_GROUP: usize = 1 << 25;

/// Columns `index, path`, the kept columns (text), `top_k:
/// list<struct<class, label, prob>>` (or `embedding:
/// fixed_size_list<float32|float16>`, or raw's `outputs`,
/// `raw_column.rs`), `error_kind, error_message`; the
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
    /// Raw output values in `pending`.
    pending_values: usize,
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
            Task::Raw => super::raw_column::raw_field(),
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
            pending_values: 0,
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
        self.pending_values = 0;
        let index = UInt64Array::from_iter_values(rows.iter().map(|r| r.index));
        let path = StringArray::from_iter_values(rows.iter().map(|r| r.path.as_str()));
        let result = match self.task {
            Task::Classify { .. } => top_k_column(&rows, &self.labels),
            Task::Embed => embedding_column(&rows, self.dim, self.dtype)?,
            Task::Raw => super::raw_column::raw_column(&rows)?,
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
        if self.task == Task::Raw {
            // Its rows' sizes are unknown up front: each batch its own row
            // group, so the writer never holds more than one.
            self.writer.flush().map_err(io::Error::other)?;
        }
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
        if let Ok(Prediction::Outputs(arrays)) = &record.result {
            self.pending_values += arrays.iter().map(|a| a.values.len()).sum::<usize>();
        }
        self.pending.push(record.clone());
        // Raw outputs can be megabytes an image: a row group ends by its
        // values too (far below the i32 offsets' 2^31).
        if self.pending.len() >= PARQUET_ROWS_PER_GROUP
            || self.pending_values >= RAW_VALUES_PER_GROUP
        {
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
