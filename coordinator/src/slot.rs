//! A worker slot: one place in the run for a worker process on a device,
//! the process filling it now and where that process stands, with the two
//! rules about its life in one place — when it counts as hung, and whether
//! it is started again after it dies.

use std::time::{Duration, Instant};

use pipeline_core::DeviceSpec;

use crate::book::{SpanId, WorkerId};
use crate::summary::WorkerReport;
use crate::workers::WorkerHandle;

/// The hang timeout's multiplier before a worker's first batch: model load,
/// kernel compilation and autotuning happen there.
const STARTUP_FACTOR: u32 = 5;

/// Where the process in a slot stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Spawned; its `Ready` has not come.
    Starting,
    /// Takes work.
    Ready,
    /// Its pipe broke on a send: it takes nothing more; its `Closed` event
    /// is on its way.
    Unreachable,
    /// Killed by the watchdog; its `Closed` event is on its way.
    Hung,
    /// It said `Failed` before `Ready` (bad weights, no such device): it
    /// would fail the same way again, so it is not restarted.
    SetupFailed,
}

/// The process in a slot.
pub(crate) struct Process {
    pub(crate) handle: WorkerHandle,
    pub(crate) phase: Phase,
    /// Spans it may still be sent (its prefetch, less what it holds).
    credit: usize,
    /// Spans sent and not returned.
    pub(crate) inflight: Vec<SpanId>,
    /// The suspect span it runs alone.
    pub(crate) isolated: Option<SpanId>,
    spawned: Instant,
    last_heard: Instant,
    first_batch_done: bool,
    /// Images it finished.
    done_images: u64,
}

/// What a closed process leaves behind for the scheduler.
pub(crate) struct Closed {
    pub(crate) handle: WorkerHandle,
    /// Spans it held.
    pub(crate) lost: Vec<SpanId>,
    /// The suspect it ran alone, if any.
    pub(crate) isolated: Option<SpanId>,
    pub(crate) phase: Phase,
}

/// Whether a slot whose process died gets a new one.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Restart {
    /// Spawn again; with `Some((from, to))` at a smaller batch.
    Yes(Option<(usize, usize)>),
    /// Its setup failed: it would fail the same way again.
    SetupFailed,
    /// It died this many times in a row without finishing anything.
    GaveUp(u32),
}

/// How long a process may say nothing before it counts as hung: `base`
/// (`--hang-timeout`), else 120 s + 2 s per image of its batch, and five
/// times that before its first batch (model load, kernel compilation,
/// autotuning). `None` while it has nothing to hang on: ready and holding
/// no span, or already killed.
pub(crate) fn hang_timeout(
    phase: Phase,
    holds_work: bool,
    first_batch_done: bool,
    base: Option<Duration>,
    batch: usize,
) -> Option<Duration> {
    if phase == Phase::Hung || (phase == Phase::Ready && !holds_work) {
        return None;
    }
    let batch = batch.max(1) as u32;
    let timeout = base.unwrap_or_else(|| Duration::from_secs(120) + Duration::from_secs(2) * batch);
    Some(if first_batch_done {
        timeout
    } else {
        timeout * STARTUP_FACTOR
    })
}

/// A worker slot.
pub(crate) struct Slot {
    pub(crate) device: DeviceSpec,
    process: Option<Process>,
    /// Deaths since it last finished a span.
    deaths_in_a_row: u32,
    /// Batch size to start the next process with (after a memory death).
    pub(crate) batch_override: Option<usize>,
    pub(crate) report: WorkerReport,
}

impl Slot {
    /// An empty slot for `device`.
    pub(crate) fn new(device: DeviceSpec) -> Self {
        Self {
            device,
            process: None,
            deaths_in_a_row: 0,
            batch_override: None,
            report: WorkerReport::default(),
        }
    }

    /// The process in the slot, if any.
    pub(crate) fn process(&self) -> Option<&Process> {
        self.process.as_ref()
    }

    /// The process in the slot, if any.
    pub(crate) fn process_mut(&mut self) -> Option<&mut Process> {
        self.process.as_mut()
    }

    /// The id of the process in the slot.
    pub(crate) fn worker(&self) -> Option<WorkerId> {
        self.process.as_ref().map(|p| p.handle.id)
    }

    /// A new process fills the slot.
    pub(crate) fn spawned(&mut self, handle: WorkerHandle) {
        let now = Instant::now();
        self.process = Some(Process {
            handle,
            phase: Phase::Starting,
            credit: 0,
            inflight: Vec::new(),
            isolated: None,
            spawned: now,
            last_heard: now,
            first_batch_done: false,
            done_images: 0,
        });
    }

    /// The process said `Ready`, wanting `prefetch` spans queued; returns
    /// its start-up seconds.
    pub(crate) fn ready(&mut self, prefetch: usize) -> f64 {
        let Some(p) = self.process.as_mut() else {
            return 0.0;
        };
        p.phase = Phase::Ready;
        p.credit = prefetch.max(1);
        p.spawned.elapsed().as_secs_f64()
    }

    /// The process said something.
    pub(crate) fn heard(&mut self) {
        if let Some(p) = self.process.as_mut() {
            p.last_heard = Instant::now();
        }
    }

    /// The process said `Failed`; before `Ready` that is its setup (then
    /// true).
    pub(crate) fn failed(&mut self) -> bool {
        match self.process.as_mut() {
            Some(p) if p.phase == Phase::Starting => {
                p.phase = Phase::SetupFailed;
                true
            }
            _ => false,
        }
    }

    /// Whether its process got through its setup (it said `Ready`).
    pub(crate) fn started(&self) -> bool {
        self.process
            .as_ref()
            .is_some_and(|p| matches!(p.phase, Phase::Ready | Phase::Unreachable | Phase::Hung))
    }

    /// It finished a batch: its first batch ends the start-up allowance,
    /// and the slot's first one is reported ([`WorkerReport::first_batch_s`]).
    pub(crate) fn batch_done(&mut self) {
        if let Some(p) = self.process.as_mut() {
            if !p.first_batch_done && self.report.first_batch_s.is_none() {
                self.report.first_batch_s = Some(p.spawned.elapsed().as_secs_f64());
            }
            p.first_batch_done = true;
        }
    }

    /// Whether it finished a batch, or has no process (for the steady window).
    pub(crate) fn warm(&self) -> bool {
        self.process.as_ref().is_none_or(|p| p.first_batch_done)
    }

    /// Whether it can be sent work: ready, and not running a suspect alone.
    pub(crate) fn takes_work(&self) -> bool {
        self.process
            .as_ref()
            .is_some_and(|p| p.phase == Phase::Ready && p.isolated.is_none())
    }

    /// Whether it holds no span.
    pub(crate) fn idle(&self) -> bool {
        self.process.as_ref().is_none_or(|p| p.inflight.is_empty())
    }

    /// Whether it has credit for another span.
    pub(crate) fn has_credit(&self) -> bool {
        self.process.as_ref().is_some_and(|p| p.credit > 0)
    }

    /// `span` was sent to it.
    pub(crate) fn sent(&mut self, span: SpanId) {
        let Some(p) = self.process.as_mut() else {
            return;
        };
        p.credit = p.credit.saturating_sub(1);
        p.inflight.push(span);
        if p.inflight.len() == 1 {
            // The clock of a worker idle until now starts here.
            p.last_heard = Instant::now();
        }
    }

    /// A send failed: the pipe is broken.
    pub(crate) fn unreachable(&mut self) {
        if let Some(p) = self.process.as_mut() {
            p.phase = Phase::Unreachable;
        }
    }

    /// It runs `span` alone.
    pub(crate) fn isolate(&mut self, span: SpanId) {
        if let Some(p) = self.process.as_mut() {
            p.isolated = Some(span);
        }
    }

    /// It returned `span` (needed or not): its credit comes back, and its
    /// run of deaths ends.
    pub(crate) fn returned(&mut self, span: SpanId) {
        self.deaths_in_a_row = 0;
        let Some(p) = self.process.as_mut() else {
            return;
        };
        p.inflight.retain(|&t| t != span);
        if p.isolated == Some(span) {
            p.isolated = None;
        }
        p.credit += 1;
        self.batch_done();
    }

    /// It finished `images` the run needed; returns its rate since it
    /// started, in images/s.
    pub(crate) fn finished(&mut self, images: u64) -> f64 {
        self.report.chunks += 1;
        self.report.images += images;
        let Some(p) = self.process.as_mut() else {
            return 0.0;
        };
        p.done_images += images;
        p.done_images as f64 / p.spawned.elapsed().as_secs_f64().max(1e-9)
    }

    /// The hang timeout of its process (see [`hang_timeout`]).
    fn hang_timeout(&self, base: Option<Duration>, batch: usize) -> Option<Duration> {
        let p = self.process.as_ref()?;
        let batch = self.report.batch_size.max(batch);
        hang_timeout(
            p.phase,
            !p.inflight.is_empty(),
            p.first_batch_done,
            base,
            batch,
        )
    }

    /// Kills its process if it said nothing for longer than its hang
    /// timeout; returns that timeout if so.
    pub(crate) fn kill_if_hung(
        &mut self,
        base: Option<Duration>,
        batch: usize,
    ) -> Option<Duration> {
        let timeout = self.hang_timeout(base, batch)?;
        let p = self.process.as_mut()?;
        if p.last_heard.elapsed() <= timeout {
            return None;
        }
        p.handle.kill();
        p.phase = Phase::Hung;
        Some(timeout)
    }

    /// Its process closed: empties the slot.
    pub(crate) fn closed(&mut self) -> Option<Closed> {
        let p = self.process.take()?;
        Some(Closed {
            handle: p.handle,
            lost: p.inflight,
            isolated: p.isolated,
            phase: p.phase,
        })
    }

    /// Whether the slot gets a new process after one in `phase` (running
    /// `isolated` alone) died: not after a
    /// failed setup, nor after more than `max_restarts` deaths in a row that
    /// an isolated suspect does not explain; after a device loss, with half
    /// the batch.
    pub(crate) fn restart(
        &mut self,
        phase: Phase,
        isolated: Option<SpanId>,
        device_lost: bool,
        max_restarts: u32,
    ) -> Restart {
        if phase == Phase::SetupFailed {
            return Restart::SetupFailed;
        }
        let mut smaller = None;
        if device_lost {
            let from = self.report.batch_size.max(1);
            let to = (from / 2).max(1);
            self.batch_override = Some(to);
            self.report.oom_backoffs += 1;
            smaller = Some((from, to));
        }
        if isolated.is_none() {
            self.deaths_in_a_row += 1;
        }
        if self.deaths_in_a_row > max_restarts {
            return Restart::GaveUp(self.deaths_in_a_row);
        }
        Restart::Yes(smaller)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hang_timeout_grows_with_the_batch_and_before_the_first_one() {
        let t = |phase, holds, first, base, batch| hang_timeout(phase, holds, first, base, batch);
        let secs = Duration::from_secs;
        assert_eq!(t(Phase::Ready, true, true, None, 16), Some(secs(152)));
        assert_eq!(t(Phase::Ready, true, false, None, 16), Some(secs(760)));
        assert_eq!(
            t(Phase::Starting, false, false, Some(secs(10)), 8),
            Some(secs(50))
        );
        assert_eq!(
            t(Phase::Ready, true, true, Some(secs(10)), 8),
            Some(secs(10))
        );
        assert_eq!(t(Phase::Ready, false, true, None, 16), None, "idle");
        assert_eq!(t(Phase::Hung, true, true, None, 16), None, "already killed");
        assert_eq!(
            t(Phase::Unreachable, false, true, Some(secs(5)), 1),
            Some(secs(5))
        );
    }

    #[test]
    fn a_slot_restarts_until_it_dies_too_often_or_its_setup_failed() {
        let mut slot = Slot::new(DeviceSpec::Cpu);
        slot.report.batch_size = 16;
        assert_eq!(
            slot.restart(Phase::SetupFailed, None, false, 5),
            Restart::SetupFailed
        );
        // A device loss halves the batch for the next process.
        assert_eq!(
            slot.restart(Phase::Ready, None, true, 5),
            Restart::Yes(Some((16, 8)))
        );
        assert_eq!(slot.batch_override, Some(8));
        // Deaths explained by an isolated suspect do not count.
        for _ in 0..10 {
            assert_eq!(
                slot.restart(Phase::Ready, Some(3), false, 2),
                Restart::Yes(None)
            );
        }
        assert_eq!(
            slot.restart(Phase::Ready, None, false, 2),
            Restart::Yes(None)
        );
        assert_eq!(
            slot.restart(Phase::Ready, None, false, 2),
            Restart::GaveUp(3)
        );
        // A finished span ends the run of deaths.
        slot.returned(0);
        assert_eq!(
            slot.restart(Phase::Ready, None, false, 2),
            Restart::Yes(None)
        );
    }
}
