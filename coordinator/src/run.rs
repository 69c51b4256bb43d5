//! One run's life: scan, plan chunks, spawn the workers, hand out chunks as
//! workers ask, survive dead workers, and write results in input order.
//!
//! Scheduling is pull-based: a worker's `Ready` says how many chunks it
//! wants queued and each `ChunkDone` asks for one more, so a fast device is
//! never held back by a slow one. When the queue is empty, an idle worker
//! re-runs the oldest chunk still running elsewhere (speculative execution);
//! the first result wins and the other is dropped, which is safe because a
//! chunk's records do not depend on who computed them.

use std::collections::{HashMap, VecDeque};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, unbounded};
use pipeline_core::{
    Chunk, DeviceSpec, FromWorker, ItemError, ItemErrorKind, ItemOutcome, Manifest, ToWorker,
    WorkItemSpec, WorkerConfig, plan_chunks,
};
use serde::Serialize;

use crate::output::{OutputFormat, Record, RecordSink, open_sink, partial_path};
use crate::progress::Progress;
use crate::workers::{Event, LogLine, WorkerHandle, describe_exit};

/// How often the scheduler wakes up without events (progress, dead checks).
const TICK: Duration = Duration::from_millis(200);

/// How long finished workers get to exit before they are killed (a worker
/// may still be running a speculative copy nobody needs).
const EXIT_GRACE: Duration = Duration::from_secs(3);

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
    /// Runs of one chunk before its items are failed as `worker_crash`.
    pub max_attempts: u32,
    /// Times a worker slot is restarted after its process died.
    pub max_restarts: u32,
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
}

/// Per-worker totals for the report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerReport {
    /// e.g. `cpu#0`.
    pub name: String,
    /// The device it ran on.
    pub device: String,
    /// Chunks it finished first.
    pub chunks: u64,
    /// Images in those chunks.
    pub images: u64,
    /// Batch size at the end.
    pub batch_size: usize,
    /// Times the batch was halved on memory exhaustion.
    pub oom_backoffs: u64,
    /// Seconds its device waited for its loader.
    pub wait_loader_s: f64,
    /// Seconds in forward passes.
    pub infer_s: f64,
    /// Seconds from spawn to `Ready` (device open, model load).
    pub startup_s: f64,
    /// How its process ended, when it ended before the run did.
    pub died: Option<String>,
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunSummary {
    /// Images in the output.
    pub images: u64,
    /// Of which failed.
    pub failures: u64,
    /// Failures by kind.
    pub failures_by_kind: HashMap<String, u64>,
    /// Scan problems (unreadable folders, symlink loops).
    pub scan_problems: Vec<String>,
    /// Seconds from start to the output's rename.
    pub wall_s: f64,
    /// `images / wall_s`.
    pub images_per_s: f64,
    /// Batch-size halvings over all workers.
    pub oom_backoffs: u64,
    /// Chunks run again after a worker died.
    pub retries: u64,
    /// Speculative duplicate runs of slow chunks.
    pub speculative: u64,
    /// Worker processes restarted.
    pub restarts: u64,
    /// Seconds to scan the dataset.
    pub scan_s: f64,
    /// Seconds spent writing output records.
    pub write_s: f64,
    /// Per worker.
    pub workers: Vec<WorkerReport>,
    /// Where the output is.
    pub out: PathBuf,
}

/// Where one chunk stands: done, how often it was tried, who runs it now.
#[derive(Debug)]
struct ChunkState {
    chunk: Chunk,
    done: bool,
    attempts: u32,
    running_on: Vec<usize>,
    started: Option<Instant>,
}

/// A worker slot: the process currently filling it and its counters.
struct Slot {
    device: DeviceSpec,
    handle: Option<WorkerHandle>,
    ready: bool,
    credit: usize,
    inflight: Vec<u64>,
    spawned: Instant,
    restarts: u32,
    done_images: u64,
    report: WorkerReport,
}

/// Writes chunks' records strictly in chunk order, holding early arrivals.
struct OrderedWriter {
    sink: Option<Box<dyn RecordSink>>,
    order: Vec<u64>,
    next: usize,
    held: HashMap<u64, Vec<Record>>,
    write_s: f64,
}

impl OrderedWriter {
    fn commit(&mut self, chunk: u64, records: Vec<Record>) -> std::io::Result<()> {
        self.held.insert(chunk, records);
        let started = Instant::now();
        while let Some(records) = self
            .order
            .get(self.next)
            .and_then(|id| self.held.remove(id))
        {
            if let Some(sink) = self.sink.as_mut() {
                for record in &records {
                    sink.write(record)?;
                }
            }
            self.next += 1;
        }
        self.write_s += started.elapsed().as_secs_f64();
        Ok(())
    }

    fn complete(&self) -> bool {
        self.next == self.order.len()
    }

    fn finish(&mut self) -> std::io::Result<()> {
        match self.sink.take() {
            Some(sink) => sink.finish(),
            None => Ok(()),
        }
    }
}

/// Runs `config` to the end and returns what happened.
pub fn run(config: &RunConfig) -> Result<RunSummary, RunError> {
    let started = Instant::now();
    let manifest = Manifest::scan(&config.data)?;
    let scan_s = started.elapsed().as_secs_f64();
    let mut progress = Progress::new(manifest.entries.len() as u64, config.quiet);
    for problem in &manifest.problems {
        progress.notice(&format!(
            "pipeline: warning: skipped {}: {}",
            problem.path.display(),
            problem.message
        ));
    }
    let chunks = plan_chunks(manifest.entries.len() as u64, config.chunk_size);
    let partial = partial_path(&config.out);
    let output_error = |source| RunError::Output {
        path: config.out.clone(),
        source,
    };
    let sink = open_sink(
        &partial,
        config.format,
        config.worker.task,
        config.feature_dim,
    )
    .map_err(output_error)?;
    let mut writer = OrderedWriter {
        sink: Some(sink),
        order: chunks.iter().map(|c| c.id).collect(),
        next: 0,
        held: HashMap::new(),
        write_s: 0.0,
    };
    let mut run = Scheduler::new(config, &manifest, &chunks, &mut progress);
    let outcome = run.drive(&mut writer, &mut progress);
    let mut summary = run.shut_down(&mut progress);
    if let Err(e) = outcome {
        let _ = writer.finish();
        let _ = std::fs::remove_file(&partial);
        progress.clear();
        return Err(e);
    }
    writer.finish().map_err(output_error)?;
    std::fs::rename(&partial, &config.out).map_err(output_error)?;
    progress.clear();
    summary.images = manifest.entries.len() as u64;
    summary.scan_s = scan_s;
    summary.write_s = writer.write_s;
    summary.scan_problems = manifest
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.path.display(), p.message))
        .collect();
    summary.wall_s = started.elapsed().as_secs_f64();
    summary.images_per_s = summary.images as f64 / summary.wall_s.max(1e-9);
    summary.out = config.out.clone();
    Ok(summary)
}

struct Scheduler<'a> {
    config: &'a RunConfig,
    manifest: &'a Manifest,
    chunks: Vec<ChunkState>,
    queue: VecDeque<u64>,
    slots: Vec<Slot>,
    by_id: HashMap<usize, usize>,
    next_id: usize,
    events: Receiver<Event>,
    events_tx: crossbeam_channel::Sender<Event>,
    log: LogLine,
    summary: RunSummary,
    first_failure: Option<String>,
    /// Items of each unfinished chunk a worker reported done, per worker.
    partial: HashMap<(usize, u64), u64>,
    /// Items of each chunk already shown on the progress bar (the most any
    /// one worker reported, so a speculative copy does not count twice).
    shown: HashMap<u64, u64>,
}

impl<'a> Scheduler<'a> {
    fn new(
        config: &'a RunConfig,
        manifest: &'a Manifest,
        chunks: &[Chunk],
        progress: &mut Progress,
    ) -> Self {
        let (events_tx, events) = unbounded();
        let slots = config
            .devices
            .iter()
            .map(|device| Slot {
                device: device.clone(),
                handle: None,
                ready: false,
                credit: 0,
                inflight: Vec::new(),
                spawned: Instant::now(),
                restarts: 0,
                done_images: 0,
                report: WorkerReport::default(),
            })
            .collect();
        Self {
            config,
            manifest,
            chunks: chunks
                .iter()
                .map(|&chunk| ChunkState {
                    chunk,
                    done: false,
                    attempts: 0,
                    running_on: Vec::new(),
                    started: None,
                })
                .collect(),
            queue: chunks.iter().map(|c| c.id).collect(),
            slots,
            by_id: HashMap::new(),
            next_id: 0,
            events,
            events_tx,
            log: progress.logger(),
            summary: RunSummary::default(),
            first_failure: None,
            partial: HashMap::new(),
            shown: HashMap::new(),
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
        s.spawned = Instant::now();
        self.by_id.insert(id, slot);
        Ok(())
    }

    fn drive(
        &mut self,
        writer: &mut OrderedWriter,
        progress: &mut Progress,
    ) -> Result<(), RunError> {
        if self.chunks.is_empty() {
            return Ok(());
        }
        for slot in 0..self.slots.len() {
            self.spawn(slot)?;
        }
        while !writer.complete() {
            match self.events.recv_timeout(TICK) {
                Ok(Event::Message { id, message }) => {
                    if let Some(&slot) = self.by_id.get(&id) {
                        self.on_message(slot, message, writer, progress)?;
                    }
                }
                Ok(Event::Closed { id, error }) => {
                    if let Some(slot) = self.by_id.remove(&id) {
                        self.on_closed(slot, error, writer, progress)?;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(RunError::WorkersFailed("every worker is gone".into()));
                }
            }
            self.dispatch();
            if !writer.complete() && self.slots.iter().all(|s| s.handle.is_none()) {
                return Err(RunError::WorkersFailed(
                    self.first_failure
                        .clone()
                        .unwrap_or_else(|| "every worker exited before the work was done".into()),
                ));
            }
        }
        Ok(())
    }

    fn on_message(
        &mut self,
        slot: usize,
        message: FromWorker,
        writer: &mut OrderedWriter,
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
                let name = &self.slots[slot].report.name;
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
            FromWorker::Progress { chunk, items } => {
                let Some(id) = self.slots[slot].handle.as_ref().map(|h| h.id) else {
                    return Ok(());
                };
                let done = self.partial.entry((id, chunk)).or_default();
                *done += items;
                let done = *done;
                let shown = self.shown.entry(chunk).or_default();
                if done > *shown {
                    progress.advance(done - *shown);
                    *shown = done;
                }
            }
            FromWorker::ChunkDone {
                chunk,
                outcomes,
                times,
            } => {
                let s = &mut self.slots[slot];
                s.inflight.retain(|&c| c != chunk);
                s.credit += 1;
                s.report.wait_loader_s += times.wait_loader_s;
                s.report.infer_s += times.infer_s;
                let Some(state) = self.chunks.get_mut(chunk as usize) else {
                    return Ok(());
                };
                let id = s.handle.as_ref().map_or(usize::MAX, |h| h.id);
                state.running_on.retain(|&w| w != id);
                if state.done {
                    return Ok(()); // a speculative copy lost the race
                }
                if let Err(problem) = check_outcomes(&state.chunk, &outcomes) {
                    (self.log)(&format!(
                        "pipeline: {} returned a bad chunk {chunk} ({problem}); running it again",
                        s.report.name
                    ));
                    if state.running_on.is_empty() {
                        self.queue.push_front(chunk);
                    }
                    return Ok(());
                }
                state.done = true;
                let images = state.chunk.len();
                s.report.chunks += 1;
                s.report.images += images;
                s.done_images += images;
                let rate = s.done_images as f64 / s.spawned.elapsed().as_secs_f64().max(1e-9);
                let line = format!(
                    "{}: batch {}, {rate:.1} images/s",
                    s.report.device, s.report.batch_size
                );
                progress.worker(slot, format!("{}: {line}", s.report.name));
                self.complete(chunk, outcomes, writer, progress)?;
            }
        }
        Ok(())
    }

    /// Hands a finished chunk's records to the writer and moves the bar by
    /// what its `Progress` messages had not shown yet.
    fn complete(
        &mut self,
        chunk: u64,
        outcomes: Vec<ItemOutcome>,
        writer: &mut OrderedWriter,
        progress: &mut Progress,
    ) -> Result<(), RunError> {
        let shown = self.shown.remove(&chunk).unwrap_or(0);
        progress.advance((outcomes.len() as u64).saturating_sub(shown));
        self.partial.retain(|&(_, c), _| c != chunk);
        let records = self.records(outcomes);
        writer
            .commit(chunk, records)
            .map_err(|source| RunError::Output {
                path: self.config.out.clone(),
                source,
            })
    }

    fn records(&mut self, outcomes: Vec<ItemOutcome>) -> Vec<Record> {
        outcomes
            .into_iter()
            .map(|o| {
                if let Err(e) = &o.result {
                    self.summary.failures += 1;
                    *self
                        .summary
                        .failures_by_kind
                        .entry(e.kind.to_string())
                        .or_default() += 1;
                }
                Record {
                    index: o.index,
                    path: self.manifest.entries[o.index as usize]
                        .relative
                        .to_string_lossy()
                        .into_owned(),
                    result: o.result,
                }
            })
            .collect()
    }

    fn on_closed(
        &mut self,
        slot: usize,
        error: Option<String>,
        writer: &mut OrderedWriter,
        progress: &mut Progress,
    ) -> Result<(), RunError> {
        let Some(handle) = self.slots[slot].handle.take() else {
            return Ok(());
        };
        let id = handle.id;
        let status = handle
            .wait()
            .map(|s| describe_exit(&s))
            .unwrap_or_else(|e| e.to_string());
        let s = &mut self.slots[slot];
        let was_ready = s.ready;
        s.ready = false;
        s.credit = 0;
        let lost: Vec<u64> = std::mem::take(&mut s.inflight);
        let mut why = format!("worker {} exited with {status}", s.report.name);
        if let Some(error) = error {
            why.push_str(&format!(" ({error})"));
        }
        s.report.died = Some(status);
        (self.log)(&format!("pipeline: {why}"));
        for chunk in lost {
            let state = &mut self.chunks[chunk as usize];
            state.running_on.retain(|&w| w != id);
            if state.done || !state.running_on.is_empty() {
                continue;
            }
            state.attempts += 1;
            if state.attempts >= self.config.max_attempts {
                let error = ItemError::new(
                    ItemErrorKind::WorkerCrash,
                    format!("{why}; chunk {chunk} failed {} times", state.attempts),
                );
                state.done = true;
                let outcomes = (state.chunk.start..state.chunk.end)
                    .map(|index| ItemOutcome {
                        index,
                        result: Err(error.clone()),
                    })
                    .collect();
                self.complete(chunk, outcomes, writer, progress)?;
            } else {
                self.summary.retries += 1;
                self.queue.push_front(chunk);
            }
        }
        // A worker that never became ready failed at setup (bad weights, no
        // such device): restarting it would fail the same way.
        let s = &mut self.slots[slot];
        if was_ready && s.restarts < self.config.max_restarts && !writer.complete() {
            s.restarts += 1;
            self.summary.restarts += 1;
            self.first_failure.get_or_insert(why);
            self.spawn(slot)?;
        } else {
            self.first_failure.get_or_insert(why);
        }
        Ok(())
    }

    /// Hands out chunks to workers with credit; idle workers with an empty
    /// queue take a copy of the oldest running chunk.
    fn dispatch(&mut self) {
        for slot in 0..self.slots.len() {
            while self.slots[slot].ready && self.slots[slot].credit > 0 {
                let Some(chunk) = self.next_chunk_for(slot) else {
                    break;
                };
                let items = self.items(chunk);
                let s = &mut self.slots[slot];
                let Some(handle) = s.handle.as_mut() else {
                    break;
                };
                let id = handle.id;
                if handle.send(&ToWorker::Chunk { id: chunk, items }).is_err() {
                    // Its `Closed` event will requeue what it held.
                    s.ready = false;
                    if !self.chunks[chunk as usize].running_on.is_empty() {
                        continue;
                    }
                    self.queue.push_front(chunk);
                    break;
                }
                s.credit -= 1;
                s.inflight.push(chunk);
                let state = &mut self.chunks[chunk as usize];
                if !state.running_on.is_empty() {
                    self.summary.speculative += 1;
                }
                state.running_on.push(id);
                state.started.get_or_insert_with(Instant::now);
            }
        }
    }

    fn next_chunk_for(&mut self, slot: usize) -> Option<u64> {
        while let Some(chunk) = self.queue.pop_front() {
            if !self.chunks[chunk as usize].done {
                return Some(chunk);
            }
        }
        if !self.slots[slot].inflight.is_empty() {
            return None;
        }
        let me = self.slots[slot].handle.as_ref()?.id;
        self.chunks
            .iter()
            .filter(|c| !c.done && c.running_on.len() == 1 && !c.running_on.contains(&me))
            .min_by_key(|c| c.started)
            .map(|c| c.chunk.id)
    }

    fn items(&self, chunk: u64) -> Vec<WorkItemSpec> {
        let c = &self.chunks[chunk as usize].chunk;
        self.manifest.entries[c.start as usize..c.end as usize]
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
                handle.finish();
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
        summary.workers = self.slots.iter().map(|s| s.report.clone()).collect();
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

/// A chunk's outcomes must be exactly its items, in order.
fn check_outcomes(chunk: &Chunk, outcomes: &[ItemOutcome]) -> Result<(), String> {
    if outcomes.len() as u64 != chunk.len() {
        return Err(format!(
            "{} outcomes for {} items",
            outcomes.len(),
            chunk.len()
        ));
    }
    match outcomes
        .iter()
        .zip(chunk.start..chunk.end)
        .find(|(o, want)| o.index != *want)
    {
        Some((o, want)) => Err(format!("item {} where {want} was expected", o.index)),
        None => Ok(()),
    }
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
    use pipeline_core::{ClassScore, Prediction};

    fn outcome(index: u64) -> ItemOutcome {
        ItemOutcome {
            index,
            result: Ok(Prediction::TopK(vec![ClassScore {
                class: 1,
                prob: 0.5,
            }])),
        }
    }

    #[test]
    fn a_chunk_must_come_back_whole_and_in_order() {
        let chunk = Chunk {
            id: 2,
            start: 10,
            end: 13,
        };
        assert!(check_outcomes(&chunk, &[outcome(10), outcome(11), outcome(12)]).is_ok());
        assert!(check_outcomes(&chunk, &[outcome(10), outcome(11)]).is_err());
        assert!(check_outcomes(&chunk, &[outcome(10), outcome(12), outcome(11)]).is_err());
        assert!(check_outcomes(&chunk, &[outcome(10), outcome(11), outcome(11)]).is_err());
    }

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

    #[test]
    fn records_are_written_in_chunk_order_whatever_order_chunks_finish_in() {
        struct Collect(std::rc::Rc<std::cell::RefCell<Vec<u64>>>);
        impl RecordSink for Collect {
            fn write(&mut self, record: &Record) -> std::io::Result<()> {
                self.0.borrow_mut().push(record.index);
                Ok(())
            }
            fn finish(self: Box<Self>) -> std::io::Result<()> {
                Ok(())
            }
        }
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut writer = OrderedWriter {
            sink: Some(Box::new(Collect(seen.clone()))),
            order: vec![0, 1, 2],
            next: 0,
            held: HashMap::new(),
            write_s: 0.0,
        };
        let records = |ids: &[u64]| -> Vec<Record> {
            ids.iter()
                .map(|&index| Record {
                    index,
                    path: String::new(),
                    result: outcome(index).result,
                })
                .collect()
        };
        writer.commit(2, records(&[4, 5])).expect("held");
        writer.commit(1, records(&[2, 3])).expect("held");
        assert!(seen.borrow().is_empty(), "nothing before chunk 0");
        writer.commit(0, records(&[0, 1])).expect("written");
        assert!(writer.complete());
        assert_eq!(*seen.borrow(), vec![0, 1, 2, 3, 4, 5]);
    }
}
