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
//! folder removed. A failure at any step leaves the parts where they were.

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use pipeline_core::Chunk;
use serde_json::Value;

use crate::identity::{PARTS_LAYOUT, RunIdentity};
use crate::output::{OutputFormat, OutputSpec, open_sink, partial_path};
use crate::part_file::{decode_jsonl, jsonl_error, line_index};

/// The part folder's description of the run.
const RUN_FILE: &str = "run.json";

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

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

fn part_name(chunk: u64) -> String {
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
    /// A part does not hold its chunk's records.
    #[error("{path} is damaged ({problem}); delete it and re-run to compute that chunk again")]
    Damaged {
        /// The part.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> PartsError + '_ {
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

/// What became of an attempt to assemble the output.
#[derive(Debug)]
pub(crate) enum Merge {
    /// This process assembled it.
    Done(Assembled),
    /// Another process is assembling it right now.
    Busy,
    /// Another process assembled it already (the folder is gone).
    AlreadyMerged,
}

/// The part folder of one output.
#[derive(Debug)]
pub struct PartStore {
    dir: PathBuf,
    temp_suffix: String,
}

/// What the assembled output holds.
#[derive(Debug, Default)]
pub(crate) struct Assembled {
    pub(crate) records: u64,
    pub(crate) failures: u64,
    pub(crate) failures_by_kind: BTreeMap<String, u64>,
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

    /// Assembles `out` unless another process is doing it or did it; with
    /// `wait`, waits for a busy one instead of returning `Busy`.
    pub(crate) fn merge(
        &self,
        chunks: &[Chunk],
        out: &Path,
        spec: &OutputSpec,
        wait: bool,
    ) -> Result<Merge, PartsError> {
        let lock_path = self.dir.join("merge.lock");
        let lock = match fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Merge::AlreadyMerged),
            Err(e) => return Err(io_error(&lock_path)(e)),
        };
        if wait {
            lock.lock().map_err(io_error(&lock_path))?;
        } else {
            match lock.try_lock() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => return Ok(Merge::Busy),
                Err(fs::TryLockError::Error(e)) => return Err(io_error(&lock_path)(e)),
            }
        }
        // The one that held the lock before may have finished meanwhile.
        if !self.dir.join(RUN_FILE).exists() {
            return Ok(Merge::AlreadyMerged);
        }
        let assembled = self.assemble(chunks, out, spec)?;
        drop(lock);
        Ok(Merge::Done(assembled))
    }

    /// Counts the records and failures of the committed parts of `chunks`.
    pub(crate) fn tally(&self, chunks: &[Chunk]) -> Result<Assembled, PartsError> {
        let mut tally = Assembled::default();
        for chunk in chunks {
            let path = self.dir.join(part_name(chunk.id));
            let bytes = match fs::read(&path) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_error(&path)(e)),
            };
            for line in bytes.split_inclusive(|&b| b == b'\n') {
                tally.records += 1;
                let error = jsonl_error(line).map_err(|e| PartsError::Damaged {
                    path: path.clone(),
                    problem: e.to_string(),
                })?;
                if let Some(error) = error {
                    tally.failures += 1;
                    *tally
                        .failures_by_kind
                        .entry(error.kind.to_string())
                        .or_default() += 1;
                }
            }
        }
        Ok(tally)
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

    /// Writes `out` from the parts of `chunks`, in order, and the failures
    /// file; removes the folder once `out` is in place.
    pub(crate) fn assemble(
        &self,
        chunks: &[Chunk],
        out: &Path,
        spec: &OutputSpec,
    ) -> Result<Assembled, PartsError> {
        let committed = self.committed()?;
        let missing: Vec<u64> = chunks
            .iter()
            .map(|c| c.id)
            .filter(|id| !committed.contains(id))
            .collect();
        if !missing.is_empty() {
            let mut list: Vec<String> = missing.iter().take(10).map(u64::to_string).collect();
            if missing.len() > list.len() {
                list.push("…".into());
            }
            return Err(PartsError::Missing {
                dir: self.dir.clone(),
                count: missing.len(),
                total: chunks.len(),
                list: list.join(", "),
            });
        }
        let partial = partial_path(out);
        let failures_file = failures_path(out);
        let failures_partial = partial_path(&failures_file);
        let result = self.write_output(chunks, &partial, &failures_partial, spec);
        let assembled = match result {
            Ok(assembled) => assembled,
            Err(e) => {
                let _ = fs::remove_file(&partial);
                let _ = fs::remove_file(&failures_partial);
                return Err(e);
            }
        };
        let folder = out
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        fs::rename(&partial, out).map_err(io_error(out))?;
        if assembled.failures > 0 {
            fs::rename(&failures_partial, &failures_file).map_err(io_error(&failures_file))?;
        } else {
            let _ = fs::remove_file(&failures_partial);
            // A failures file of an earlier run (--overwrite) would mislead.
            let _ = fs::remove_file(&failures_file);
        }
        File::open(folder)
            .and_then(|f| f.sync_all())
            .map_err(io_error(folder))?;
        fs::remove_dir_all(&self.dir).map_err(io_error(&self.dir))?;
        Ok(assembled)
    }

    fn write_output(
        &self,
        chunks: &[Chunk],
        partial: &Path,
        failures_partial: &Path,
        spec: &OutputSpec,
    ) -> Result<Assembled, PartsError> {
        let mut assembled = Assembled::default();
        let mut failures =
            io::BufWriter::new(File::create(failures_partial).map_err(io_error(failures_partial))?);
        // JSONL parts are already the output's bytes: copy them. Other
        // formats re-encode the records.
        let mut jsonl = match spec.format {
            OutputFormat::Jsonl => Some(io::BufWriter::with_capacity(
                1 << 20,
                File::create(partial).map_err(io_error(partial))?,
            )),
            _ => None,
        };
        let mut sink = match spec.format {
            OutputFormat::Jsonl => None,
            _ => Some(open_sink(partial, spec).map_err(io_error(partial))?),
        };
        for chunk in chunks {
            let path = self.dir.join(part_name(chunk.id));
            let bytes = fs::read(&path).map_err(io_error(&path))?;
            let damaged = |problem: String| PartsError::Damaged {
                path: path.clone(),
                problem,
            };
            let mut expected = chunk.start;
            for line in bytes.split_inclusive(|&b| b == b'\n') {
                if !line.ends_with(b"\n") {
                    return Err(damaged("its last line is cut off".into()));
                }
                let record = match &sink {
                    Some(_) => Some(decode_jsonl(line).map_err(|e| damaged(e.to_string()))?),
                    None => None,
                };
                let index = match &record {
                    Some(r) => r.index,
                    None => {
                        line_index(line).ok_or_else(|| damaged("a line has no index".into()))?
                    }
                };
                if index != expected || index >= chunk.end {
                    return Err(damaged(format!(
                        "item {index} where {expected} was expected"
                    )));
                }
                expected += 1;
                let error = match &record {
                    Some(r) => r.result.as_ref().err().cloned(),
                    None => jsonl_error(line).map_err(|e| damaged(e.to_string()))?,
                };
                if let Some(error) = error {
                    assembled.failures += 1;
                    *assembled
                        .failures_by_kind
                        .entry(error.kind.to_string())
                        .or_default() += 1;
                    failures
                        .write_all(line)
                        .map_err(io_error(failures_partial))?;
                }
                match (&mut sink, record) {
                    (Some(sink), Some(record)) => sink.write(&record),
                    _ => jsonl.as_mut().map_or(Ok(()), |out| out.write_all(line)),
                }
                .map_err(io_error(partial))?;
            }
            if expected != chunk.end {
                return Err(damaged(format!(
                    "{} records for {} items",
                    expected - chunk.start,
                    chunk.len()
                )));
            }
            assembled.records += chunk.len();
        }
        if let Some(sink) = sink {
            sink.finish().map_err(io_error(partial))?;
        }
        if let Some(out) = jsonl {
            let file = out
                .into_inner()
                .map_err(|e| io_error(partial)(e.into_error()))?;
            file.sync_all().map_err(io_error(partial))?;
        } else {
            File::open(partial)
                .and_then(|f| f.sync_all())
                .map_err(io_error(partial))?;
        }
        let file = failures
            .into_inner()
            .map_err(|e| io_error(failures_partial)(e.into_error()))?;
        file.sync_all().map_err(io_error(failures_partial))?;
        Ok(assembled)
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
    use crate::output::Record;
    use crate::part_file::encode_jsonl;
    use pipeline_core::{ClassLabels, Task};
    use pipeline_core::{ClassScore, ItemError, ItemErrorKind, Prediction, plan_chunks};

    fn record(index: u64) -> Record {
        Record {
            index,
            path: format!("dir/{index}.jpg"),
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
    }

    #[test]
    fn a_folder_of_another_run_is_refused_saying_what_changed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("p.jsonl");
        PartStore::open(&out, &identity()).expect("created");
        PartStore::open(&out, &identity()).expect("same run reopens");
        let mut other = identity();
        other.model = pipeline_core::ModelKind::Resnet18;
        let error = PartStore::open(&out, &other).expect_err("another model");
        let message = error.to_string();
        assert!(
            message.contains("another --model (was \"tiny\", now \"resnet18\")"),
            "{message}"
        );
        assert!(!message.contains("chunk-size"), "{message}");
    }
}
