//! `pipeline bench`: throughput you can prove.
//!
//! Each configuration runs the real pipeline — the coordinator, one worker
//! process per device, the loader, the device, part files — `--repeat`
//! times over `--data` or a generated dataset, and reports the median
//! steady-state rate (warm-up and run-out excluded, see
//! `coordinator::SteadyWindow`), its spread, the time per stage, the device
//! busy fraction, batch latency and the stage that limits the run.
//! `--model-only` measures the model alone on pre-made batches instead.
//!
//! Output: a Markdown table on stdout, `--json FILE`, `--plot FILE.svg`.

mod measure;
mod modes;
mod report;
mod sweep;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use coordinator::{OutputFormat, RunConfig, RunSummary, Stages};
use pipeline_core::{DeviceSpec, SpanTimes, WorkerConfig};
use rayon::prelude::*;
use serde::Serialize;

use crate::args::BenchArgs;
use crate::exit::Outcome;
use crate::plan::{
    check_parent, current_exe, data_spec, default_loader_threads, load_average, per_worker,
    plan_workers,
};
use crate::progress::Progress;

use self::measure::*;
use self::modes::*;
use self::report::*;
use self::sweep::*;

/// Batch size assumed for the default chunk size when `--batch-size auto`
/// (the CPU's default).
pub(super) const AUTO_BATCH_GUESS: u64 = 16;

/// Where the bench reads its images from.
pub(super) struct Dataset {
    /// Read once; every run of the bench reads the same list.
    pub(super) manifest: pipeline_core::Manifest,
    /// What end-to-end runs read.
    pub(super) spec: pipeline_core::DataSpec,
    pub(super) source: DatasetSource,
}

/// What the bench read, as the JSON report names it.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum DatasetSource {
    /// `--data`: a folder, manifest, shards or URL.
    Data(String),
    /// `--synthetic N` photo-like JPEGs.
    Synthetic {
        images: u64,
        width: u32,
        height: u32,
        jpeg_quality: u8,
    },
}

pub(crate) fn run(args: &BenchArgs) -> Outcome {
    match bench(args) {
        Ok(()) => Outcome::Success,
        Err(message) => Outcome::Failed(message),
    }
}

pub(super) fn bench(args: &BenchArgs) -> Result<(), String> {
    let axes = parse_sweep(&args.sweep)?;
    let size = parse_size(&args.size)?;
    let spec = args
        .data
        .as_deref()
        .map(|data| data_spec(data, &args.source))
        .transpose()?;
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
    let devices = &planned.devices;
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
            p.loader_threads = default_loader_threads(cores, devices.len() * p.workers, load);
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
        Some(dataset(
            args,
            spec.as_ref(),
            planned.worker.remote,
            size,
            scratch.path(),
        )?)
    };
    let mut results = Vec::new();
    for point in &points {
        let mut samples = Vec::new();
        for repeat in 0..args.repeat {
            let sample = match (mode, &dataset) {
                (Mode::ModelOnly, _) | (_, None) => {
                    model_only(&planned.worker, devices, point, args.batches as usize)?
                }
                (Mode::LoaderOnly, Some(data)) => loader_only(&planned.worker, point, data)?,
                (Mode::EndToEnd, Some(data)) => {
                    pipeline(args, &planned.worker, devices, point, data, scratch.path())?
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
            devices: devices.len(),
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
            devices,
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
pub(super) fn dataset(
    args: &BenchArgs,
    spec: Option<&pipeline_core::DataSpec>,
    remote: pipeline_core::RemoteSpec,
    (width, height): (u32, u32),
    scratch: &Path,
) -> Result<Dataset, String> {
    let open = |spec: &pipeline_core::DataSpec| {
        loader::source::open(spec, remote).map_err(|e| e.to_string())
    };
    if let Some(spec) = spec {
        return Ok(Dataset {
            manifest: open(spec)?,
            spec: spec.clone(),
            source: DatasetSource::Data(spec.data.clone()),
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
    let spec = pipeline_core::DataSpec::new(dir.to_string_lossy());
    Ok(Dataset {
        manifest: open(&spec)?,
        spec,
        source: DatasetSource::Synthetic {
            images: count,
            width,
            height,
            jpeg_quality: 90,
        },
    })
}
