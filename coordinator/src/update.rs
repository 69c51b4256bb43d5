//! `--update` and `--retry-failed`: a complete output brought up to date
//! with a changed source by computing only what changed.
//!
//! - **Identity.** An item is its name and its *stamp* (size and mtime for
//!   a folder's files, size and ETag for a listed prefix, offset and size
//!   for a shard member; lists and tables have none: their rows are their
//!   names). Every run writes one hash of each per output row beside the
//!   output (`OUT.keys`, [`crate::keys_path`]).
//! - **Plan.** A new item whose key an old row has reuses that row's
//!   result; every other item is computed; old rows no new item reuses are
//!   dropped. Matches keep the old rows' order (rows are read back in one
//!   pass), so an item that moved before an earlier match is computed
//!   again rather than reused. `--retry-failed` also computes the items
//!   whose old row is an error.
//! - **Run.** The items to compute form a manifest of their own, run as
//!   any run is (chunks, parts, resume after a crash or a signal: the
//!   plan is derived again from the same old output and source).
//! - **Assembly.** Every new item in order: its reused result (read back
//!   from the old output, [`crate::readback`]) or its computed one, with
//!   the new scan's index, path and kept columns, through the output's own
//!   encoder. The output equals a fresh full run's, byte for byte.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::Path;

use pipeline_core::{Chunk, Entries, Kept, Manifest};
use serde::Serialize;

use crate::assemble::{Assembled, sync_failures};
use crate::identity::RunIdentity;
use crate::output::{OutputSpec, Record, open_sink};
use crate::output::{decode_jsonl, encode_jsonl};
use crate::parts::{PartStore, PartsError, io_error, keys_path, part_name};
use crate::readback;

/// How many records an update reused, computed and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UpdateCounts {
    /// Records taken from the old output.
    pub reused: u64,
    /// Records computed now.
    pub computed: u64,
    /// Old records no item of the source has any more (or that changed).
    pub dropped: u64,
}

/// No old row: the item is computed.
const COMPUTE: u64 = u64::MAX;

/// Which new items reuse which old rows.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Per new item, the old row it reuses, or [`COMPUTE`].
    pub(crate) reuse: Vec<u64>,
    /// The new items to compute, in order.
    pub(crate) computed: Vec<u64>,
    pub(crate) counts: UpdateCounts,
}

impl Plan {
    /// The old row item `i` reuses.
    pub(crate) fn reused(&self, i: usize) -> Option<u64> {
        (self.reuse[i] != COMPUTE).then_some(self.reuse[i])
    }
}

/// Matches `new` keys against `old` ones (rows in `failed` are never
/// reused).
pub(crate) fn plan(old: &[u64], failed: &HashSet<u64>, new: &[u64]) -> Plan {
    // (key, row), sorted: 16 bytes an old row, and a key's rows in order.
    let mut by_key: Vec<(u64, u64)> = old
        .iter()
        .enumerate()
        .map(|(row, &key)| (key, row as u64))
        .filter(|(_, row)| !failed.contains(row))
        .collect();
    by_key.sort_unstable();
    let mut reuse = Vec::with_capacity(new.len());
    let mut computed = Vec::new();
    // The last old row reused: matches must come after it.
    let mut last: Option<u64> = None;
    for (i, &key) in new.iter().enumerate() {
        let start = by_key.partition_point(|&(k, _)| k < key);
        let rows = &by_key[start..];
        let after = rows.partition_point(|&(k, r)| k == key && last.is_some_and(|l| r <= l));
        match rows.get(after).filter(|&&(k, _)| k == key) {
            Some(&(_, row)) => {
                reuse.push(row);
                last = Some(row);
            }
            None => {
                reuse.push(COMPUTE);
                computed.push(i as u64);
            }
        }
    }
    let reused = (new.len() - computed.len()) as u64;
    Plan {
        counts: UpdateCounts {
            reused,
            computed: computed.len() as u64,
            dropped: old.len() as u64 - reused,
        },
        reuse,
        computed,
    }
}

/// Why an output cannot be updated.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// No keys file beside the output.
    #[error(
        "--update: {0} has no item keys beside it (an output written before --update existed); \
         run once with --overwrite, then --update works on it"
    )]
    NoKeys(std::path::PathBuf),
    /// The keys file is unreadable or damaged.
    #[error("--update: {path}: {message}; run once with --overwrite to write it anew")]
    BadKeys {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        message: String,
    },
    /// The old output was computed under other settings.
    #[error(
        "--update: the output was computed with {0}; its results cannot be mixed with this \
         run's: --overwrite recomputes everything"
    )]
    Settings(String),
    /// Shards each see a part of the run.
    #[error("--update and --retry-failed run in one process; leave out --shard and --num-shards")]
    Sharded,
}

/// The identity the old output was computed under, and its item keys.
pub(crate) fn old_keys(out: &Path) -> Result<(RunIdentity, Vec<u64>), UpdateError> {
    let path = keys_path(out);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(UpdateError::NoKeys(out.to_owned()));
        }
        Err(e) => {
            return Err(UpdateError::BadKeys {
                path,
                message: e.to_string(),
            });
        }
    };
    let bad = |message: String| UpdateError::BadKeys {
        path: path.clone(),
        message,
    };
    let line = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| bad("no identity line".into()))?;
    let identity: RunIdentity = serde_json::from_slice(&bytes[..line])
        .map_err(|e| bad(format!("its identity line: {e}")))?;
    let keys = &bytes[line + 1..];
    if keys.len() % 8 != 0 {
        return Err(bad(format!(
            "{} bytes is not a whole number of keys",
            keys.len()
        )));
    }
    let keys = keys
        .chunks_exact(8)
        .map(|k| u64::from_le_bytes(k.try_into().expect("8 bytes")))
        .collect();
    Ok((identity, keys))
}

/// Refuses to mix results computed under other settings (model, weights,
/// task, preprocessing, …) into this run's output. The inputs, the chunk
/// size and the kept columns may differ: every row's path and kept values
/// come from the new scan, only results are reused.
pub(crate) fn same_settings(old: &RunIdentity, now: &RunIdentity) -> Result<(), UpdateError> {
    let mut old = old.clone();
    old.inputs = now.inputs.clone();
    old.chunk_size = now.chunk_size;
    old.kept_columns = now.kept_columns.clone();
    match old.difference(now) {
        Some(what) => Err(UpdateError::Settings(what)),
        None => Ok(()),
    }
}

/// The rows of the old output at `out` that failed, read from the output
/// itself (its failures file may belong to another output of the same
/// name stem).
pub(crate) fn old_failures(out: &Path, spec: &OutputSpec) -> Result<HashSet<u64>, PartsError> {
    let damaged = |e: io::Error| PartsError::Unreadable {
        path: out.to_owned(),
        problem: e.to_string(),
    };
    let mut rows = readback::open(out, spec).map_err(damaged)?;
    let mut failed = HashSet::new();
    let mut row = 0u64;
    while let Some(result) = rows.next_result().map_err(damaged)? {
        if result.is_err() {
            failed.insert(row);
        }
        row += 1;
    }
    Ok(failed)
}

/// The items of `full` that `plan` computes, as a manifest of their own.
pub(crate) fn sub_manifest(full: &Manifest, plan: &Plan) -> Manifest {
    let mut entries = Entries::new();
    let mut kept = Kept::new(full.kept.columns.clone());
    for &i in &plan.computed {
        let i = i as usize;
        let entry = full.entries.get(i);
        entries.push_stamped(entry.name, entry.location, full.entries.stamp(i));
        if !kept.columns.is_empty() {
            kept.push(&full.kept.get(i));
        }
    }
    Manifest {
        source: full.source.clone(),
        entries,
        kept,
        problems: full.problems.clone(),
        revision: full.revision,
    }
}

/// The computed records, in order, from the parts of the update's chunks.
struct Computed<'a> {
    store: &'a PartStore,
    chunks: std::slice::Iter<'a, Chunk>,
    kept: &'a [String],
    part: Vec<u8>,
    at: usize,
    path: std::path::PathBuf,
}

impl Computed<'_> {
    fn next(&mut self) -> Result<Record, PartsError> {
        while self.at >= self.part.len() {
            let chunk = self.chunks.next().ok_or_else(|| PartsError::Damaged {
                path: self.store.dir.clone(),
                problem: "fewer computed records than items to compute".into(),
            })?;
            self.path = self.store.dir.join(part_name(chunk.id));
            self.part = fs::read(&self.path).map_err(io_error(&self.path))?;
            self.at = 0;
        }
        let rest = &self.part[self.at..];
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |p| p + 1);
        self.at += end;
        decode_jsonl(&rest[..end], self.kept).map_err(|e| PartsError::Damaged {
            path: self.path.clone(),
            problem: e.to_string(),
        })
    }
}

impl PartStore {
    /// Writes the updated output (see the module docs) to `partial` and its
    /// failures to `failures_partial`, reading the old rows from `out`.
    pub(crate) fn write_update(
        &self,
        chunks: &[Chunk],
        out: &Path,
        (partial, failures_partial): (&Path, &Path),
        spec: &OutputSpec,
        (full, plan): (&Manifest, &Plan),
    ) -> Result<Assembled, PartsError> {
        let damaged = |problem: String| PartsError::Unreadable {
            path: out.to_owned(),
            problem,
        };
        let mut old = readback::open(out, spec).map_err(|e| damaged(e.to_string()))?;
        let mut old_row = 0u64;
        let mut computed = Computed {
            store: self,
            chunks: chunks.iter(),
            kept: &spec.kept,
            part: Vec::new(),
            at: 0,
            path: self.dir.clone(),
        };
        let rows = full.entries.len() as u64;
        let mut sink = open_sink(partial, spec, rows).map_err(io_error(partial))?;
        let mut failures = io::BufWriter::new(
            fs::File::create(failures_partial).map_err(io_error(failures_partial))?,
        );
        let mut assembled = Assembled::default();
        // The parts' items are the computed ones, numbered from 0.
        let mut next_computed = 0u64;
        for (i, entry) in full.entries.iter().enumerate() {
            let result = match plan.reused(i) {
                Some(row) => {
                    // Rows before it were dropped: skip them.
                    let mut found = None;
                    while old_row <= row {
                        let next = old.next_result().map_err(|e| damaged(e.to_string()))?;
                        found = next;
                        if found.is_none() {
                            break;
                        }
                        old_row += 1;
                    }
                    found.ok_or_else(|| {
                        damaged(format!("it has fewer rows than its keys say ({row})"))
                    })?
                }
                None => {
                    let record = computed.next()?;
                    if record.index != next_computed {
                        return Err(PartsError::Damaged {
                            path: self.dir.clone(),
                            problem: format!(
                                "computed item {} where {next_computed} was expected",
                                record.index
                            ),
                        });
                    }
                    next_computed += 1;
                    record.result
                }
            };
            let values = full.kept.get(i);
            let record = Record {
                index: i as u64,
                path: entry.name.to_string_lossy().into_owned(),
                kept: spec
                    .kept
                    .iter()
                    .cloned()
                    .zip(values.into_iter().map(|v| v.map(str::to_owned)))
                    .collect(),
                result,
            };
            if let Err(error) = &record.result {
                assembled.failures += 1;
                *assembled
                    .failures_by_kind
                    .entry(error.kind.to_string())
                    .or_default() += 1;
                encode_jsonl(&record, &spec.labels, &mut failures)
                    .map_err(io_error(failures_partial))?;
            }
            sink.write(&record).map_err(io_error(partial))?;
        }
        sink.finish().map_err(io_error(partial))?;
        fs::File::open(partial)
            .and_then(|f| f.sync_all())
            .map_err(io_error(partial))?;
        sync_failures(failures, failures_partial)?;
        assembled.records = rows;
        Ok(assembled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_items_are_computed_deleted_ones_dropped_and_order_kept() {
        // Old rows a b c d e; new: a, x (new), c, d' (changed), e, b (moved).
        let old = [1, 2, 3, 4, 5];
        let new = [1, 9, 3, 44, 5, 2];
        let p = plan(&old, &HashSet::new(), &new);
        assert_eq!(p.computed, [1, 3, 5]);
        assert_eq!(
            (0..new.len()).map(|i| p.reused(i)).collect::<Vec<_>>(),
            [Some(0), None, Some(2), None, Some(4), None]
        );
        assert_eq!(
            p.counts,
            UpdateCounts {
                reused: 3,
                computed: 3,
                dropped: 2
            }
        );
        // Failed rows are computed again.
        let p = plan(&old, &HashSet::from([2]), &old);
        assert_eq!(p.computed, [2]);
        // A repeated key matches its rows in order.
        let p = plan(&[7, 7], &HashSet::new(), &[7, 7, 7]);
        assert_eq!(p.computed, [2]);
        assert_eq!(p.reused(1), Some(1));
    }
}
