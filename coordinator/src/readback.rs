//! An existing output read back, row by row in its order, as each row's
//! result (a prediction or an error), for `--update` and `--retry-failed`.
//! Every format the tool writes reads back to the result it was written
//! from: JSONL and CSV floats are shortest round-trip text, Parquet and npy
//! hold f32 (or f16, which re-encodes to the same bits), and top-k labels
//! are re-derived from the class.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float16Type, Float32Type, UInt32Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use pipeline_core::{ClassScore, ItemError, Prediction, Task};

use crate::output::decode_jsonl;
use crate::output::{OutputFormat, OutputSpec};

/// One row's result.
pub(crate) type RowResult = Result<Prediction, ItemError>;

fn bad(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

fn error(kind: &str, message: &str) -> io::Result<ItemError> {
    serde_json::from_value(serde_json::json!({ "kind": kind, "message": message }))
        .map_err(|e| bad(format!("error kind `{kind}`: {e}")))
}

/// The rows of an output, in order.
pub(crate) struct Rows {
    source: Source,
    buffered: VecDeque<RowResult>,
    task: Task,
    dim: usize,
}

/// The elements of an `.npy` file, as f32.
type Values = Box<dyn Iterator<Item = io::Result<f32>>>;

enum Source {
    Jsonl(io::Lines<BufReader<File>>),
    Csv(csv::StringRecordsIntoIter<File>, Vec<String>),
    /// Parquet files still to read, and the one being read.
    Parquet(VecDeque<PathBuf>, Option<ParquetRecordBatchReader>),
    /// npy shards: the next shard's number, and the open one's embeddings
    /// (an element iterator) and metadata batches.
    Npy {
        dir: PathBuf,
        next: u64,
        open: Option<(Values, ParquetRecordBatchReader)>,
    },
}

fn parquet_reader(path: &Path) -> io::Result<ParquetRecordBatchReader> {
    ParquetRecordBatchReaderBuilder::try_new(File::open(path)?)
        .and_then(|b| b.build())
        .map_err(|e| bad(format!("{}: {e}", path.display())))
}

/// Opens the output at `out` as `spec` says it was written.
pub(crate) fn open(out: &Path, spec: &OutputSpec) -> io::Result<Rows> {
    let source = match spec.format {
        OutputFormat::Npy => Source::Npy {
            dir: out.to_owned(),
            next: 0,
            open: None,
        },
        OutputFormat::Parquet if spec.layout.is_folder(spec.format) => {
            let mut files: Vec<PathBuf> = std::fs::read_dir(out)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
                .collect();
            files.sort();
            Source::Parquet(files.into(), None)
        }
        OutputFormat::Parquet => Source::Parquet(VecDeque::from([out.to_owned()]), None),
        OutputFormat::Jsonl => Source::Jsonl(BufReader::new(File::open(out)?).lines()),
        OutputFormat::Csv => {
            let mut reader = csv::Reader::from_path(out).map_err(bad)?;
            let header = reader
                .headers()
                .map_err(bad)?
                .iter()
                .map(str::to_owned)
                .collect();
            Source::Csv(reader.into_records(), header)
        }
    };
    Ok(Rows {
        source,
        buffered: VecDeque::new(),
        task: spec.task,
        dim: spec.feature_dim,
    })
}

impl Rows {
    /// The next row's result; `None` after the last row.
    pub(crate) fn next_result(&mut self) -> io::Result<Option<RowResult>> {
        loop {
            if let Some(row) = self.buffered.pop_front() {
                return Ok(Some(row));
            }
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// Buffers more rows; false at the end.
    fn fill(&mut self) -> io::Result<bool> {
        match &mut self.source {
            Source::Jsonl(lines) => match lines.next() {
                None => Ok(false),
                Some(line) => {
                    let record = decode_jsonl(line?.as_bytes(), &[])?;
                    self.buffered.push_back(record.result);
                    Ok(true)
                }
            },
            Source::Csv(records, header) => match records.next() {
                None => Ok(false),
                Some(row) => {
                    let row = row.map_err(bad)?;
                    let result = csv_result(&row, header, self.task, self.dim)?;
                    self.buffered.push_back(result);
                    Ok(true)
                }
            },
            Source::Parquet(files, reader) => loop {
                if let Some(r) = reader {
                    match r.next() {
                        Some(batch) => {
                            let batch = batch.map_err(bad)?;
                            let results = parquet_results(&batch, self.task)?;
                            self.buffered.extend(results);
                            return Ok(true);
                        }
                        None => *reader = None,
                    }
                }
                match files.pop_front() {
                    Some(path) => *reader = Some(parquet_reader(&path)?),
                    None => return Ok(false),
                }
            },
            Source::Npy { dir, next, open } => loop {
                if let Some((values, meta)) = open {
                    match meta.next() {
                        Some(batch) => {
                            let batch = batch.map_err(bad)?;
                            let errors = errors(&batch)?;
                            for error in errors {
                                let row: Vec<f32> =
                                    values.by_ref().take(self.dim).collect::<io::Result<_>>()?;
                                if row.len() != self.dim {
                                    return Err(bad(
                                        "an npy shard has fewer rows than its metadata",
                                    ));
                                }
                                self.buffered.push_back(match error {
                                    Some(e) => Err(e),
                                    None => Ok(Prediction::Embedding(row)),
                                });
                            }
                            return Ok(true);
                        }
                        None => *open = None,
                    }
                }
                let npy = dir.join(format!("img_emb/img_emb_{next}.npy"));
                if !npy.exists() {
                    return Ok(false);
                }
                let meta = parquet_reader(&dir.join(format!("metadata/metadata_{next}.parquet")))?;
                *open = Some((npy_values(&npy)?, meta));
                *next += 1;
            },
        }
    }
}

/// The elements of an f32 or f16 `.npy` file, as f32.
fn npy_values(path: &Path) -> io::Result<Values> {
    let file = npyz::NpyFile::new(BufReader::new(File::open(path)?))?;
    let half = matches!(file.dtype(), npyz::DType::Plain(t) if t.size_field() == 2);
    Ok(if half {
        Box::new(
            file.data::<half::f16>()
                .map_err(bad)?
                .map(|v| v.map(f32::from)),
        )
    } else {
        Box::new(file.data::<f32>().map_err(bad)?)
    })
}

/// Each row's error (or `None`) from the `error_kind` and `error_message`
/// columns.
fn errors(batch: &RecordBatch) -> io::Result<Vec<Option<ItemError>>> {
    let column = |name: &str| -> io::Result<&ArrayRef> {
        batch
            .column_by_name(name)
            .ok_or_else(|| bad(format!("no `{name}` column")))
    };
    let kind = column("error_kind")?.as_string::<i32>();
    let message = column("error_message")?.as_string::<i32>();
    (0..batch.num_rows())
        .map(|r| {
            kind.is_valid(r)
                .then(|| error(kind.value(r), message.value(r)))
                .transpose()
        })
        .collect()
}

fn parquet_results(batch: &RecordBatch, task: Task) -> io::Result<Vec<RowResult>> {
    let errors = errors(batch)?;
    let mut results = Vec::with_capacity(errors.len());
    for (r, error) in errors.into_iter().enumerate() {
        if let Some(e) = error {
            results.push(Err(e));
            continue;
        }
        results.push(Ok(match task {
            Task::Embed => {
                let list = batch
                    .column_by_name("embedding")
                    .ok_or_else(|| bad("no `embedding` column"))?
                    .as_fixed_size_list();
                let values = list.value(r);
                match values.data_type() {
                    DataType::Float16 => Prediction::Embedding(
                        values
                            .as_primitive::<Float16Type>()
                            .values()
                            .iter()
                            .map(|v| f32::from(*v))
                            .collect(),
                    ),
                    _ => Prediction::Embedding(
                        values.as_primitive::<Float32Type>().values().to_vec(),
                    ),
                }
            }
            Task::Raw => Prediction::Outputs(crate::output::raw_arrays(
                batch
                    .column_by_name("outputs")
                    .ok_or_else(|| bad("no `outputs` column"))?
                    .as_list::<i32>(),
                r,
            )?),
            Task::Classify { .. } => {
                let list = batch
                    .column_by_name("top_k")
                    .ok_or_else(|| bad("no `top_k` column"))?
                    .as_list::<i32>();
                let entries = list.value(r);
                let s = entries.as_struct();
                let class = s.column(0).as_primitive::<UInt32Type>();
                let prob = s.column(2).as_primitive::<Float32Type>();
                Prediction::TopK(
                    (0..s.len())
                        .map(|k| ClassScore {
                            class: class.value(k),
                            prob: prob.value(k),
                        })
                        .collect(),
                )
            }
        }));
    }
    Ok(results)
}

fn csv_result(
    row: &csv::StringRecord,
    header: &[String],
    task: Task,
    dim: usize,
) -> io::Result<RowResult> {
    let field = |name: &str| -> io::Result<&str> {
        header
            .iter()
            .position(|h| h == name)
            .and_then(|i| row.get(i))
            .ok_or_else(|| bad(format!("no `{name}` column")))
    };
    let kind = field("error_kind")?;
    if !kind.is_empty() {
        return Ok(Err(error(kind, field("error_message")?)?));
    }
    let number = |name: String| -> io::Result<f32> {
        field(&name)?
            .parse()
            .map_err(|e| bad(format!("{name}: {e}")))
    };
    Ok(Ok(match task {
        Task::Embed => Prediction::Embedding(
            (0..dim)
                .map(|i| number(format!("f_{i}")))
                .collect::<io::Result<_>>()?,
        ),
        Task::Classify { top_k } => {
            let mut scores = Vec::new();
            for k in 1..=top_k {
                let class = field(&format!("class_{k}"))?;
                if class.is_empty() {
                    break;
                }
                scores.push(ClassScore {
                    class: class.parse().map_err(bad)?,
                    prob: number(format!("prob_{k}"))?,
                });
            }
            Prediction::TopK(scores)
        }
        Task::Raw => return Err(bad("--task raw has no CSV form")),
    }))
}
