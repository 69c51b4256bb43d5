//! One run's life: scan, plan chunks, skip those a previous run committed,
//! spawn the workers, hand out work as workers ask, survive dead and hung
//! workers, commit every finished chunk as a part file, and assemble the
//! output in input order.
//!
//! Scheduling is pull-based: a worker's `Ready` says how many tasks it
//! wants queued and each `ChunkDone` asks for one more, so a fast device is
//! never held back by a slow one. A task is a chunk or, after failures, a
//! piece of one. When the queue is empty, an idle worker re-runs the oldest
//! task still running elsewhere (speculative execution); the first result
//! wins, which is safe because a record does not depend on who computed it.
//!
//! Failures, and what each costs:
//! - a worker that dies (crash, signal, `kill -9`) or makes no progress
//!   for the hang timeout (then it is killed) costs its tasks in flight:
//!   they become *suspects* and run again alone on one worker, so the next
//!   death has a certain cause. A suspect that kills its worker is split in
//!   halves, down to single images; an image that kills a worker
//!   [`ISOLATED_FAILURES`] times becomes a `worker_crash` record;
//! - a worker that exits with [`WORKER_EXIT_DEVICE_LOST`] (device memory
//!   exhausted, device lost) is respawned with half its batch, and its tasks
//!   are simply queued again;
//! - SIGINT/SIGTERM stop the hand-out; tasks in flight get the grace period
//!   to finish and be committed, then the run exits resumable.

use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, unbounded};
use pipeline_core::{
    Chunk, ClassLabels, DeviceSpec, Fnv64, FromWorker, ItemOutcome, Manifest, Shard, ToWorker,
    WORKER_EXIT_DEVICE_LOST, WorkItemSpec, WorkerConfig, plan_chunks,
};
use serde::Serialize;
use serde_json::json;

use crate::book::{Death, Finished, TaskBook, TaskId};
use crate::output::{OutputFormat, OutputSpec};
use crate::parts::{Merge, PartStore, PartsError, parts_dir};
use crate::progress::Progress;
use crate::signals::{StopSignals, signal_name};
use crate::stats::{Stages, SteadyWindow, Timeline};
use crate::workers::{Event, LogLine, WorkerHandle, describe_exit};

/// How often the scheduler wakes up without events (signals, hang checks).
const TICK: Duration = Duration::from_millis(200);

/// How long finished workers get to exit before they are killed (a worker
/// may still be running a speculative copy nobody needs).
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// The hang timeout's multiplier before a worker's first batch: model load,
/// kernel compilation and autotuning happen there.
const STARTUP_FACTOR: u32 = 5;

/// Everything one run needs, validated by the front end.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The dataset folder.
    pub data: PathBuf,
    /// One entry per worker process: its device. The same device may appear
    /// several times (`--workers-per-gpu`).
    pub devices: Vec<DeviceSpec>,
    /// The worker setup shared by all workers (name and device are set per
    /// worker).
    pub worker: WorkerConfig,
    /// Items per chunk.
    pub chunk_size: u64,
    /// Output file.
    pub out: PathBuf,
    /// Output format.
    pub format: OutputFormat,
    /// Feature width, for CSV headers of `--task embed`.
    pub feature_dim: usize,
    /// The `pipeline` executable to spawn workers from.
    pub exe: PathBuf,
    /// Deaths in a row (without a finished task between them, and not
    /// explained by an isolated suspect) before a worker slot is given up.
    pub max_restarts: u32,
    /// A worker with work in flight and no message for this long is killed
    /// as hung; `None`: 120 s + 2 s per image of its batch.
    pub hang_timeout: Option<Duration>,
    /// After SIGINT/SIGTERM, how long tasks in flight may take to finish.
    pub grace: Duration,
    /// Start afresh: delete the parts of an earlier run, replace `out`.
    pub overwrite: bool,
    /// Accept a complete `out` as done instead of refusing it.
    pub resume: bool,
    /// The part of the chunks this process runs ([`Shard::ALL`] on one
    /// machine); shards share `out`'s part folder.
    pub shard: Shard,
    /// Where the shard came from (`--shard`, `SLURM_ARRAY_TASK_ID=1 of 3 tasks`).
    pub shard_source: Option<String>,
    /// With several shards: assemble the output if this shard finds every
    /// chunk committed when it ends (`infer --merge`).
    pub merge: bool,
    /// No progress or summary.
    pub quiet: bool,
}

/// A run that could not complete its output.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// `--data` is not usable.
    #[error(transparent)]
    Scan(#[from] pipeline_core::ScanError),
    /// The output could not be written.
    #[error("cannot write {path}: {source}")]
    Output {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A finished chunk could not be committed (a full disk, say).
    #[error(
        "cannot write a part to {dir}: {source}; the parts committed so far are kept: fix \
         that and run the same command again to finish"
    )]
    Commit {
        /// The part folder.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The output exists and the run was not told what to do with it.
    #[error(
        "--out {0} already exists; pass --overwrite to replace it, or --resume to keep it \
         as the finished result"
    )]
    OutputExists(PathBuf),
    /// The part folder cannot be used or assembled.
    #[error(transparent)]
    Parts(#[from] PartsError),
    /// `pipeline merge` found neither parts nor an output.
    #[error("{0} does not exist: no shard has committed anything for this output yet")]
    NothingToMerge(PathBuf),
    /// `--overwrite` would delete the parts other shards committed.
    #[error(
        "--overwrite with shards would delete the parts the other shards commit; delete \
         {0} once before starting the shards instead"
    )]
    OverwriteShards(PathBuf),
    /// The weight or class file could not be read for the run's
    /// fingerprint.
    #[error("{flag} {path}: {source}")]
    Fingerprint {
        /// `--weights` or `--classes`.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The worker executable could not be started.
    #[error("cannot start a worker ({exe}): {source}")]
    Spawn {
        /// What was run.
        exe: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Every worker failed; the message is the first worker's.
    #[error("{0}")]
    WorkersFailed(String),
    /// SIGINT or SIGTERM stopped the run; what finished is committed.
    #[error(
        "stopped by {}: {committed} of {total} chunks are committed in {}; \
         run the same command again to finish",
        signal_name(*signal),
        dir.display()
    )]
    Interrupted {
        /// The signal.
        signal: i32,
        /// Chunks committed.
        committed: u64,
        /// Chunks in the run.
        total: u64,
        /// The part folder.
        dir: PathBuf,
    },
}

/// Per-worker totals for the report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerReport {
    /// e.g. `cpu#0`.
    pub name: String,
    /// The device it ran on.
    pub device: String,
    /// Tasks it finished first.
    pub chunks: u64,
    /// Images in those tasks.
    pub images: u64,
    /// Batch size at the end.
    pub batch_size: usize,
    /// Times the batch was halved on memory exhaustion (in the process, or
    /// by a respawn after the process died of it).
    pub oom_backoffs: u64,
    /// Seconds its device waited for its loader.
    pub wait_loader_s: f64,
    /// Seconds in forward passes.
    pub infer_s: f64,
    /// Seconds from spawn to `Ready` (device open, model load).
    pub startup_s: f64,
    /// Processes that filled this slot and died, and how.
    pub deaths: Vec<String>,
    /// Peak resident memory of its last process (Linux `VmHWM`, read just
    /// before it was told to finish).
    pub peak_rss_bytes: Option<u64>,
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunSummary {
    /// Images in the output.
    pub images: u64,
    /// Of which failed.
    pub failures: u64,
    /// Failures by kind.
    pub failures_by_kind: std::collections::BTreeMap<String, u64>,
    /// Scan problems (unreadable folders, symlink loops).
    pub scan_problems: Vec<String>,
    /// Chunks in the run.
    pub chunks: u64,
    /// Chunks an earlier run had committed (resume).
    pub chunks_resumed: u64,
    /// The output existed and `--resume` accepted it; nothing was run.
    pub already_complete: bool,
    /// This run's shard (`1/3`) when the dataset is split.
    pub shard: Option<String>,
    /// Chunks this shard owns (all of them without shards).
    pub chunks_owned: u64,
    /// Whether the output file was assembled (by this run). A shard that
    /// ends before the others leaves that to `pipeline merge` or to the
    /// last shard run with `--merge`.
    pub merged: bool,
    /// Seconds from start to the output's rename.
    pub wall_s: f64,
    /// Images computed by this run per second of wall time.
    pub images_per_s: f64,
    /// Batch-size halvings over all workers.
    pub oom_backoffs: u64,
    /// Tasks run again after a worker died or hung.
    pub retries: u64,
    /// Tasks split in halves to find an image that kills workers.
    pub splits: u64,
    /// Speculative duplicate runs of slow tasks.
    pub speculative: u64,
    /// Worker processes restarted.
    pub restarts: u64,
    /// Workers killed for making no progress.
    pub hangs: u64,
    /// Seconds to scan the dataset.
    pub scan_s: f64,
    /// Seconds committing parts (encoding and fsyncs), summed over the
    /// committer threads.
    pub commit_s: f64,
    /// Seconds assembling the output from the parts.
    pub assemble_s: f64,
    /// Seconds per stage, summed over workers (`write_s`: the commits'
    /// seconds over the committer threads, plus assembly).
    pub stages: Stages,
    /// Between warm-up and run-out: the rate a longer run would hold.
    /// `None` when the run was too short to have one.
    pub steady: Option<SteadyWindow>,
    /// Peak resident memory of this (the coordinator's) process so far.
    pub coordinator_peak_rss_bytes: Option<u64>,
    /// Each forward pass's seconds, upload to read-back, in arrival order.
    #[serde(skip)]
    pub batch_latencies_s: Vec<f64>,
    /// Per worker.
    pub workers: Vec<WorkerReport>,
    /// Where the output is.
    pub out: PathBuf,
}

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

/// A worker slot: the process currently filling it and its counters.
struct Slot {
    device: DeviceSpec,
    handle: Option<WorkerHandle>,
    ready: bool,
    credit: usize,
    inflight: Vec<u64>,
    /// The suspect task it runs alone.
    isolated: Option<u64>,
    spawned: Instant,
    last_heard: Instant,
    first_batch_done: bool,
    /// Killed by the watchdog; its `Closed` event is on its way.
    hung: bool,
    /// It said `Failed` before `Ready`: bad weights, no such device.
    setup_failed: bool,
    /// Deaths since it last finished a task.
    deaths_in_a_row: u32,
    /// Batch size to start the next process with (after a memory death).
    batch_override: Option<usize>,
    done_images: u64,
    report: WorkerReport,
}

/// A stable description of everything the records depend on, so a resumed
/// run can refuse parts that another configuration made. Devices, batch
/// size and worker counts are not in it: they do not change the records
/// (README: identity holds per device kind).
fn identity(config: &RunConfig, manifest: &Manifest) -> Result<serde_json::Value, RunError> {
    let weights = match &config.worker.weights {
        Some(path) => {
            let (bytes, fnv64) =
                file_fingerprint(path).map_err(|source| RunError::Fingerprint {
                    flag: "--weights",
                    path: path.clone(),
                    source,
                })?;
            json!({"bytes": bytes, "fnv64": fnv64})
        }
        None => json!({"random_seed": config.worker.seed}),
    };
    let mut identity = json!({
        "inputs": {
            "items": manifest.entries.len(),
            "paths_fnv64": format!("{:016x}", manifest.fingerprint()),
        },
        "chunk_size": config.chunk_size,
        "model": config.worker.model.name(),
        "weights": weights,
        "task": config.worker.task,
        "preprocess": config.worker.preprocess,
        "limits": config.worker.limits,
    });
    // Only when chosen, so that earlier runs' identities stay the same.
    if let Some(pooling) = config.worker.pooling {
        identity["pooling"] = json!(pooling);
    }
    if let Some(classes) = &config.worker.classes {
        let (bytes, fnv64) =
            file_fingerprint(&classes.path).map_err(|source| RunError::Fingerprint {
                flag: "--classes",
                path: classes.path.clone(),
                source,
            })?;
        identity["classes"] = json!({"bytes": bytes, "fnv64": fnv64, "labels": classes.labels});
    }
    Ok(identity)
}

/// The size and FNV-64 hash (hex) of the file at `path`.
fn file_fingerprint(path: &Path) -> std::io::Result<(u64, String)> {
    let mut file = std::fs::File::open(path)?;
    let mut hash = Fnv64::default();
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = std::io::Read::read(&mut file, &mut buffer)?;
        if n == 0 {
            break;
        }
        hash.write(&buffer[..n]);
        bytes += n as u64;
    }
    Ok((bytes, format!("{:016x}", hash.finish())))
}

/// Runs `config` to the end and returns what happened.
pub fn run(config: &RunConfig) -> Result<RunSummary, RunError> {
    let started = Instant::now();
    let manifest = Manifest::scan(&config.data)?;
    let scan_s = started.elapsed().as_secs_f64();
    crate::failpoints::after_scan();
    let output_error = |path: &Path| {
        let path = path.to_owned();
        move |source| RunError::Output { path, source }
    };
    let parts = parts_dir(&config.out);
    let sharded = config.shard.count > 1;
    if config.overwrite && sharded {
        return Err(RunError::OverwriteShards(parts));
    }
    if config.overwrite {
        match std::fs::remove_dir_all(&parts) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(output_error(&parts)(e));
            }
            _ => {}
        }
    } else if config.out.exists() && !parts.exists() {
        if config.resume {
            return Ok(RunSummary {
                already_complete: true,
                out: config.out.clone(),
                ..RunSummary::default()
            });
        }
        return Err(RunError::OutputExists(config.out.clone()));
    }
    let chunks = plan_chunks(manifest.entries.len() as u64, config.chunk_size);
    let store = PartStore::open(&config.out, &identity(config, &manifest)?)?;
    let output = OutputSpec {
        format: config.format,
        task: config.worker.task,
        feature_dim: config.feature_dim,
        labels: ClassLabels::of(config.worker.classes.as_ref()),
    };
    let committed: HashSet<u64> = store.committed()?;
    let owned: Vec<Chunk> = chunks
        .iter()
        .copied()
        .filter(|c| config.shard.owns(c))
        .collect();
    let resumed: Vec<&Chunk> = owned.iter().filter(|c| committed.contains(&c.id)).collect();

    let owned_items: u64 = owned.iter().map(Chunk::len).sum();
    let mut progress = Progress::new(owned_items, config.quiet);
    for problem in &manifest.problems {
        progress.notice(&format!(
            "pipeline: warning: skipped {}: {}",
            problem.path.display(),
            problem.message
        ));
    }
    if sharded {
        progress.notice(&format!(
            "pipeline: shard {} ({}): {} of {} chunks, {owned_items} of {} images",
            config.shard,
            config.shard_source.as_deref().unwrap_or("--shard"),
            owned.len(),
            chunks.len(),
            manifest.entries.len()
        ));
    }
    if !resumed.is_empty() {
        progress.notice(&format!(
            "pipeline: resuming: {} of {} chunks are already committed in {}",
            resumed.len(),
            owned.len(),
            store.dir().display()
        ));
        progress.advance(resumed.iter().map(|c| c.len()).sum());
    }
    let signals = StopSignals::install()
        .map_err(|e| RunError::WorkersFailed(format!("cannot install signal handlers: {e}")))?;
    let mut run = Scheduler::new(config, &manifest, &owned, &committed, &store, &mut progress);
    let outcome = std::thread::scope(|scope| {
        let (commits, queue) = crossbeam_channel::bounded(COMMIT_QUEUE);
        for _ in 0..COMMIT_THREADS {
            let (queue, events) = (queue.clone(), run.events_tx.clone());
            let (manifest, store, labels) = (&manifest, &store, &output.labels);
            scope.spawn(move || commit_parts(&queue, manifest, labels, store, &events));
        }
        run.commits = Some(commits);
        let outcome = run.drive(&mut progress, &signals);
        // The committers finish what is queued, then end with the scope.
        run.commits = None;
        outcome
    });
    let computed = run.computed_images;
    let mut summary = run.shut_down(&mut progress);
    drop(signals);
    outcome?;

    let assembling = Instant::now();
    let everything_committed = !sharded || {
        let now = store.committed()?;
        chunks.iter().all(|c| now.contains(&c.id))
    };
    let merge = if !sharded || (config.merge && everything_committed) {
        store.merge(&chunks, &config.out, &output, !sharded)?
    } else {
        Merge::Busy
    };
    let totals = match merge {
        Merge::Done(assembled) => {
            summary.merged = true;
            assembled
        }
        Merge::Busy | Merge::AlreadyMerged => {
            if !config.merge {
                progress.notice(&format!(
                    "pipeline: shard {} done; run `pipeline merge --out {}` once every shard is",
                    config.shard,
                    config.out.display()
                ));
            }
            // Count this shard's own records while its parts are there.
            store.tally(&owned).unwrap_or_default()
        }
    };
    progress.clear();
    summary.assemble_s = assembling.elapsed().as_secs_f64();
    // The commits ran on COMMIT_THREADS threads at once.
    summary.stages.write_s = summary.commit_s / COMMIT_THREADS as f64 + summary.assemble_s;
    summary.images = totals.records;
    summary.failures = totals.failures;
    summary.failures_by_kind = totals.failures_by_kind;
    summary.chunks = chunks.len() as u64;
    summary.chunks_owned = owned.len() as u64;
    summary.chunks_resumed = resumed.len() as u64;
    summary.shard = sharded.then(|| config.shard.to_string());
    summary.scan_s = scan_s;
    summary.scan_problems = manifest
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.path.display(), p.message))
        .collect();
    summary.wall_s = started.elapsed().as_secs_f64();
    summary.coordinator_peak_rss_bytes = crate::workers::peak_rss_bytes("/proc/self/status");
    summary.images_per_s = computed as f64 / summary.wall_s.max(1e-9);
    summary.out = config.out.clone();
    Ok(summary)
}

/// `pipeline merge`: assembles `out` from the parts every shard committed,
/// or says which chunks are missing.
pub fn merge(out: &Path, format: Option<OutputFormat>) -> Result<RunSummary, RunError> {
    let started = Instant::now();
    if !parts_dir(out).exists() {
        if out.exists() {
            return Ok(RunSummary {
                already_complete: true,
                out: out.to_owned(),
                ..RunSummary::default()
            });
        }
        return Err(RunError::NothingToMerge(parts_dir(out)));
    }
    let (store, stored) = PartStore::open_existing(out)?;
    let chunks = plan_chunks(stored.items, stored.chunk_size);
    let format =
        format.unwrap_or_else(|| OutputFormat::from_path(out).unwrap_or(OutputFormat::Jsonl));
    let spec = OutputSpec {
        format,
        task: stored.task,
        feature_dim: stored
            .model
            .parse::<pipeline_core::ModelKind>()
            .map_or(0, |m| m.embedding_dim(stored.pooling)),
        labels: stored.labels,
    };
    let mut summary = RunSummary {
        chunks: chunks.len() as u64,
        out: out.to_owned(),
        ..RunSummary::default()
    };
    match store.merge(&chunks, out, &spec, true)? {
        Merge::Done(assembled) => {
            summary.merged = true;
            summary.images = assembled.records;
            summary.failures = assembled.failures;
            summary.failures_by_kind = assembled.failures_by_kind;
        }
        Merge::Busy | Merge::AlreadyMerged => summary.already_complete = true,
    }
    summary.wall_s = started.elapsed().as_secs_f64();
    Ok(summary)
}

struct Scheduler<'a> {
    config: &'a RunConfig,
    manifest: &'a Manifest,
    store: &'a PartStore,
    /// Tasks, suspects and chunks: what to run next (see `book.rs`).
    book: TaskBook,
    /// Chunks this process owns.
    owned: usize,
    /// Chunks not committed yet.
    remaining: usize,
    slots: Vec<Slot>,
    by_id: HashMap<usize, usize>,
    next_id: usize,
    events: Receiver<Event>,
    events_tx: crossbeam_channel::Sender<Event>,
    log: LogLine,
    summary: RunSummary,
    first_failure: Option<String>,
    /// Set by SIGINT/SIGTERM: the signal and when the grace period ends.
    stopping: Option<(i32, Instant)>,
    /// Items of each unfinished task a worker reported done, per worker.
    partial: HashMap<(usize, u64), u64>,
    /// Items of each task already shown on the progress bar (the most any
    /// one worker reported, so a speculative copy does not count twice).
    shown: HashMap<u64, u64>,
    /// Images this run computed (not resumed).
    computed_images: u64,
    /// Stage times the workers reported.
    times: pipeline_core::ChunkTimes,
    /// Batch completions, for the steady-state rate.
    timeline: Timeline,
    /// Whole chunks for the committer threads; `None` outside `drive`.
    commits: Option<crossbeam_channel::Sender<(u64, Vec<ItemOutcome>)>>,
    /// Chunks sent to the committers and not reported back yet.
    pending_commits: usize,
}

impl<'a> Scheduler<'a> {
    fn new(
        config: &'a RunConfig,
        manifest: &'a Manifest,
        chunks: &[Chunk],
        committed: &HashSet<u64>,
        store: &'a PartStore,
        progress: &mut Progress,
    ) -> Self {
        let (events_tx, events) = unbounded();
        let now = Instant::now();
        let slots = config
            .devices
            .iter()
            .map(|device| Slot {
                device: device.clone(),
                handle: None,
                ready: false,
                credit: 0,
                inflight: Vec::new(),
                isolated: None,
                spawned: now,
                last_heard: now,
                first_batch_done: false,
                hung: false,
                setup_failed: false,
                deaths_in_a_row: 0,
                batch_override: None,
                done_images: 0,
                report: WorkerReport::default(),
            })
            .collect();
        Self {
            config,
            manifest,
            store,
            owned: chunks.len(),
            remaining: chunks.iter().filter(|c| !committed.contains(&c.id)).count(),
            book: TaskBook::new(chunks, committed),
            slots,
            by_id: HashMap::new(),
            next_id: 0,
            events,
            events_tx,
            log: progress.logger(),
            summary: RunSummary::default(),
            first_failure: None,
            stopping: None,
            partial: HashMap::new(),
            shown: HashMap::new(),
            computed_images: 0,
            times: pipeline_core::ChunkTimes::default(),
            timeline: Timeline::new(now),
            commits: None,
            pending_commits: 0,
        }
    }

    fn worker_name(&self, slot: usize) -> String {
        let device = &self.slots[slot].device;
        let same_before = self.slots[..slot]
            .iter()
            .filter(|s| &s.device == device)
            .count();
        format!("{device}#{same_before}")
    }

    fn spawn(&mut self, slot: usize) -> Result<(), RunError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut worker = self.config.worker.clone();
        worker.name = self.worker_name(slot);
        worker.device = self.slots[slot].device.clone();
        if let Some(batch) = self.slots[slot].batch_override {
            worker.batch_size = Some(batch);
        }
        let handle = WorkerHandle::spawn(&self.config.exe, id, &worker, &self.events_tx, &self.log)
            .map_err(|source| RunError::Spawn {
                exe: self.config.exe.clone(),
                source,
            })?;
        let s = &mut self.slots[slot];
        s.report.name = worker.name;
        s.report.device = worker.device.to_string();
        s.handle = Some(handle);
        s.ready = false;
        s.credit = 0;
        s.hung = false;
        s.setup_failed = false;
        s.first_batch_done = false;
        s.spawned = Instant::now();
        s.last_heard = s.spawned;
        self.by_id.insert(id, slot);
        Ok(())
    }

    /// Starts the steady window once every live worker finished a batch.
    fn note_warm(&mut self) {
        if !self.timeline.is_warm()
            && self
                .slots
                .iter()
                .all(|s| s.first_batch_done || s.handle.is_none())
        {
            self.timeline.warm();
        }
    }

    fn in_flight(&self) -> bool {
        self.slots.iter().any(|s| !s.inflight.is_empty())
    }

    fn drive(&mut self, progress: &mut Progress, signals: &StopSignals) -> Result<(), RunError> {
        if self.remaining == 0 {
            return Ok(());
        }
        for slot in 0..self.slots.len() {
            self.spawn(slot)?;
        }
        while self.remaining > 0 {
            if let (Some(signal), None) = (signals.received(), self.stopping) {
                self.stop(signal);
            }
            if let Some((signal, deadline)) = self.stopping
                && ((!self.in_flight() && self.pending_commits == 0) || Instant::now() >= deadline)
            {
                // Commits still queued finish when the committers drain.
                let committed = (self.owned - self.remaining) as u64;
                return Err(RunError::Interrupted {
                    signal,
                    committed,
                    total: self.owned as u64,
                    dir: self.store.dir().to_owned(),
                });
            }
            match self.events.recv_timeout(TICK) {
                Ok(Event::Message { id, message }) => {
                    if let Some(&slot) = self.by_id.get(&id) {
                        self.slots[slot].last_heard = Instant::now();
                        self.on_message(slot, message, progress)?;
                    }
                }
                Ok(Event::Closed { id, error }) => {
                    if let Some(slot) = self.by_id.remove(&id) {
                        self.on_closed(slot, error, progress)?;
                    }
                }
                Ok(Event::Committed { result }) => self.on_committed(result)?,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(RunError::WorkersFailed("every worker is gone".into()));
                }
            }
            self.watch_for_hangs();
            self.dispatch();
            if self.work_left()
                && self.stopping.is_none()
                && self.slots.iter().all(|s| s.handle.is_none())
            {
                return Err(RunError::WorkersFailed(
                    self.first_failure
                        .clone()
                        .unwrap_or_else(|| "every worker exited before the work was done".into()),
                ));
            }
        }
        Ok(())
    }

    /// The first SIGINT/SIGTERM: hand out nothing more.
    fn stop(&mut self, signal: i32) {
        let grace = self.config.grace;
        self.stopping = Some((signal, Instant::now() + grace));
        self.book.stop();
        let running: usize = self.slots.iter().map(|s| s.inflight.len()).sum();
        (self.log)(&format!(
            "pipeline: {}: no new work; waiting up to {:.0} s for {running} task(s) in flight \
             (again to stop at once)",
            signal_name(signal),
            grace.as_secs_f64()
        ));
    }

    /// Kills workers that have had work and said nothing for too long.
    fn watch_for_hangs(&mut self) {
        let base = self.config.hang_timeout;
        for s in &mut self.slots {
            let Some(handle) = s.handle.as_mut() else {
                continue;
            };
            if s.hung || (s.ready && s.inflight.is_empty()) {
                continue;
            }
            let batch = s
                .report
                .batch_size
                .max(self.config.worker.batch_size.unwrap_or(0))
                .max(1);
            let timeout = base.unwrap_or_else(|| {
                Duration::from_secs(120) + Duration::from_secs(2) * batch as u32
            });
            let timeout = if s.first_batch_done {
                timeout
            } else {
                timeout * STARTUP_FACTOR
            };
            if s.last_heard.elapsed() > timeout {
                (self.log)(&format!(
                    "pipeline: {}: no progress for {:.0} s; killing it",
                    s.report.name,
                    timeout.as_secs_f64()
                ));
                handle.kill();
                s.hung = true;
                self.summary.hangs += 1;
            }
        }
    }

    fn on_message(
        &mut self,
        slot: usize,
        message: FromWorker,
        progress: &mut Progress,
    ) -> Result<(), RunError> {
        match message {
            FromWorker::Ready {
                device,
                batch_size,
                prefetch,
                ..
            } => {
                let s = &mut self.slots[slot];
                s.ready = true;
                s.credit = prefetch.max(1);
                s.report.device = format!("{} ({device})", s.device);
                s.report.batch_size = batch_size;
                s.report.startup_s += s.spawned.elapsed().as_secs_f64();
                let line = format!("{}: {device}, batch {batch_size}", s.report.name);
                progress.worker(slot, line);
            }
            FromWorker::Failed { message } => {
                let s = &mut self.slots[slot];
                s.setup_failed |= !s.ready;
                let name = &s.report.name;
                (self.log)(&format!("pipeline: worker {name} failed: {message}"));
                self.first_failure.get_or_insert(message);
            }
            FromWorker::BatchSize { from, to, reason } => {
                let s = &mut self.slots[slot];
                s.report.oom_backoffs += 1;
                s.report.batch_size = to;
                self.summary.oom_backoffs += 1;
                (self.log)(&format!(
                    "pipeline: {}: out of memory at batch {from}, now {to} ({reason})",
                    s.report.name
                ));
            }
            FromWorker::Progress { chunk: task, items } => {
                self.slots[slot].first_batch_done = true;
                let Some(id) = self.slots[slot].handle.as_ref().map(|h| h.id) else {
                    return Ok(());
                };
                self.timeline.batch_done(items);
                self.note_warm();
                let done = self.partial.entry((id, task)).or_default();
                *done += items;
                let done = *done;
                let shown = self.shown.entry(task).or_default();
                if done > *shown {
                    progress.advance(done - *shown);
                    *shown = done;
                }
            }
            FromWorker::ChunkDone {
                chunk: task,
                outcomes,
                times,
            } => self.on_done(slot, task, outcomes, times, progress)?,
        }
        Ok(())
    }

    fn on_done(
        &mut self,
        slot: usize,
        task: u64,
        outcomes: Vec<ItemOutcome>,
        times: pipeline_core::ChunkTimes,
        progress: &mut Progress,
    ) -> Result<(), RunError> {
        let s = &mut self.slots[slot];
        s.inflight.retain(|&t| t != task);
        if s.isolated == Some(task) {
            s.isolated = None;
        }
        s.credit += 1;
        s.first_batch_done = true;
        s.deaths_in_a_row = 0;
        s.report.wait_loader_s += times.wait_loader_s;
        s.report.infer_s += times.infer_s;
        self.times.add(&times);
        let id = s.handle.as_ref().map_or(usize::MAX, |h| h.id);
        let name = s.report.name.clone();
        let returned = outcomes.len() as u64;
        let finished = self.book.finished(task, id, outcomes);
        let images = match &finished {
            Finished::Stale => return Ok(()), // a speculative copy lost the race
            Finished::Bad(problem) => {
                (self.log)(&format!(
                    "pipeline: {name} returned a bad task {task} ({problem}); running it again"
                ));
                return Ok(());
            }
            Finished::Recorded { images } | Finished::Complete { images, .. } => *images,
        };
        let earlier = self.partial.get(&(id, task)).copied().unwrap_or(0);
        self.timeline.batch_done(returned.saturating_sub(earlier));
        self.note_warm();
        let s = &mut self.slots[slot];
        s.report.chunks += 1;
        s.report.images += images;
        s.done_images += images;
        let rate = s.done_images as f64 / s.spawned.elapsed().as_secs_f64().max(1e-9);
        let line = format!(
            "{}: batch {}, {rate:.1} images/s",
            s.report.device, s.report.batch_size
        );
        progress.worker(slot, format!("{name}: {line}"));
        self.finish_task(task, finished, progress)
    }

    /// Counts a task the book recorded; sends its chunk to the committers
    /// once the book says it is complete.
    fn finish_task(
        &mut self,
        task: TaskId,
        finished: Finished,
        progress: &mut Progress,
    ) -> Result<(), RunError> {
        let images = match &finished {
            Finished::Recorded { images } | Finished::Complete { images, .. } => *images,
            Finished::Stale | Finished::Bad(_) => return Ok(()),
        };
        let shown = self.shown.remove(&task).unwrap_or(0);
        progress.advance(images.saturating_sub(shown));
        self.partial.retain(|&(_, t), _| t != task);
        self.computed_images += images;
        let Finished::Complete {
            chunk, outcomes, ..
        } = finished
        else {
            return Ok(());
        };
        // Encoding and the fsyncs happen on the committer threads; the
        // chunk counts as done when its `Committed` event arrives.
        let Some(commits) = &self.commits else {
            return Err(RunError::WorkersFailed(
                "the committer threads are gone".into(),
            ));
        };
        commits
            .send((chunk, outcomes))
            .map_err(|_| RunError::WorkersFailed("the committer threads are gone".into()))?;
        self.pending_commits += 1;
        Ok(())
    }

    /// A committer thread finished (or failed) writing `chunk`'s part.
    fn on_committed(&mut self, result: std::io::Result<f64>) -> Result<(), RunError> {
        self.pending_commits -= 1;
        let seconds = result.map_err(|source| RunError::Commit {
            dir: self.store.dir().to_owned(),
            source,
        })?;
        self.summary.commit_s += seconds;
        self.remaining -= 1;
        Ok(())
    }

    /// Whether any chunk still needs a worker (not merely its commit).
    fn work_left(&self) -> bool {
        self.remaining > self.pending_commits
    }

    fn on_closed(
        &mut self,
        slot: usize,
        error: Option<String>,
        progress: &mut Progress,
    ) -> Result<(), RunError> {
        let Some(handle) = self.slots[slot].handle.take() else {
            return Ok(());
        };
        let id = handle.id;
        let status = handle.wait();
        let device_lost = status
            .as_ref()
            .is_ok_and(|s| s.code() == Some(WORKER_EXIT_DEVICE_LOST));
        let status = status
            .map(|s| describe_exit(&s))
            .unwrap_or_else(|e| e.to_string());
        let s = &mut self.slots[slot];
        s.ready = false;
        s.credit = 0;
        let isolated = s.isolated.take();
        let lost: Vec<u64> = std::mem::take(&mut s.inflight);
        let mut why = if s.hung {
            format!("worker {} hung and was killed", s.report.name)
        } else {
            format!("worker {} exited with {status}", s.report.name)
        };
        if device_lost {
            why.push_str(" (device out of memory or lost)");
        }
        if let Some(error) = error {
            why.push_str(&format!(" ({error})"));
        }
        s.report.deaths.push(status);
        if self.stopping.is_none() {
            (self.log)(&format!("pipeline: {why}"));
        }
        if self.stopping.is_none() {
            // Memory is about the batch, not the images: no blame.
            let death = if device_lost {
                Death::DeviceLost
            } else {
                Death::Crashed
            };
            for (task, failed) in self.book.worker_died(id, &lost, isolated, death, &why) {
                self.finish_task(task, failed, progress)?;
            }
        }
        if self.stopping.is_some() || !self.work_left() {
            return Ok(());
        }
        // A worker that said its setup failed (bad weights, no such
        // device) would fail the same way again. One killed while starting
        // up is restarted like any other.
        self.first_failure.get_or_insert(why);
        let s = &mut self.slots[slot];
        if s.setup_failed {
            return Ok(());
        }
        if device_lost {
            let from = s.report.batch_size.max(1);
            let to = (from / 2).max(1);
            s.batch_override = Some(to);
            s.report.oom_backoffs += 1;
            self.summary.oom_backoffs += 1;
            (self.log)(&format!(
                "pipeline: {}: restarting with batch {to} (was {from})",
                s.report.name
            ));
        }
        if isolated.is_none() {
            s.deaths_in_a_row += 1;
        }
        if s.deaths_in_a_row > self.config.max_restarts {
            (self.log)(&format!(
                "pipeline: {}: died {} times in a row without finishing anything; \
                 not restarting it",
                s.report.name, s.deaths_in_a_row
            ));
            return Ok(());
        }
        self.summary.restarts += 1;
        self.spawn(slot)
    }

    /// Hands out tasks to workers with credit. While suspects wait, workers
    /// take no other work until one is idle and runs a suspect alone; idle
    /// workers with an empty queue take a copy of the oldest running task.
    fn dispatch(&mut self) {
        if self.stopping.is_some() {
            return;
        }
        for slot in 0..self.slots.len() {
            let s = &self.slots[slot];
            if !s.ready || s.handle.is_none() || s.isolated.is_some() {
                continue;
            }
            if let Some(suspect) = self.book.next_suspect() {
                if s.inflight.is_empty() && self.send(slot, suspect) {
                    self.book.took_suspect();
                    self.slots[slot].isolated = Some(suspect);
                }
                continue;
            }
            while self.slots[slot].credit > 0 {
                let s = &self.slots[slot];
                let Some(id) = s.handle.as_ref().map(|h| h.id) else {
                    break;
                };
                let Some(task) = self.book.next_for(id, s.inflight.is_empty()) else {
                    break;
                };
                if !self.send(slot, task) {
                    self.book.unsent(task);
                    break;
                }
            }
        }
        if self.book.drained() {
            self.timeline.drained();
        }
    }

    /// Sends `task` to `slot`'s worker; false if the worker is gone (its
    /// `Closed` event will requeue what it held).
    fn send(&mut self, slot: usize, task: u64) -> bool {
        let items = self.items(task);
        let s = &mut self.slots[slot];
        let Some(handle) = s.handle.as_mut() else {
            return false;
        };
        let id = handle.id;
        if handle.send(&ToWorker::Chunk { id: task, items }).is_err() {
            s.ready = false;
            return false;
        }
        s.credit = s.credit.saturating_sub(1);
        s.inflight.push(task);
        if s.inflight.len() == 1 {
            // The clock of a worker idle until now starts here.
            s.last_heard = Instant::now();
        }
        self.book.sent(task, id);
        true
    }

    fn items(&self, task: TaskId) -> Vec<WorkItemSpec> {
        let items = self.book.items(task);
        self.manifest.entries[items.start as usize..items.end as usize]
            .iter()
            .map(|e| WorkItemSpec {
                index: e.index,
                path: absolute(&self.manifest.root, &e.relative)
                    .as_os_str()
                    .as_bytes()
                    .to_vec(),
            })
            .collect()
    }

    /// Ends every worker: `Finish`, a grace period, then kill.
    fn shut_down(&mut self, progress: &mut Progress) -> RunSummary {
        for slot in &mut self.slots {
            if let Some(handle) = slot.handle.as_mut() {
                slot.report.peak_rss_bytes = handle.peak_rss_bytes();
                if self.stopping.is_some() {
                    handle.kill();
                } else {
                    handle.finish();
                }
            }
        }
        let deadline = Instant::now() + EXIT_GRACE;
        for slot in &mut self.slots {
            if let Some(mut handle) = slot.handle.take() {
                while !handle.try_exited() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
                handle.kill();
                let _ = handle.wait();
            }
        }
        progress.clear();
        let mut summary = std::mem::take(&mut self.summary);
        let counts = self.book.counts();
        summary.retries = counts.retries;
        summary.splits = counts.splits;
        summary.speculative = counts.speculative;
        summary.workers = self.slots.iter().map(|s| s.report.clone()).collect();
        summary.stages = Stages::from_worker(&self.times);
        summary.batch_latencies_s = std::mem::take(&mut self.times.batch_s);
        summary.steady = self.timeline.steady();
        summary
    }
}

fn absolute(root: &Path, relative: &Path) -> PathBuf {
    let path = root.join(relative);
    if path.is_absolute() {
        path
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(&path))
            .unwrap_or(path)
    }
}

/// A finished chunk's part file bytes: each outcome with its item's path,
/// as JSONL. With [`check_outcomes`] and the frame decode, this is the
/// coordinator's work per result between a worker's pipe and the disk
/// (`benches`: `coordinator_path`).
pub fn encode_part(
    manifest: &Manifest,
    labels: &ClassLabels,
    outcomes: Vec<ItemOutcome>,
) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(outcomes.len() * 192);
    for o in &outcomes {
        let path = manifest.entries[o.index as usize]
            .relative
            .to_string_lossy();
        crate::output::encode_jsonl_parts(o.index, &path, &o.result, labels, &mut bytes)
            .expect("writing JSON into a Vec cannot fail");
    }
    bytes
}

/// The output format implied by `--format`, else the file extension, else JSONL.
pub fn choose_format(flag: Option<&str>, out: &Path) -> Result<OutputFormat, String> {
    match flag {
        Some(f) => f.parse(),
        None => Ok(OutputFormat::from_path(out).unwrap_or(OutputFormat::Jsonl)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_follows_the_flag_then_the_extension() {
        let csv = Path::new("out/p.csv");
        assert_eq!(choose_format(None, csv), Ok(OutputFormat::Csv));
        assert_eq!(
            choose_format(Some("parquet"), csv),
            Ok(OutputFormat::Parquet)
        );
        assert_eq!(
            choose_format(None, Path::new("p.PARQUET")),
            Ok(OutputFormat::Parquet)
        );
        assert_eq!(choose_format(None, Path::new("p")), Ok(OutputFormat::Jsonl));
        assert_eq!(
            choose_format(None, Path::new("p.txt")),
            Ok(OutputFormat::Jsonl)
        );
        assert!(choose_format(Some("xml"), csv).is_err());
    }
}
