//! A time limit for the hub client's requests. `hf-hub` builds its own
//! `ureq` agent without timeouts and takes none, so a hub that accepts a
//! connection and then sends nothing (a stalled proxy or CDN node, a
//! server gone quiet mid-body) would hold the run forever, before any
//! worker starts. Each request runs on a thread of its own while the
//! caller's thread watches its heartbeat: a try starting, a retry's wait,
//! a download's bytes arriving. When `limit` passes without one, the
//! request has stalled: the caller says so in one line and the run ends
//! (the abandoned thread with it); what reached a `.part` file is resumed
//! by the next run. The limit is Python's `HF_HUB_DOWNLOAD_TIMEOUT`, with
//! its default of 10 s.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use hf_hub::api::Progress;
use indicatif::ProgressBar;

/// `huggingface_hub`'s default for `HF_HUB_DOWNLOAD_TIMEOUT`.
const DEFAULT_LIMIT: Duration = Duration::from_secs(10);

/// How often the watcher looks.
const LOOK: Duration = Duration::from_millis(100);

/// The limit `HF_HUB_DOWNLOAD_TIMEOUT` sets (seconds above 0), else
/// Python's default; a value that is no such number, in one line.
pub(super) fn limit_from(value: Option<&str>) -> Result<Duration, String> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(DEFAULT_LIMIT);
    };
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("HF_HUB_DOWNLOAD_TIMEOUT={value}: not a number of seconds above 0"))
}

/// A request's heartbeat, and a download's progress bar where one is shown.
#[derive(Clone)]
pub(super) struct Beat {
    started: Instant,
    /// Milliseconds from `started` to the last beat.
    last: Arc<AtomicU64>,
    bar: Option<ProgressBar>,
}

impl Beat {
    /// The request is alive now.
    pub(super) fn tick(&self) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(now, Ordering::Relaxed);
    }

    /// Waits `wait` (a retry's pause), alive all along.
    pub(super) fn pause(&self, wait: Duration) {
        let until = Instant::now() + wait;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            self.tick();
            std::thread::sleep(left.min(LOOK));
            if left <= LOOK {
                break;
            }
        }
        self.tick();
    }

    /// How long since the last beat.
    fn idle(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }
}

impl Progress for Beat {
    fn init(&mut self, size: usize, filename: &str) {
        self.tick();
        if let Some(bar) = &mut self.bar {
            bar.init(size, filename);
        }
    }

    fn update(&mut self, size: usize) {
        self.tick();
        if let Some(bar) = &mut self.bar {
            bar.update(size);
        }
    }

    fn finish(&mut self) {
        self.tick();
        if let Some(bar) = &mut self.bar {
            Progress::finish(bar);
        }
    }
}

/// Why a watched call gave no result.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unanswered {
    /// `limit` passed without a heartbeat.
    Stalled,
    /// Its thread did not start, or ended without a result (it panicked):
    /// why, for the run's one-line error.
    Failed(String),
}

/// `call` on a thread of its own, handed its [`Beat`] (with a progress
/// bar when `bar`), its result once it returns; [`Unanswered::Stalled`]
/// once `limit` passes without a beat (a try's start counts: `call` ticks
/// it).
pub(super) fn watched<T: Send + 'static>(
    limit: Duration,
    bar: bool,
    call: impl FnOnce(Beat) -> T + Send + 'static,
) -> Result<T, Unanswered> {
    let beat = Beat {
        started: Instant::now(),
        last: Arc::new(AtomicU64::new(0)),
        bar: bar.then(|| ProgressBar::new(0)),
    };
    let watch = beat.clone();
    let (done, result) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("hub request".into())
        .spawn(move || {
            let _ = done.send(call(beat));
        })
        .map_err(|e| Unanswered::Failed(format!("no thread for a hub request: {e}")))?;
    loop {
        let Some(left) = limit.checked_sub(watch.idle()).filter(|l| !l.is_zero()) else {
            if let Some(bar) = &watch.bar {
                bar.abandon();
            }
            return Err(Unanswered::Stalled);
        };
        match result.recv_timeout(left.min(LOOK)) {
            Ok(value) => return Ok(value),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Unanswered::Failed(
                    "a hub request ended without an answer (its thread panicked)".to_owned(),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_python_s_variable_or_its_default() {
        assert_eq!(limit_from(None), Ok(Duration::from_secs(10)));
        assert_eq!(limit_from(Some(" ")), Ok(Duration::from_secs(10)));
        assert_eq!(limit_from(Some("2.5")), Ok(Duration::from_millis(2500)));
        for bad in ["0", "-1", "ten", "inf", "NaN"] {
            let err = limit_from(Some(bad)).expect_err(bad);
            assert!(
                err.starts_with(&format!("HF_HUB_DOWNLOAD_TIMEOUT={bad}: ")),
                "{err}"
            );
        }
    }

    #[test]
    fn a_call_that_beats_runs_past_the_limit_and_a_silent_one_stalls() {
        let limit = Duration::from_secs(1);
        // Beats every 50 ms for 2.5 s: past the limit, never idle.
        let alive = watched(limit, false, |beat| {
            for _ in 0..50 {
                std::thread::sleep(Duration::from_millis(50));
                beat.tick();
            }
            7
        });
        assert_eq!(alive, Ok(7));
        // A retry's pause of 2.5 s is not silence.
        assert_eq!(
            watched(limit, false, |beat| beat.pause(Duration::from_millis(2500))),
            Ok(())
        );
        let started = Instant::now();
        let silent = watched(limit, false, |_beat| {
            std::thread::sleep(Duration::from_secs(30));
        });
        assert_eq!(silent, Err(Unanswered::Stalled));
        let took = started.elapsed();
        assert!(took >= limit && took < Duration::from_secs(10), "{took:?}");
        // A request that dies on its thread is an error, not this thread's
        // panic.
        let died = watched(limit, false, |_beat| -> u8 { panic!("injected") });
        assert!(matches!(died, Err(Unanswered::Failed(why)) if why.contains("panicked")));
    }
}
