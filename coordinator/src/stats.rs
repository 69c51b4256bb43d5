//! What a run measures about itself: time per stage and the steady-state
//! rate, for `--report` and `pipeline bench`.
//!
//! The steady window starts when every worker has finished its first batch
//! (kernel compilation, autotune and the first decode are behind it) and
//! ends when the last span is handed out (from then on workers start to run
//! dry). Images finished inside it, over its length, are the rate a longer
//! run would hold.

use std::time::Instant;

use pipeline_core::SpanTimes;
use serde::Serialize;

/// Seconds per stage over the whole run. The loader's stages are
/// thread-seconds summed over every worker's decoder threads; the device's
/// are seconds of the workers' device threads, summed over workers.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stages {
    /// Reading files.
    pub read_s: f64,
    /// Decoding and preprocessing.
    pub decode_s: f64,
    /// Device threads waiting for their loaders.
    pub wait_loader_s: f64,
    /// Copying `u8` pixels to the device and normalising them.
    pub upload_s: f64,
    /// Running the model.
    pub compute_s: f64,
    /// Reading results back, top-k included.
    pub readback_s: f64,
    /// The coordinator writing: committing parts (their thread-seconds over
    /// the committer threads, which run at once) and assembling the output.
    pub write_s: f64,
}

impl Stages {
    /// The worker-side stages of `times`; `write_s` is left at zero.
    pub fn from_worker(times: &SpanTimes) -> Self {
        Self {
            read_s: times.read_s,
            decode_s: times.decode_s,
            wait_loader_s: times.wait_loader_s,
            upload_s: times.upload_s,
            compute_s: times.compute_s,
            readback_s: times.readback_s,
            write_s: 0.0,
        }
    }

    /// Upload, compute and read-back.
    pub fn device_s(&self) -> f64 {
        self.upload_s + self.compute_s + self.readback_s
    }

    /// Fraction of the device threads' time spent on the device rather than
    /// waiting for their loaders; `None` before any batch ran.
    pub fn device_busy_fraction(&self) -> Option<f64> {
        let total = self.device_s() + self.wait_loader_s;
        (total > 0.0).then(|| self.device_s() / total)
    }
}

/// The part of a run between warm-up and run-out (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SteadyWindow {
    /// Seconds from the run's start to the window's start.
    pub start_s: f64,
    /// Seconds from the run's start to the window's end.
    pub end_s: f64,
    /// Images finished inside the window.
    pub images: u64,
    /// `images` over the window's length.
    pub images_per_s: f64,
}

/// Batch completions over time, and the window's two ends.
#[derive(Debug)]
pub(crate) struct Timeline {
    started: Instant,
    warm: Option<Instant>,
    drained: Option<Instant>,
    done: Vec<(Instant, u64)>,
}

impl Timeline {
    pub(crate) fn new(started: Instant) -> Self {
        Self {
            started,
            warm: None,
            drained: None,
            done: Vec::new(),
        }
    }

    /// A batch of `items` finished now.
    pub(crate) fn batch_done(&mut self, items: u64) {
        self.batch_done_at(Instant::now(), items);
    }

    fn batch_done_at(&mut self, at: Instant, items: u64) {
        self.done.push((at, items));
    }

    pub(crate) fn is_warm(&self) -> bool {
        self.warm.is_some()
    }

    /// Every worker has finished a batch (the first call counts).
    pub(crate) fn warm(&mut self) {
        self.warm.get_or_insert_with(Instant::now);
    }

    /// The last span was handed out (the first call counts).
    pub(crate) fn drained(&mut self) {
        self.drained.get_or_insert_with(Instant::now);
    }

    /// The steady window, if the run had one with at least two batches in
    /// it (one batch says nothing about a rate).
    pub(crate) fn steady(&self) -> Option<SteadyWindow> {
        let (start, end) = (self.warm?, self.drained?);
        let inside: Vec<u64> = self
            .done
            .iter()
            .filter(|(at, _)| *at > start && *at <= end)
            .map(|&(_, items)| items)
            .collect();
        let seconds = (end - start).as_secs_f64();
        if inside.len() < 2 || seconds <= 0.0 {
            return None;
        }
        let images: u64 = inside.iter().sum();
        Some(SteadyWindow {
            start_s: (start - self.started).as_secs_f64(),
            end_s: (end - self.started).as_secs_f64(),
            images,
            images_per_s: images as f64 / seconds,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_window_counts_only_batches_between_warm_up_and_run_out() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut timeline = Timeline::new(t0);
        timeline.batch_done_at(at(500), 100); // warm-up: excluded
        timeline.warm = Some(at(1000));
        for ms in [1500, 2000, 2500, 3000] {
            timeline.batch_done_at(at(ms), 10);
        }
        timeline.drained = Some(at(3000));
        timeline.batch_done_at(at(3500), 10); // run-out: excluded
        let window = timeline.steady().expect("a window");
        assert_eq!(window.images, 40);
        assert!((window.images_per_s - 20.0).abs() < 1e-9, "{window:?}");
        assert!((window.start_s - 1.0).abs() < 1e-9 && (window.end_s - 3.0).abs() < 1e-9);
    }

    #[test]
    fn no_window_without_two_batches_inside_it() {
        let t0 = Instant::now();
        let mut timeline = Timeline::new(t0);
        timeline.warm = Some(t0 + Duration::from_secs(1));
        timeline.batch_done_at(t0 + Duration::from_secs(2), 8);
        timeline.drained = Some(t0 + Duration::from_secs(3));
        assert_eq!(timeline.steady(), None);
        timeline.drained = None;
        assert_eq!(timeline.steady(), None);
    }

    #[test]
    fn busy_fraction_is_device_time_over_device_plus_waiting() {
        let stages = Stages {
            upload_s: 1.0,
            compute_s: 6.0,
            readback_s: 1.0,
            wait_loader_s: 2.0,
            ..Stages::default()
        };
        assert_eq!(stages.device_busy_fraction(), Some(0.8));
        assert_eq!(Stages::default().device_busy_fraction(), None);
    }
}
