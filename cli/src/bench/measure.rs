//! One run's sample, the repeats of one point, and their statistics:
//! medians, nearest-rank percentiles, stage rows and the limiting stage.

use coordinator::Stages;
use serde::Serialize;

use super::sweep::{Mode, Point, plural};

/// A batch this many times slower than the median is warm-up.
pub(super) const WARM_UP_FACTOR: f64 = 4.0;

/// A steady rate this much above what the devices' passes sustain is
/// flagged (the stage times are the whole run's, so they differ from the
/// window's by a few percent).
pub(super) const ABOVE_THE_DEVICES: f64 = 1.10;

/// One measured run.
#[derive(Debug, Clone)]
pub(super) struct Sample {
    pub(super) images_per_s: f64,
    /// Whether the rate is the steady window's (else the whole run's).
    pub(super) steady: bool,
    /// The images it computed over its whole time: end to end, from the
    /// run's start to its last record written (start-up and run-out
    /// included, as `pipeline infer` would take after its flags); alone,
    /// from opening the model or the loader to the last batch. What the
    /// steady rate is believed beside (CONVENTIONS.md, rule 13).
    pub(super) whole_images_per_s: f64,
    pub(super) images: u64,
    pub(super) batch_size: usize,
    pub(super) stages: Stages,
    pub(super) latencies_s: Vec<f64>,
    pub(super) peak_rss_bytes: Option<u64>,
    /// CPU seconds this process used (`--loader-only`: decoders may start
    /// threads of their own, so thread counts alone do not say "per core").
    pub(super) cpu_s: Option<f64>,
}

/// Everything measured at one point.
#[derive(Debug, Clone)]
pub(super) struct Measured {
    pub(super) point: Point,
    pub(super) devices: usize,
    pub(super) samples: Vec<Sample>,
}

impl Measured {
    pub(super) fn rates(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.images_per_s).collect()
    }

    pub(super) fn median(&self) -> f64 {
        median(&self.rates())
    }

    pub(super) fn whole_rates(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.whole_images_per_s).collect()
    }

    /// The devices' capacity end to end (upload, compute and read-back one
    /// after another on each worker) and the median steady rate, when the
    /// rate is more than [`ABOVE_THE_DEVICES`] above it: a window that
    /// counts work it did not hold.
    pub(super) fn rate_above_devices(&self, mode: Mode) -> Option<(f64, f64)> {
        if mode != Mode::EndToEnd {
            return None;
        }
        let device = group_capacity(&self.stage_rows(mode), &["upload", "compute", "read-back"])?;
        let rate = self.median();
        (rate > device * ABOVE_THE_DEVICES).then_some((rate, device))
    }

    /// The repeat whose rate is the median's (or nearest to it): its stages
    /// are the ones reported.
    pub(super) fn typical(&self) -> &Sample {
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

    /// Device seconds spent on warm-up, not steady work: what batches
    /// slower than [`WARM_UP_FACTOR`] × the median batch took beyond the
    /// median (a process's first batch compiles shaders and autotunes:
    /// seconds on a GPU, against milliseconds for the rest).
    pub(super) fn warm_up_excess_s(&self) -> f64 {
        let latencies = &self.typical().latencies_s;
        let p50 = median(latencies);
        latencies
            .iter()
            .filter(|&&l| l > WARM_UP_FACTOR * p50)
            .map(|l| l - p50)
            .sum()
    }

    /// Images per CPU-second over all repeats, where CPU time was measured.
    pub(super) fn per_cpu_second(&self) -> Option<f64> {
        let cpu: Option<f64> = self.samples.iter().map(|s| s.cpu_s).sum();
        let images: u64 = self.samples.iter().map(|s| s.images).sum();
        cpu.filter(|&c| c > 0.0).map(|c| images as f64 / c)
    }

    pub(super) fn workers_total(&self) -> usize {
        self.devices * self.point.workers
    }

    pub(super) fn latencies(&self) -> Vec<f64> {
        let mut all: Vec<f64> = self
            .samples
            .iter()
            .flat_map(|s| s.latencies_s.iter().copied())
            .collect();
        all.sort_by(f64::total_cmp);
        all
    }

    /// Per stage: busy seconds and the images/s that stage alone could
    /// sustain with the threads it has. Compute's seconds leave out the
    /// warm-up batches' excess ([`Measured::warm_up_excess_s`]): on a short
    /// GPU run it would otherwise name compute as the limit when the loader
    /// is.
    pub(super) fn stage_rows(&self, mode: Mode) -> Vec<StageRow> {
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
            let compute = (s.stages.compute_s - self.warm_up_excess_s()).max(0.0);
            rows.push(row("compute", compute, workers));
            rows.push(row("read-back", s.stages.readback_s, workers));
        }
        if mode == Mode::EndToEnd {
            rows.push(row("write", s.stages.write_s, 1.0));
        }
        rows
    }

    /// Images/s the loader's threads and the devices could each sustain
    /// alone (end to end), when the loader's is the lower: by how much the
    /// loader holds the devices back.
    pub(super) fn loader_limit(&self, mode: Mode) -> Option<LoaderLimit> {
        if mode != Mode::EndToEnd {
            return None;
        }
        let rows = self.stage_rows(mode);
        let loader = group_capacity(&rows, &["read", "decode+preprocess"])?;
        let device = group_capacity(&rows, &["upload", "compute", "read-back"])?;
        (loader < device).then_some(LoaderLimit {
            loader_images_per_s: loader,
            device_images_per_s: device,
        })
    }

    /// The stage group with the lowest capacity — the loader's threads
    /// (read and decode share them), the device (upload, compute and
    /// read-back run one after another), or the coordinator's writes —
    /// named by its largest stage.
    pub(super) fn limiting_stage(&self, mode: Mode) -> String {
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

    /// This point's figures, as the JSON report writes them.
    pub(super) fn report(&self, mode: Mode) -> PointReport {
        let rates = self.rates();
        let whole = self.whole_rates();
        let latencies = self.latencies();
        let typical = self.typical();
        PointReport {
            shape: Shape {
                batch: typical.batch_size,
                batch_flag: self.point.batch,
                workers_per_device: self.point.workers,
                workers: self.workers_total(),
                loader_threads: self.point.loader_threads,
            },
            rate: Rate {
                images_per_s: self.median(),
                spread: Spread {
                    min: rates.iter().copied().fold(f64::INFINITY, f64::min),
                    max: rates.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                },
                repeats: rates,
                steady: self.samples.iter().all(|s| s.steady),
                images_per_repeat: typical.images,
                whole_run_images_per_s: median(&whole),
                whole_run_repeats: whole,
            },
            stages: self.stage_rows(mode),
            device_busy_fraction: (mode == Mode::EndToEnd)
                .then(|| typical.stages.device_busy_fraction())
                .flatten(),
            batch_latency_ms: Latency {
                p50: percentile(&latencies, 0.50).map(|s| s * 1e3),
                p99: percentile(&latencies, 0.99).map(|s| s * 1e3),
                batches: latencies.len(),
            },
            limiting_stage: self.limiting_stage(mode),
            loader_limit: self.loader_limit(mode),
            peak_rss_bytes: typical.peak_rss_bytes,
            images_per_cpu_s: self.per_cpu_second(),
        }
    }
}

/// One point of the sweep in the JSON report.
#[derive(Debug, Clone, Serialize)]
pub(super) struct PointReport {
    #[serde(flatten)]
    pub(super) shape: Shape,
    #[serde(flatten)]
    pub(super) rate: Rate,
    pub(super) stages: Vec<StageRow>,
    pub(super) device_busy_fraction: Option<f64>,
    pub(super) batch_latency_ms: Latency,
    pub(super) limiting_stage: String,
    /// Set when the loader, not the device, sets the speed.
    pub(super) loader_limit: Option<LoaderLimit>,
    pub(super) peak_rss_bytes: Option<u64>,
    pub(super) images_per_cpu_s: Option<f64>,
}

/// Where a point sits in the sweep.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Shape {
    /// Images per forward pass (the one used, also under `auto`).
    pub(super) batch: usize,
    /// What `--batch-size` or the sweep asked (`None`: auto).
    pub(super) batch_flag: Option<usize>,
    pub(super) workers_per_device: usize,
    pub(super) workers: usize,
    pub(super) loader_threads: usize,
}

/// A point's rate over its repeats.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Rate {
    /// Median steady-state rate over the repeats.
    pub(super) images_per_s: f64,
    /// Each repeat's rate.
    pub(super) repeats: Vec<f64>,
    pub(super) spread: Spread,
    /// Whether every repeat had a steady window.
    pub(super) steady: bool,
    pub(super) images_per_repeat: u64,
    /// Median over the repeats of images over each repeat's whole time
    /// ([`Sample::whole_images_per_s`]): the rate beside which the steady
    /// one is believed.
    pub(super) whole_run_images_per_s: f64,
    /// Each repeat's whole-time rate.
    pub(super) whole_run_repeats: Vec<f64>,
}

/// The slowest and fastest repeat.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct Spread {
    pub(super) min: f64,
    pub(super) max: f64,
}

/// Batch latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct Latency {
    pub(super) p50: Option<f64>,
    pub(super) p99: Option<f64>,
    pub(super) batches: usize,
}

#[derive(Debug, Clone, Serialize)]
pub(super) struct StageRow {
    pub(super) stage: &'static str,
    pub(super) busy_s: f64,
    pub(super) images_per_s: Option<f64>,
}

/// Images/s a group of stages run one after another sustains: the
/// harmonic sum of its members' rates; `None` without a measured member.
fn group_capacity(rows: &[StageRow], names: &[&str]) -> Option<f64> {
    let inverse: f64 = rows
        .iter()
        .filter(|r| names.contains(&r.stage))
        .map(|r| r.images_per_s.map_or(0.0, |c| 1.0 / c))
        .sum();
    (inverse > 0.0).then(|| 1.0 / inverse)
}

pub(super) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Nearest-rank percentile of sorted values.
pub(super) fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// User + system CPU seconds of this process, all threads (Linux
/// `/proc/self/stat`, in the kernel's fixed 100 Hz user ticks).
pub(super) fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which ends at the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some((ticks(11)? + ticks(12)?) as f64 / 100.0)
}

/// The loader holds the devices back: what each could sustain alone.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct LoaderLimit {
    pub(super) loader_images_per_s: f64,
    pub(super) device_images_per_s: f64,
}

impl LoaderLimit {
    /// The sentence the table ends with.
    pub(super) fn sentence(&self, loader_threads: usize) -> String {
        format!(
            "The loader is the limit: its {loader_threads} thread{} per worker sustain {:.1} \
             images/s, the devices {:.1} ({:.0}% idle). More --loader-threads, --jpeg-draft or \
             --fast-preprocess would raise it.",
            plural(loader_threads),
            self.loader_images_per_s,
            self.device_images_per_s,
            100.0 * (1.0 - self.loader_images_per_s / self.device_images_per_s)
        )
    }
}
