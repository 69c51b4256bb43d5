//! What the user sees while a run goes, as the coordinator's
//! [`coordinator::Report`]: on a terminal, an overall bar (with images/s and
//! an ETA from the measured rate) and one line per worker; off a terminal, a
//! plain status line every [`PLAIN_INTERVAL`]; with `--quiet`, only warnings.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often the plain (non-terminal) status line is written.
const PLAIN_INTERVAL: Duration = Duration::from_secs(10);

/// The run's progress display.
pub(crate) struct Progress {
    mode: Mode,
    state: Mutex<State>,
}

enum Mode {
    Bars(MultiProgress),
    Plain,
    Quiet,
}

struct State {
    total: u64,
    done: u64,
    started: Instant,
    last_plain: Instant,
    overall: Option<ProgressBar>,
    workers: Vec<ProgressBar>,
    /// The run ended: lines go straight to stderr.
    finished: bool,
}

impl Progress {
    /// Bars on a terminal, status lines elsewhere, warnings only if `quiet`.
    pub(crate) fn new(quiet: bool) -> Self {
        let mode = if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            Mode::Bars(MultiProgress::with_draw_target(
                ProgressDrawTarget::stderr_with_hz(5),
            ))
        } else {
            Mode::Plain
        };
        let now = Instant::now();
        Self {
            mode,
            state: Mutex::new(State {
                total: 0,
                done: 0,
                started: now,
                last_plain: now,
                overall: None,
                workers: Vec::new(),
                finished: false,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere must not silence the display.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Prints `line` above the bars, or on stderr; without a credential
    /// (a worker's own stderr may quote an item's URL whole).
    fn print(&self, line: &str) {
        let line = pipeline_core::redact_text(line);
        let line: &str = &line;
        match &self.mode {
            Mode::Bars(multi) if !self.state().finished => {
                if multi.println(line).is_err() {
                    eprintln!("{line}");
                }
            }
            _ => eprintln!("{line}"),
        }
    }
}

fn overall_style() -> ProgressStyle {
    ProgressStyle::with_template("{bar:40.cyan/blue} {pos}/{len} images · {rate} · ETA {eta} ")
        .map(|style| {
            style.with_key(
                "rate",
                |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.1} images/s", state.per_sec());
                },
            )
        })
        .unwrap_or_else(|_| ProgressStyle::default_bar())
}

impl coordinator::Report for Progress {
    fn start(&self, images: u64, already: u64) {
        let mut state = self.state();
        state.total = images;
        state.done = already;
        if let Mode::Bars(multi) = &self.mode {
            let overall = multi.add(ProgressBar::new(images));
            overall.set_style(overall_style());
            overall.inc(already);
            state.overall = Some(overall);
        }
    }

    fn warn(&self, line: &str) {
        self.print(line);
    }

    fn notice(&self, line: &str) {
        if !matches!(self.mode, Mode::Quiet) {
            self.print(line);
        }
    }

    fn worker(&self, worker: usize, status: &str) {
        let Mode::Bars(multi) = &self.mode else {
            return;
        };
        let mut state = self.state();
        if state.finished {
            return;
        }
        while state.workers.len() <= worker {
            let bar = multi.add(ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("  {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            state.workers.push(bar);
        }
        state.workers[worker].set_message(status.to_owned());
    }

    fn advance(&self, images: u64) {
        let mut state = self.state();
        state.done += images;
        if let Some(overall) = &state.overall {
            overall.inc(images);
        }
        if matches!(self.mode, Mode::Plain) && state.last_plain.elapsed() >= PLAIN_INTERVAL {
            state.last_plain = Instant::now();
            let secs = state.started.elapsed().as_secs_f64();
            let rate = state.done as f64 / secs.max(1e-9);
            let eta = (state.total - state.done.min(state.total)) as f64 / rate.max(1e-9);
            eprintln!(
                "pipeline: {}/{} images, {rate:.1} images/s, ETA {eta:.0} s",
                state.done, state.total
            );
        }
    }

    fn finish(&self) {
        let mut state = self.state();
        state.finished = true;
        if let Some(overall) = state.overall.take() {
            overall.finish_and_clear();
        }
        for bar in state.workers.drain(..) {
            bar.finish_and_clear();
        }
        if let Mode::Bars(multi) = &self.mode {
            let _ = multi.clear();
        }
    }
}
