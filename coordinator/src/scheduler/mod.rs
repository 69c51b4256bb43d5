//! The event loop of one run: spawns the workers, hands out what the span
//! book says, reacts to their messages and deaths, and feeds finished chunks
//! to the committer threads. See `run.rs` for the failure model.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, unbounded};
use pipeline_core::{
    Chunk, FromWorker, ItemOutcome, Manifest, ToWorker, WORKER_EXIT_DEVICE_LOST, WorkItemSpec,
};

use crate::book::{Death, Finished, SpanBook, SpanId};
use crate::config::RunConfig;
use crate::parts::PartStore;
use crate::report::Report;
use crate::run_error::RunError;
use crate::signals::{StopSignals, signal_name};
use crate::slot::{Closed, Phase, Restart, Slot};
use crate::stats::{Stages, Timeline};
use crate::summary::RunSummary;
use crate::workers::{Event, WorkerHandle, describe_exit};

mod lifecycle;

/// How often the scheduler wakes up without events (signals, hang checks).
const TICK: Duration = Duration::from_millis(200);

/// How long finished workers get to exit before they are killed (a worker
/// may still be running a speculative copy nobody needs).
const EXIT_GRACE: Duration = Duration::from_secs(3);

pub(crate) struct Scheduler<'a> {
    config: &'a RunConfig,
    manifest: &'a Manifest,
    store: &'a PartStore,
    /// Spans, suspects and chunks: what to run next (see `book/`).
    book: SpanBook,
    /// The worker slots and the events their processes send.
    pub(crate) workers: Workers,
    /// Chunks owned, not yet committed, and on their way to the committers.
    pub(crate) commits: Commits,
    /// What the progress bar has shown of unfinished spans.
    seen: Seen,
    /// What the run's summary will say.
    pub(crate) tally: Tally,
    report: Arc<dyn Report>,
    /// Set by SIGINT/SIGTERM: the signal and when the grace period ends.
    stopping: Option<(i32, Instant)>,
}

/// The worker slots, and the channel their processes report on.
pub(crate) struct Workers {
    slots: Vec<Slot>,
    /// Worker process id → its slot.
    by_id: HashMap<usize, usize>,
    next_id: usize,
    events: Receiver<Event>,
    pub(crate) events_tx: crossbeam_channel::Sender<Event>,
}

/// Chunks between the span book and the disk.
pub(crate) struct Commits {
    /// Whole chunks for the committer threads; `None` outside `drive`.
    pub(crate) sender: Option<crossbeam_channel::Sender<(u64, Vec<ItemOutcome>)>>,
    /// Chunks sent to the committers and not reported back yet.
    pending: usize,
    /// Chunks this process owns.
    owned: usize,
    /// Chunks not committed yet.
    remaining: usize,
}

/// Items of unfinished spans already counted on the progress bar.
#[derive(Default)]
struct Seen {
    /// Items of each unfinished span a worker reported done, per worker.
    partial: HashMap<(usize, u64), u64>,
    /// Items of each span already shown (the most any one worker reported,
    /// so a speculative copy does not count twice).
    shown: HashMap<u64, u64>,
}

/// What the run did, gathered as it goes.
pub(crate) struct Tally {
    summary: RunSummary,
    first_failure: Option<String>,
    /// Setup failures not said yet: said once a worker starts, else the
    /// run's error says the first.
    unreported: Vec<String>,
    /// Images this run computed (not resumed).
    pub(crate) computed_images: u64,
    /// Stage times the workers reported.
    times: pipeline_core::SpanTimes,
    /// Batch completions, for the steady-state rate.
    timeline: Timeline,
}

impl<'a> Scheduler<'a> {
    pub(crate) fn new(
        config: &'a RunConfig,
        manifest: &'a Manifest,
        chunks: &[Chunk],
        committed: &HashSet<u64>,
        store: &'a PartStore,
        report: Arc<dyn Report>,
    ) -> Self {
        let (events_tx, events) = unbounded();
        let now = Instant::now();
        let slots = config.devices.iter().cloned().map(Slot::new).collect();
        Self {
            config,
            manifest,
            store,
            book: SpanBook::new(chunks, committed),
            workers: Workers {
                slots,
                by_id: HashMap::new(),
                next_id: 0,
                events,
                events_tx,
            },
            commits: Commits {
                sender: None,
                pending: 0,
                owned: chunks.len(),
                remaining: chunks.iter().filter(|c| !committed.contains(&c.id)).count(),
            },
            seen: Seen::default(),
            tally: Tally {
                summary: RunSummary::default(),
                first_failure: None,
                unreported: Vec::new(),
                computed_images: 0,
                times: pipeline_core::SpanTimes::default(),
                timeline: Timeline::new(now),
            },
            report,
            stopping: None,
        }
    }

    /// Counts a batch of `items` for the steady window, dated by when its
    /// pass ended (`held_s` before its frame); `first` if it was its
    /// worker's first.
    fn note_batch(&mut self, items: u64, held_s: f64, first: bool) {
        let ended = self.tally.timeline.batch_done(items, held_s);
        if first {
            self.tally.timeline.first_batch_ended(ended);
        }
        self.note_warm();
    }

    /// Starts the steady window once every live worker finished a batch.
    fn note_warm(&mut self) {
        if !self.tally.timeline.is_warm() && self.workers.slots.iter().all(Slot::warm) {
            self.tally.timeline.warm();
        }
    }

    fn in_flight(&self) -> bool {
        self.workers.slots.iter().any(|s| !s.idle())
    }

    pub(crate) fn drive(&mut self, signals: &StopSignals) -> Result<(), RunError> {
        if self.commits.remaining == 0 {
            return Ok(());
        }
        for slot in 0..self.workers.slots.len() {
            self.spawn(slot)?;
        }
        while self.commits.remaining > 0 {
            if let (Some(signal), None) = (signals.received(), self.stopping) {
                self.stop(signal);
            }
            if let Some((signal, deadline)) = self.stopping
                && ((!self.in_flight() && self.commits.pending == 0) || Instant::now() >= deadline)
            {
                // Commits still queued finish when the committers drain.
                let committed = (self.commits.owned - self.commits.remaining) as u64;
                return Err(RunError::Interrupted {
                    signal,
                    committed,
                    total: self.commits.owned as u64,
                    dir: self.store.dir().to_owned(),
                });
            }
            match self.workers.events.recv_timeout(TICK) {
                Ok(Event::Message { id, message }) => {
                    if let Some(&slot) = self.workers.by_id.get(&id) {
                        self.workers.slots[slot].heard();
                        self.on_message(slot, message)?;
                    }
                }
                Ok(Event::Closed { id, error }) => {
                    if let Some(slot) = self.workers.by_id.remove(&id) {
                        self.on_closed(slot, error)?;
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
                && self.workers.slots.iter().all(|s| s.process().is_none())
            {
                return Err(RunError::WorkersFailed(
                    self.tally
                        .first_failure
                        .clone()
                        .unwrap_or_else(|| "every worker exited before the work was done".into()),
                ));
            }
        }
        Ok(())
    }

    /// The first SIGINT/SIGTERM: hand out nothing more.
    fn stop(&mut self, signal: i32) {
        let grace = self.config.patience.grace;
        self.stopping = Some((signal, Instant::now() + grace));
        self.book.stop();
        let running: usize = self
            .workers
            .slots
            .iter()
            .filter_map(Slot::process)
            .map(|p| p.inflight.len())
            .sum();
        self.report.warn(&format!(
            "pipeline: {}: no new work; waiting up to {:.0} s for {running} span(s) in flight \
             (again to stop at once)",
            signal_name(signal),
            grace.as_secs_f64()
        ));
    }

    fn on_message(&mut self, slot: usize, message: FromWorker) -> Result<(), RunError> {
        match message {
            FromWorker::Ready {
                device,
                batch_size,
                prefetch,
                ..
            } => {
                let s = &mut self.workers.slots[slot];
                s.report.startup_s += s.ready(prefetch);
                s.report.device = format!("{} ({device})", s.device);
                s.report.batch_size = batch_size;
                let line = format!("{}: {device}, batch {batch_size}", s.report.name);
                self.report.worker(slot, &line);
                // The run goes on: say which workers could not start.
                for line in std::mem::take(&mut self.tally.unreported) {
                    self.report.warn(&line);
                }
            }
            FromWorker::Failed { message } => {
                let s = &mut self.workers.slots[slot];
                let setup = s.failed();
                let name = &s.report.name;
                let line = if setup {
                    format!("pipeline: worker {name} could not start: {message}")
                } else {
                    format!("pipeline: worker {name} failed: {message}")
                };
                // A setup failure is said once: now if the run goes on
                // without that worker, else by the run's own error.
                let running = self.workers.slots.iter().any(Slot::started);
                if setup && !running {
                    self.tally.unreported.push(line);
                } else {
                    self.report.warn(&line);
                }
                self.tally.first_failure.get_or_insert(message);
            }
            FromWorker::BatchSize { from, to, reason } => {
                let s = &mut self.workers.slots[slot];
                s.report.oom_backoffs += 1;
                s.report.batch_size = to;
                self.tally.summary.recovery.oom_backoffs += 1;
                self.report.warn(&format!(
                    "pipeline: {}: out of memory at batch {from}, now {to} ({reason})",
                    s.report.name
                ));
            }
            FromWorker::Progress {
                span,
                items,
                held_s,
            } => {
                let first = !self.workers.slots[slot].warm();
                self.workers.slots[slot].batch_done();
                let Some(id) = self.workers.slots[slot].worker() else {
                    return Ok(());
                };
                self.note_batch(items, held_s, first);
                let done = self.seen.partial.entry((id, span)).or_default();
                *done += items;
                let done = *done;
                let shown = self.seen.shown.entry(span).or_default();
                if done > *shown {
                    self.report.advance(done - *shown);
                    *shown = done;
                }
            }
            FromWorker::SpanDone {
                span,
                outcomes,
                times,
                held_s,
            } => self.on_done(slot, span, outcomes, times, held_s)?,
        }
        Ok(())
    }

    fn on_done(
        &mut self,
        slot: usize,
        span: u64,
        outcomes: Vec<ItemOutcome>,
        times: pipeline_core::SpanTimes,
        held_s: f64,
    ) -> Result<(), RunError> {
        let s = &mut self.workers.slots[slot];
        let first = !s.warm();
        s.returned(span);
        s.report.wait_loader_s += times.wait_loader_s;
        s.report.infer_s += times.infer_s;
        self.tally.times.add(&times);
        let id = s.worker().unwrap_or(usize::MAX);
        let name = s.report.name.clone();
        let returned = outcomes.len() as u64;
        let finished = self.book.finished(span, id, outcomes);
        let images = match &finished {
            Finished::Stale => return Ok(()), // a speculative copy lost the race
            Finished::Bad(problem) => {
                self.report.warn(&format!(
                    "pipeline: {name} returned a bad span {span} ({problem}); running it again"
                ));
                return Ok(());
            }
            Finished::Recorded { images } | Finished::Complete { images, .. } => *images,
        };
        let earlier = self.seen.partial.get(&(id, span)).copied().unwrap_or(0);
        self.note_batch(returned.saturating_sub(earlier), held_s, first);
        let s = &mut self.workers.slots[slot];
        let rate = s.finished(images);
        let line = format!(
            "{}: batch {}, {rate:.1} images/s",
            s.report.device, s.report.batch_size
        );
        self.report.worker(slot, &format!("{name}: {line}"));
        self.finish_span(span, finished)
    }

    /// Counts a span the book recorded; sends its chunk to the committers
    /// once the book says it is complete.
    fn finish_span(&mut self, span: SpanId, finished: Finished) -> Result<(), RunError> {
        let images = match &finished {
            Finished::Recorded { images } | Finished::Complete { images, .. } => *images,
            Finished::Stale | Finished::Bad(_) => return Ok(()),
        };
        let shown = self.seen.shown.remove(&span).unwrap_or(0);
        self.report.advance(images.saturating_sub(shown));
        self.seen.partial.retain(|&(_, t), _| t != span);
        self.tally.computed_images += images;
        let Finished::Complete {
            chunk, outcomes, ..
        } = finished
        else {
            return Ok(());
        };
        // Encoding and the fsyncs happen on the committer threads; the
        // chunk counts as done when its `Committed` event arrives.
        let Some(commits) = &self.commits.sender else {
            return Err(RunError::WorkersFailed(
                "the committer threads are gone".into(),
            ));
        };
        commits
            .send((chunk, outcomes))
            .map_err(|_| RunError::WorkersFailed("the committer threads are gone".into()))?;
        self.commits.pending += 1;
        Ok(())
    }

    /// A committer thread finished (or failed) writing `chunk`'s part.
    fn on_committed(&mut self, result: std::io::Result<f64>) -> Result<(), RunError> {
        self.commits.pending -= 1;
        let seconds = result.map_err(|source| RunError::Commit {
            dir: self.store.dir().to_owned(),
            source,
        })?;
        self.tally.summary.times.commit_s += seconds;
        self.commits.remaining -= 1;
        Ok(())
    }

    /// Whether any chunk still needs a worker (not merely its commit).
    fn work_left(&self) -> bool {
        self.commits.remaining > self.commits.pending
    }

    /// Hands out spans to workers with credit. While suspects wait, workers
    /// take no other work until one is idle and runs a suspect alone; idle
    /// workers with an empty queue take a copy of the oldest running span.
    fn dispatch(&mut self) {
        if self.stopping.is_some() {
            return;
        }
        for slot in 0..self.workers.slots.len() {
            let s = &self.workers.slots[slot];
            if !s.takes_work() {
                continue;
            }
            if let Some(suspect) = self.book.next_suspect() {
                if s.idle() && self.send(slot, suspect) {
                    self.book.took_suspect();
                    self.workers.slots[slot].isolate(suspect);
                }
                continue;
            }
            while self.workers.slots[slot].has_credit() {
                let s = &self.workers.slots[slot];
                let Some(id) = s.worker() else {
                    break;
                };
                let Some(span) = self.book.next_for(id, s.idle()) else {
                    break;
                };
                if !self.send(slot, span) {
                    self.book.unsent(span);
                    break;
                }
            }
        }
        if self.book.drained() {
            self.tally.timeline.drained();
        }
    }

    /// Sends `span` to `slot`'s worker; false if the worker is gone (its
    /// `Closed` event will requeue what it held).
    fn send(&mut self, slot: usize, span: SpanId) -> bool {
        let items = self.items(span);
        let s = &mut self.workers.slots[slot];
        let Some(p) = s.process_mut() else {
            return false;
        };
        let id = p.handle.id;
        if p.handle.send(&ToWorker::Span { id: span, items }).is_err() {
            s.unreachable();
            return false;
        }
        s.sent(span);
        self.book.sent(span, id);
        true
    }

    fn items(&self, span: SpanId) -> Vec<WorkItemSpec> {
        let items = self.book.items(span);
        self.manifest
            .entries
            .range(items.start as usize..items.end as usize)
            .map(|e| WorkItemSpec {
                index: e.index,
                location: e.location,
            })
            .collect()
    }
}
