//! Outputs that are folders of shards, each holding a contiguous range of
//! `--shard-rows` records in input order:
//!
//! - `--format npy`, clip-retrieval's layout, which numpy,
//!   embedding-reader and autofaiss read as-is:
//!   `img_emb/img_emb_{n}.npy` (`[rows, dim]`, f32 or f16) beside
//!   `metadata/metadata_{n}.parquet` (`index`, `path`, kept columns,
//!   `error_kind`, `error_message`). A failed item keeps its row, as zeros,
//!   so row `i` of a shard is always its `i`-th item.
//! - Parquet with `--shard-rows`: `part-{n:05}.parquet`, each a complete
//!   Parquet file of the usual columns.
//!
//! The folder is written under a temporary name and renamed into place
//! whole by assembly, like single-file outputs; every file is fsynced
//! before that.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use pipeline_core::Prediction;

use super::format::{DEFAULT_SHARD_ROWS, EmbeddingDtype, OutputFormat, OutputSpec};
use super::parquet_sink::ParquetSink;
use super::record::{Record, RecordSink};

type Out = BufWriter<File>;

/// Embedding rows of one `.npy` file, little-endian f32 or f16 after the
/// header [`npy_header`] wrote.
struct Embeddings {
    out: Out,
    dtype: EmbeddingDtype,
    /// One row's bytes, reused.
    row: Vec<u8>,
}

/// The `.npy` (format 1.0) header of a C-order `[rows, dim]` array, laid
/// out as numpy's own `np.save` lays it out. Readers in the ecosystem
/// parse this text with a pattern (embedding-reader looks for
/// `'shape': (ROWS, DIM)`), so the spelling matters, and the `npyz` crate
/// spells a shape `(ROWS, DIM,)`: the header is written here instead.
pub(super) fn npy_header(dtype: EmbeddingDtype, rows: u64, dim: usize) -> Vec<u8> {
    let descr = match dtype {
        EmbeddingDtype::F32 => "<f4",
        EmbeddingDtype::F16 => "<f2",
    };
    let mut dict =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({rows}, {dim}), }}");
    // numpy leaves room for the first axis to grow to 21 digits in place.
    dict.push_str(&" ".repeat(21usize.saturating_sub(rows.to_string().len())));
    // Magic (6) + version (2) + length (2) + dict + padding + newline, a
    // multiple of 64.
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    dict.push('\n');
    let mut header = b"\x93NUMPY\x01\x00".to_vec();
    header.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    header.extend_from_slice(dict.as_bytes());
    header
}

/// The files of the shard being written.
struct Open {
    embeddings: Option<Embeddings>,
    table: ParquetSink<Out>,
    files: Vec<PathBuf>,
    /// Records still to come in this shard.
    left: u64,
}

/// A folder of shards (see the module docs).
pub(crate) struct Shards {
    dir: PathBuf,
    spec: OutputSpec,
    shard_rows: u64,
    total: u64,
    written: u64,
    open: Option<Open>,
}

fn create(path: &Path) -> io::Result<Out> {
    Ok(BufWriter::with_capacity(1 << 20, File::create(path)?))
}

impl Shards {
    /// A folder at `dir` for `total` records.
    pub(crate) fn new(dir: &Path, spec: &OutputSpec, total: u64) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        if spec.format == OutputFormat::Npy {
            fs::create_dir_all(dir.join("img_emb"))?;
            fs::create_dir_all(dir.join("metadata"))?;
        }
        Ok(Self {
            dir: dir.to_owned(),
            spec: spec.clone(),
            shard_rows: spec.layout.shard_rows.unwrap_or(DEFAULT_SHARD_ROWS).max(1),
            total,
            written: 0,
            open: None,
        })
    }

    fn open_shard(&self) -> io::Result<Open> {
        let n = self.written / self.shard_rows;
        let rows = self.shard_rows.min(self.total - self.written);
        let labels = self.spec.labels.clone();
        if self.spec.format != OutputFormat::Npy {
            let path = self.dir.join(format!("part-{n:05}.parquet"));
            return Ok(Open {
                embeddings: None,
                table: ParquetSink::new(create(&path)?, &self.spec, labels, true)?,
                files: vec![path],
                left: rows,
            });
        }
        let npy = self.dir.join(format!("img_emb/img_emb_{n}.npy"));
        let meta = self.dir.join(format!("metadata/metadata_{n}.parquet"));
        let dtype = self.spec.layout.embedding_dtype;
        let mut out = create(&npy)?;
        out.write_all(&npy_header(dtype, rows, self.spec.feature_dim))?;
        let embeddings = Embeddings {
            out,
            dtype,
            row: Vec::new(),
        };
        Ok(Open {
            embeddings: Some(embeddings),
            table: ParquetSink::new(create(&meta)?, &self.spec, labels, false)?,
            files: vec![npy, meta],
            left: rows,
        })
    }
}

/// Closes a shard's files and makes them durable.
fn close(open: Open) -> io::Result<()> {
    if let Some(mut e) = open.embeddings {
        e.out.flush()?;
    }
    open.table
        .close()?
        .into_inner()
        .map_err(|e| e.into_error())?;
    for file in &open.files {
        File::open(file)?.sync_all()?;
    }
    Ok(())
}

impl RecordSink for Shards {
    fn write(&mut self, record: &Record) -> io::Result<()> {
        if self.written >= self.total {
            return Err(io::Error::other(format!(
                "record {} past the {} planned",
                record.index, self.total
            )));
        }
        let mut open = match self.open.take() {
            Some(open) => open,
            None => self.open_shard()?,
        };
        if let Some(embeddings) = &mut open.embeddings {
            let dim = self.spec.feature_dim;
            let values: &[f32] = match &record.result {
                Ok(Prediction::Embedding(v)) if v.len() == dim => v,
                Ok(other) => {
                    return Err(io::Error::other(format!(
                        "item {} holds no {dim}-wide embedding: {other:?}",
                        record.index
                    )));
                }
                Err(_) => &[],
            };
            let zeros = std::iter::repeat_n(0.0, dim - values.len());
            let row = &mut embeddings.row;
            row.clear();
            for v in values.iter().copied().chain(zeros) {
                match embeddings.dtype {
                    EmbeddingDtype::F32 => row.extend_from_slice(&v.to_le_bytes()),
                    EmbeddingDtype::F16 => {
                        row.extend_from_slice(&half::f16::from_f32(v).to_le_bytes())
                    }
                }
            }
            embeddings.out.write_all(row)?;
        }
        open.table.write(record)?;
        self.written += 1;
        open.left -= 1;
        if open.left == 0 {
            close(open)?;
        } else {
            self.open = Some(open);
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> io::Result<()> {
        if self.written != self.total || self.open.is_some() {
            return Err(io::Error::other(format!(
                "{} records written of {}",
                self.written, self.total
            )));
        }
        File::open(&self.dir)?.sync_all()?;
        for sub in ["img_emb", "metadata"] {
            let sub = self.dir.join(sub);
            if sub.is_dir() {
                File::open(sub)?.sync_all()?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_npy_header_is_spelled_as_numpy_spells_it() {
        // np.save(f, np.zeros((10, 128), dtype=np.float16)) with numpy 2.
        let numpy = b"\x93NUMPY\x01\x00v\x00{'descr': '<f2', 'fortran_order': False, \
            'shape': (10, 128), }";
        let header = npy_header(EmbeddingDtype::F16, 10, 128);
        assert!(
            header.starts_with(numpy),
            "{}",
            String::from_utf8_lossy(&header)
        );
        assert_eq!(header.len(), 128);
        assert_eq!(header.last(), Some(&b'\n'));
        let big = npy_header(EmbeddingDtype::F32, 1_000_000, 512);
        assert_eq!(big.len() % 64, 0);
        assert!(String::from_utf8_lossy(&big).contains("'<f4'"));
    }
}
