//! `pipeline bench`: throughput you can prove.
//!
//! Each configuration runs the real pipeline — the coordinator, one worker
//! process per device slot, the loader, the device, part files — `--repeat`
//! times over `--data` or a generated dataset, and reports the median
//! steady-state rate (warm-up and run-out excluded, see
//! `coordinator::SteadyWindow`), its spread, the time per stage, the device
//! busy fraction, batch latency and the stage that limits the run.
//! `--model-only` measures the model alone on pre-made batches instead.
//!
//! Output: a Markdown table on stdout, `--json FILE`, `--plot FILE.svg`.

use std::path::Path;
use std::time::{Duration, Instant};

use coordinator::{OutputFormat, RunConfig, RunSummary, Stages};
use pipeline_core::{ChunkTimes, DeviceSpec, Shard, WorkerConfig};
use rayon::prelude::*;
use serde::Serialize;
use serde_json::json;

use crate::args::BenchArgs;
use crate::exit::Outcome;
use crate::infer::{
    MAX_RESTARTS, check_data, check_parent, current_exe, default_loader_threads, load_average,
    per_worker, plan_workers,
};

/// Batch size assumed for the default chunk size when `--batch-size auto`
/// (the CPU's default).
const AUTO_BATCH_GUESS: u64 = 16;

/// What a bench run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The whole pipeline, processes and all.
    EndToEnd,
    /// The model on pre-made batches (`--model-only`).
    ModelOnly,
    /// The loader alone: read, decode, preprocess (`--loader-only`).
    LoaderOnly,
}

impl Mode {
    fn of(args: &BenchArgs) -> Self {
        if args.model_only {
            Mode::ModelOnly
        } else if args.loader_only {
            Mode::LoaderOnly
        } else {
            Mode::EndToEnd
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::EndToEnd => "end_to_end",
            Mode::ModelOnly => "model_only",
            Mode::LoaderOnly => "loader_only",
        }
    }

    fn loads(self) -> bool {
        self != Mode::ModelOnly
    }

    fn computes(self) -> bool {
        self != Mode::LoaderOnly
    }
}

/// One configuration to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
struct Point {
    /// `None`: the worker's own choice (`auto`).
    batch: Option<usize>,
    /// Workers per device.
    workers: usize,
    /// Decoder threads per worker.
    loader_threads: usize,
}

impl Point {
    fn label(&self) -> String {
        let batch = self.batch.map_or("auto".to_owned(), |b| b.to_string());
        format!(
            "batch {batch}, {} worker{}/device, {} loader thread{}",
            self.workers,
            plural(self.workers),
            self.loader_threads,
            plural(self.loader_threads)
        )
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// A sweep axis and its values (`batch=8,32,128`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Axis {
    Batch(Vec<usize>),
    Workers(Vec<usize>),
    LoaderThreads(Vec<usize>),
}

fn parse_sweep(specs: &[String]) -> Result<Vec<Axis>, String> {
    let mut axes: Vec<Axis> = Vec::new();
    for spec in specs {
        let bad = |why: &str| format!("--sweep {spec}: {why}");
        let (key, values) = spec
            .split_once('=')
            .ok_or_else(|| bad("expected KEY=V,V,… (batch, workers, loader-threads)"))?;
        let values = values
            .split(',')
            .map(|v| match v.trim().parse::<usize>() {
                Ok(n) if (1..=4096).contains(&n) => Ok(n),
                _ => Err(bad(&format!("{v:?} is not a number in 1..=4096"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let axis = match key.trim() {
            "batch" | "batch-size" => Axis::Batch(values),
            "workers" | "workers-per-gpu" => Axis::Workers(values),
            "loader-threads" => Axis::LoaderThreads(values),
            other => {
                return Err(bad(&format!(
                    "unknown key {other:?}; expected batch, workers or loader-threads"
                )));
            }
        };
        if axes
            .iter()
            .any(|a| std::mem::discriminant(a) == std::mem::discriminant(&axis))
        {
            return Err(bad("this key is swept twice"));
        }
        axes.push(axis);
    }
    Ok(axes)
}

/// Every combination of the axes, the base point filling the rest, in the
/// order the axes were given (the last varies fastest).
fn points(base: Point, axes: &[Axis]) -> Vec<Point> {
    let mut points = vec![base];
    for axis in axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                let values = match axis {
                    Axis::Batch(v) | Axis::Workers(v) | Axis::LoaderThreads(v) => v.clone(),
                };
                values.into_iter().map(move |v| match axis {
                    Axis::Batch(_) => Point {
                        batch: Some(v),
                        ..p
                    },
                    Axis::Workers(_) => Point { workers: v, ..p },
                    Axis::LoaderThreads(_) => Point {
                        loader_threads: v,
                        ..p
                    },
                })
            })
            .collect();
    }
    points
}

/// `500x375` → (500, 375).
fn parse_size(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("--size {text}: expected WIDTHxHEIGHT, each 8..=16384");
    let (w, h) = text.split_once(['x', 'X']).ok_or_else(bad)?;
    let side = |s: &str| {
        s.trim()
            .parse::<u32>()
            .ok()
            .filter(|n| (8..=16384).contains(n))
    };
    Ok((side(w).ok_or_else(bad)?, side(h).ok_or_else(bad)?))
}

/// One measured run.
#[derive(Debug, Clone)]
struct Sample {
    images_per_s: f64,
    /// Whether the rate is the steady window's (else the whole run's).
    steady: bool,
    images: u64,
    batch_size: usize,
    stages: Stages,
    latencies_s: Vec<f64>,
    peak_rss_bytes: Option<u64>,
    /// CPU seconds this process used (`--loader-only`: decoders may start
    /// threads of their own, so thread counts alone do not say "per core").
    cpu_s: Option<f64>,
}

/// Everything measured at one point.
#[derive(Debug, Clone)]
struct Measured {
    point: Point,
    devices: usize,
    samples: Vec<Sample>,
}

impl Measured {
    fn rates(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.images_per_s).collect()
    }

    fn median(&self) -> f64 {
        median(&self.rates())
    }

    /// The repeat whose rate is the median's (or nearest to it): its stages
    /// are the ones reported.
    fn typical(&self) -> &Sample {
        let m = self.median();
        self.samples
            .iter()
            .min_by(|a, b| {
                (a.images_per_s - m)
                    .abs()
                    .total_cmp(&(b.images_per_s - m).abs())
            })
            .expect("at least one repeat")
    }

    /// Images per CPU-second over all repeats, where CPU time was measured.
    fn per_cpu_second(&self) -> Option<f64> {
        let cpu: Option<f64> = self.samples.iter().map(|s| s.cpu_s).sum();
        let images: u64 = self.samples.iter().map(|s| s.images).sum();
        cpu.filter(|&c| c > 0.0).map(|c| images as f64 / c)
    }

    fn workers_total(&self) -> usize {
        self.devices * self.point.workers
    }

    fn latencies(&self) -> Vec<f64> {
        let mut all: Vec<f64> = self
            .samples
            .iter()
            .flat_map(|s| s.latencies_s.iter().copied())
            .collect();
        all.sort_by(f64::total_cmp);
        all
    }

    /// Per stage: busy seconds and the images/s that stage alone could
    /// sustain with the threads it has.
    fn stage_rows(&self, mode: Mode) -> Vec<StageRow> {
        let s = self.typical();
        let images = s.images as f64;
        let workers = self.workers_total() as f64;
        let loader = workers * self.point.loader_threads as f64;
        let row = |stage, busy_s: f64, parallel: f64| StageRow {
            stage,
            busy_s,
            images_per_s: (busy_s > 0.0).then(|| images * parallel / busy_s),
        };
        let mut rows = Vec::new();
        if mode.loads() {
            rows.push(row("read", s.stages.read_s, loader));
            rows.push(row("decode+preprocess", s.stages.decode_s, loader));
        }
        if mode.computes() {
            rows.push(row("upload", s.stages.upload_s, workers));
            rows.push(row("compute", s.stages.compute_s, workers));
            rows.push(row("read-back", s.stages.readback_s, workers));
        }
        if mode == Mode::EndToEnd {
            rows.push(row("write", s.stages.write_s, 1.0));
        }
        rows
    }

    /// The stage group with the lowest capacity — the loader's threads
    /// (read and decode share them), the device (upload, compute and
    /// read-back run one after another), or the coordinator's writes —
    /// named by its largest stage.
    fn limiting_stage(&self, mode: Mode) -> String {
        let rows = self.stage_rows(mode);
        let find = |name: &str| rows.iter().find(|r| r.stage == name);
        let group = |names: &[&str]| -> Option<(f64, &'static str)> {
            let members: Vec<&StageRow> = names.iter().filter_map(|n| find(n)).collect();
            let capacity = 1.0
                / members
                    .iter()
                    .map(|r| r.images_per_s.map_or(0.0, |c| 1.0 / c))
                    .sum::<f64>();
            let largest = members
                .iter()
                .max_by(|a, b| a.busy_s.total_cmp(&b.busy_s))?;
            capacity.is_finite().then_some((capacity, largest.stage))
        };
        [
            group(&["read", "decode+preprocess"]),
            group(&["upload", "compute", "read-back"]),
            group(&["write"]),
        ]
        .into_iter()
        .flatten()
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map_or_else(|| "unknown".to_owned(), |(_, stage)| stage.to_owned())
    }

    fn json(&self, mode: Mode) -> serde_json::Value {
        let rates = self.rates();
        let latencies = self.latencies();
        let typical = self.typical();
        json!({
            "batch": typical.batch_size,
            "batch_flag": self.point.batch,
            "workers_per_device": self.point.workers,
            "workers": self.workers_total(),
            "loader_threads": self.point.loader_threads,
            "images_per_s": self.median(),
            "repeats": rates,
            "spread": {
                "min": rates.iter().copied().fold(f64::INFINITY, f64::min),
                "max": rates.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            },
            "steady": self.samples.iter().all(|s| s.steady),
            "images_per_repeat": typical.images,
            "stages": self.stage_rows(mode),
            "device_busy_fraction": (mode == Mode::EndToEnd)
                .then(|| typical.stages.device_busy_fraction())
                .flatten(),
            "batch_latency_ms": {
                "p50": percentile(&latencies, 0.50).map(|s| s * 1e3),
                "p99": percentile(&latencies, 0.99).map(|s| s * 1e3),
                "batches": latencies.len(),
            },
            "limiting_stage": self.limiting_stage(mode),
            "peak_rss_bytes": typical.peak_rss_bytes,
            "images_per_cpu_s": self.per_cpu_second(),
        })
    }
}

#[derive(Debug, Clone, Serialize)]
struct StageRow {
    stage: &'static str,
    busy_s: f64,
    images_per_s: Option<f64>,
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Where the bench reads its images from.
struct Dataset {
    /// Scanned once; every run of the bench reads the same list.
    manifest: pipeline_core::Manifest,
    describe: serde_json::Value,
}

pub(crate) fn run(args: &BenchArgs) -> Outcome {
    match bench(args) {
        Ok(()) => Outcome::Success,
        Err(message) => Outcome::Failed(message),
    }
}

fn bench(args: &BenchArgs) -> Result<(), String> {
    let axes = parse_sweep(&args.sweep)?;
    let size = parse_size(&args.size)?;
    if let Some(dir) = &args.data {
        check_data(dir)?;
    }
    for (flag, path) in [("--json", &args.json), ("--plot", &args.plot)] {
        if let Some(path) = path {
            check_parent(flag, path)?;
        }
    }
    let planned = plan_workers(&args.run)?;
    if !args.quiet {
        for notice in planned.notices.iter().filter(|n| !n.is_empty()) {
            eprintln!("{notice}");
        }
    }
    let slots = &planned.slots;
    let base = Point {
        batch: planned.worker.batch_size,
        workers: args.run.workers_per_gpu as usize,
        loader_threads: planned.worker.loader_threads,
    };
    let mut points = points(base, &axes);
    let threads_fixed = args.run.loader_threads.is_some()
        || axes.iter().any(|a| matches!(a, Axis::LoaderThreads(_)));
    if !threads_fixed {
        // The default follows the worker count, as `infer`'s does.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let load = load_average();
        for p in &mut points {
            p.loader_threads = default_loader_threads(cores, slots.len() * p.workers, load);
        }
    }
    let scratch = tempfile::Builder::new()
        .prefix("pipeline-bench-")
        .tempdir()
        .map_err(|e| format!("cannot make a temporary folder: {e}"))?;
    let mode = Mode::of(args);
    let dataset = if mode == Mode::ModelOnly {
        None
    } else {
        Some(dataset(args, size, scratch.path())?)
    };
    let mut results = Vec::new();
    for point in &points {
        let mut samples = Vec::new();
        for repeat in 0..args.repeat {
            let sample = match (mode, &dataset) {
                (Mode::ModelOnly, _) | (_, None) => {
                    model_only(&planned.worker, slots, point, args.batches as usize)?
                }
                (Mode::LoaderOnly, Some(data)) => loader_only(&planned.worker, point, data)?,
                (Mode::EndToEnd, Some(data)) => {
                    pipeline(args, &planned.worker, slots, point, data, scratch.path())?
                }
            };
            if !args.quiet {
                eprintln!(
                    "pipeline bench: {}: run {}/{}: {:.2} images/s{}",
                    point.label(),
                    repeat + 1,
                    args.repeat,
                    sample.images_per_s,
                    if sample.steady {
                        ""
                    } else {
                        " (whole run: too short for a steady window)"
                    }
                );
            }
            samples.push(sample);
        }
        results.push(Measured {
            point: *point,
            devices: slots.len(),
            samples,
        });
    }
    let best = results
        .iter()
        .max_by(|a, b| a.median().total_cmp(&b.median()))
        .expect("at least one point");
    print!("{}", table(&results, best, args));
    if let Some(path) = &args.json {
        let report = report_json(
            &results,
            best,
            args,
            &planned.worker,
            slots,
            dataset.as_ref(),
        );
        let bytes = serde_json::to_vec_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(path, bytes).map_err(|e| format!("--json {}: {e}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        plot(&results, path, &planned.worker)
            .map_err(|e| format!("--plot {}: {e}", path.display()))?;
    }
    Ok(())
}

/// `--data`, or `--synthetic N` photo-like JPEGs written under `scratch`.
fn dataset(
    args: &BenchArgs,
    (width, height): (u32, u32),
    scratch: &Path,
) -> Result<Dataset, String> {
    let scan = |dir: &Path| pipeline_core::Manifest::scan(dir).map_err(|e| e.to_string());
    if let Some(dir) = &args.data {
        return Ok(Dataset {
            manifest: scan(dir)?,
            describe: json!({ "data": dir }),
        });
    }
    let count = args.synthetic.unwrap_or(0);
    let dir = scratch.join("synthetic");
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !args.quiet {
        eprintln!(
            "pipeline bench: writing {count} synthetic {width}x{height} JPEGs to {}",
            dir.display()
        );
    }
    (0..count).into_par_iter().try_for_each(|i| {
        let bytes = loader::synthetic::jpeg_photo(width, height, i, 90)
            .map_err(|e| format!("cannot make a synthetic JPEG: {e}"))?;
        let path = dir.join(format!("{i:08}.jpg"));
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))
    })?;
    Ok(Dataset {
        manifest: scan(&dir)?,
        describe: json!({
            "synthetic": { "images": count, "width": width, "height": height, "jpeg_quality": 90 },
        }),
    })
}

/// The worker configuration at `point`.
fn worker_at(worker: &WorkerConfig, point: &Point) -> WorkerConfig {
    WorkerConfig {
        batch_size: point.batch,
        loader_threads: point.loader_threads,
        ..worker.clone()
    }
}

/// About 16 chunks per worker, within 1 batch and 256 images, and a whole
/// number of batches: batches never span chunks, so any other size would
/// run a padded, partly wasted batch at the end of every chunk.
fn default_chunk(images: u64, workers: u64, batch: u64) -> u64 {
    let batch = batch.max(1);
    let wanted = (images / (16 * workers.max(1))).clamp(1, 256.max(batch));
    wanted.div_ceil(batch) * batch
}

/// One run of the whole pipeline.
fn pipeline(
    args: &BenchArgs,
    worker: &WorkerConfig,
    slots: &[DeviceSpec],
    point: &Point,
    data: &Dataset,
    scratch: &Path,
) -> Result<Sample, String> {
    let devices = per_worker(slots, point.workers);
    let images = data.manifest.entries.len() as u64;
    let batch = point.batch.map_or(AUTO_BATCH_GUESS, |b| b as u64);
    let chunk_size = args
        .chunk_size
        .unwrap_or_else(|| default_chunk(images, devices.len() as u64, batch));
    let out = scratch.join("bench.jsonl");
    let config = RunConfig {
        data: data.manifest.root.clone(),
        devices,
        worker: worker_at(worker, point),
        chunk_size,
        out: out.clone(),
        format: OutputFormat::Jsonl,
        feature_dim: worker.model.embedding_dim(worker.pooling),
        exe: current_exe()?,
        max_restarts: MAX_RESTARTS,
        hang_timeout: None,
        grace: Duration::from_secs(20),
        overwrite: true,
        resume: false,
        shard: Shard::ALL,
        shard_source: None,
        merge: false,
        quiet: true,
    };
    let summary: RunSummary = coordinator::run(&config).map_err(|e| e.to_string())?;
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
            .map_or(summary.images_per_s, |w| w.images_per_s),
        steady: summary.steady.is_some(),
        images: summary.images,
        batch_size: summary.workers.first().map_or(0, |w| w.batch_size),
        stages: summary.stages,
        latencies_s: summary.batch_latencies_s,
        peak_rss_bytes,
        cpu_s: None,
    })
}

/// One run of the model alone on every worker slot at once (threads of
/// this process, one engine each).
fn model_only(
    worker: &WorkerConfig,
    slots: &[DeviceSpec],
    point: &Point,
    batches: usize,
) -> Result<Sample, String> {
    let configs: Vec<WorkerConfig> = per_worker(slots, point.workers)
        .into_iter()
        .enumerate()
        .map(|(i, device)| WorkerConfig {
            name: format!("{device}#{i}"),
            device,
            ..worker_at(worker, point)
        })
        .collect();
    let runs: Vec<Result<gpu_worker::ModelOnlyRun, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = configs
            .iter()
            .map(|c| scope.spawn(move || gpu_worker::model_only(c, batches)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("the model panicked".into()))
            })
            .collect()
    });
    let runs = runs.into_iter().collect::<Result<Vec<_>, _>>()?;
    let mut times = ChunkTimes::default();
    for run in &runs {
        times.add(&run.times);
    }
    Ok(Sample {
        images_per_s: runs.iter().map(|r| r.images_per_s).sum(),
        steady: true,
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
fn loader_only(worker: &WorkerConfig, point: &Point, data: &Dataset) -> Result<Sample, String> {
    let manifest = &data.manifest;
    let items: Vec<loader::WorkItem> = manifest
        .entries
        .iter()
        .map(|e| loader::WorkItem {
            index: e.index,
            path: manifest.root.join(&e.relative),
        })
        .collect();
    let batch_size = point.batch.unwrap_or(AUTO_BATCH_GUESS as usize);
    let loader = loader::Loader::new(loader::LoaderConfig {
        threads: point.loader_threads,
        batch_size,
        spec: worker.preprocess.clone(),
        limits: worker.limits,
    })
    .map_err(|e| e.to_string())?;
    let cpu_before = process_cpu_seconds();
    let started = Instant::now();
    let mut stream = loader.load_all(items).map_err(|e| e.to_string())?;
    let mut times = ChunkTimes::default();
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

/// User + system CPU seconds of this process, all threads (Linux
/// `/proc/self/stat`, in the kernel's fixed 100 Hz user ticks).
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which ends at the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some((ticks(11)? + ticks(12)?) as f64 / 100.0)
}

fn table(results: &[Measured], best: &Measured, args: &BenchArgs) -> String {
    let mode = Mode::of(args);
    let mut out = String::new();
    let what = mode.name().replace('_', " ");
    out.push_str(&format!(
        "| batch | workers | loader threads | images/s ({what}, median of {}) | min | max | device busy | p50 batch ms | p99 batch ms | limiting stage |\n",
        args.repeat
    ));
    out.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for m in results {
        let rates = m.rates();
        let lat = m.latencies();
        let ms = |p| percentile(&lat, p).map_or("–".to_owned(), |s| format!("{:.1}", s * 1e3));
        let busy = if mode != Mode::EndToEnd {
            "–".to_owned()
        } else {
            m.typical()
                .stages
                .device_busy_fraction()
                .map_or("–".to_owned(), |f| format!("{:.0}%", f * 100.0))
        };
        out.push_str(&format!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {busy} | {} | {} | {} |\n",
            m.typical().batch_size,
            m.workers_total(),
            if !mode.loads() {
                "–".to_owned()
            } else {
                m.point.loader_threads.to_string()
            },
            m.median(),
            rates.iter().copied().fold(f64::INFINITY, f64::min),
            rates.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ms(0.50),
            ms(0.99),
            m.limiting_stage(mode),
        ));
    }
    out.push_str(&format!(
        "\nStages of the fastest ({}), its median repeat:\n\n| stage | busy s | images/s it alone could sustain |\n|---|---|---|\n",
        best.point.label()
    ));
    for row in best.stage_rows(mode) {
        out.push_str(&format!(
            "| {} | {:.3} | {} |\n",
            row.stage,
            row.busy_s,
            row.images_per_s
                .map_or("–".to_owned(), |r| format!("{r:.1}"))
        ));
    }
    if let Some(rate) = best.per_cpu_second() {
        out.push_str(&format!(
            "\n{rate:.2} images per CPU-second (all threads of this process, decoders' own included)\n"
        ));
    }
    out
}

fn report_json(
    results: &[Measured],
    best: &Measured,
    args: &BenchArgs,
    worker: &WorkerConfig,
    slots: &[DeviceSpec],
    dataset: Option<&Dataset>,
) -> serde_json::Value {
    let mode = Mode::of(args);
    let best_json = best.json(mode);
    json!({
        "images_per_s": best.median(),
        "stages": best_json["stages"],
        "device_busy_fraction": best_json["device_busy_fraction"],
        "batch_latency_ms": best_json["batch_latency_ms"],
        "limiting_stage": best_json["limiting_stage"],
        "best": best_json,
        "sweep": results.iter().map(|m| m.json(mode)).collect::<Vec<_>>(),
        "mode": mode.name(),
        "config": {
            "model": worker.model.name(),
            "weights": worker.weights,
            "task": worker.task,
            "preprocess": worker.preprocess,
            "devices": slots.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "repeat": args.repeat,
            "dataset": dataset.map(|d| d.describe.clone()),
            "model_only_batches": args.model_only.then_some(args.batches),
        },
        "machine": {
            "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
            "pipeline": env!("CARGO_PKG_VERSION"),
        },
    })
}

/// Images/s across the sweep: one line per (workers, loader threads), batch
/// size along the x axis.
fn plot(results: &[Measured], path: &Path, worker: &WorkerConfig) -> Result<(), String> {
    use plotters::prelude::*;

    let batches: Vec<usize> = {
        let mut b: Vec<usize> = results.iter().map(|m| m.typical().batch_size).collect();
        b.sort_unstable();
        b.dedup();
        b
    };
    let mut lines: Vec<(usize, usize)> = results
        .iter()
        .map(|m| (m.workers_total(), m.point.loader_threads))
        .collect();
    lines.sort_unstable();
    lines.dedup();
    let top = results
        .iter()
        .flat_map(|m| m.rates())
        .fold(0.0f64, f64::max)
        * 1.15;
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let last = batches.len().saturating_sub(1).max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("pipeline bench: {} images/s", worker.model.name()),
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.25f64..last + 0.25, 0f64..top.max(1e-3))
        .map_err(err)?;
    let batch_at = |x: f64| batches.get(x.round().max(0.0) as usize).copied();
    chart
        .configure_mesh()
        .x_desc("batch size")
        .y_desc("images/s (median)")
        .x_labels(batches.len().max(2))
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-6 {
                batch_at(*x).map_or(String::new(), |b| b.to_string())
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(err)?;
    for (i, &(workers, threads)) in lines.iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        let mut series: Vec<(f64, f64)> = results
            .iter()
            .filter(|m| (m.workers_total(), m.point.loader_threads) == (workers, threads))
            .filter_map(|m| {
                let x = batches.iter().position(|&b| b == m.typical().batch_size)?;
                Some((x as f64, m.median()))
            })
            .collect();
        series.sort_by(|a, b| a.0.total_cmp(&b.0));
        let label = format!(
            "{workers} worker{}, {threads} loader thread{}",
            plural(workers),
            plural(threads)
        );
        chart
            .draw_series(LineSeries::new(series.clone(), colour.stroke_width(2)))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour));
        chart
            .draw_series(
                series
                    .into_iter()
                    .map(|p| Circle::new(p, 4, colour.filled())),
            )
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_is_every_combination_last_axis_fastest() {
        let axes = parse_sweep(&["batch=8,32".into(), "workers=1,2".into()]).expect("valid");
        let base = Point {
            batch: None,
            workers: 1,
            loader_threads: 2,
        };
        let got: Vec<(Option<usize>, usize)> = points(base, &axes)
            .iter()
            .map(|p| (p.batch, p.workers))
            .collect();
        assert_eq!(
            got,
            vec![(Some(8), 1), (Some(8), 2), (Some(32), 1), (Some(32), 2)]
        );
        assert_eq!(points(base, &[]), vec![base]);
    }

    #[test]
    fn bad_sweeps_say_what_is_wrong() {
        for (spec, needle) in [
            ("batch", "KEY=V"),
            ("batch=0", "not a number"),
            ("batch=8,x", "not a number"),
            ("colour=1", "unknown key"),
        ] {
            let e = parse_sweep(&[spec.into()]).expect_err(spec);
            assert!(
                e.contains(needle) && e.starts_with("--sweep"),
                "{spec}: {e}"
            );
        }
        let twice = parse_sweep(&["batch=1".into(), "batch-size=2".into()]);
        assert!(twice.expect_err("twice").contains("twice"));
    }

    #[test]
    fn default_chunks_are_whole_batches() {
        assert_eq!(default_chunk(200, 1, 8), 16); // 12 → 16
        assert_eq!(default_chunk(100_000, 1, 16), 256);
        assert_eq!(default_chunk(100_000, 1, 96), 288); // 256 → 3 batches
        assert_eq!(default_chunk(10, 4, 8), 8);
        assert_eq!(default_chunk(10_000, 2, 512), 512);
    }

    #[test]
    fn sizes_parse_and_refuse() {
        assert_eq!(parse_size("500x375"), Ok((500, 375)));
        assert_eq!(parse_size("4032X3024"), Ok((4032, 3024)));
        for bad in ["500", "0x10", "axb", "20000x10"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn median_and_nearest_rank_percentiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&sorted, 0.5), Some(50.0));
        assert_eq!(percentile(&sorted, 0.99), Some(99.0));
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    fn measured(stages: Stages, loader_threads: usize) -> Measured {
        Measured {
            point: Point {
                batch: Some(8),
                workers: 1,
                loader_threads,
            },
            devices: 1,
            samples: vec![Sample {
                images_per_s: 10.0,
                steady: true,
                images: 100,
                batch_size: 8,
                stages,
                latencies_s: vec![0.1; 13],
                peak_rss_bytes: None,
                cpu_s: None,
            }],
        }
    }

    #[test]
    fn the_limiting_stage_is_the_group_with_the_least_capacity() {
        // Device: 10 s of compute for 100 images → 10 images/s. Loader:
        // 8 thread-seconds of decoding over 2 threads → 25 images/s.
        let compute_bound = Stages {
            read_s: 0.5,
            decode_s: 7.5,
            upload_s: 0.5,
            compute_s: 9.0,
            readback_s: 0.5,
            write_s: 0.1,
            ..Stages::default()
        };
        let m = measured(compute_bound.clone(), 2);
        assert_eq!(m.limiting_stage(Mode::EndToEnd), "compute");
        let rows = m.stage_rows(Mode::EndToEnd);
        let decode = rows
            .iter()
            .find(|r| r.stage == "decode+preprocess")
            .expect("row");
        assert!((decode.images_per_s.expect("rate") - 100.0 * 2.0 / 7.5).abs() < 1e-9);
        // 30 thread-seconds of decoding on one thread: 3.3 images/s, below
        // the device's 10.
        let decode_bound = Stages {
            decode_s: 30.0,
            ..compute_bound
        };
        assert_eq!(
            measured(decode_bound, 1).limiting_stage(Mode::EndToEnd),
            "decode+preprocess"
        );
    }
}
