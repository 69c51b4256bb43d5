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
    index: usize,
    text: &'a str,
    embedding: &'a [f32],
}

/// Writes `rows` to `out` in `format` (npy and Parquet in `dtype`).
pub fn write_text_embeddings(
    out: &Path,
    format: TextFormat,
    dtype: EmbeddingDtype,
    rows: &TextEmbeddings<'_>,
) -> io::Result<()> {
    assert_eq!(rows.values.len(), rows.texts.len() * rows.dim);
    let partial = partial_path(out);
    if partial.is_dir() {
        fs::remove_dir_all(&partial)?;
    } else if partial.exists() {
        fs::remove_file(&partial)?;
    }
    match format {
        TextFormat::Jsonl => {
            let mut w = BufWriter::with_capacity(1 << 20, File::create(&partial)?);
            for (i, (text, e)) in rows
                .texts
                .iter()
                .zip(rows.values.chunks_exact(rows.dim))
                .enumerate()
            {
                let line = JsonlRow {
                    index: i,
                    text,
                    embedding: e,
                };
                serde_json::to_writer(&mut w, &line)?;
                w.write_all(b"\n")?;
            }
            finish(w)?;
        }
        TextFormat::Parquet => {
            let file = File::create(&partial)?;
            let batch = table(rows, dtype, "text", true)?;
            write_parquet(file, batch)?;
        }
        TextFormat::Npy => {
            fs::create_dir_all(partial.join("text_emb"))?;
            fs::create_dir_all(partial.join("metadata"))?;
            let npy = partial.join("text_emb/text_emb_0.npy");
            let mut w = BufWriter::with_capacity(1 << 20, File::create(&npy)?);
            w.write_all(&npy_header(dtype, rows.texts.len() as u64, rows.dim))?;
            for &v in rows.values {
                match dtype {
                    EmbeddingDtype::F32 => w.write_all(&v.to_le_bytes())?,
                    EmbeddingDtype::F16 => w.write_all(&half::f16::from_f32(v).to_le_bytes())?,
                }
            }
            finish(w)?;
            let meta = File::create(partial.join("metadata/metadata_0.parquet"))?;
            write_parquet(meta, table(rows, dtype, "caption", false)?)?;
            for dir in ["text_emb", "metadata", ""] {
                File::open(partial.join(dir))?.sync_all()?;
            }
        }
    }
    if out.is_dir() {
        fs::remove_dir_all(out)?;
    }
    fs::rename(&partial, out)?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        File::open(parent)?.sync_all()?;
    }
    Ok(())
}

fn finish(w: BufWriter<File>) -> io::Result<()> {
    let file = w.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()
}

/// `index`, the text column named `text_name`, and the embeddings if
/// `with_embedding`.
fn table(
    rows: &TextEmbeddings<'_>,
    dtype: EmbeddingDtype,
    text_name: &str,
    with_embedding: bool,
) -> io::Result<RecordBatch> {
    let n = rows.texts.len();
    let mut fields = vec![
        Field::new("index", DataType::UInt64, false),
        Field::new(text_name, DataType::Utf8, false),
    ];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter_values(0..n as u64)),
        Arc::new(StringArray::from_iter_values(rows.texts.iter())),
    ];
    if with_embedding {
        let (item, values): (DataType, ArrayRef) = match dtype {
            EmbeddingDtype::F32 => (
                DataType::Float32,
                Arc::new(Float32Array::from(rows.values.to_vec())),
            ),
            EmbeddingDtype::F16 => (
                DataType::Float16,
                Arc::new(Float16Array::from_iter_values(
                    rows.values.iter().map(|&v| half::f16::from_f32(v)),
                )),
            ),
        };
        let item = Arc::new(Field::new("item", item, false));
        let list = FixedSizeListArray::try_new(item.clone(), rows.dim as i32, values, None)
            .map_err(io::Error::other)?;
        fields.push(Field::new(
            "embedding",
            DataType::FixedSizeList(item, rows.dim as i32),
            false,
        ));
        columns.push(Arc::new(list));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(io::Error::other)
}

fn write_parquet(file: File, batch: RecordBatch) -> io::Result<()> {
    let mut writer = ArrowWriter::try_new(file, batch.schema(), None).map_err(io::Error::other)?;
    writer.write(&batch).map_err(io::Error::other)?;
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
}
