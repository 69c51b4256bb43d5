//! Committed chunks on disk, and the final file assembled from them.
//!
//! Next to the output `OUT` lives the folder `OUT.parts/`:
//!
//! - `run.json`: what the results depend on (the input list's hash, chunk
//!   size, model, weights, task, preprocessing, decode limits). A run that
//!   finds the folder resumes only if its own `run.json` is the same, and
//!   otherwise says which of these changed.
//! - `chunk-NNNNNNNN.jsonl`: one finished chunk's records, in the exact
//!   bytes of the JSONL output, written to a temporary file, fsynced and
//!   renamed, so a part is either whole or absent, whatever kills the
//!   process.
//!
//! When every chunk is committed, the parts are read in chunk order into
//! `OUT.partial`, which is fsynced and renamed to `OUT`; only then is the
//! folder removed (`assemble.rs`). A failure at any step leaves the parts
//! where they were.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use pipeline_core::Manifest;

use crate::identity::{PARTS_LAYOUT, RunIdentity};

/// The part folder's description of the run.
pub(crate) const RUN_FILE: &str = "run.json";

/// `OUT.parts`, next to `OUT`.
pub fn parts_dir(out: &Path) -> PathBuf {
    with_suffix(out, ".parts")
}

/// `predictions.failures.jsonl` for `predictions.jsonl`: every failed
/// item's record, for scripts that only want those.
pub fn failures_path(out: &Path) -> PathBuf {
    let stem = out.file_stem().unwrap_or_default().to_os_string();
    let mut name = stem;
    name.push(".failures.jsonl");
    out.with_file_name(name)
}

/// `predictions.jsonl.keys` for `predictions.jsonl`: one line of the run
/// identity's JSON (what the results depend on), then per output row, in
/// order, a little-endian u64 hash of its item's name and stamp (size and
/// mtime, or ETag). `--update` matches a new scan against it.
pub fn keys_path(out: &Path) -> PathBuf {
    with_suffix(out, ".keys")
}

/// The keys file inside the part folder, moved beside the output by
/// assembly.
pub(crate) const KEYS_FILE: &str = "keys.bin";

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

pub(crate) fn part_name(chunk: u64) -> String {
    format!("chunk-{chunk:08}.jsonl")
}

fn chunk_of(name: &str) -> Option<u64> {
    name.strip_prefix("chunk-")?
        .strip_suffix(".jsonl")?
        .parse()
        .ok()
}

/// Why the part folder cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PartsError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The folder belongs to a run with other inputs or settings.
    #[error(
        "{dir} holds the parts of a run with {what}; pass --overwrite to start afresh \
         (its parts are deleted)"
    )]
    Mismatch {
        /// The folder.
        dir: PathBuf,
        /// What differs, in words.
        what: String,
    },
    /// Chunks are missing at assembly time.
    #[error("{dir}: {count} of {total} chunks are not committed yet (missing: {list})")]
    Missing {
        /// The folder.
        dir: PathBuf,
        /// How many.
        count: usize,
        /// Of how many.
        total: usize,
        /// The first few ids.
        list: String,
    },
    /// `--update` cannot read the existing output back.
    #[error(
        "cannot read {path} back for --update ({problem}); give the --format, --task and \
         --shard-rows it was written with, or --overwrite to compute it anew"
    )]
    Unreadable {
        /// The output.
        path: PathBuf,
        /// What went wrong.
        problem: String,
    },
    /// A part does not hold its chunk's records.
    #[error("{path} is damaged ({problem}); delete it and re-run to compute that chunk again")]
    Damaged {
        /// The part.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

pub(crate) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> PartsError + '_ {
    move |source| PartsError::Io {
        path: path.to_owned(),
        source,
    }
}

fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into())
}

/// The part folder of one output.
#[derive(Debug)]
pub struct PartStore {
    pub(crate) dir: PathBuf,
    temp_suffix: String,
}

impl PartStore {
    fn at(dir: PathBuf) -> Self {
        Self {
            // Shards on several nodes share the folder: host and pid.
            temp_suffix: format!(".tmp-{}-{}", hostname(), std::process::id()),
            dir,
        }
    }

    /// Opens `OUT.parts` for a run described by `identity`, creating it if
    /// needed. An existing folder must describe the same run.
    pub fn open(out: &Path, identity: &RunIdentity) -> Result<Self, PartsError> {
        let store = Self::at(parts_dir(out));
        // Compare what was read from disk with what would be read: a float
        // must compare after the same trip through JSON text.
        let text = serde_json::to_vec_pretty(identity).map_err(io::Error::other);
        let text = text.map_err(io_error(&store.dir))?;
        let identity: RunIdentity = serde_json::from_slice(&text)
            .map_err(io::Error::other)
            .map_err(io_error(&store.dir))?;
        let run_file = store.dir.join(RUN_FILE);
        match fs::read(&run_file) {
            Ok(bytes) => {
                let stored = read_identity(&run_file, &bytes)?;
                if let Some(what) = stored.difference(&identity) {
                    return Err(PartsError::Mismatch {
                        dir: store.dir.clone(),
                        what,
                    });
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(&store.dir).map_err(io_error(&store.dir))?;
                store
                    .write_atomically(RUN_FILE, &text)
                    .map_err(io_error(&run_file))?;
            }
            Err(e) => return Err(io_error(&run_file)(e)),
        }
        Ok(store)
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Opens the part folder of `out` as it is, for `pipeline merge`.
    pub(crate) fn open_existing(out: &Path) -> Result<(Self, RunIdentity), PartsError> {
        let dir = parts_dir(out);
        let run_file = dir.join(RUN_FILE);
        let bytes = fs::read(&run_file).map_err(io_error(&run_file))?;
        let stored = read_identity(&run_file, &bytes)?;
        Ok((Self::at(dir), stored))
    }

    /// Ids of the chunks already committed.
    pub(crate) fn committed(&self) -> Result<HashSet<u64>, PartsError> {
        let mut ids = HashSet::new();
        for entry in fs::read_dir(&self.dir).map_err(io_error(&self.dir))? {
            let entry = entry.map_err(io_error(&self.dir))?;
            if let Some(id) = entry.file_name().to_str().and_then(chunk_of) {
                ids.insert(id);
            }
        }
        Ok(ids)
    }

    /// Records the run's item keys (see [`keys_path`]) after one line of
    /// its identity's JSON, once.
    pub(crate) fn write_keys(&self, identity: &RunIdentity, manifest: &Manifest) -> io::Result<()> {
        if self.dir.join(KEYS_FILE).exists() {
            return Ok(());
        }
        let mut bytes = serde_json::to_vec(identity).map_err(io::Error::other)?;
        bytes.push(b'\n');
        bytes.reserve(manifest.entries.len() * 8);
        manifest.for_each_item_key(|key| bytes.extend_from_slice(&key.to_le_bytes()));
        self.write_atomically(KEYS_FILE, &bytes)
    }

    /// Commits one chunk's part (its records' JSONL bytes, from
    /// [`crate::encode_part`]): after this returns, the part survives any
    /// crash of this process or the machine.
    pub fn commit(&self, chunk: u64, bytes: &[u8]) -> io::Result<()> {
        crate::failpoints::part_write()?;
        self.write_atomically(&part_name(chunk), bytes)
    }

    /// Temp file, write, fsync, rename, fsync the folder.
    fn write_atomically(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let path = self.dir.join(name);
        let temp = self.dir.join(format!("{name}{}", self.temp_suffix));
        let written = File::create(&temp).and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        });
        if let Err(e) = written.and_then(|()| fs::rename(&temp, &path)) {
            let _ = fs::remove_file(&temp);
            return Err(e);
        }
        File::open(&self.dir)?.sync_all()
    }
}

/// `run.json` as this build reads it. One written by another layout
/// version may not parse: that is a mismatch naming the version, not
/// damage.
fn read_identity(run_file: &Path, bytes: &[u8]) -> Result<RunIdentity, PartsError> {
    serde_json::from_slice(bytes).map_err(|e| {
        let layout = serde_json::from_slice::<Value>(bytes)
            .ok()
            .and_then(|v| v.get("layout").and_then(Value::as_u64));
        match layout {
            Some(old) if old != PARTS_LAYOUT => PartsError::Mismatch {
                dir: run_file.parent().unwrap_or(run_file).to_owned(),
                what: format!("an older version of pipeline (was {old}, now {PARTS_LAYOUT})"),
            },
            _ => PartsError::Damaged {
                path: run_file.to_owned(),
                problem: e.to_string(),
            },
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::encode_jsonl;
    use crate::output::{OutputFormat, OutputSpec, Record, partial_path};
    use pipeline_core::{ClassLabels, Task};
    use pipeline_core::{ClassScore, ItemError, ItemErrorKind, Prediction, plan_chunks};

    fn record(index: u64) -> Record {
        Record {
            index,
            path: format!("dir/{index}.jpg"),
            kept: Vec::new(),
            result: if index % 3 == 2 {
                Err(ItemError::new(ItemErrorKind::Decode, "bad \"bytes\"\n"))
            } else {
                Ok(Prediction::TopK(vec![ClassScore {
                    class: index as u32,
                    prob: 1.0 / (index as f32 + 3.0),
                }]))
            },
        }
    }

    fn part(records: &[Record]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for record in records {
            encode_jsonl(record, &ClassLabels::Imagenet, &mut bytes).expect("encoded");
        }
        bytes
    }

    fn spec(format: OutputFormat) -> OutputSpec {
        OutputSpec {
            format,
            task: Task::Classify { top_k: 1 },
            feature_dim: 0,
            labels: ClassLabels::Imagenet,
            kept: Vec::new(),
            layout: Default::default(),
        }
    }

    fn identity() -> RunIdentity {
        RunIdentity::example(pipeline_core::ModelKind::Tiny, 5, 2)
    }

    #[test]
    fn parts_assemble_in_chunk_order_whatever_order_they_were_committed_in() {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("p.jsonl");
        let chunks = plan_chunks(5, 2);
        let store = PartStore::open(&out, &identity()).expect("opened");
        for chunk in chunks.iter().rev() {
            let records: Vec<Record> = (chunk.start..chunk.end).map(record).collect();
            store.commit(chunk.id, &part(&records)).expect("committed");
        }
        let assembled = store
            .assemble(&chunks, &out, &spec(OutputFormat::Jsonl))
            .expect("assembled");
        assert_eq!((assembled.records, assembled.failures), (5, 1));
        let mut direct = Vec::new();
        for index in 0..5 {
            encode_jsonl(&record(index), &ClassLabels::Imagenet, &mut direct).expect("encoded");
        }
        assert_eq!(fs::read(&out).expect("output"), direct);
        let failures = fs::read_to_string(failures_path(&out)).expect("failures file");
        assert_eq!(failures.lines().count(), 1);
        assert!(failures.contains("\"index\":2"));
        assert!(!parts_dir(&out).exists(), "the parts are removed");
    }

    #[test]
    fn a_missing_or_damaged_part_stops_assembly_and_keeps_the_parts() {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("p.jsonl");
        let chunks = plan_chunks(5, 2);
        let store = PartStore::open(&out, &identity()).expect("opened");
        store
            .commit(0, &part(&[record(0), record(1)]))
            .expect("committed");
        store.commit(2, &part(&[record(4)])).expect("committed");
        let error = store
            .assemble(&chunks, &out, &spec(OutputFormat::Jsonl))
            .expect_err("chunk 1 is missing");
        assert!(error.to_string().contains("missing: 1"), "{error}");
        store.commit(1, &part(&[record(2)])).expect("committed");
        let error = store
            .assemble(&chunks, &out, &spec(OutputFormat::Csv))
            .expect_err("chunk 1 is short");
        assert!(error.to_string().contains("damaged"), "{error}");
        assert!(!out.exists() && !partial_path(&out).exists());
        assert_eq!(store.committed().expect("listed").len(), 3);
    }

    #[test]
    fn float_settings_compare_equal_after_their_trip_through_run_json() {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("p.jsonl");
        let mut floats = identity();
        floats.preprocess.normalize.mean = [123.675, 116.28, 103.53];
        floats.preprocess.normalize.std = [58.395, 57.12, 57.375];
        PartStore::open(&out, &floats).expect("created");
        PartStore::open(&out, &floats).expect("the same floats reopen");
        // Equal means equal: a float one ulp away is another run.
        let mut nudged = floats.clone();
        let std = &mut nudged.preprocess.normalize.std[0];
        *std = f32::from_bits(std.to_bits() + 1);
        let error = PartStore::open(&out, &nudged).expect_err("one ulp is another run");
        assert!(error.to_string().contains("preprocess"), "{error}");
    }

    #[test]
    fn a_folder_of_another_run_is_refused_saying_what_changed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("p.jsonl");
        PartStore::open(&out, &identity()).expect("created");
        PartStore::open(&out, &identity()).expect("same run reopens");
        let mut other = identity();
        other.model = pipeline_core::ModelKind::Resnet18.into();
        let error = PartStore::open(&out, &other).expect_err("another model");
        let message = error.to_string();
        assert!(
            message.contains("another --model (was \"tiny\", now \"resnet18\")"),
            "{message}"
        );
        assert!(!message.contains("chunk-size"), "{message}");
    }
}
