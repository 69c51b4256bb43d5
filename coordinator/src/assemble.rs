//! Assembling the output from committed parts: `merge` (one process at a
//! time, under a lock in the part folder), the failure tally, and the
//! ordered copy or re-encoding of the parts into `OUT` and its failures
//! file. The parts themselves are `parts.rs`'s.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

use pipeline_core::Chunk;

use crate::output::{OutputFormat, OutputSpec, open_sink, partial_path};
use crate::output::{decode_jsonl, jsonl_error, line_index};
use crate::parts::{
    KEYS_FILE, PartStore, PartsError, RUN_FILE, failures_path, io_error, keys_path, part_name,
};

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
/// What the assembled output holds.
#[derive(Debug, Default)]
pub(crate) struct Assembled {
    pub(crate) records: u64,
    pub(crate) failures: u64,
    pub(crate) failures_by_kind: BTreeMap<String, u64>,
}

impl PartStore {
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

    /// Writes `out` from the parts of `chunks`, in order, and the failures
    /// file; removes the folder once `out` is in place.
    pub(crate) fn assemble(
        &self,
        chunks: &[Chunk],
        out: &Path,
        spec: &OutputSpec,
    ) -> Result<Assembled, PartsError> {
        self.assemble_with(chunks, out, |partial, failures_partial| {
            self.write_output(chunks, partial, failures_partial, spec)
        })
    }

    /// [`PartStore::assemble`] with `write` writing the output and the
    /// failures file to the temporary paths it is given.
    pub(crate) fn assemble_with(
        &self,
        chunks: &[Chunk],
        out: &Path,
        write: impl FnOnce(&Path, &Path) -> Result<Assembled, PartsError>,
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
        let result = write(&partial, &failures_partial);
        let assembled = match result {
            Ok(assembled) => assembled,
            Err(e) => {
                let _ = fs::remove_file(&partial).or_else(|_| fs::remove_dir_all(&partial));
                let _ = fs::remove_file(&failures_partial);
                return Err(e);
            }
        };
        // A folder output replaces the one an `--overwrite` run found.
        if partial.is_dir() && out.is_dir() {
            fs::remove_dir_all(out).map_err(io_error(out))?;
        }
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
        self.move_keys(out)?;
        File::open(folder)
            .and_then(|f| f.sync_all())
            .map_err(io_error(folder))?;
        fs::remove_dir_all(&self.dir).map_err(io_error(&self.dir))?;
        Ok(assembled)
    }

    /// Moves the run's item keys beside `out` (or removes a stale file an
    /// earlier output left there).
    pub(crate) fn move_keys(&self, out: &Path) -> Result<(), PartsError> {
        let keys = self.dir.join(KEYS_FILE);
        let beside = keys_path(out);
        if keys.exists() {
            fs::rename(&keys, &beside).map_err(io_error(&beside))
        } else {
            let _ = fs::remove_file(&beside);
            Ok(())
        }
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
            _ => {
                let rows = chunks.iter().map(Chunk::len).sum();
                Some(open_sink(partial, spec, rows).map_err(io_error(partial))?)
            }
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
                    Some(_) => {
                        Some(decode_jsonl(line, &spec.kept).map_err(|e| damaged(e.to_string()))?)
                    }
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
        sync_failures(failures, failures_partial)?;
        Ok(assembled)
    }
}

/// Flushes and fsyncs the failures file being written at `path`.
pub(crate) fn sync_failures(failures: io::BufWriter<File>, path: &Path) -> Result<(), PartsError> {
    let file = failures
        .into_inner()
        .map_err(|e| io_error(path)(e.into_error()))?;
    file.sync_all().map_err(io_error(path))
}
