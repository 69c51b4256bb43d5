//! `pipeline infer`: flags → a validated `RunConfig`, the run, its summary,
//! and the exit code.

use coordinator::{
    Existing, OutputLayout, Patience, RunConfig, RunSummary, Sharding, Update, choose_format,
};
use pipeline_core::Shard;

use crate::args::{InferArgs, LayoutArgs, MergeArgs};
use crate::exit::Outcome;
use crate::plan::{check_parent, current_exe, data_spec, plan_workers};
use crate::progress::Progress;

pub(crate) fn run(args: &InferArgs) -> Outcome {
    // The command's own clock, flags and model resolution included.
    let started = std::time::Instant::now();
    match plan(args) {
        // `_classes` holds a class matrix made from labels for the run.
        Ok((config, notices, _classes)) => {
            if !args.quiet {
                for notice in notices.iter().filter(|n| !n.is_empty()) {
                    eprintln!("{}", pipeline_core::redact_text(notice));
                }
            }
            let progress = std::sync::Arc::new(Progress::new(args.quiet));
            let result = coordinator::run(&config, progress);
            // The run returns once the output is assembled: its last record
            // is written.
            let command_s = started.elapsed().as_secs_f64();
            finish(args, &config, result, command_s)
        }
        Err(message) => Outcome::Failed(message),
    }
}

/// The run's configuration, the notices for the user, and the folder of a
/// class matrix made from `--classes` labels (kept until the run ends).
type Plan = (RunConfig, Vec<String>, Option<tempfile::TempDir>);

fn plan(args: &InferArgs) -> Result<Plan, String> {
    let data = data_spec(&args.data, &args.source)?;
    let format =
        choose_format(args.format.as_deref(), &args.out).map_err(|e| format!("--format: {e}"))?;
    let layout = output_layout(&args.layout)?;
    check_parent("--out", &args.out)?;
    let planned = plan_workers(&args.run, &model_flags(args))?;
    if !(args.grace.is_finite() && args.grace >= 0.0) {
        return Err(format!(
            "--grace {}: expected seconds, 0 or more",
            args.grace
        ));
    }
    let hang_timeout = match args.hang_timeout.trim() {
        "auto" => None,
        secs => match secs.parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 => Some(std::time::Duration::from_secs_f64(s)),
            _ => {
                return Err(format!(
                    "--hang-timeout {secs}: expected auto or seconds above 0"
                ));
            }
        },
    };
    let shard = coordinator::choose_shard(
        args.shard.as_deref(),
        args.num_shards,
        &coordinator::process_env,
    )?;
    let task = planned.worker.task;
    layout.check(format, task)?;
    // A chunk's results travel to the coordinator in one message.
    if let Some(bytes) = planned.raw_bytes {
        let most = (pipeline_core::MAX_FRAME_BYTES / 2) / bytes.max(1);
        if most == 0 {
            return Err(format!(
                "--task raw: one image's outputs take {:.1} MiB, more than half of a worker's \
                 message ({} MiB); pick smaller ones with --output A,B",
                bytes as f64 / f64::from(1 << 20),
                pipeline_core::MAX_FRAME_BYTES >> 20
            ));
        }
        if args.chunk_size as usize > most {
            return Err(format!(
                "--chunk-size {}: --task raw's outputs take {:.1} MiB an image, and a chunk's \
                 results travel in one message of at most {} MiB; use --chunk-size {} or less",
                args.chunk_size,
                bytes as f64 / f64::from(1 << 20),
                pipeline_core::MAX_FRAME_BYTES >> 20,
                most
            ));
        }
    }
    if task == pipeline_core::Task::Embed
        && planned.worker.model.embedding_dim(planned.worker.pooling) == 0
        && format != coordinator::OutputFormat::Jsonl
    {
        return Err(format!(
            "--format {}: {}'s output has no fixed width per image, which its columns need; \
             use --format jsonl",
            format!("{format:?}").to_lowercase(),
            planned.worker.model
        ));
    }
    let config = RunConfig {
        layout,
        update: if args.retry_failed {
            Update::AlsoFailed
        } else if args.update {
            Update::Changed
        } else {
            Update::No
        },
        existing: if args.overwrite {
            Existing::Overwrite
        } else if args.resume {
            Existing::Resume
        } else {
            Existing::Refuse
        },
        patience: Patience {
            hang_timeout,
            grace: std::time::Duration::from_secs_f64(args.grace),
            ..Patience::default()
        },
        sharding: Sharding {
            shard: shard.as_ref().map_or(Shard::ALL, |c| c.shard),
            source: shard.map(|c| c.source),
            merge: args.merge,
        },
        ..RunConfig::new(
            data,
            planned.worker_devices,
            planned.worker,
            args.chunk_size,
            args.out.clone(),
            format,
            current_exe()?,
        )
    };
    Ok((config, planned.notices, planned.class_dir))
}

/// `command_s`: seconds from the command's start to its last record.
fn finish(
    args: &InferArgs,
    config: &RunConfig,
    result: Result<RunSummary, coordinator::RunError>,
    command_s: f64,
) -> Outcome {
    let summary = match result {
        Ok(summary) => summary,
        Err(e) => {
            if let coordinator::RunError::Interrupted { signal, .. } = &e {
                return Outcome::Interrupted {
                    signal: *signal,
                    message: e.to_string(),
                };
            }
            return Outcome::Failed(e.to_string());
        }
    };
    if summary.chunks.already_complete {
        if !args.quiet {
            eprintln!(
                "pipeline: {} is already complete (--resume); nothing to do",
                summary.out.display()
            );
        }
        return Outcome::Success;
    }
    if let Some(path) = &args.report {
        let report = ReportFile {
            summary: &summary,
            command: CommandRate::of(&summary, command_s),
            config: ConfigReport::of(config),
        };
        // Every string in it (`--data`, a worker's last words, a scan
        // problem) without credentials: a report is shared.
        let written = serde_json::to_string_pretty(&report)
            .map(|text| pipeline_core::redact_text(&text).into_owned())
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(path, bytes));
        if let Err(e) = written {
            return Outcome::Failed(format!("--report {}: {e}", path.display()));
        }
    }
    if !args.quiet {
        eprintln!("{}", summary_line(&summary));
    }
    items_outcome(&summary)
}

/// `--report FILE`: the summary, the whole command's rate, and the
/// configuration that produced them.
#[derive(serde::Serialize)]
struct ReportFile<'a> {
    summary: &'a RunSummary,
    command: CommandRate,
    config: ConfigReport<'a>,
}

/// The whole command's rate: the images this run computed over the seconds
/// from `pipeline infer`'s start to its last record written, start-up,
/// scan and assembly included. `summary.steady` is believed only beside it
/// (CONVENTIONS.md, rule 13).
#[derive(serde::Serialize)]
struct CommandRate {
    wall_s: f64,
    images: u64,
    images_per_s: f64,
}

impl CommandRate {
    fn of(summary: &RunSummary, wall_s: f64) -> Self {
        let images = summary.times.images_computed;
        Self {
            wall_s,
            images,
            images_per_s: images as f64 / wall_s.max(1e-9),
        }
    }
}

/// The run's settings as the report names them.
#[derive(serde::Serialize)]
struct ConfigReport<'a> {
    data: &'a str,
    /// The layout `--data` was read as.
    input_format: Option<pipeline_core::InputFormat>,
    /// How remote items were read.
    remote: pipeline_core::RemoteSpec,
    devices: Vec<String>,
    model: String,
    weights: &'a Option<std::path::PathBuf>,
    task: pipeline_core::Task,
    preprocess: &'a pipeline_core::PreprocessSpec,
    batch_size: Option<usize>,
    loader_threads: usize,
    chunk_size: u64,
    grace_s: f64,
    hang_timeout_s: Option<f64>,
    shard: String,
    shard_source: &'a Option<String>,
    /// Which scheduler variable gave the GPUs, if any.
    scheduler_gpus: Option<String>,
}

impl<'a> ConfigReport<'a> {
    fn of(config: &'a RunConfig) -> Self {
        let worker = &config.worker;
        Self {
            data: &config.data.data,
            input_format: loader::source::detect(&config.data).ok(),
            remote: worker.remote,
            devices: config.devices.iter().map(ToString::to_string).collect(),
            model: worker.model.to_string(),
            weights: &worker.weights,
            task: worker.task,
            preprocess: &worker.preprocess,
            batch_size: worker.batch_size,
            loader_threads: worker.loader_threads,
            chunk_size: config.chunk_size,
            grace_s: config.patience.grace.as_secs_f64(),
            hang_timeout_s: config.patience.hang_timeout.map(|d| d.as_secs_f64()),
            shard: config.sharding.shard.to_string(),
            shard_source: &config.sharding.source,
            scheduler_gpus: coordinator::scheduler_gpus_source(&coordinator::process_env),
        }
    }
}

/// 0 or 1: whether any item of the output is an error record.
fn items_outcome(summary: &RunSummary) -> Outcome {
    if summary.records.failures > 0 {
        Outcome::ItemsFailed
    } else {
        Outcome::Success
    }
}

/// The output layout flags, each checked on its own (against the format
/// and task by the caller).
fn output_layout(args: &LayoutArgs) -> Result<OutputLayout, String> {
    Ok(OutputLayout {
        embedding_dtype: args
            .embedding_dtype
            .parse()
            .map_err(|e| format!("--embedding-dtype: {e}"))?,
        compression: args
            .compression
            .parse()
            .map_err(|e| format!("--compression: {e}"))?,
        shard_rows: args.shard_rows,
    })
}

/// `pipeline merge`.
pub(crate) fn merge(args: &MergeArgs) -> Outcome {
    let format = match &args.format {
        Some(f) => match f.parse() {
            Ok(f) => Some(f),
            Err(e) => return Outcome::Failed(format!("--format: {e}")),
        },
        None => None,
    };
    let layout = match output_layout(&args.layout) {
        Ok(layout) => layout,
        Err(e) => return Outcome::Failed(e),
    };
    match coordinator::merge(&args.out, format, layout) {
        Err(e) => Outcome::Failed(e.to_string()),
        Ok(summary) if summary.chunks.already_complete => {
            if !args.quiet {
                eprintln!(
                    "pipeline: {} is already merged; nothing to do",
                    summary.out.display()
                );
            }
            Outcome::Success
        }
        Ok(summary) => {
            if !args.quiet {
                eprintln!("{}", summary_line(&summary));
            }
            items_outcome(&summary)
        }
    }
}

fn summary_line(s: &RunSummary) -> String {
    let mut kinds: Vec<_> = s.records.failures_by_kind.iter().collect();
    kinds.sort();
    let failures = if s.records.failures == 0 {
        "no failures".to_owned()
    } else {
        let by_kind: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        format!("{} failed ({})", s.records.failures, by_kind.join(", "))
    };
    let mut resumed = if s.chunks.resumed > 0 {
        format!(
            " ({} of {} chunks resumed)",
            s.chunks.resumed, s.chunks.owned
        )
    } else {
        String::new()
    };
    if let Some(u) = &s.update {
        resumed.push_str(&format!(
            " ({} reused, {} computed, {} dropped)",
            u.reused, u.computed, u.dropped
        ));
    }
    let shard = s
        .chunks
        .shard
        .as_ref()
        .map_or(String::new(), |shard| format!(" shard {shard}:"));
    let target = if s.chunks.merged {
        s.out.display().to_string()
    } else {
        format!(
            "{} (not merged yet)",
            coordinator::parts_dir(&s.out).display()
        )
    };
    format!(
        "pipeline:{shard} {} images{resumed}, {failures}, {:.1} s, {:.1} images/s, \
         {} OOM backoffs, {} retries, {} restarts → {target}",
        s.records.images,
        s.times.wall_s,
        s.times.images_per_s,
        s.recovery.oom_backoffs,
        s.recovery.retries,
        s.recovery.restarts,
    )
}

/// The model flags beside `--model`, as planning takes them.
fn model_flags(args: &InferArgs) -> crate::plan::ModelFlags {
    use crate::onnx_args::ScoresArg;
    let onnx = &args.onnx;
    crate::plan::ModelFlags {
        preprocess: args.preprocess.flags(),
        output: onnx.output.clone(),
        scores: onnx.scores.map(|s| match s {
            ScoresArg::Softmax => pipeline_core::Scores::Softmax,
            ScoresArg::Sigmoid => pipeline_core::Scores::Sigmoid,
            ScoresArg::Raw => pipeline_core::Scores::Raw,
        }),
        labels: onnx.labels.clone(),
        normalize: onnx.normalize,
    }
}
