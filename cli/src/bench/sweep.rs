//! `--sweep` and the points it spans: what each run of the bench varies.

use serde::Serialize;

use crate::args::BenchArgs;

/// What a bench run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// The whole pipeline, processes and all.
    EndToEnd,
    /// The model on pre-made batches (`--model-only`).
    ModelOnly,
    /// The loader alone: read, decode, preprocess (`--loader-only`).
    LoaderOnly,
}

impl Mode {
    pub(super) fn of(args: &BenchArgs) -> Self {
        if args.model_only {
            Mode::ModelOnly
        } else if args.loader_only {
            Mode::LoaderOnly
        } else {
            Mode::EndToEnd
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Mode::EndToEnd => "end_to_end",
            Mode::ModelOnly => "model_only",
            Mode::LoaderOnly => "loader_only",
        }
    }

    pub(super) fn loads(self) -> bool {
        self != Mode::ModelOnly
    }

    pub(super) fn computes(self) -> bool {
        self != Mode::LoaderOnly
    }
}

/// One configuration to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(super) struct Point {
    /// `None`: the worker's own choice (`auto`).
    pub(super) batch: Option<usize>,
    /// Workers per device.
    pub(super) workers: usize,
    /// Decoder threads per worker.
    pub(super) loader_threads: usize,
}

impl Point {
    pub(super) fn label(&self) -> String {
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

pub(super) fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// A sweep axis and its values (`batch=8,32,128`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Axis {
    Batch(Vec<usize>),
    Workers(Vec<usize>),
    LoaderThreads(Vec<usize>),
}

pub(super) fn parse_sweep(specs: &[String]) -> Result<Vec<Axis>, String> {
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
pub(super) fn points(base: Point, axes: &[Axis]) -> Vec<Point> {
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
pub(super) fn parse_size(text: &str) -> Result<(u32, u32), String> {
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
