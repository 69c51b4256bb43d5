//! The worker process's main loop (`pipeline worker`): handshake, open the
//! device, load the model, then run spans as the coordinator sends them.
//!
//! Threads: one reads frames from stdin and feeds spans to the loader
//! through a bounded channel ([`SPAN_QUEUE_CAPACITY`]); the loader's rayon
//! pool decodes the current and next span; the calling thread runs the
//! device and is the only writer of stdout. Dropping the span sender (on
//! `Finish`) drains the loader and ends the loop; the end of stdin without
//! `Finish` means the coordinator died: the device loop stops at its next
//! batch and `main` exits with `WORKER_EXIT_ORPHANED`.
//!
//! SIGINT and SIGTERM are ignored ([`ignore_stop_signals`]): on `scancel`
//! or a Ctrl-C the coordinator decides what its workers finish, within its
//! grace period, and then kills them.

use std::collections::HashMap;

use std::io::{Read, Write};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Instant;

use crossbeam_channel::bounded;
use loader::{
    Batch, BatchStream, DecoderPriority, Loader, LoaderConfig, Ready, WorkGroup, WorkItem,
};
use pipeline_core::{
    FromWorker, ItemOutcome, PROTOCOL_VERSION, SpanTimes, ToWorker, WorkerConfig, read_frame,
    write_frame,
};

use crate::backoff::{BatchSizeChange, ItemResult, OomBackoff};
use engine_seam::{Engine, EngineError, InFlight, OpenError, PixelBatch};

/// Chunks a worker asks to have queued: one running, one being decoded.
pub const PREFETCH_SPANS: usize = 2;

/// Chunks between the stdin reader and the loader. The coordinator never
/// sends more than [`PREFETCH_SPANS`] ahead, so this never fills.
const SPAN_QUEUE_CAPACITY: usize = PREFETCH_SPANS + 2;

/// Why a worker stopped early.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The device ran out of memory beyond what backoff handles, or was
    /// lost; the process should exit with
    /// [`pipeline_core::WORKER_EXIT_DEVICE_LOST`].
    #[error("{0}")]
    DeviceLost(String),
    /// The coordinator's pipe broke or sent something unreadable.
    #[error("protocol: {0}")]
    Protocol(String),
    /// Setup or the device failed; the message was sent to the coordinator.
    #[error("{0}")]
    Failed(String),
    /// Stdin closed without `Finish`: the coordinator is gone and nobody
    /// reads the results; the process should exit with
    /// [`pipeline_core::WORKER_EXIT_ORPHANED`].
    #[error("the coordinator is gone (stdin closed)")]
    Orphaned,
}

/// Runs one worker over `input`/`output` (the process's stdin and stdout).
pub fn serve<R, W>(mut input: R, output: &mut W) -> Result<(), WorkerError>
where
    R: Read + Send + 'static,
    W: Write,
{
    let config = match read_frame::<_, ToWorker>(&mut input).map_err(protocol)? {
        Some(ToWorker::Hello { version, config }) if version == PROTOCOL_VERSION => *config,
        Some(ToWorker::Hello { version, .. }) => {
            let message = format!(
                "coordinator speaks protocol {version}, this worker {PROTOCOL_VERSION}; \
                 both must be the same build"
            );
            return fail(output, message);
        }
        Some(_) => return fail(output, "the first message was not a handshake".into()),
        None => {
            return Err(WorkerError::Protocol(
                "stdin closed before the handshake".into(),
            ));
        }
    };
    let (engine, loader, batch_size) = match setup(&config) {
        Ok(ready) => ready,
        Err(error) => return fail(output, error.to_string()),
    };
    write_frame(
        output,
        &FromWorker::Ready {
            version: PROTOCOL_VERSION,
            device: engine.device_name(),
            batch_size,
            prefetch: PREFETCH_SPANS,
        },
    )
    .map_err(protocol)?;

    let (span_tx, span_rx) = bounded::<WorkGroup>(SPAN_QUEUE_CAPACITY);
    let orphaned = Arc::new(AtomicBool::new(false));
    let reader_orphaned = Arc::clone(&orphaned);
    let reader = thread::Builder::new()
        .name("worker-stdin".into())
        .spawn(move || read_spans(input, &span_tx, &reader_orphaned))
        .map_err(|e| WorkerError::Failed(format!("cannot start the stdin thread: {e}")))?;
    let mut stream = loader
        .stream(span_rx)
        .map_err(|e| WorkerError::Failed(e.to_string()))?;

    let mut device = DeviceLoop {
        engine: engine.as_ref(),
        name: &config.name,
        backoff: OomBackoff::new(batch_size),
        overlap: true,
        outbox: Outbox {
            output,
            open_spans: HashMap::new(),
            retries_reported: pipeline_core::RemoteRetries::default(),
        },
    };
    let mut in_flight: Option<Launched<'_>> = None;
    loop {
        let mut wait_loader_s = 0.0;
        let next = match stream.ready() {
            Ready::Batch(batch) => Some(batch),
            Ready::End => None,
            Ready::NotYet => {
                // Nothing to overlap the pass in flight with: deliver it
                // rather than hold its results while the loader catches up.
                if let Some(launched) = in_flight.take() {
                    device.complete(launched, &stream)?;
                }
                let waiting = Instant::now();
                let next = stream.next();
                wait_loader_s = waiting.elapsed().as_secs_f64();
                next
            }
        };
        let Some(batch) = next else { break };
        if orphaned.load(Ordering::SeqCst) {
            return Err(WorkerError::Orphaned);
        }
        engine_seam::failpoints::device_lost_once()
            .map_err(|message| WorkerError::DeviceLost(format!("{}: {message}", config.name)))?;
        let times = SpanTimes {
            wait_loader_s,
            read_s: batch.read_s,
            decode_s: batch.decode_s,
            ..SpanTimes::default()
        };
        in_flight = device.launch(batch, times, in_flight, &stream)?;
    }
    if let Some(launched) = in_flight.take() {
        device.complete(launched, &stream)?;
    }
    stream
        .finish()
        .map_err(|e| WorkerError::Failed(e.to_string()))?;
    reader
        .join()
        .map_err(|p| WorkerError::Protocol(pipeline_core::panic_message(p.as_ref())))?
}

/// A batch whose pass [`Engine::launch`] queued.
struct Launched<'a> {
    batch: Batch,
    pass: InFlight<'a>,
    times: SpanTimes,
    /// When `launch` returned: when the pass ended, where it ran inside
    /// `launch` ([`engine_seam::PendingPass::ended_in_launch`]).
    launched_at: Instant,
}

/// The device thread's state: the engine, its batch size, whether passes
/// overlap, and where results go.
struct DeviceLoop<'a, W: Write> {
    engine: &'a dyn Engine,
    name: &'a str,
    backoff: OomBackoff,
    /// Launch the next pass before finishing the last (see
    /// [`Engine::launch`]). Turned off for the rest of the process by an
    /// out-of-memory at a launch beside another pass or at a finish. A
    /// batch larger than the backoff's size runs one pass at a time either
    /// way.
    overlap: bool,
    outbox: Outbox<'a, W>,
}

impl<'a, W: Write> DeviceLoop<'a, W> {
    /// Queues `batch`'s pass, then delivers the pass that was in flight
    /// before it; returns what is in flight now. A batch that cannot be
    /// launched in one pass runs through the backoff, one pass at a time.
    fn launch(
        &mut self,
        batch: Batch,
        mut times: SpanTimes,
        previous: Option<Launched<'a>>,
        stream: &BatchStream,
    ) -> Result<Option<Launched<'a>>, WorkerError> {
        let rows = batch.indices.len();
        let size = self.backoff.batch_size();
        let launched = (self.overlap && rows > 0 && rows <= size).then(|| {
            let started = Instant::now();
            let pixels = PixelBatch::new(
                &batch.pixels,
                rows,
                size,
                batch.side as usize,
                &batch.normalize,
            );
            let pass = self.engine.launch(&pixels, &mut times);
            times.infer_s += started.elapsed().as_secs_f64();
            pass.map(|pass| (pass, Instant::now()))
        });
        let had_previous = previous.is_some();
        if let Some(previous) = previous {
            self.complete(previous, stream)?;
        }
        match launched {
            Some(Ok((pass, launched_at))) => Ok(Some(Launched {
                batch,
                pass,
                times,
                launched_at,
            })),
            Some(Err(EngineError::OutOfMemory { .. })) => {
                self.overlap &= !had_previous;
                self.engine.release_cached_memory();
                self.run_one_by_one(batch, times, stream)?;
                Ok(None)
            }
            Some(Err(error)) => Err(self.fatal(error)),
            None => {
                self.run_one_by_one(batch, times, stream)?;
                Ok(None)
            }
        }
    }

    /// Waits for a launched pass and delivers its results. If the device
    /// ran out of memory, the batch runs again through the backoff.
    fn complete(
        &mut self,
        launched: Launched<'a>,
        stream: &BatchStream,
    ) -> Result<(), WorkerError> {
        let Launched {
            batch,
            pass,
            mut times,
            launched_at,
        } = launched;
        let ended_in_launch = pass.ended_in_launch();
        let started = Instant::now();
        let finished = pass.finish(&mut times);
        let returned = Instant::now();
        times.infer_s += (returned - started).as_secs_f64();
        // A pass that ran inside `launch` ended a whole pass ago (the next
        // one ran since); one that `finish` waited for ended just now.
        let ended = if ended_in_launch {
            launched_at
        } else {
            returned
        };
        match finished {
            Ok(predictions) => {
                let results = batch
                    .indices
                    .iter()
                    .copied()
                    .zip(predictions.into_iter().map(Ok))
                    .collect();
                self.outbox
                    .deliver(batch, results, times, Vec::new(), ended, stream)
            }
            Err(EngineError::OutOfMemory { .. }) => {
                self.overlap = false;
                self.engine.release_cached_memory();
                self.run_one_by_one(batch, times, stream)
            }
            Err(error) => Err(self.fatal(error)),
        }
    }

    /// Runs `batch` in passes of the backoff's size, each waited for.
    fn run_one_by_one(
        &mut self,
        batch: Batch,
        mut times: SpanTimes,
        stream: &BatchStream,
    ) -> Result<(), WorkerError> {
        let started = Instant::now();
        let mut changes = Vec::new();
        let results = self
            .backoff
            .run(self.engine, &batch, &mut times, &mut |change| {
                changes.push(change.clone())
            });
        let ended = Instant::now();
        times.infer_s += (ended - started).as_secs_f64();
        match results {
            Ok(results) => self
                .outbox
                .deliver(batch, results, times, changes, ended, stream),
            Err(error) => {
                self.outbox.batch_size_changes(changes)?;
                Err(self.fatal(error))
            }
        }
    }

    /// Tells the coordinator the device failed, and says how to exit.
    fn fatal(&mut self, error: EngineError) -> WorkerError {
        let message = format!("{}: {error}", self.name);
        let _ = fail(self.outbox.output, message.clone());
        if error.device_is_gone() {
            WorkerError::DeviceLost(message)
        } else {
            WorkerError::Failed(message)
        }
    }
}

/// Where results go: one frame per batch, and one per finished span.
struct Outbox<'a, W: Write> {
    output: &'a mut W,
    open_spans: HashMap<u64, (Vec<ItemOutcome>, SpanTimes)>,
    retries_reported: pipeline_core::RemoteRetries,
}

impl<W: Write> Outbox<'_, W> {
    /// Reports changes of the batch size.
    fn batch_size_changes(&mut self, changes: Vec<BatchSizeChange>) -> Result<(), WorkerError> {
        for change in changes {
            let frame = FromWorker::BatchSize {
                from: change.from,
                to: change.to,
                reason: change.reason,
            };
            write_frame(self.output, &frame).map_err(protocol)?;
        }
        Ok(())
    }

    /// Records `batch`'s results and the loader's failures in its span, and
    /// sends the span when it is complete, else a progress frame; either
    /// says how long ago `batch`'s pass `ended`.
    fn deliver(
        &mut self,
        batch: Batch,
        results: Vec<ItemResult>,
        times: SpanTimes,
        changes: Vec<BatchSizeChange>,
        ended: Instant,
        stream: &BatchStream,
    ) -> Result<(), WorkerError> {
        self.batch_size_changes(changes)?;
        let (outcomes, span_times) = self.open_spans.entry(batch.group).or_default();
        span_times.add(&times);
        let done = results.len() + batch.failures.len();
        outcomes.extend(
            results
                .into_iter()
                .map(|(index, result)| ItemOutcome { index, result }),
        );
        outcomes.extend(batch.failures.iter().map(|(index, error)| ItemOutcome {
            index: *index,
            result: Err(error.clone()),
        }));
        let (span, group_done) = (batch.group, batch.group_done);
        stream.recycle(batch);
        let message = if group_done {
            engine_seam::failpoints::crash_once();
            engine_seam::failpoints::hang_once();
            let (mut outcomes, mut times) = self.open_spans.remove(&span).unwrap_or_default();
            // The process's retries since the last span closed: exact in
            // total, approximate per span (fetching runs ahead).
            let retries = loader::remote::retry_counts();
            times.remote_retries = retries.since(&self.retries_reported);
            self.retries_reported = retries;
            outcomes.sort_unstable_by_key(|o| o.index);
            FromWorker::SpanDone {
                span,
                outcomes,
                times,
                held_s: ended.elapsed().as_secs_f64(),
            }
        } else {
            FromWorker::Progress {
                span,
                items: done as u64,
                held_s: ended.elapsed().as_secs_f64(),
            }
        };
        write_frame(self.output, &message).map_err(protocol)
    }
}

fn protocol(e: std::io::Error) -> WorkerError {
    WorkerError::Protocol(e.to_string())
}

/// Why a worker could not start. Its text is what the coordinator shows
/// (`FromWorker::Failed`), one line.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The engine did not open: its device, weights or classes.
    #[error(transparent)]
    Engine(#[from] OpenError),
    /// The loader's pool did not start.
    #[error(transparent)]
    Loader(#[from] loader::LoaderError),
    /// The `worker-setup` failpoint (test builds).
    #[error("{0}")]
    Injected(String),
    /// The configured engine does not run the model.
    #[error("{0}")]
    NoEngine(String),
}

fn setup(config: &WorkerConfig) -> Result<(Box<dyn Engine>, Loader, usize), SetupError> {
    let (engine, batch_size) = open_engine(config)?;
    // Beside a model on the same cores, decoders take only the cores it
    // leaves idle (BENCHMARKS.md, "End to end on the CPU against a script").
    let priority = if config.device.computes_on_host_cores() {
        DecoderPriority::Background
    } else {
        DecoderPriority::Normal
    };
    let loader = Loader::with_priority(
        LoaderConfig {
            threads: config.loader_threads.max(1),
            batch_size,
            spec: config.preprocess.clone(),
            limits: config.limits,
            remote: config.remote,
        },
        priority,
    )?;
    Ok((engine, loader, batch_size))
}

/// Opens the configured engine (one the registry row of the model lists,
/// `ModelSpec::engines`) on the configured device, and picks the starting
/// batch size: the user's, else the engine's for its device.
pub(crate) fn open_engine(config: &WorkerConfig) -> Result<(Box<dyn Engine>, usize), SetupError> {
    engine_seam::failpoints::setup_fails().map_err(SetupError::Injected)?;
    if !config.model.engines().contains(&config.engine) {
        return Err(SetupError::NoEngine(format!(
            "the {} engine does not run {}",
            config.engine.name(),
            config.model
        )));
    }
    let engine = crate::factory::open(config)?;
    let batch_size = config
        .batch_size
        .unwrap_or_else(|| engine.default_batch(&config.model));
    Ok((engine, batch_size))
}

/// Tells the coordinator why this worker stops. It reports the message;
/// only if it cannot be told does the message go to stderr here.
fn fail<W: Write>(output: &mut W, message: String) -> Result<(), WorkerError> {
    let frame = FromWorker::Failed {
        message: message.clone(),
    };
    if write_frame(output, &frame).is_err() {
        eprintln!("pipeline worker: {message}");
    }
    Err(WorkerError::Failed(message))
}

/// Makes SIGINT and SIGTERM harmless to this process (see the module doc).
pub fn ignore_stop_signals() -> std::io::Result<()> {
    let ignored = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, std::sync::Arc::clone(&ignored))?;
    }
    Ok(())
}

/// Feeds spans to the loader until `Finish`. If stdin ends without it
/// (the coordinator is gone, nobody reads the results), it raises
/// `orphaned`, which stops the device loop at its next batch, and returns
/// [`WorkerError::Orphaned`].
fn read_spans<R: Read>(
    mut input: R,
    spans: &crossbeam_channel::Sender<WorkGroup>,
    orphaned: &AtomicBool,
) -> Result<(), WorkerError> {
    loop {
        match read_frame::<_, ToWorker>(&mut input) {
            Ok(Some(ToWorker::Span { id, items })) => {
                engine_seam::failpoints::crash_on(&items);
                let items = items
                    .into_iter()
                    .map(|item| WorkItem {
                        index: item.index,
                        location: item.location,
                    })
                    .collect();
                if spans.send(WorkGroup { id, items }).is_err() {
                    return Ok(()); // the device loop ended first
                }
            }
            Ok(Some(ToWorker::Finish)) => return Ok(()),
            Ok(None) => {
                orphaned.store(true, Ordering::SeqCst);
                return Err(WorkerError::Orphaned);
            }
            Ok(Some(ToWorker::Hello { .. })) => {
                return Err(WorkerError::Protocol("a second handshake".into()));
            }
            Err(e) => return Err(WorkerError::Protocol(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use pipeline_core::{DecodeLimits, DeviceSpec, EngineKind, ModelKind, Precision, Task};

    use super::*;

    /// A worker told to run an engine its model's registry row does not
    /// list stops at setup with a one-line reason, whatever engine it is.
    #[test]
    fn an_engine_the_registry_does_not_list_is_refused_at_setup() {
        let config = WorkerConfig {
            name: "cpu#0".into(),
            device: DeviceSpec::Cpu,
            model: ModelKind::Tiny.into(),
            weights: None,
            resolved: Default::default(),
            seed: 0,
            task: Task::Embed,
            pooling: None,
            classes: None,
            precision: Precision::Auto,
            engine: EngineKind::Cuda,
            batch_size: Some(2),
            loader_threads: 1,
            preprocess: ModelKind::Tiny.default_preprocess(),
            limits: DecodeLimits::default(),
            remote: Default::default(),
            cuda_uuids: Default::default(),
            onnx_runtime: None,
        };
        let error = match open_engine(&config) {
            Ok(_) => panic!("tiny has no CUDA engine"),
            Err(e) => e.to_string(),
        };
        assert_eq!(error, "the cuda engine does not run tiny");
        let burn = WorkerConfig {
            engine: EngineKind::Burn,
            ..config
        };
        assert!(open_engine(&burn).is_ok(), "burn runs tiny");
    }
}
