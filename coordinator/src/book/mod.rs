//! The span book: which item ranges exist, which are waiting, running,
//! suspected or done, and what to hand a worker next. Pure bookkeeping — no
//! processes, channels, clocks or files — so the scheduler's rules are
//! unit-tested here rather than only end to end:
//!
//! - every owned, uncommitted chunk starts as one span, queued in order;
//! - a span that was in flight when its worker died becomes a *suspect* and
//!   runs alone on an otherwise idle worker;
//! - a suspect that kills the worker running it alone is split in halves
//!   (both suspects), down to one image, which after [`ISOLATED_FAILURES`]
//!   such deaths becomes a `worker_crash` error record;
//! - a device-lost death (out of memory) blames no image: its spans go back
//!   to the front of the queue;
//! - an idle worker with nothing queued takes a copy of the oldest span
//!   running on one other worker; the first result wins, later copies are
//!   dropped;
//! - a chunk is complete when every item has exactly one outcome, and its
//!   outcomes come out sorted by index.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Range;

use pipeline_core::{Chunk, ItemError, ItemErrorKind, ItemOutcome};

/// Deaths of a worker running one image alone before that image becomes a
/// `worker_crash` record. A death costs a respawn (seconds), and a chance
/// `kill -9` or OOM-killer hit must not turn a good image into an error, so
/// a single death never does: it takes this many in a row on that image.
pub const ISOLATED_FAILURES: u32 = 3;

/// A span's id: its position in the book (pieces of a split get new ones).
pub(crate) type SpanId = u64;

/// A worker process's id (each spawn gets a new one).
pub(crate) type WorkerId = usize;

/// A range of one chunk's items, run as a unit: the whole chunk, or a piece
/// after a split.
#[derive(Debug)]
struct Span {
    chunk: u64,
    items: Range<u64>,
    /// Finished, or replaced by its halves.
    done: bool,
    /// It was in flight when a worker died: it now runs alone.
    suspect: bool,
    /// Deaths of a worker that ran it alone.
    isolated_failures: u32,
    /// Workers running it.
    running_on: Vec<WorkerId>,
    /// When it was first sent, in sends: the oldest is copied first.
    first_sent: Option<u64>,
}

/// One chunk's outcomes, until every item has one.
#[derive(Debug)]
struct ChunkState {
    chunk: Chunk,
    outcomes: Vec<ItemOutcome>,
}

/// Retries, splits and speculative copies, for the run's summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BookCounts {
    /// Spans run again after a worker died with them.
    pub(crate) retries: u64,
    /// Suspect spans split in halves.
    pub(crate) splits: u64,
    /// Copies of a running span sent to an idle worker.
    pub(crate) speculative: u64,
}

/// What became of a span's result.
#[derive(Debug, PartialEq)]
pub(crate) enum Finished {
    /// Another copy finished first (or the span was split): dropped.
    Stale,
    /// The outcomes do not match the span's items; it is queued again
    /// unless another worker still runs it.
    Bad(BadOutcomes),
    /// Recorded; its chunk still waits for other spans.
    Recorded {
        /// The span's items.
        images: u64,
    },
    /// Recorded, and its chunk is complete: commit these, sorted by index.
    Complete {
        /// The span's items.
        images: u64,
        /// The chunk.
        chunk: u64,
        /// Every item's outcome, in index order.
        outcomes: Vec<ItemOutcome>,
    },
}

/// How a worker died, for what its spans become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Death {
    /// Out of device memory or device lost: the batch, not the images.
    DeviceLost,
    /// A crash, a hang or any other exit.
    Crashed,
}

/// The span book.
#[derive(Debug)]
pub(crate) struct SpanBook {
    spans: Vec<Span>,
    chunks: HashMap<u64, ChunkState>,
    /// Spans to hand out, in order.
    queue: VecDeque<SpanId>,
    /// Spans that were in flight when a worker died: each runs alone.
    suspects: VecDeque<SpanId>,
    sends: u64,
    counts: BookCounts,
}

impl SpanBook {
    /// One span per chunk of `chunks` not in `committed`, queued in order.
    pub(crate) fn new(chunks: &[Chunk], committed: &HashSet<u64>) -> Self {
        let open: Vec<&Chunk> = chunks
            .iter()
            .filter(|c| !committed.contains(&c.id))
            .collect();
        Self {
            spans: open
                .iter()
                .map(|c| Span {
                    chunk: c.id,
                    items: c.start..c.end,
                    done: false,
                    suspect: false,
                    isolated_failures: 0,
                    running_on: Vec::new(),
                    first_sent: None,
                })
                .collect(),
            chunks: open
                .iter()
                .map(|&&chunk| {
                    let outcomes = Vec::new();
                    (chunk.id, ChunkState { chunk, outcomes })
                })
                .collect(),
            queue: (0..open.len() as u64).collect(),
            suspects: VecDeque::new(),
            sends: 0,
            counts: BookCounts::default(),
        }
    }

    /// The items of `span`.
    pub(crate) fn items(&self, span: SpanId) -> Range<u64> {
        self.spans[span as usize].items.clone()
    }

    /// The suspect to run alone next, if any waits.
    pub(crate) fn next_suspect(&self) -> Option<SpanId> {
        self.suspects.front().copied()
    }

    /// `next_suspect` was sent: it leaves the suspects' queue.
    pub(crate) fn took_suspect(&mut self) {
        self.suspects.pop_front();
    }

    /// The next span for `worker`: the queue's first unfinished one, or,
    /// when the queue is empty and the worker is `idle`, a copy of the
    /// oldest span running on exactly one other worker (suspects excepted).
    pub(crate) fn next_for(&mut self, worker: WorkerId, idle: bool) -> Option<SpanId> {
        while let Some(span) = self.queue.pop_front() {
            if !self.spans[span as usize].done {
                return Some(span);
            }
        }
        if !idle {
            return None;
        }
        self.spans
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                !t.done && !t.suspect && t.running_on.len() == 1 && !t.running_on.contains(&worker)
            })
            .min_by_key(|(_, t)| t.first_sent)
            .map(|(i, _)| i as SpanId)
    }

    /// `span` went to `worker`.
    pub(crate) fn sent(&mut self, span: SpanId, worker: WorkerId) {
        let t = &mut self.spans[span as usize];
        if !t.running_on.is_empty() {
            self.counts.speculative += 1;
        }
        t.running_on.push(worker);
        self.sends += 1;
        t.first_sent.get_or_insert(self.sends);
    }

    /// `span` could not be sent after all: back to the front of the queue,
    /// unless another worker runs it.
    pub(crate) fn unsent(&mut self, span: SpanId) {
        if self.spans[span as usize].running_on.is_empty() {
            self.queue.push_front(span);
        }
    }

    /// `worker` returned `outcomes` for `span`.
    pub(crate) fn finished(
        &mut self,
        span: SpanId,
        worker: WorkerId,
        outcomes: Vec<ItemOutcome>,
    ) -> Finished {
        let Some(t) = self.spans.get_mut(span as usize) else {
            return Finished::Stale;
        };
        t.running_on.retain(|&w| w != worker);
        if t.done {
            return Finished::Stale;
        }
        if let Err(problem) = check_outcomes(t.items.clone(), &outcomes) {
            if t.running_on.is_empty() {
                self.queue.push_front(span);
            }
            return Finished::Bad(problem);
        }
        self.record(span, outcomes)
    }

    /// Marks `span` done with `outcomes`; completes its chunk if it can.
    fn record(&mut self, span: SpanId, outcomes: Vec<ItemOutcome>) -> Finished {
        let t = &mut self.spans[span as usize];
        t.done = true;
        let images = outcomes.len() as u64;
        let Some(state) = self.chunks.get_mut(&t.chunk) else {
            return Finished::Recorded { images };
        };
        state.outcomes.extend(outcomes);
        if state.outcomes.len() as u64 != state.chunk.len() {
            return Finished::Recorded { images };
        }
        let mut outcomes = std::mem::take(&mut state.outcomes);
        outcomes.sort_unstable_by_key(|o| o.index);
        Finished::Complete {
            images,
            chunk: t.chunk,
            outcomes,
        }
    }

    /// `worker` died holding `lost`; it ran `isolated` alone, if any. A
    /// device loss requeues its spans; a crash makes them suspects, and
    /// blames the one it ran alone (split, retry, or fail the image, whose
    /// error says `why`). Returns the spans that a failed image finished.
    pub(crate) fn worker_died(
        &mut self,
        worker: WorkerId,
        lost: &[SpanId],
        isolated: Option<SpanId>,
        death: Death,
        why: &str,
    ) -> Vec<(SpanId, Finished)> {
        let mut completed = Vec::new();
        for &span in lost {
            let t = &mut self.spans[span as usize];
            t.running_on.retain(|&w| w != worker);
            if t.done || !t.running_on.is_empty() {
                continue;
            }
            match death {
                Death::DeviceLost => {
                    self.counts.retries += 1;
                    self.queue.push_front(span);
                }
                Death::Crashed if isolated == Some(span) => {
                    if let Some(done) = self.blame(span, why) {
                        completed.push((span, done));
                    }
                }
                Death::Crashed => {
                    t.suspect = true;
                    self.counts.retries += 1;
                    self.suspects.push_back(span);
                }
            }
        }
        completed
    }

    /// A span killed the worker that ran it alone: split it, or after
    /// [`ISOLATED_FAILURES`] deaths on one image, fail that image.
    fn blame(&mut self, span: SpanId, why: &str) -> Option<Finished> {
        let t = &mut self.spans[span as usize];
        if t.items.end - t.items.start == 1 {
            t.isolated_failures += 1;
            if t.isolated_failures < ISOLATED_FAILURES {
                self.counts.retries += 1;
                self.suspects.push_front(span);
                return None;
            }
            let error = ItemError::new(
                ItemErrorKind::WorkerCrash,
                format!("{why} on this image, {} times", t.isolated_failures),
            );
            let outcome = ItemOutcome {
                index: t.items.start,
                result: Err(error),
            };
            return Some(self.record(span, vec![outcome]));
        }
        t.done = true;
        let (chunk, Range { start, end }) = (t.chunk, t.items.clone());
        let middle = start + (end - start) / 2;
        let first = self.spans.len() as SpanId;
        for items in [start..middle, middle..end] {
            self.spans.push(Span {
                chunk,
                items,
                done: false,
                suspect: true,
                isolated_failures: 0,
                running_on: Vec::new(),
                first_sent: None,
            });
        }
        self.counts.splits += 1;
        self.suspects.push_front(first + 1);
        self.suspects.push_front(first);
        None
    }

    /// Hands out nothing more (SIGINT/SIGTERM).
    pub(crate) fn stop(&mut self) {
        self.queue.clear();
        self.suspects.clear();
    }

    /// Nothing queued and no suspect waiting.
    pub(crate) fn drained(&self) -> bool {
        self.queue.is_empty() && self.suspects.is_empty()
    }

    /// Retries, splits and speculative copies so far.
    pub(crate) fn counts(&self) -> BookCounts {
        self.counts
    }
}

/// How a worker's outcomes for a span were not its items.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadOutcomes {
    /// Too many or too few.
    #[error("{got} outcomes for {expected} items")]
    Count {
        /// Outcomes returned.
        got: u64,
        /// Items in the span.
        expected: u64,
    },
    /// Not in index order, or not the span's items.
    #[error("item {got} where {expected} was expected")]
    Order {
        /// The index returned.
        got: u64,
        /// The index due there.
        expected: u64,
    },
}

/// A span's outcomes must be exactly its items, in order.
pub fn check_outcomes(items: Range<u64>, outcomes: &[ItemOutcome]) -> Result<(), BadOutcomes> {
    let expected = items.end - items.start;
    if outcomes.len() as u64 != expected {
        return Err(BadOutcomes::Count {
            got: outcomes.len() as u64,
            expected,
        });
    }
    match outcomes
        .iter()
        .zip(items)
        .find(|(o, index)| o.index != *index)
    {
        Some((o, index)) => Err(BadOutcomes::Order {
            got: o.index,
            expected: index,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
