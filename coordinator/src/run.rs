//! One run's life: scan, plan chunks, skip those a previous run committed,
//! spawn the workers, hand out work as workers ask, survive dead and hung
//! workers, commit every finished chunk as a part file, and assemble the
//! output in input order.
//!
//! Scheduling is pull-based: a worker's `Ready` says how many spans it
//! wants queued and each `SpanDone` asks for one more, so a fast device is
//! never held back by a slow one. A *span* is a chunk or, after failures, a
//! piece of one. When the queue is empty, an idle worker re-runs the oldest
//! span still running elsewhere (speculative execution); the first result
//! wins, which is safe because a record does not depend on who computed it.
//!
//! Failures, and what each costs:
//! - a worker that dies (crash, signal, `kill -9`) or makes no progress
//!   for the hang timeout (then it is killed) costs its spans in flight:
//!   they become *suspects* and run again alone on one worker, so the next
//!   death has a certain cause. A suspect that kills its worker is split in
//!   halves, down to single images; an image that kills a worker
//!   [`crate::ISOLATED_FAILURES`] times becomes a `worker_crash` record;
//! - a worker that exits with [`pipeline_core::WORKER_EXIT_DEVICE_LOST`] (device memory
//!   exhausted, device lost) is respawned with half its batch, and its spans
//!   are simply queued again;
//! - SIGINT/SIGTERM stop the hand-out; spans in flight get the grace period
//!   to finish and be committed, then the run exits resumable.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use pipeline_core::{Chunk, ClassLabels, ItemOutcome, Manifest, plan_chunks};

use crate::assemble::Merge;
use crate::config::{Existing, RunConfig, Update};
use crate::identity::{Inputs, RunIdentity};
use crate::output::encode_part;
use crate::output::{OutputFormat, OutputLayout, OutputSpec};
use crate::parts::{PartStore, parts_dir};
use crate::report::Report;
use crate::run_error::RunError;
use crate::scheduler::Scheduler;
use crate::signals::StopSignals;
use crate::summary::RunSummary;
use crate::update::{self, UpdateError};
use crate::workers::Event;

/// Threads writing part files. Each part costs two fsyncs (the file, the
/// folder), milliseconds on many disks; several threads let them overlap
/// (journaling file systems commit concurrent fsyncs together), and keep
/// them off the scheduler's thread.
pub const COMMIT_THREADS: usize = 4;

/// Whole chunks waiting for a committer. When they fall this far behind,
/// the scheduler waits: memory stays bounded by a few chunks' results.
const COMMIT_QUEUE: usize = 16;

/// A committer thread: encodes each chunk's records and commits its part,
/// reporting every result as an [`Event::Committed`].
fn commit_parts(
    queue: &crossbeam_channel::Receiver<(u64, Vec<ItemOutcome>)>,
    manifest: &Manifest,
    labels: &ClassLabels,
    store: &PartStore,
    events: &crossbeam_channel::Sender<Event>,
) {
    for (chunk, outcomes) in queue {
        let started = Instant::now();
        let bytes = encode_part(manifest, labels, outcomes);
        let result = store
            .commit(chunk, &bytes)
            .map(|()| started.elapsed().as_secs_f64());
        if events.send(Event::Committed { result }).is_err() {
            return;
        }
    }
}

/// Runs `config` to the end and returns what happened, telling `report`
/// as it goes.
pub fn run(config: &RunConfig, report: Arc<dyn Report>) -> Result<RunSummary, RunError> {
    let started = Instant::now();
    let scanned = loader::source::open(&config.data, config.worker.remote)?;
    let scan_s = started.elapsed().as_secs_f64();
    crate::failpoints::after_scan();
    let output_error = |path: &Path| {
        let path = path.to_owned();
        move |source| RunError::Output { path, source }
    };
    let parts = parts_dir(&config.out);
    let sharded = config.sharding.shard.count > 1;
    let overwrite = config.existing == Existing::Overwrite;
    if overwrite && sharded {
        return Err(RunError::OverwriteShards(parts));
    }
    if overwrite {
        match std::fs::remove_dir_all(&parts) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(output_error(&parts)(e));
            }
            _ => {}
        }
    }
    // `--update` on a complete output: run only what changed (`update.rs`);
    // the full scan and the plan are kept for assembly.
    let updating = config.update != Update::No && !overwrite && config.out.exists();
    if updating && sharded {
        return Err(UpdateError::Sharded.into());
    }
    if !overwrite && !updating && config.out.exists() && !parts.exists() {
        if config.existing == Existing::Resume {
            return Ok(RunSummary::already_complete(&config.out));
        }
        return Err(RunError::OutputExists(config.out.clone()));
    }
    let output = OutputSpec {
        format: config.format,
        task: config.worker.task,
        feature_dim: config.feature_dim(),
        labels: ClassLabels::for_model(config.worker.classes.as_ref(), &config.worker.model),
        kept: scanned.kept.columns.clone(),
        layout: config.layout,
    };
    let mut old_identity = None;
    let (manifest, update) = if updating {
        let (identity, old) = update::old_keys(&config.out)?;
        old_identity = Some(identity);
        let failed = match config.update {
            Update::AlsoFailed => update::old_failures(&config.out, &output)?,
            _ => HashSet::new(),
        };
        let plan = update::plan(&old, &failed, &scanned.item_keys());
        (update::sub_manifest(&scanned, &plan), Some((scanned, plan)))
    } else {
        (scanned, None)
    };
    let chunks = plan_chunks(manifest.entries.len() as u64, config.chunk_size);
    let stored = match &old_identity {
        Some(old) => Some(old.clone()),
        None => PartStore::open_existing(&config.out)
            .ok()
            .map(|(_, stored)| stored),
    };
    let identity = RunIdentity::of(config, &manifest)?
        .fingerprinted_like(stored.as_ref(), config.worker.weights.as_deref())?;
    if let Some(old) = &old_identity {
        update::same_settings(old, &identity)?;
    }
    let store = PartStore::open(&config.out, &identity)?;
    // The keys, and the identity beside them, describe the whole output.
    let whole = update.as_ref().map_or(&manifest, |(full, _)| full);
    let whole_identity = RunIdentity {
        inputs: Inputs::of(whole),
        ..identity.clone()
    };
    store
        .write_keys(&whole_identity, whole)
        .map_err(output_error(store.dir()))?;
    if let Some((_, plan)) = &update {
        let c = plan.counts;
        report.notice(&format!(
            "pipeline: updating {}: {} records reused, {} to compute, {} dropped",
            config.out.display(),
            c.reused,
            c.computed,
            c.dropped
        ));
    }
    let committed: HashSet<u64> = store.committed()?;
    let owned: Vec<Chunk> = chunks
        .iter()
        .copied()
        .filter(|c| config.sharding.shard.owns(c))
        .collect();
    let resumed: Vec<&Chunk> = owned.iter().filter(|c| committed.contains(&c.id)).collect();

    let owned_items: u64 = owned.iter().map(Chunk::len).sum();
    let resumed_items = resumed.iter().map(|c| c.len()).sum();
    report.start(owned_items, resumed_items);
    for problem in &manifest.problems {
        report.notice(&format!(
            "pipeline: warning: skipped {}: {}",
            problem.path.display(),
            problem.message
        ));
    }
    if sharded {
        report.notice(&format!(
            "pipeline: shard {} ({}): {} of {} chunks, {owned_items} of {} images",
            config.sharding.shard,
            config.sharding.source.as_deref().unwrap_or("--shard"),
            owned.len(),
            chunks.len(),
            manifest.entries.len()
        ));
    }
    if !resumed.is_empty() {
        report.notice(&format!(
            "pipeline: resuming: {} of {} chunks are already committed in {}",
            resumed.len(),
            owned.len(),
            store.dir().display()
        ));
    }
    let signals = StopSignals::install()
        .map_err(|e| RunError::WorkersFailed(format!("cannot install signal handlers: {e}")))?;
    let mut run = Scheduler::new(
        config,
        &manifest,
        &owned,
        &committed,
        &store,
        report.clone(),
    );
    let outcome = std::thread::scope(|scope| {
        let (commits, queue) = crossbeam_channel::bounded(COMMIT_QUEUE);
        for _ in 0..COMMIT_THREADS {
            let (queue, events) = (queue.clone(), run.workers.events_tx.clone());
            let (manifest, store, labels) = (&manifest, &store, &output.labels);
            scope.spawn(move || commit_parts(&queue, manifest, labels, store, &events));
        }
        run.commits.sender = Some(commits);
        let outcome = run.drive(&signals);
        // The committers finish what is queued, then end with the scope.
        run.commits.sender = None;
        outcome
    });
    let computed = run.tally.computed_images;
    let mut summary = run.shut_down();
    report.finish();
    drop(signals);
    outcome?;

    let assembling = Instant::now();
    let everything_committed = !sharded || {
        let now = store.committed()?;
        chunks.iter().all(|c| now.contains(&c.id))
    };
    let merge = if let Some((full, plan)) = &update {
        summary.update = Some(plan.counts);
        Merge::Done(
            store.assemble_with(&chunks, &config.out, |partial, failures| {
                store.write_update(
                    &chunks,
                    &config.out,
                    (partial, failures),
                    &output,
                    (full, plan),
                )
            })?,
        )
    } else if !sharded || (config.sharding.merge && everything_committed) {
        store.merge(&chunks, &config.out, &output, !sharded)?
    } else {
        Merge::Busy
    };
    let totals = match merge {
        Merge::Done(assembled) => {
            summary.chunks.merged = true;
            assembled
        }
        Merge::Busy | Merge::AlreadyMerged => {
            if !config.sharding.merge {
                report.notice(&format!(
                    "pipeline: shard {} done; run `pipeline merge --out {}` once every shard is",
                    config.sharding.shard,
                    config.out.display()
                ));
            }
            // Count this shard's own records while its parts are there.
            store.tally(&owned).unwrap_or_default()
        }
    };
    summary.times.assemble_s = assembling.elapsed().as_secs_f64();
    // The commits ran on COMMIT_THREADS threads at once.
    summary.stages.write_s =
        summary.times.commit_s / COMMIT_THREADS as f64 + summary.times.assemble_s;
    summary.records.images = totals.records;
    summary.records.failures = totals.failures;
    summary.records.failures_by_kind = totals.failures_by_kind;
    summary.chunks.total = chunks.len() as u64;
    summary.chunks.owned = owned.len() as u64;
    summary.chunks.resumed = resumed.len() as u64;
    summary.chunks.shard = sharded.then(|| config.sharding.shard.to_string());
    summary.times.scan_s = scan_s;
    summary.records.scan_problems = manifest
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.path.display(), p.message))
        .collect();
    summary.times.wall_s = started.elapsed().as_secs_f64();
    summary.coordinator_peak_rss_bytes = crate::workers::peak_rss_bytes("/proc/self/status");
    summary.times.images_per_s = computed as f64 / summary.times.wall_s.max(1e-9);
    summary.times.images_computed = computed;
    summary.out = config.out.clone();
    Ok(summary)
}

/// `pipeline merge`: assembles `out` from the parts every shard committed,
/// or says which chunks are missing.
pub fn merge(
    out: &Path,
    format: Option<OutputFormat>,
    layout: OutputLayout,
) -> Result<RunSummary, RunError> {
    let started = Instant::now();
    if !parts_dir(out).exists() {
        if out.exists() {
            return Ok(RunSummary::already_complete(out));
        }
        return Err(RunError::NothingToMerge(parts_dir(out)));
    }
    let (store, stored) = PartStore::open_existing(out)?;
    let chunks = plan_chunks(stored.inputs.items, stored.chunk_size);
    let format =
        format.unwrap_or_else(|| OutputFormat::from_path(out).unwrap_or(OutputFormat::Jsonl));
    let spec = OutputSpec {
        format,
        task: stored.task,
        feature_dim: stored.model.embedding_dim(stored.pooling),
        labels: stored.labels(),
        kept: stored.kept_columns.clone(),
        layout,
    };
    layout
        .check(format, stored.task)
        .map_err(RunError::Layout)?;
    let mut summary = RunSummary {
        out: out.to_owned(),
        ..RunSummary::default()
    };
    summary.chunks.total = chunks.len() as u64;
    match store.merge(&chunks, out, &spec, true)? {
        Merge::Done(assembled) => {
            summary.chunks.merged = true;
            summary.records.images = assembled.records;
            summary.records.failures = assembled.failures;
            summary.records.failures_by_kind = assembled.failures_by_kind;
        }
        Merge::Busy | Merge::AlreadyMerged => summary.chunks.already_complete = true,
    }
    summary.times.wall_s = started.elapsed().as_secs_f64();
    Ok(summary)
}
