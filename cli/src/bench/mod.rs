//! `pipeline bench`: throughput you can prove.
//!
//! Each configuration runs the real pipeline — the coordinator, one worker
//! process per device, the loader, the device, part files — `--repeat`
//! times over `--data` or a generated dataset, and reports the median
//! steady-state rate (warm-up and run-out excluded, see
//! `coordinator::SteadyWindow`) beside the whole run's (start to last
//! record), its spread, the time per stage, the device busy fraction,
//! batch latency and the stage that limits the run; a steady rate above
//! what the devices' passes sustain is flagged.
//! `--model-only` measures the model alone on pre-made batches instead.
//!
//! Output: a Markdown table on stdout, `--json FILE`, `--plot FILE.svg`.

mod dataset;
mod measure;
mod modes;
mod report;
mod sweep;
#[cfg(test)]
mod tests;

use crate::args::BenchArgs;
use crate::exit::Outcome;
use crate::plan::{check_parent, data_spec, default_loader_threads, per_worker, plan_workers};

use self::dataset::dataset;
use self::measure::Measured;
use self::modes::{loader_only, model_only, pipeline};
use self::report::{plot, report_json, table};
use self::sweep::{Axis, Mode, Point, parse_size, parse_sweep, points};

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
    let planned = plan_workers(&args.run, &crate::plan::ModelFlags::default())?;
    if !args.quiet {
        for notice in planned.notices.iter().filter(|n| !n.is_empty()) {
            eprintln!("{}", pipeline_core::redact_text(notice));
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
        for p in &mut points {
            p.loader_threads = default_loader_threads(cores, &per_worker(devices, p.workers));
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
                    "pipeline bench: {}: run {}/{}: {:.2} images/s{}, whole run {:.2}",
                    point.label(),
                    repeat + 1,
                    args.repeat,
                    sample.images_per_s,
                    if sample.steady {
                        ""
                    } else {
                        " (whole run: too short for a steady window)"
                    },
                    sample.whole_images_per_s
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
    print!(
        "{}",
        pipeline_core::redact_text(&table(&results, best, args))
    );
    if let Some(path) = &args.json {
        let report = report_json(
            &results,
            best,
            args,
            &planned.worker,
            devices,
            dataset.as_ref(),
        );
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        // `--data`'s URL, as every output shows it: without credentials.
        std::fs::write(path, pipeline_core::redact_text(&text).as_bytes())
            .map_err(|e| format!("--json {}: {e}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        plot(&results, path, &planned.worker)
            .map_err(|e| format!("--plot {}: {e}", path.display()))?;
    }
    Ok(())
}
