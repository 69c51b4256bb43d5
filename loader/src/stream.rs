//! The loader's threads: a fetch thread walks the work groups and turns
//! locations into bytes ahead of time (remote objects, Parquet cells; local
//! files pass through), a producer thread cuts the fetched items into
//! batches, a rayon pool of `threads` decodes each batch's items in parallel
//! straight into the batch buffer, and finished batches wait in a bounded
//! crossbeam channel.
//!
//! Backpressure: when [`BATCH_QUEUE_CAPACITY`] batches are waiting, the
//! producer blocks on `send`, so decoding never runs ahead of the consumer by
//! more than that. Shutdown: dropping the [`BatchStream`] makes the next
//! `send` fail and the producer returns.

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, bounded};
use pipeline_core::{
    DecodeLimits, ItemError, ItemErrorKind, ItemIndex, Location, PreprocessSpec, RemoteSpec,
    SpecError, panic_message,
};
use rayon::prelude::*;

use crate::batch::{Batch, WorkGroup, WorkItem};
use crate::fetch::{Pending, fetch_group};
use crate::preprocess::Preprocessor;

/// Finished batches that may wait for the consumer: one being consumed
/// plus one ready is enough to hide decode latency without hoarding memory.
pub const BATCH_QUEUE_CAPACITY: usize = 2;

/// Spent pixel buffers kept for reuse.
const RECYCLE_CAPACITY: usize = BATCH_QUEUE_CAPACITY + 2;

/// How the loader runs.
#[derive(Debug, Clone, PartialEq)]
pub struct LoaderConfig {
    /// Decoder threads in the rayon pool.
    pub threads: usize,
    /// Images per batch (the last batch of a group may be smaller).
    pub batch_size: usize,
    /// Resize, crop and normalisation.
    pub spec: PreprocessSpec,
    /// Decompression-bomb guards.
    pub limits: DecodeLimits,
    /// How remote items are fetched.
    pub remote: RemoteSpec,
}

/// How the decoder threads are scheduled against the rest of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecoderPriority {
    /// Like any thread: the choice where the model runs elsewhere (a GPU).
    #[default]
    Normal,
    /// Only on cores nothing else wants (Linux's `SCHED_IDLE`; the lowest
    /// priority elsewhere): beside an engine that computes on the same
    /// cores, so a decoder never preempts one of its GEMM threads mid-batch
    /// (its partners would wait at the next barrier), and decodes while the
    /// engine waits or leaves a core idle.
    Background,
}

/// Fetched items that may wait for the producer, at least: enough to keep
/// `--io-concurrency` requests in flight while a batch decodes.
pub const FETCH_QUEUE_MIN: usize = 64;

/// What the fetch thread hands the producer.
enum Fetched {
    /// A group starts; `len` items follow.
    Group { id: u64, len: usize },
    /// The next item of the group.
    Item(ItemIndex, Pending),
}

/// The loader could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LoaderError {
    /// Bad preprocessing spec.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// Zero batch size or zero threads.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// The OS refused to create threads.
    #[error("cannot start loader threads: {0}")]
    Threads(String),
    /// The producer thread died; some items were not delivered.
    #[error("loader thread panicked: {0}")]
    Panicked(String),
}

/// A configured loader with its decoder pool.
#[derive(Debug, Clone)]
pub struct Loader {
    pool: Arc<rayon::ThreadPool>,
    config: Arc<LoaderConfig>,
}

thread_local! {
    static PREPROCESSOR: RefCell<Preprocessor> = RefCell::new(Preprocessor::new());
    /// The last image's pixel buffer, for the next decode on this thread.
    static SPARE_PIXELS: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// The largest pixel buffer a decoder thread keeps between images
/// (a 21 MP photo): one giant image must not pin its memory on every
/// thread for the rest of the run.
const SPARE_PIXELS_MAX: usize = 64 << 20;

impl Loader {
    /// Validates `config` and starts the decoder pool.
    pub fn new(config: LoaderConfig) -> Result<Self, LoaderError> {
        Self::with_priority(config, DecoderPriority::Normal)
    }

    /// [`Loader::new`], its decoder threads scheduled as `priority` says.
    pub fn with_priority(
        config: LoaderConfig,
        priority: DecoderPriority,
    ) -> Result<Self, LoaderError> {
        config.spec.validate()?;
        if config.threads == 0 {
            return Err(LoaderError::Zero("loader threads"));
        }
        if config.batch_size == 0 {
            return Err(LoaderError::Zero("batch size"));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(config.threads)
            .thread_name(|i| format!("loader-{i}"))
            .start_handler(move |_| {
                if priority == DecoderPriority::Background {
                    lower_this_thread();
                }
            })
            .build()
            .map_err(|e| LoaderError::Threads(e.to_string()))?;
        Ok(Self {
            pool: Arc::new(pool),
            config: Arc::new(config),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// Loads one local image on the calling thread: the CHW `u8` crop.
    pub fn load_one(&self, path: &Path) -> Result<Vec<u8>, ItemError> {
        let side = self.config.spec.crop as usize;
        let mut out = vec![0u8; 3 * side * side];
        let item = WorkItem::file(0, path);
        load_into(Pending::Read(item.location), &self.config, &mut out).result?;
        Ok(out)
    }

    /// Loads `items` as one group.
    pub fn load_all(&self, items: Vec<WorkItem>) -> Result<BatchStream, LoaderError> {
        self.stream(std::iter::once(WorkGroup { id: 0, items }))
    }

    /// Starts loading `groups` in order; batches come out in input order.
    /// The iterator is pulled lazily, so it may be fed by another thread.
    pub fn stream<I>(&self, groups: I) -> Result<BatchStream, LoaderError>
    where
        I: IntoIterator<Item = WorkGroup>,
        I::IntoIter: Send + 'static,
    {
        let (tx, rx) = bounded(BATCH_QUEUE_CAPACITY);
        let (recycle_tx, recycle_rx) = bounded(RECYCLE_CAPACITY);
        let queue = FETCH_QUEUE_MIN
            .max(2 * self.config.batch_size)
            .max(2 * self.config.remote.concurrency);
        let (fetched_tx, fetched_rx) = bounded(queue);
        let remote = self.config.remote;
        let groups = groups.into_iter();
        let fetcher = thread::Builder::new()
            .name("loader-fetch".into())
            .spawn(move || fetch(groups, remote, &fetched_tx))
            .map_err(|e| LoaderError::Threads(e.to_string()))?;
        let loader = self.clone();
        let producer = thread::Builder::new()
            .name("loader-producer".into())
            .spawn(move || loader.produce(&fetched_rx, &tx, &recycle_rx))
            .map_err(|e| LoaderError::Threads(e.to_string()))?;
        Ok(BatchStream {
            rx,
            recycle_tx,
            threads: vec![fetcher, producer],
        })
    }

    fn produce(
        &self,
        fetched: &Receiver<Fetched>,
        tx: &Sender<Batch>,
        recycle: &Receiver<Vec<u8>>,
    ) {
        let side = self.config.spec.crop;
        let image_len = 3 * side as usize * side as usize;
        while let Ok(Fetched::Group { id, len }) = fetched.recv() {
            let batches = len.div_ceil(self.config.batch_size).max(1);
            let mut left = len;
            for b in 0..batches {
                let take = left.min(self.config.batch_size);
                left -= take;
                let mut items = Vec::with_capacity(take);
                for _ in 0..take {
                    match fetched.recv() {
                        Ok(Fetched::Item(index, pending)) => items.push((index, pending)),
                        // The fetch thread died mid-group: the caller's
                        // group iterator panicked; the stream ends.
                        _ => return,
                    }
                }
                let mut pixels = recycle.try_recv().unwrap_or_default();
                // No clear(): every slot is overwritten by its crop or
                // compacted away, so a recycled buffer need not be zeroed.
                pixels.resize(items.len() * image_len, 0);
                let indices: Vec<ItemIndex> = items.iter().map(|(i, _)| *i).collect();
                let results: Vec<Loaded> = self.pool.install(|| {
                    pixels
                        .par_chunks_mut(image_len)
                        .zip(items.into_par_iter())
                        .map(|(out, (_, pending))| load_into(pending, &self.config, out))
                        .collect()
                });
                let batch = pack(
                    id,
                    b + 1 == batches,
                    &indices,
                    results,
                    pixels,
                    image_len,
                    &self.config.spec,
                );
                if tx.send(batch).is_err() {
                    return; // the consumer is gone
                }
            }
        }
    }
}

/// The fetch thread: each group's start, then its items in order.
fn fetch(groups: impl Iterator<Item = WorkGroup>, remote: RemoteSpec, tx: &Sender<Fetched>) {
    for group in groups {
        if tx
            .send(Fetched::Group {
                id: group.id,
                len: group.items.len(),
            })
            .is_err()
        {
            return;
        }
        let mut alive = true;
        fetch_group(group.items, remote, |index, pending| {
            alive = tx.send(Fetched::Item(index, pending)).is_ok();
            alive
        });
        if !alive {
            return; // the producer is gone
        }
    }
}

/// One item's result with the seconds spent reading and decoding it.
struct Loaded {
    result: Result<(), ItemError>,
    read_s: f64,
    decode_s: f64,
}

/// Moves successful rows to the front of `pixels` and splits off failures.
fn pack(
    group: u64,
    group_done: bool,
    items: &[ItemIndex],
    results: Vec<Loaded>,
    mut pixels: Vec<u8>,
    image_len: usize,
    spec: &PreprocessSpec,
) -> Batch {
    let mut indices = Vec::with_capacity(items.len());
    let mut failures = Vec::new();
    let (mut read_s, mut decode_s) = (0.0, 0.0);
    for (row, (&index, loaded)) in items.iter().zip(results).enumerate() {
        read_s += loaded.read_s;
        decode_s += loaded.decode_s;
        match loaded.result {
            Ok(()) => {
                let dst = indices.len();
                if dst != row {
                    pixels.copy_within(row * image_len..(row + 1) * image_len, dst * image_len);
                }
                indices.push(index);
            }
            Err(e) => failures.push((index, e)),
        }
    }
    pixels.truncate(indices.len() * image_len);
    Batch {
        group,
        group_done,
        indices,
        failures,
        pixels,
        side: spec.crop,
        normalize: spec.normalize,
        read_s,
        decode_s,
    }
}

/// Decodes and preprocesses one file into `out`; a decoder panic becomes a
/// `decode` error for this item only.
/// Decodes an in-memory image file and preprocesses it into `out` (the CHW
/// `u8` crop, `3 × crop × crop` bytes): the loader's work on one item after
/// the read, and the entry point of the fuzz target (`loader/fuzz`).
///
/// A decoder panic is not caught here, so fuzzing finds it; the loader
/// turns one into a `decode` error record.
pub fn load_bytes(
    bytes: &[u8],
    spec: &PreprocessSpec,
    limits: &DecodeLimits,
    out: &mut [u8],
) -> Result<(), ItemError> {
    let spare = SPARE_PIXELS.take();
    let image = crate::decode::decode_bytes_into(bytes, spec, limits, spare)?;
    crate::preprocess::check_resize(&image, spec, limits)?;
    let done = PREPROCESSOR.with(|p| p.borrow_mut().run(&image, spec, out));
    if image.pixels.capacity() <= SPARE_PIXELS_MAX {
        SPARE_PIXELS.set(image.pixels);
    }
    done
}

/// Puts the calling thread where [`DecoderPriority::Background`] says. A
/// refusal (no known case: lowering needs no privilege) leaves the thread
/// as it was, said once on stderr: slower, never wrong.
fn lower_this_thread() {
    use thread_priority::{ThreadPriority, ThreadSchedulePolicy};
    #[cfg(target_os = "linux")]
    let lowered = thread_priority::set_thread_priority_and_policy(
        thread_priority::thread_native_id(),
        ThreadPriority::Min,
        ThreadSchedulePolicy::Normal(thread_priority::NormalThreadSchedulePolicy::Idle),
    );
    #[cfg(not(target_os = "linux"))]
    let lowered = thread_priority::set_current_thread_priority(ThreadPriority::Min);
    if let Err(e) = lowered {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!("pipeline: decoder threads keep their priority (the OS refused: {e:?})")
        });
    }
}

fn load_into(pending: Pending, config: &LoaderConfig, out: &mut [u8]) -> Loaded {
    let started = Instant::now();
    let mut read_s = 0.0;
    let mut fetched_s = 0.0;
    let run = || {
        let bytes = match pending {
            Pending::Read(Location::File { path, range }) => {
                use std::os::unix::ffi::OsStrExt;
                let path = Path::new(std::ffi::OsStr::from_bytes(&path));
                bytes::Bytes::from(match range {
                    None => crate::decode::read_file(path, &config.limits)?,
                    Some(range) => crate::decode::read_range(path, range, &config.limits)?,
                })
            }
            Pending::Read(other) => {
                return Err(ItemError::new(
                    ItemErrorKind::Io,
                    format!("not a local file: {other:?}"),
                ));
            }
            Pending::Ready(bytes, seconds) => {
                fetched_s = seconds;
                let bytes = bytes?;
                crate::decode::check_size(bytes.len() as u64, &config.limits)?;
                bytes
            }
        };
        read_s = started.elapsed().as_secs_f64();
        load_bytes(&bytes, &config.spec, &config.limits, out)
    };
    let result = catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|payload| {
        Err(ItemError::new(
            ItemErrorKind::Decode,
            format!("decoder panicked: {}", panic_message(payload.as_ref())),
        ))
    });
    let total = started.elapsed().as_secs_f64();
    // A file that could not be read spent all its time reading.
    let read_s = if read_s == 0.0 { total } else { read_s };
    Loaded {
        result,
        read_s: read_s + fetched_s,
        decode_s: total - read_s,
    }
}

/// Batches in input order. Iterate it; hand spent batches back with
/// [`BatchStream::recycle`] to reuse their buffers.
#[derive(Debug)]
pub struct BatchStream {
    rx: Receiver<Batch>,
    recycle_tx: Sender<Vec<u8>>,
    /// The fetch and producer threads.
    threads: Vec<JoinHandle<()>>,
}

impl BatchStream {
    /// Returns a consumed batch's pixel buffer to the producer.
    pub fn recycle(&self, batch: Batch) {
        // A full recycle queue just means enough spare buffers exist.
        let _ = self.recycle_tx.try_send(batch.pixels);
    }

    /// The next batch if one is ready now, without waiting: the device
    /// thread finishes work it has in flight rather than hold it while the
    /// loader catches up.
    pub fn ready(&mut self) -> Ready {
        match self.rx.try_recv() {
            Ok(batch) => Ready::Batch(batch),
            Err(crossbeam_channel::TryRecvError::Empty) => Ready::NotYet,
            Err(crossbeam_channel::TryRecvError::Disconnected) => Ready::End,
        }
    }

    /// Waits for the loader's threads to end and reports whether one died.
    /// Call after the iterator is exhausted.
    pub fn finish(self) -> Result<(), LoaderError> {
        let mut died = Ok(());
        for thread in self.threads {
            if let Err(payload) = thread.join() {
                died = Err(LoaderError::Panicked(panic_message(payload.as_ref())));
            }
        }
        died
    }
}

/// What [`BatchStream::ready`] found.
#[derive(Debug)]
pub enum Ready {
    /// The next batch.
    Batch(Batch),
    /// None yet: the loader is still working on it.
    NotYet,
    /// None will come: every group was loaded.
    End,
}

impl Iterator for BatchStream {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        self.rx.recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Background decoders run under `SCHED_IDLE`, on every thread of the
    /// pool; normal ones keep the default policy.
    #[cfg(target_os = "linux")]
    #[test]
    fn background_decoders_run_only_on_idle_cores() {
        use thread_priority::{
            NormalThreadSchedulePolicy, ThreadSchedulePolicy, thread_schedule_policy,
        };
        let config = || LoaderConfig {
            threads: 3,
            batch_size: 1,
            spec: PreprocessSpec::default(),
            limits: DecodeLimits::default(),
            remote: Default::default(),
        };
        let policies = |loader: Loader| {
            loader
                .pool
                .broadcast(|_| thread_schedule_policy().expect("a thread has a policy"))
        };
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        let background =
            policies(Loader::with_priority(config(), DecoderPriority::Background).expect("starts"));
        assert_eq!(background, vec![idle; 3]);
        let normal = policies(Loader::new(config()).expect("starts"));
        assert_eq!(normal.len(), 3);
        assert!(normal.iter().all(|p| *p != idle), "{normal:?}");
    }
}
