//! Worker processes' lives, seen from the scheduler: starting one in a
//! slot, killing it when it hangs, what its death costs (the span book
//! decides what its spans become, the slot whether it starts again), and
//! ending them all when the run is over.

use super::*;

impl Scheduler<'_> {
    fn worker_name(&self, slot: usize) -> String {
        let device = &self.workers.slots[slot].device;
        let same_before = self.workers.slots[..slot]
            .iter()
            .filter(|s| &s.device == device)
            .count();
        format!("{device}#{same_before}")
    }

    pub(super) fn spawn(&mut self, slot: usize) -> Result<(), RunError> {
        let id = self.workers.next_id;
        self.workers.next_id += 1;
        let mut worker = self.config.worker.clone();
        worker.name = self.worker_name(slot);
        worker.device = self.workers.slots[slot].device.clone();
        if let Some(batch) = self.workers.slots[slot].batch_override {
            worker.batch_size = Some(batch);
        }
        let handle = WorkerHandle::spawn(
            &self.config.exe,
            id,
            &worker,
            &self.workers.events_tx,
            &self.report,
        )
        .map_err(|source| RunError::Spawn {
            exe: self.config.exe.clone(),
            source,
        })?;
        let s = &mut self.workers.slots[slot];
        s.report.name = worker.name;
        s.report.device = worker.device.to_string();
        s.spawned(handle);
        self.workers.by_id.insert(id, slot);
        Ok(())
    }

    /// Kills workers that have had work and said nothing for too long.
    pub(super) fn watch_for_hangs(&mut self) {
        let batch = self.config.worker.batch_size.unwrap_or(0);
        for s in &mut self.workers.slots {
            if let Some(timeout) = s.kill_if_hung(self.config.patience.hang_timeout, batch) {
                self.report.warn(&format!(
                    "pipeline: {}: no progress for {:.0} s; killing it",
                    s.report.name,
                    timeout.as_secs_f64()
                ));
                self.tally.summary.recovery.hangs += 1;
            }
        }
    }

    pub(super) fn on_closed(&mut self, slot: usize, error: Option<String>) -> Result<(), RunError> {
        let Some(Closed {
            handle,
            lost,
            isolated,
            phase,
        }) = self.workers.slots[slot].closed()
        else {
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
        let s = &mut self.workers.slots[slot];
        let mut why = if phase == Phase::Hung {
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
            // A failed setup was reported with its reason already.
            if phase != Phase::SetupFailed {
                self.report.warn(&format!("pipeline: {why}"));
            }
            // Memory is about the batch, not the images: no blame.
            let death = if device_lost {
                Death::DeviceLost
            } else {
                Death::Crashed
            };
            let failed = self.book.worker_died(id, &lost, isolated, death, &why);
            for (span, failed) in failed {
                self.finish_span(span, failed)?;
            }
        }
        if self.stopping.is_some() || !self.work_left() {
            return Ok(());
        }
        self.tally.first_failure.get_or_insert(why);
        let s = &mut self.workers.slots[slot];
        match s.restart(
            phase,
            isolated,
            device_lost,
            self.config.patience.max_restarts,
        ) {
            Restart::SetupFailed => Ok(()),
            Restart::GaveUp(deaths) => {
                self.report.warn(&format!(
                    "pipeline: {}: died {deaths} times in a row without finishing anything; \
                     not restarting it",
                    s.report.name
                ));
                Ok(())
            }
            Restart::Yes(smaller) => {
                if let Some((from, to)) = smaller {
                    self.tally.summary.recovery.oom_backoffs += 1;
                    self.report.warn(&format!(
                        "pipeline: {}: restarting with batch {to} (was {from})",
                        s.report.name
                    ));
                }
                self.tally.summary.recovery.restarts += 1;
                self.spawn(slot)
            }
        }
    }

    /// Ends every worker: `Finish`, a grace period, then kill.
    pub(crate) fn shut_down(&mut self) -> RunSummary {
        for slot in &mut self.workers.slots {
            let rss = slot.process().and_then(|p| p.handle.peak_rss_bytes());
            if let Some(p) = slot.process_mut() {
                if self.stopping.is_some() {
                    p.handle.kill();
                } else {
                    p.handle.finish();
                }
                slot.report.peak_rss_bytes = rss;
            }
        }
        let deadline = Instant::now() + EXIT_GRACE;
        for slot in &mut self.workers.slots {
            if let Some(Closed { mut handle, .. }) = slot.closed() {
                while !handle.try_exited() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
                handle.kill();
                let _ = handle.wait();
            }
        }
        let mut summary = std::mem::take(&mut self.tally.summary);
        let counts = self.book.counts();
        summary.recovery.retries = counts.retries;
        summary.recovery.splits = counts.splits;
        summary.recovery.speculative = counts.speculative;
        summary.workers = self
            .workers
            .slots
            .iter()
            .map(|s| s.report.clone())
            .collect();
        summary.stages = Stages::from_worker(&self.tally.times);
        // The workers' retries, and the coordinator's own (listings and
        // manifests it read before the workers started).
        let mut remote = self.tally.times.remote_retries;
        remote.add(&loader::remote::retry_counts());
        summary.recovery.remote_retries = remote.total();
        summary.recovery.remote_retry_kinds = remote;
        summary.batch_latencies_s = std::mem::take(&mut self.tally.times.batch_s);
        summary.steady = self.tally.timeline.steady();
        summary
    }
}
