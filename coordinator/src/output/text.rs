//! `pipeline embed-text`'s outputs: one embedding per text, in input order.
//!
//! - JSONL: `{"index":0,"text":"…","embedding":[…]}` per line;
//! - Parquet: `index: uint64, text: utf8, embedding:
//!   fixed_size_list<float32|float16>`;
//! - npy: clip-retrieval's text layout, `text_emb/text_emb_0.npy`
//!   (`[texts, dim]`) beside `metadata/metadata_0.parquet` (`index`,
//!   `caption`).
//!
//! Written under `OUT.partial` (a file or a folder), fsynced, and renamed
//! into place, as the image outputs are.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, FixedSizeListArray, Float16Array, Float32Array, RecordBatch};
use arrow_array::{StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;

use super::format::{EmbeddingDtype, partial_path};
use super::sharded::npy_header;

/// The formats `embed-text --format` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFormat {
    /// One JSON object per line.
    Jsonl,
    /// One Parquet file.
    Parquet,
    /// clip-retrieval's folder of `.npy` and metadata.
    Npy,
}

impl std::str::FromStr for TextFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "jsonl" => Ok(Self::Jsonl),
            "parquet" => Ok(Self::Parquet),
            "npy" => Ok(Self::Npy),
            other => Err(format!("{other}: expected jsonl, parquet or npy")),
        }
    }
}

impl TextFormat {
    /// The format `out`'s name implies: `.jsonl`, `.parquet`, else a folder
    /// of npy.
    pub fn of_path(out: &Path) -> Self {
        match out.extension().and_then(|e| e.to_str()) {
            Some("jsonl") => Self::Jsonl,
            Some("parquet") => Self::Parquet,
            _ => Self::Npy,
        }
    }
}

/// Texts and their embeddings, `dim` floats each, in order.
pub struct TextEmbeddings<'a> {
    /// The texts.
    pub texts: &'a [String],
    /// Width of each embedding.
    pub dim: usize,
    /// `texts.len() × dim` floats.
    pub values: &'a [f32],
}

/// One JSONL line, its keys in this order; floats as f32's shortest
/// round-trip digits, as the image records write them.
#[derive(serde::Serialize)]
struct JsonlRow<'a> {
    index: u64,
    text: &'a str,
    embedding: &'a [f32],
}

/// Rows per Parquet row group: a group is buffered whole before it is
/// written (16 Mi floats of 768 wide at most).
const ROW_GROUP: usize = 16_384;

/// Writes `rows` to `out` in `format` (npy and Parquet in `dtype`).
pub fn write_text_embeddings(
    out: &Path,
    format: TextFormat,
    dtype: EmbeddingDtype,
    rows: &TextEmbeddings<'_>,
) -> io::Result<()> {
    let mut writer = TextWriter::create(out, format, dtype, rows.dim, rows.texts.len() as u64)?;
    writer.write(rows)?;
    writer.finish()
}

/// Where the rows go, by format.
enum Sink {
    Jsonl(BufWriter<File>),
    Parquet(ArrowWriter<File>),
    Npy {
        embeddings: BufWriter<File>,
        metadata: ArrowWriter<File>,
    },
}

/// `embed-text`'s output, written as the embeddings come, a chunk at a
/// time, so that a file of any number of texts runs in bounded memory.
/// Rows go under `OUT.partial`; [`TextWriter::finish`] fsyncs and renames
/// it into place.
pub struct TextWriter {
    out: std::path::PathBuf,
    partial: std::path::PathBuf,
    dtype: EmbeddingDtype,
    dim: usize,
    /// Rows the npy header declares (every format checks it at the end).
    rows: u64,
    written: u64,
    sink: Sink,
}

impl TextWriter {
    /// Starts `out` for `rows` texts of `dim`-wide embeddings.
    pub fn create(
        out: &Path,
        format: TextFormat,
        dtype: EmbeddingDtype,
        dim: usize,
        rows: u64,
    ) -> io::Result<Self> {
        let partial = partial_path(out);
        if partial.is_dir() {
            fs::remove_dir_all(&partial)?;
        } else if partial.exists() {
            fs::remove_file(&partial)?;
        }
        let sink = match format {
            TextFormat::Jsonl => {
                Sink::Jsonl(BufWriter::with_capacity(1 << 20, File::create(&partial)?))
            }
            TextFormat::Parquet => Sink::Parquet(parquet_writer(
                File::create(&partial)?,
                schema(dtype, dim, "text", true),
            )?),
            TextFormat::Npy => {
                fs::create_dir_all(partial.join("text_emb"))?;
                fs::create_dir_all(partial.join("metadata"))?;
                let npy = File::create(partial.join("text_emb/text_emb_0.npy"))?;
                let mut embeddings = BufWriter::with_capacity(1 << 20, npy);
                embeddings.write_all(&npy_header(dtype, rows, dim))?;
                let meta = File::create(partial.join("metadata/metadata_0.parquet"))?;
                Sink::Npy {
                    embeddings,
                    metadata: parquet_writer(meta, schema(dtype, dim, "caption", false))?,
                }
            }
        };
        Ok(Self {
            out: out.to_path_buf(),
            partial,
            dtype,
            dim,
            rows,
            written: 0,
            sink,
        })
    }

    /// The next texts and their embeddings, in order.
    pub fn write(&mut self, rows: &TextEmbeddings<'_>) -> io::Result<()> {
        assert_eq!(rows.dim, self.dim, "one width per output");
        assert_eq!(rows.values.len(), rows.texts.len() * rows.dim);
        let first = self.written;
        match &mut self.sink {
            Sink::Jsonl(w) => {
                for (i, (text, e)) in rows
                    .texts
                    .iter()
                    .zip(rows.values.chunks_exact(rows.dim))
                    .enumerate()
                {
                    let line = JsonlRow {
                        index: first + i as u64,
                        text,
                        embedding: e,
                    };
                    serde_json::to_writer(&mut *w, &line)?;
                    w.write_all(b"\n")?;
                }
            }
            Sink::Parquet(writer) => {
                let batch = table(rows, first, self.dtype, "text", true)?;
                writer.write(&batch).map_err(io::Error::other)?;
            }
            Sink::Npy {
                embeddings,
                metadata,
            } => {
                for &v in rows.values {
                    match self.dtype {
                        EmbeddingDtype::F32 => embeddings.write_all(&v.to_le_bytes())?,
                        EmbeddingDtype::F16 => {
                            embeddings.write_all(&half::f16::from_f32(v).to_le_bytes())?;
                        }
                    }
                }
                let batch = table(rows, first, self.dtype, "caption", false)?;
                metadata.write(&batch).map_err(io::Error::other)?;
            }
        }
        self.written += rows.texts.len() as u64;
        Ok(())
    }

    /// Closes, fsyncs and renames the output into place; an output that
    /// holds another number of rows than it was started for is an error.
    pub fn finish(self) -> io::Result<()> {
        if self.written != self.rows {
            return Err(io::Error::other(format!(
                "{} texts were embedded where {} were read",
                self.written, self.rows
            )));
        }
        match self.sink {
            Sink::Jsonl(w) => finish(w)?,
            Sink::Parquet(writer) => close_parquet(writer)?,
            Sink::Npy {
                embeddings,
                metadata,
            } => {
                finish(embeddings)?;
                close_parquet(metadata)?;
                for dir in ["text_emb", "metadata", ""] {
                    File::open(self.partial.join(dir))?.sync_all()?;
                }
            }
        }
        if self.out.is_dir() {
            fs::remove_dir_all(&self.out)?;
        }
        fs::rename(&self.partial, &self.out)?;
        if let Some(parent) = self.out.parent().filter(|p| !p.as_os_str().is_empty()) {
            File::open(parent)?.sync_all()?;
        }
        Ok(())
    }
}

fn finish(w: BufWriter<File>) -> io::Result<()> {
    let file = w.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()
}

/// `index`, the text column named `text_name`, and the embeddings if
/// `with_embedding`.
fn schema(dtype: EmbeddingDtype, dim: usize, text_name: &str, with_embedding: bool) -> Schema {
    let mut fields = vec![
        Field::new("index", DataType::UInt64, false),
        Field::new(text_name, DataType::Utf8, false),
    ];
    if with_embedding {
        fields.push(Field::new(
            "embedding",
            DataType::FixedSizeList(item_field(dtype), dim as i32),
            false,
        ));
    }
    Schema::new(fields)
}

fn item_field(dtype: EmbeddingDtype) -> Arc<Field> {
    let item = match dtype {
        EmbeddingDtype::F32 => DataType::Float32,
        EmbeddingDtype::F16 => DataType::Float16,
    };
    Arc::new(Field::new("item", item, false))
}

/// `rows` as a batch of [`schema`], numbered from `first`.
fn table(
    rows: &TextEmbeddings<'_>,
    first: u64,
    dtype: EmbeddingDtype,
    text_name: &str,
    with_embedding: bool,
) -> io::Result<RecordBatch> {
    let n = rows.texts.len() as u64;
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter_values(first..first + n)),
        Arc::new(StringArray::from_iter_values(rows.texts.iter())),
    ];
    if with_embedding {
        let values: ArrayRef = match dtype {
            EmbeddingDtype::F32 => Arc::new(Float32Array::from(rows.values.to_vec())),
            EmbeddingDtype::F16 => Arc::new(Float16Array::from_iter_values(
                rows.values.iter().map(|&v| half::f16::from_f32(v)),
            )),
        };
        let list = FixedSizeListArray::try_new(item_field(dtype), rows.dim as i32, values, None)
            .map_err(io::Error::other)?;
        columns.push(Arc::new(list));
    }
    let schema = schema(dtype, rows.dim, text_name, with_embedding);
    RecordBatch::try_new(Arc::new(schema), columns).map_err(io::Error::other)
}

fn parquet_writer(file: File, schema: Schema) -> io::Result<ArrowWriter<File>> {
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_size(ROW_GROUP)
        .build();
    ArrowWriter::try_new(file, Arc::new(schema), Some(props)).map_err(io::Error::other)
}

fn close_parquet(writer: ArrowWriter<File>) -> io::Result<()> {
    let file = writer.into_inner().map_err(io::Error::other)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_holds_every_text_in_order() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let texts = vec!["a cat".to_owned(), String::new(), "ünï \"q\"".to_owned()];
        let values: Vec<f32> = (0..6).map(|i| i as f32 * 0.25).collect();
        let rows = TextEmbeddings {
            texts: &texts,
            dim: 2,
            values: &values,
        };
        let jsonl = dir.path().join("t.jsonl");
        write_text_embeddings(&jsonl, TextFormat::Jsonl, EmbeddingDtype::F32, &rows)
            .expect("written");
        let lines: Vec<serde_json::Value> = fs::read_to_string(&jsonl)
            .expect("read")
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[2]["text"], "ünï \"q\"");
        assert_eq!(lines[1]["index"], 1);
        assert_eq!(lines[2]["embedding"], serde_json::json!([1.0, 1.25]));
        let first = fs::read_to_string(&jsonl).expect("read");
        assert!(
            first.starts_with("{\"index\":0,\"text\":\"a cat\",\"embedding\":[0.0,0.25]}"),
            "{first}"
        );

        let npy = dir.path().join("emb");
        write_text_embeddings(&npy, TextFormat::Npy, EmbeddingDtype::F16, &rows).expect("written");
        let bytes = fs::read(npy.join("text_emb/text_emb_0.npy")).expect("npy");
        let header = npy_header(EmbeddingDtype::F16, 3, 2);
        assert_eq!(&bytes[..header.len()], header.as_slice());
        assert_eq!(bytes.len(), header.len() + 3 * 2 * 2);
        assert!(npy.join("metadata/metadata_0.parquet").is_file());
        assert!(!dir.path().join("emb.partial").exists());
    }

    /// Rows written a chunk at a time give the bytes of one write (JSONL,
    /// npy) and the same table (Parquet), numbered on across chunks; a
    /// count other than the one started with is refused at the end.
    #[test]
    fn chunks_written_in_turn_equal_one_write() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let texts: Vec<String> = (0..7).map(|i| format!("text {i}")).collect();
        let values: Vec<f32> = (0..21).map(|i| i as f32 / 8.0).collect();
        let all = TextEmbeddings {
            texts: &texts,
            dim: 3,
            values: &values,
        };
        for (format, name) in [
            (TextFormat::Jsonl, "t.jsonl"),
            (TextFormat::Npy, "t_npy"),
            (TextFormat::Parquet, "t.parquet"),
        ] {
            let whole = dir.path().join(format!("whole_{name}"));
            write_text_embeddings(&whole, format, EmbeddingDtype::F32, &all).expect("written");
            let chunked = dir.path().join(format!("chunked_{name}"));
            let mut w =
                TextWriter::create(&chunked, format, EmbeddingDtype::F32, 3, 7).expect("started");
            for (from, to) in [(0, 3), (3, 3), (3, 7)] {
                w.write(&TextEmbeddings {
                    texts: &texts[from..to],
                    dim: 3,
                    values: &values[from * 3..to * 3],
                })
                .expect("a chunk");
            }
            w.finish().expect("finished");
            match format {
                TextFormat::Jsonl => assert_eq!(
                    fs::read(&whole).expect("read"),
                    fs::read(&chunked).expect("read")
                ),
                TextFormat::Npy => assert_eq!(
                    fs::read(whole.join("text_emb/text_emb_0.npy")).expect("read"),
                    fs::read(chunked.join("text_emb/text_emb_0.npy")).expect("read")
                ),
                TextFormat::Parquet => {
                    let read = |p: &Path| {
                        let file = File::open(p).expect("open");
                        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                            .expect("parquet")
                            .build()
                            .expect("reader")
                            .map(|b| b.expect("a batch"))
                            .collect::<Vec<_>>()
                    };
                    // Both are one row group, read back as one batch.
                    let (whole, chunked) = (read(&whole), read(&chunked));
                    assert_eq!(whole.len(), 1);
                    assert_eq!(whole, chunked);
                }
            }
        }
        let short = dir.path().join("short.jsonl");
        let mut w = TextWriter::create(&short, TextFormat::Jsonl, EmbeddingDtype::F32, 3, 7)
            .expect("started");
        w.write(&TextEmbeddings {
            texts: &texts[..2],
            dim: 3,
            values: &values[..6],
        })
        .expect("a chunk");
        let error = w.finish().expect_err("two of seven rows").to_string();
        assert!(
            error.contains("2 texts were embedded where 7 were read"),
            "{error}"
        );
        assert!(!short.exists());
    }
}
