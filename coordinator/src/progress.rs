//! What the user sees while a run goes: on a terminal, an overall bar (with
//! images/s and an ETA from the measured rate) and one line per worker; off
//! a terminal, a plain status line every [`PLAIN_INTERVAL`]; with `--quiet`,
//! nothing but errors.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::workers::LogLine;

/// How often the plain (non-terminal) status line is written.
const PLAIN_INTERVAL: Duration = Duration::from_secs(10);

/// The run's progress display.
pub(crate) struct Progress {
    mode: Mode,
    total: u64,
    done: u64,
    started: Instant,
    last_plain: Instant,
}

enum Mode {
    Bars {
        multi: MultiProgress,
        overall: ProgressBar,
        workers: Vec<ProgressBar>,
    },
    Plain,
    Quiet,
}

impl Progress {
    /// A display for `total` images.
    pub(crate) fn new(total: u64, quiet: bool) -> Self {
        let mode = if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(5));
            let overall = multi.add(ProgressBar::new(total));
            overall.set_style(
                ProgressStyle::with_template(
                    "{bar:40.cyan/blue} {pos}/{len} images · {rate} · ETA {eta} ",
                )
                .map(|style| {
                    style.with_key(
                        "rate",
                        |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                            let _ = write!(w, "{:.1} images/s", state.per_sec());
                        },
                    )
                })
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            Mode::Bars {
                multi,
                overall,
                workers: Vec::new(),
            }
        } else {
            Mode::Plain
        };
        let now = Instant::now();
        Self {
            mode,
            total,
            done: 0,
            started: now,
            last_plain: now,
        }
    }

    /// A thread-safe way to print a line above the bars.
    pub(crate) fn logger(&self) -> LogLine {
        match &self.mode {
            Mode::Bars { multi, .. } => {
                let multi = multi.clone();
                Arc::new(move |line: &str| {
                    if multi.println(line).is_err() {
                        eprintln!("{line}");
                    }
                })
            }
            Mode::Plain | Mode::Quiet => Arc::new(|line: &str| eprintln!("{line}")),
        }
    }

    /// Prints a notice (suppressed by `--quiet`).
    pub(crate) fn notice(&self, line: &str) {
        match &self.mode {
            Mode::Bars { multi, .. } => {
                let _ = multi.println(line);
            }
            Mode::Plain => eprintln!("{line}"),
            Mode::Quiet => {}
        }
    }

    /// Sets worker `slot`'s status line.
    pub(crate) fn worker(&mut self, slot: usize, status: String) {
        if let Mode::Bars { multi, workers, .. } = &mut self.mode {
            while workers.len() <= slot {
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("  {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                workers.push(bar);
            }
            workers[slot].set_message(status);
        }
    }

    /// `items` more images are finished.
    pub(crate) fn advance(&mut self, items: u64) {
        self.done += items;
        match &self.mode {
            Mode::Bars { overall, .. } => overall.inc(items),
            Mode::Plain if self.last_plain.elapsed() >= PLAIN_INTERVAL => {
                self.last_plain = Instant::now();
                let secs = self.started.elapsed().as_secs_f64();
                let rate = self.done as f64 / secs.max(1e-9);
                let eta = (self.total - self.done.min(self.total)) as f64 / rate.max(1e-9);
                eprintln!(
                    "pipeline: {}/{} images, {rate:.1} images/s, ETA {eta:.0} s",
                    self.done, self.total
                );
            }
            Mode::Plain | Mode::Quiet => {}
        }
    }

    /// Removes the bars (before the summary is printed).
    pub(crate) fn clear(&mut self) {
        if let Mode::Bars {
            multi,
            overall,
            workers,
        } = &self.mode
        {
            overall.finish_and_clear();
            for bar in workers {
                bar.finish_and_clear();
            }
            let _ = multi.clear();
        }
    }
}
