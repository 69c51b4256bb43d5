//! The three things a bench run measures: the whole pipeline, the model
//! alone on pre-made batches, and the loader alone.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use coordinator::{OutputFormat, RunConfig, RunSummary, Stages};
use pipeline_core::{DeviceSpec, SpanTimes, WorkerConfig};

use super::dataset::Dataset;
use super::measure::{Sample, process_cpu_seconds};
use super::sweep::Point;
use crate::args::BenchArgs;
use crate::plan::{current_exe, per_worker};
use crate::progress::Progress;

/// Batch size assumed for the default chunk size when `--batch-size auto`
/// (the CPU's default).
pub(super) const AUTO_BATCH_GUESS: u64 = 16;

/// The worker configuration at `point`.
pub(super) fn worker_at(worker: &WorkerConfig, point: &Point) -> WorkerConfig {
    WorkerConfig {
        batch_size: point.batch,
        loader_threads: point.loader_threads,
        ..worker.clone()
    }
}

/// About 16 chunks per worker, within 1 batch and 256 images, and a whole
/// number of batches: batches never span chunks, so any other size would
/// run a padded, partly wasted batch at the end of every chunk.
pub(super) fn default_chunk(images: u64, workers: u64, batch: u64) -> u64 {
    let batch = batch.max(1);
    let wanted = (images / (16 * workers.max(1))).clamp(1, 256.max(batch));
    wanted.div_ceil(batch) * batch
}

/// One run of the whole pipeline.
pub(super) fn pipeline(
    args: &BenchArgs,
    worker: &WorkerConfig,
    devices: &[DeviceSpec],
    point: &Point,
    data: &Dataset,
    scratch: &Path,
) -> Result<Sample, String> {
    let worker_devices = per_worker(devices, point.workers);
    let images = data.manifest.entries.len() as u64;
    let batch = point.batch.map_or(AUTO_BATCH_GUESS, |b| b as u64);
    let chunk_size = args
        .chunk_size
        .unwrap_or_else(|| default_chunk(images, worker_devices.len() as u64, batch));
    let out = scratch.join("bench.jsonl");
    let config = RunConfig {
        existing: coordinator::Existing::Overwrite,
        ..RunConfig::new(
            data.spec.clone(),
            worker_devices,
            worker_at(worker, point),
            chunk_size,
            out.clone(),
            OutputFormat::Jsonl,
            current_exe()?,
        )
    };
    let started = Instant::now();
    let summary: RunSummary =
        coordinator::run(&config, Arc::new(Progress::new(true))).map_err(|e| e.to_string())?;
    // The run returns once its output is assembled: its last record written.
    let whole_s = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(coordinator::failures_path(&out));
    let peak_rss_bytes = summary.coordinator_peak_rss_bytes.map(|c| {
        c + summary
            .workers
            .iter()
            .filter_map(|w| w.peak_rss_bytes)
            .sum::<u64>()
    });
    Ok(Sample {
        images_per_s: summary
            .steady
            .map_or(summary.times.images_per_s, |w| w.images_per_s),
        steady: summary.steady.is_some(),
        whole_images_per_s: summary.times.images_computed as f64 / whole_s.max(1e-9),
        images: summary.records.images,
        batch_size: summary.workers.first().map_or(0, |w| w.batch_size),
        stages: summary.stages,
        latencies_s: summary.batch_latencies_s,
        peak_rss_bytes,
        cpu_s: None,
    })
}

/// One run of the model alone on every worker's device at once (threads of
/// this process, one engine each).
pub(super) fn model_only(
    worker: &WorkerConfig,
    devices: &[DeviceSpec],
    point: &Point,
    batches: usize,
) -> Result<Sample, String> {
    let configs: Vec<WorkerConfig> = per_worker(devices, point.workers)
        .into_iter()
        .enumerate()
        .map(|(i, device)| WorkerConfig {
            name: format!("{device}#{i}"),
            device,
            ..worker_at(worker, point)
        })
        .collect();
    let started = Instant::now();
    let runs: Vec<Result<gpu_worker::ModelOnlyRun, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = configs
            .iter()
            .map(|c| scope.spawn(move || gpu_worker::model_only(c, batches)))
            .collect();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(run) => run.map_err(|e| e.to_string()),
                Err(_) => Err("the model panicked".to_owned()),
            })
            .collect()
    });
    let whole_s = started.elapsed().as_secs_f64();
    let runs = runs.into_iter().collect::<Result<Vec<_>, _>>()?;
    let mut times = SpanTimes::default();
    for run in &runs {
        times.add(&run.times);
    }
    Ok(Sample {
        images_per_s: runs.iter().map(|r| r.images_per_s).sum(),
        steady: true,
        // Opening the model and its warm-up pass included.
        whole_images_per_s: runs.iter().map(|r| r.images).sum::<u64>() as f64 / whole_s.max(1e-9),
        images: runs.iter().map(|r| r.images).sum(),
        batch_size: runs.first().map_or(0, |r| r.batch_size),
        stages: Stages::from_worker(&times),
        latencies_s: std::mem::take(&mut times.batch_s),
        peak_rss_bytes: None,
        cpu_s: None,
    })
}

/// One pass of the loader alone over the dataset: read, decode and
/// preprocess into batches, which are dropped. Compare with Pillow on the
/// same files (`scripts/bench_pillow_loader.py --files`).
pub(super) fn loader_only(
    worker: &WorkerConfig,
    point: &Point,
    data: &Dataset,
) -> Result<Sample, String> {
    let manifest = &data.manifest;
    let items: Vec<loader::WorkItem> = manifest
        .entries
        .iter()
        .map(|e| loader::WorkItem {
            index: e.index,
            location: e.location.clone(),
        })
        .collect();
    let batch_size = point.batch.unwrap_or(AUTO_BATCH_GUESS as usize);
    let opened = Instant::now();
    let loader = loader::Loader::new(loader::LoaderConfig {
        threads: point.loader_threads,
        batch_size,
        spec: worker.preprocess.clone(),
        limits: worker.limits,
        remote: worker.remote,
    })
    .map_err(|e| e.to_string())?;
    let cpu_before = process_cpu_seconds();
    let started = Instant::now();
    let mut stream = loader.load_all(items).map_err(|e| e.to_string())?;
    let mut times = SpanTimes::default();
    let mut images = 0;
    while let Some(batch) = stream.next() {
        times.read_s += batch.read_s;
        times.decode_s += batch.decode_s;
        images += batch.item_count() as u64;
        stream.recycle(batch);
    }
    stream.finish().map_err(|e| e.to_string())?;
    let wall = started.elapsed().as_secs_f64();
    Ok(Sample {
        images_per_s: images as f64 / wall.max(1e-9),
        steady: true,
        whole_images_per_s: images as f64 / opened.elapsed().as_secs_f64().max(1e-9),
        images,
        batch_size,
        stages: Stages::from_worker(&times),
        latencies_s: Vec::new(),
        peak_rss_bytes: None,
        cpu_s: process_cpu_seconds()
            .zip(cpu_before)
            .map(|(after, before)| after - before),
    })
}
