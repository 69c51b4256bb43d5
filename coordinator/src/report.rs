//! How a run tells its user what is happening. The coordinator never
//! prints: it calls a [`Report`], which the binary implements (progress bars
//! on a terminal, status lines in a log, only warnings with `--quiet`).

/// What a run says while it goes. Called from the scheduler's thread and
/// from the threads that read the workers' output, hence `&self` and
/// `Send + Sync`.
pub trait Report: Send + Sync {
    /// The run owns `images` images; `already` of them were committed by
    /// an earlier run (resumed).
    fn start(&self, images: u64, already: u64);
    /// A line the user must see even when quiet: a worker's own error
    /// output, a death, a restart, a hang.
    fn warn(&self, line: &str);
    /// An informational line: the shard plan, a resume, a skipped file.
    fn notice(&self, line: &str);
    /// Worker `worker`'s current status (its device, batch and rate).
    fn worker(&self, worker: usize, status: &str);
    /// `images` more images are finished.
    fn advance(&self, images: u64);
    /// The run is over; the summary comes next.
    fn finish(&self);
}

/// Says nothing at all: for callers that only want the summary.
pub struct Silent;

impl Report for Silent {
    fn start(&self, _: u64, _: u64) {}
    fn warn(&self, _: &str) {}
    fn notice(&self, _: &str) {}
    fn worker(&self, _: usize, _: &str) {}
    fn advance(&self, _: u64) {}
    fn finish(&self) {}
}
