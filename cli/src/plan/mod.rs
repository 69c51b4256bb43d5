//! Flags → configuration, shared by `infer` and `bench`: devices from
//! `--gpus` (enumerated in a child, see `probe/`), the weight file, the
//! task, pooling and zero-shot classes, loader threads, and the checks on
//! paths, each a one-line error before any worker starts.

use std::path::{Path, PathBuf};

use gpu_worker::zero_shot::ZeroShotModel;
use pipeline_core::{
    CropRounding, DataSpec, DecodeLimits, DeviceSpec, EmbedPooling, EngineKind, Family,
    InputFormat, ModelKind, Precision, PreprocessSpec, RemoteSpec, ResolvedWeights, Task,
    WorkerConfig,
};

pub(crate) mod hub;
mod onnx;
mod remote_model;
mod zero_shot;

use crate::args::{DecodeArgs, EngineArg, LimitArgs, RunArgs, SourceArgs, TaskArg};

/// File name of each model's weights in the cache folder, as
/// `scripts/fetch-weights.sh` writes them.
fn cached_file_name(model: ModelKind) -> Option<&'static str> {
    match model {
        ModelKind::EfficientnetLite0 => Some("efficientnet-lite0-57934424.pth"),
        ModelKind::Resnet18 => Some("resnet18.pth"),
        ModelKind::Resnet34 => Some("resnet34.pth"),
        ModelKind::Resnet50 => Some("resnet50.pth"),
        ModelKind::Resnet101 => Some("resnet101.pth"),
        ModelKind::Resnet152 => Some("resnet152.pth"),
        // No fetch script for the others: their hubs are unreachable from
        // here, and users bring their own checkpoints (`--weights`).
        _ => None,
    }
}

/// `$PIPELINE_WEIGHTS_DIR`, else `$XDG_CACHE_HOME/pipeline/weights`, else
/// `~/.cache/pipeline/weights` — where `scripts/fetch-weights.sh` puts files.
pub(crate) fn weights_dir() -> Option<PathBuf> {
    match std::env::var_os("PIPELINE_WEIGHTS_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => Some(PathBuf::from(dir)),
        None => pipeline_core::cache_dir().map(|c| c.join("weights")),
    }
}

/// The weight file to use, a notice for the user, and the file as every
/// engine builds from it, resolved once here (#42 item 7): its layout,
/// which also says how its upstream rounds the centre crop (a Hugging Face
/// checkpoint is preprocessed as its HF processor does; anything else as
/// torchvision).
fn weights(
    args: &RunArgs,
    model: ModelKind,
) -> Result<(Option<PathBuf>, String, ResolvedWeights), String> {
    if let Some(path) = &args.weights {
        let resolved = checked_weights(model, path)?;
        return Ok((Some(path.clone()), String::new(), resolved));
    }
    // The cached files are torchvision's and EfficientNet-Lite0's; seeded
    // weights have no upstream but torchvision's.
    let cached = cached_file_name(model)
        .and_then(|name| Some(weights_dir()?.join(name)))
        .filter(|p| p.is_file());
    Ok(match cached {
        Some(path) => {
            let notice = format!("pipeline: {model} weights from {}", path.display());
            let resolved = checked_weights(model, &path)?;
            (Some(path), notice, resolved)
        }
        None => (
            None,
            format!(
                "pipeline: no --weights: {model} runs with seeded random weights (seed {}), \
                 so its predictions mean nothing; for real ones run scripts/fetch-weights.sh",
                args.seed
            ),
            ResolvedWeights::default(),
        ),
    })
}

/// The preprocessing flags over a built-in model's own transform: its
/// crop stays its input's size (a ViT's position embeddings are made for
/// it), so a flag that changes it is one line.
fn builtin_preprocess(
    model: ModelKind,
    flags: &pipeline_core::PreprocessFlags,
    own: PreprocessSpec,
) -> Result<PreprocessSpec, String> {
    let spec = pipeline_core::spec_from_flags(flags, own.clone())?;
    if spec.crop != own.crop {
        return Err(format!(
            "--size/--crop {}: {model} takes {c}×{c} crops, its input's size; the flags can \
             change its resize, filter and statistics",
            spec.crop,
            c = own.crop
        ));
    }
    Ok(spec)
}

/// `--batch-size`: `auto` (`None`) or 1..=4096.
fn batch_size(args: &RunArgs) -> Result<Option<usize>, String> {
    match args.batch_size.trim() {
        "auto" => Ok(None),
        n => match n.parse::<usize>() {
            Ok(n) if (1..=4096).contains(&n) => Ok(Some(n)),
            _ => Err(format!("--batch-size {n}: expected auto or 1..=4096")),
        },
    }
}

/// What `infer` says of the model beyond [`RunArgs`]: preprocessing flags
/// laid over the model's own (#41), and for an ONNX model the output read
/// and how a classifier's values become scores.
#[derive(Debug, Default)]
pub(crate) struct ModelFlags {
    pub(crate) preprocess: pipeline_core::PreprocessFlags,
    pub(crate) output: Option<String>,
    pub(crate) scores: Option<pipeline_core::Scores>,
    pub(crate) labels: Option<PathBuf>,
    pub(crate) normalize: bool,
}

/// `--weights FILE` checked for `model` by its names and shapes only, so
/// that a checkpoint of another model is one line before any worker
/// starts, and resolved: what every worker builds the network from.
pub(crate) fn checked_weights(model: ModelKind, path: &Path) -> Result<ResolvedWeights, String> {
    if !path.is_file() {
        return Err(format!("--weights {}: no such file", path.display()));
    }
    gpu_worker::Model::resolve_file(model, path).map_err(|e| format!("--weights: {e}"))
}

/// `model`'s preprocessing with `--jpeg-draft`, `--fast-preprocess` and the
/// crop rounding of its weights' upstream.
pub(crate) fn preprocess_spec(
    model: ModelKind,
    decode: &DecodeArgs,
    crop_rounding: CropRounding,
) -> PreprocessSpec {
    PreprocessSpec {
        jpeg_draft: decode.jpeg_draft,
        fast: decode.fast_preprocess,
        crop_rounding,
        ..model.default_preprocess()
    }
}

/// What `infer` and `bench` plan alike from [`RunArgs`].
pub(crate) struct Planned {
    /// The devices `--gpus` chose, each once.
    pub(crate) devices: Vec<DeviceSpec>,
    /// One per worker process (`--workers-per-gpu` applied).
    pub(crate) worker_devices: Vec<DeviceSpec>,
    /// The workers' configuration (name and device are set per worker).
    pub(crate) worker: WorkerConfig,
    /// Lines for the user: how devices and weights were chosen.
    pub(crate) notices: Vec<String>,
    /// Where the class matrix of `--classes` labels is, for the run's
    /// length (removed when dropped).
    pub(crate) class_dir: Option<tempfile::TempDir>,
    /// `--task raw`: the bytes one image's outputs take in a worker's
    /// message, where the graph fixes their shapes.
    pub(crate) raw_bytes: Option<usize>,
}

/// Whether the CUDA engine runs `model` at `precision`, else why not: it
/// runs every family but the test CNN, in f16 with f32 accumulation.
fn cuda_fits(model: ModelKind, precision: Precision) -> Result<(), String> {
    if !model.spec().engines.contains(&EngineKind::Cuda) {
        return Err(format!(
            "the CUDA engine does not run {model} (a test model); it runs the ResNets, \
             EfficientNet-Lite0, ConvNeXt and the ViT, CLIP, SigLIP and DINOv2 image towers \
             (--engine vulkan or cpu runs {model})"
        ));
    }
    cuda_precision(precision)
}

/// Whether the CUDA engine computes at `precision`: f16 with f32
/// accumulation only.
fn cuda_precision(precision: Precision) -> Result<(), String> {
    match precision {
        Precision::Auto | Precision::F16 => Ok(()),
        Precision::F32 | Precision::Bf16 => Err(format!(
            "the CUDA engine computes in f16 (f32 accumulation), not {precision}; --engine \
             vulkan or cpu runs --precision {precision}"
        )),
    }
}

/// Checks the shared flags and turns them into devices and a worker
/// configuration.
pub(crate) fn plan_workers(args: &RunArgs, flags: &ModelFlags) -> Result<Planned, String> {
    if onnx::is_onnx(&args.model) {
        return onnx::plan(args, flags);
    }
    if let Some(id) = hub::hub_id(&args.model) {
        return hub::plan(args, flags, &id);
    }
    if flags.output.is_some() || flags.scores.is_some() || flags.labels.is_some() || flags.normalize
    {
        return Err(
            "--output, --scores, --labels and --normalize go with --model FILE.onnx".to_owned(),
        );
    }
    let model: ModelKind = args.model.parse().map_err(|e| format!("--model: {e}"))?;
    let batch_size = batch_size(args)?;
    let precision: Precision = args
        .precision
        .parse()
        .map_err(|e| format!("--precision: {e}"))?;
    let cuda_fits = cuda_fits(model, precision);
    if args.engine == EngineArg::Cuda
        && let Err(why) = &cuda_fits
    {
        return Err(format!("--engine cuda: {why}"));
    }
    let (devices, engine, device_notice) =
        crate::devices::engine_devices(args.engine, &args.gpus, cuda_fits)?;
    let worker_devices = per_worker(&devices, args.workers_per_gpu as usize);
    let (weights, weights_notice, resolved) = weights(args, model)?;
    let loader_threads = loader_threads(args, &worker_devices);
    let task = match (args.task, &args.classes) {
        (Some(TaskArg::Raw), _) => {
            return Err(
                "--task raw reads an ONNX model's outputs (--model FILE.onnx); the built-in \
                 models embed or classify"
                    .to_owned(),
            );
        }
        (Some(TaskArg::Embed), Some(_)) => {
            return Err("--classes goes with --task classify (zero-shot), not embed".to_owned());
        }
        (Some(TaskArg::Classify), None) if !model.classifies() => {
            return Err(format!(
                "--task classify: {model} has no classifier head; use --task embed{}",
                if model.zero_shot() {
                    ", or classify zero-shot with --classes FILE (class text embeddings)"
                } else {
                    ""
                }
            ));
        }
        (Some(TaskArg::Classify), _) | (None, Some(_)) => Task::Classify {
            top_k: args.top_k as usize,
        },
        (None, None) if model.classifies() => Task::Classify {
            top_k: args.top_k as usize,
        },
        (Some(TaskArg::Embed) | None, None) => Task::Embed,
    };
    let (classes, class_dir) = match &args.classes {
        Some(value) => zero_shot::classes(
            value,
            args,
            &ZeroShotModel::builtin(model, weights.as_deref(), resolved.logit),
            || {
                crate::embed_text::text_model(
                    model.name(),
                    weights.as_deref(),
                    args.tokenizer.as_deref(),
                )
            },
            (&devices[0], engine),
        )?,
        None if !args.prompts.is_empty() || args.tokenizer.is_some() => {
            return Err("--prompt and --tokenizer go with --classes labels".to_owned());
        }
        None => (None, None),
    };
    let pooling = match &args.pooling {
        None => None,
        Some(_) if model.family() != Family::Dinov2 => {
            return Err(format!(
                "--pooling: only DINOv2 models take it, not {model}"
            ));
        }
        Some(_) if task != Task::Embed => {
            return Err("--pooling goes with --task embed".to_owned());
        }
        Some(p) => Some(
            p.parse::<EmbedPooling>()
                .map_err(|e| format!("--pooling: {e}"))?,
        ),
    };
    let cuda_uuids = crate::devices::cuda_uuids(&devices);
    Ok(Planned {
        devices,
        worker_devices,
        worker: WorkerConfig {
            name: String::new(),
            device: DeviceSpec::Cpu,
            model: model.into(),
            weights,
            resolved,
            seed: args.seed,
            task,
            pooling,
            classes,
            precision,
            engine,
            batch_size,
            loader_threads,
            preprocess: builtin_preprocess(
                model,
                &flags.preprocess,
                preprocess_spec(model, &args.decode, resolved.crop_rounding()),
            )?,
            limits: decode_limits(&args.limits),
            remote: remote_spec(args)?,
            cuda_uuids,
            onnx_runtime: None,
        },
        notices: vec![device_notice.unwrap_or_default(), weights_notice],
        class_dir,
        raw_bytes: None,
    })
}

/// One entry per worker process: each device `workers` times.
pub(crate) fn per_worker(devices: &[DeviceSpec], workers: usize) -> Vec<DeviceSpec> {
    devices
        .iter()
        .flat_map(|d| std::iter::repeat_n(d.clone(), workers))
        .collect()
}

/// `--max-pixels` and `--max-file-bytes`.
pub(crate) fn decode_limits(args: &LimitArgs) -> DecodeLimits {
    let max_pixels = args.max_pixels;
    DecodeLimits {
        max_pixels,
        // A decoded RGBA frame of the largest image, and never below the
        // default.
        max_alloc_bytes: max_pixels
            .saturating_mul(4)
            .max(DecodeLimits::default().max_alloc_bytes),
        max_file_bytes: args.max_file_bytes,
    }
}

/// `--io-concurrency`, `--io-timeout`, `--io-retries`.
pub(crate) fn remote_spec(args: &RunArgs) -> Result<RemoteSpec, String> {
    if !(args.io_timeout.is_finite() && args.io_timeout > 0.0) {
        return Err(format!(
            "--io-timeout {}: expected seconds above 0",
            args.io_timeout
        ));
    }
    Ok(RemoteSpec {
        concurrency: args.io_concurrency as usize,
        timeout_s: args.io_timeout,
        retries: args.io_retries,
        idle_only: false,
    })
}

/// `--data` and the flags that say how to read it, checked as far as can
/// be without reading it: a local path must exist; the layout is detected.
pub(crate) fn data_spec(data: &str, args: &SourceArgs) -> Result<DataSpec, String> {
    let format = args
        .input_format
        .as_deref()
        .map(str::parse::<InputFormat>)
        .transpose()
        .map_err(|e| format!("--input-format: {e}"))?;
    let spec = DataSpec {
        data: data.to_owned(),
        format,
        path_column: args.path_column.clone(),
        image_column: args.image_column.clone(),
        keep_columns: args.keep_columns.clone(),
    };
    let local = Path::new(data);
    if !spec.is_remote() && !data.contains('{') && !local.exists() {
        return Err(format!("--data {data}: no such file or folder"));
    }
    if format == Some(InputFormat::Folder) && !spec.is_remote() && !local.is_dir() {
        return Err(format!("--data {data}: not a folder"));
    }
    loader::source::detect(&spec).map_err(|e| e.to_string())?;
    Ok(spec)
}

/// The folder an output file goes into must exist.
pub(crate) fn check_parent(flag: &str, file: &Path) -> Result<(), String> {
    match file.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) if !parent.is_dir() => Err(format!(
            "{flag} {}: folder {} does not exist",
            file.display(),
            parent.display()
        )),
        _ => Ok(()),
    }
}

/// `--loader-threads`, else [`default_loader_threads`] for the cores this
/// process may use.
fn loader_threads(args: &RunArgs, workers: &[DeviceSpec]) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    args.loader_threads
        .map_or_else(|| default_loader_threads(cores, workers), |n| n as usize)
}

/// Decoder threads per worker, from the cores this process may use
/// (`available_parallelism`: the CPU affinity and cgroup quota a Slurm or
/// Kubernetes job is given).
///
/// - Beside a model on the host's cores (`cpu`, `software`): every core.
///   The decoders run at background priority there
///   ([`loader::DecoderPriority`]), so they fill what the model leaves idle
///   rather than preempting it, and the two pools never oversubscribe at
///   the same priority.
/// - Feeding GPUs: the cores less one (the coordinator's writes and each
///   worker's device thread, which mostly waits), divided among the
///   node's workers: 15 threads for one GPU on 16 cores, 7 each for 8 GPUs
///   on 64 cores. At least one.
///
/// The load average is not subtracted: it lags by a minute (after a
/// previous job it took threads from an idle machine), and on a shared
/// node it counts other jobs' cores, which the affinity already excludes.
pub(crate) fn default_loader_threads(cores: usize, workers: &[DeviceSpec]) -> usize {
    if workers.iter().any(DeviceSpec::computes_on_host_cores) {
        return cores.max(1);
    }
    (cores.saturating_sub(1) / workers.len().max(1)).max(1)
}

/// This executable, which the coordinator starts as each worker.
pub(crate) fn current_exe() -> Result<PathBuf, String> {
    std::env::current_exe()
        .map_err(|e| format!("cannot find the pipeline executable to start workers: {e}"))
}

#[cfg(test)]
mod tests {
    use super::default_loader_threads;
    use pipeline_core::DeviceSpec;

    #[test]
    fn loader_threads_share_the_cores_among_workers() {
        let gpus = |n: usize| (0..n).map(DeviceSpec::Gpu).collect::<Vec<_>>();
        assert_eq!(default_loader_threads(16, &gpus(1)), 15);
        assert_eq!(default_loader_threads(64, &gpus(8)), 7);
        assert_eq!(default_loader_threads(8, &gpus(2)), 3);
        assert_eq!(default_loader_threads(2, &gpus(8)), 1);
        assert_eq!(default_loader_threads(1, &gpus(1)), 1);
        // Beside a model on the same cores: all of them, in the background.
        assert_eq!(default_loader_threads(2, &[DeviceSpec::Cpu]), 2);
        assert_eq!(default_loader_threads(16, &[DeviceSpec::Software]), 16);
    }
}
