//! What a bench run says: the Markdown table, the JSON report and the plot.

use std::path::Path;

use pipeline_core::{DeviceSpec, WorkerConfig};
use serde::Serialize;

use super::dataset::{Dataset, DatasetSource};
use super::measure::{Latency, LoaderLimit, Measured, PointReport, StageRow, median, percentile};
use super::sweep::{Mode, plural};
use crate::args::BenchArgs;

pub(super) fn table(results: &[Measured], best: &Measured, args: &BenchArgs) -> String {
    let mode = Mode::of(args);
    let mut out = String::new();
    let what = mode.name().replace('_', " ");
    out.push_str(&format!(
        "| batch | workers | loader threads | images/s ({what}, median of {}) | min | max | whole run images/s | device busy | p50 batch ms | p99 batch ms | limiting stage |\n",
        args.repeat
    ));
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
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
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {busy} | {} | {} | {} |\n",
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
            median(&m.whole_rates()),
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
    out.push_str(&format!(
        "\nWhole run: images computed over each run's whole time, start-up and run-out \
         included ({}); the steady rate is the window between.\n",
        if mode == Mode::EndToEnd {
            "from the run's start to its last record written"
        } else {
            "from opening the model or the loader"
        }
    ));
    for m in results {
        if let Some((rate, device)) = m.rate_above_devices(mode) {
            out.push_str(&format!(
                "\n{}: the steady rate, {rate:.2} images/s, is above the {device:.2} the devices' \
                 passes sustain: do not trust it (CONVENTIONS.md, rule 13).\n",
                m.point.label()
            ));
        }
    }
    if let Some(limit) = best.loader_limit(mode) {
        out.push_str(&format!(
            "\n{}\n",
            limit.sentence(best.point.loader_threads)
        ));
    }
    if let Some(rate) = best.per_cpu_second() {
        out.push_str(&format!(
            "\n{rate:.2} images per CPU-second (all threads of this process, decoders' own included)\n"
        ));
    }
    out
}

/// The `--json` report: the fastest point's headline figures at the top
/// level (what scripts read), then every point, the mode, the configuration
/// and the machine.
#[derive(Serialize)]
pub(super) struct BenchReport<'a> {
    /// The fastest point's median steady rate.
    images_per_s: f64,
    /// Its median rate over each run's whole time, beside which the steady
    /// one is believed.
    whole_run_images_per_s: f64,
    stages: Vec<StageRow>,
    device_busy_fraction: Option<f64>,
    batch_latency_ms: Latency,
    limiting_stage: String,
    /// Set when the loader, not the device, sets the speed, with both
    /// capacities.
    loader_limit: Option<LoaderLimit>,
    best: PointReport,
    sweep: Vec<PointReport>,
    mode: &'static str,
    config: BenchConfig<'a>,
    machine: Machine,
}

/// What was benchmarked.
#[derive(Serialize)]
struct BenchConfig<'a> {
    model: String,
    weights: &'a Option<std::path::PathBuf>,
    task: pipeline_core::Task,
    /// `--precision` as given (`auto`: f16 on GPUs that compute in it).
    precision: pipeline_core::Precision,
    preprocess: &'a pipeline_core::PreprocessSpec,
    devices: Vec<String>,
    repeat: u32,
    dataset: Option<&'a DatasetSource>,
    model_only_batches: Option<u32>,
}

/// Where the bench ran.
#[derive(Serialize)]
struct Machine {
    cores: usize,
    pipeline: &'static str,
    /// What decodes JPEGs, and whether with SIMD: a loader figure means
    /// little without it.
    jpeg_decoder: loader::JpegDecoder,
}

pub(super) fn report_json<'a>(
    results: &[Measured],
    best: &Measured,
    args: &BenchArgs,
    worker: &'a WorkerConfig,
    devices: &[DeviceSpec],
    dataset: Option<&'a Dataset>,
) -> BenchReport<'a> {
    let mode = Mode::of(args);
    let best = best.report(mode);
    BenchReport {
        images_per_s: best.rate.images_per_s,
        whole_run_images_per_s: best.rate.whole_run_images_per_s,
        stages: best.stages.clone(),
        device_busy_fraction: best.device_busy_fraction,
        batch_latency_ms: best.batch_latency_ms,
        limiting_stage: best.limiting_stage.clone(),
        loader_limit: best.loader_limit,
        best,
        sweep: results.iter().map(|m| m.report(mode)).collect(),
        mode: mode.name(),
        config: BenchConfig {
            model: worker.model.to_string(),
            weights: &worker.weights,
            task: worker.task,
            precision: worker.precision,
            preprocess: &worker.preprocess,
            devices: devices.iter().map(ToString::to_string).collect(),
            repeat: args.repeat,
            dataset: dataset.map(|d| &d.source),
            model_only_batches: args.model_only.then_some(args.batches),
        },
        machine: Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            pipeline: env!("CARGO_PKG_VERSION"),
            jpeg_decoder: loader::jpeg_decoder(),
        },
    }
}

/// Images/s across the sweep: one line per (workers, loader threads), batch
/// size along the x axis.
pub(super) fn plot(results: &[Measured], path: &Path, worker: &WorkerConfig) -> Result<(), String> {
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
            format!("pipeline bench: {} images/s", worker.model),
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
