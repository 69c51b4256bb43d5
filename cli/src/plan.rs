//! Flags → configuration, shared by `infer` and `bench`: devices from
//! `--gpus` (enumerated in a child, see `probe.rs`), the weight file, the
//! task, pooling and zero-shot classes, loader threads, and the checks on
//! paths, each a one-line error before any worker starts.

use std::path::{Path, PathBuf};

use gpu_worker::zero_shot::ClassMatrix;
use pipeline_core::{
    CropRounding, DataSpec, DecodeLimits, DeviceSpec, EmbedPooling, Family, InputFormat, ModelKind,
    PreprocessSpec, RemoteSpec, Task, WorkerConfig, ZeroShotClasses,
};

use crate::args::{RunArgs, SourceArgs, TaskArg};

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

/// `--gpus` → the devices, each once (before `--workers-per-gpu`), and
/// a notice saying how `all` chose.
fn chosen_devices(flag: &str) -> Result<(Vec<DeviceSpec>, Option<String>), String> {
    let flag = flag.trim();
    if flag.eq_ignore_ascii_case("all") {
        // A driver that crashes while enumerating costs the probe's
        // process; the run goes on on the CPU and says why.
        let (gpus, nvidia) = match crate::probe::probe() {
            Ok(probe) => (probe.gpus, probe.nvidia.len()),
            Err(e) => {
                let notice = format!("pipeline: warning: {e}; running on the CPU (burn flex)");
                return Ok((vec![DeviceSpec::Cpu], Some(notice)));
            }
        };
        // GPU indices are PCI bus order, as nvidia-smi and CUDA with
        // CUDA_DEVICE_ORDER=PCI_BUS_ID number them.
        let given = coordinator::scheduler_gpus(&coordinator::process_env);
        let chosen: Vec<DeviceSpec> = (0..gpus.len())
            .filter(|i| {
                given
                    .as_ref()
                    .is_none_or(|(allowed, _)| allowed.contains(i))
            })
            .map(DeviceSpec::Gpu)
            .collect();
        let names: Vec<String> = chosen.iter().map(ToString::to_string).collect();
        let notice = match (&given, chosen.is_empty()) {
            (Some((_, source)), true) => format!(
                "pipeline: {source} names no Vulkan GPU of this machine; running on the CPU \
                 (burn flex)"
            ),
            (None, true) => {
                let facts = crate::diagnose::Facts::of_this_machine(nvidia, 0);
                match crate::diagnose::explain(&facts) {
                    Some(why) => format!("pipeline: {why}; running on the CPU (burn flex)"),
                    None => "pipeline: no GPU found; running on the CPU (burn flex)".to_owned(),
                }
            }
            (Some((_, source)), false) => {
                format!("pipeline: devices {} (from {source})", names.join(", "))
            }
            (None, false) => format!("pipeline: devices {}", names.join(", ")),
        };
        if chosen.is_empty() {
            return Ok((vec![DeviceSpec::Cpu], Some(notice)));
        }
        return Ok((chosen, Some(notice)));
    }
    if flag.eq_ignore_ascii_case("none") {
        return Ok((vec![DeviceSpec::Cpu], None));
    }
    let mut chosen = Vec::new();
    let mut probed = None;
    let mut probe = |part: &str| -> Result<crate::probe::Probe, String> {
        if probed.is_none() {
            probed = Some(crate::probe::probe().map_err(|e| format!("--gpus {part}: {e}"))?);
        }
        Ok(probed.clone().unwrap_or_default())
    };
    for part in flag.split(',') {
        let part = part.trim();
        let spec = if part.contains(':') && part.contains('.') {
            // A PCI bus id, as nvidia-smi and lspci print it.
            let index = probe(part)?.gpu_by_pci(part).ok_or_else(|| {
                format!("--gpus {part}: no Vulkan GPU at that PCI bus id (see `pipeline devices`)")
            })?;
            DeviceSpec::Gpu(index)
        } else {
            part.parse().map_err(|e| format!("--gpus: {e}"))?
        };
        if spec == DeviceSpec::Software && !probe(part)?.has_software() {
            return Err(format!(
                "--gpus {part}: Mesa's lavapipe (a Vulkan device on the CPU) is not installed; \
                 install the mesa-vulkan-drivers package, or use --gpus cpu"
            ));
        }
        if let DeviceSpec::Gpu(i) = spec {
            let count = probe(part)?.gpus.len();
            if i >= count {
                return Err(format!(
                    "--gpus {part}: this machine has {count} GPU(s) (see `pipeline devices`); \
                     use cpu or software to run without one"
                ));
            }
        }
        if chosen.contains(&spec) {
            return Err(format!("--gpus lists {spec} twice"));
        }
        chosen.push(spec);
    }
    Ok((chosen, None))
}

/// The weight file to use, a notice for the user, and how the file's
/// upstream rounds its centre crop (a Hugging Face checkpoint is
/// preprocessed as its HF processor does; anything else as torchvision).
fn weights(
    args: &RunArgs,
    model: ModelKind,
) -> Result<(Option<PathBuf>, String, CropRounding), String> {
    if let Some(path) = &args.weights {
        if !path.is_file() {
            return Err(format!("--weights {}: no such file", path.display()));
        }
        // Names and shapes only, here, so that a checkpoint of another
        // model is one line before any worker starts.
        let rounding =
            gpu_worker::Model::check_file(model, path).map_err(|e| format!("--weights: {e}"))?;
        return Ok((Some(path.clone()), String::new(), rounding));
    }
    // The cached files are torchvision's and EfficientNet-Lite0's; seeded
    // weights have no upstream but torchvision's.
    let cached = cached_file_name(model)
        .and_then(|name| Some(weights_dir()?.join(name)))
        .filter(|p| p.is_file());
    Ok(match cached {
        Some(path) => {
            let notice = format!("pipeline: {model} weights from {}", path.display());
            (Some(path), notice, CropRounding::HalfEven)
        }
        None => (
            None,
            format!(
                "pipeline: no --weights: {model} runs with seeded random weights (seed {}), \
                 so its predictions mean nothing; for real ones run scripts/fetch-weights.sh",
                args.seed
            ),
            CropRounding::HalfEven,
        ),
    })
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
}

/// Checks the shared flags and turns them into devices and a worker
/// configuration.
pub(crate) fn plan_workers(args: &RunArgs) -> Result<Planned, String> {
    let model: ModelKind = args.model.parse().map_err(|e| format!("--model: {e}"))?;
    let batch_size = match args.batch_size.trim() {
        "auto" => None,
        n => match n.parse::<usize>() {
            Ok(n) if (1..=4096).contains(&n) => Some(n),
            _ => return Err(format!("--batch-size {n}: expected auto or 1..=4096")),
        },
    };
    let (devices, device_notice) = chosen_devices(&args.gpus)?;
    let worker_devices = per_worker(&devices, args.workers_per_gpu as usize);
    let (weights, weights_notice, crop_rounding) = weights(args, model)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let loader_threads = args.loader_threads.map_or_else(
        || default_loader_threads(cores, &worker_devices),
        |n| n as usize,
    );
    let task = match (args.task, &args.classes) {
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
    let classes = match &args.classes {
        Some(path) => Some(zero_shot_classes(path, model, weights.as_deref())?),
        None => None,
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
    Ok(Planned {
        devices,
        worker_devices,
        worker: WorkerConfig {
            name: String::new(),
            device: DeviceSpec::Cpu,
            model,
            weights,
            seed: args.seed,
            task,
            pooling,
            classes,
            precision: args
                .precision
                .parse()
                .map_err(|e| format!("--precision: {e}"))?,
            batch_size,
            loader_threads,
            preprocess: PreprocessSpec {
                jpeg_draft: args.jpeg_draft,
                fast: args.fast_preprocess,
                crop_rounding,
                ..model.default_preprocess()
            },
            limits: DecodeLimits {
                max_pixels: args.max_pixels,
                // A decoded RGBA frame of the largest image, and never
                // below the default.
                max_alloc_bytes: args
                    .max_pixels
                    .saturating_mul(4)
                    .max(DecodeLimits::default().max_alloc_bytes),
                max_file_bytes: args.max_file_bytes,
            },
            remote: remote_spec(args)?,
        },
        notices: vec![device_notice.unwrap_or_default(), weights_notice],
    })
}

/// `--classes FILE`, read and checked against the model and its weights
/// before any worker starts; the workers read the matrix again, by its
/// absolute path.
fn zero_shot_classes(
    path: &Path,
    model: ModelKind,
    weights: Option<&Path>,
) -> Result<ZeroShotClasses, String> {
    let matrix = ClassMatrix::open(path).map_err(|e| format!("--classes: {e}"))?;
    gpu_worker::zero_shot::check(model, weights, &matrix)
        .map_err(|e| format!("--classes {}: {e}", path.display()))?;
    let path =
        std::fs::canonicalize(path).map_err(|e| format!("--classes {}: {e}", path.display()))?;
    Ok(ZeroShotClasses {
        path,
        labels: matrix.labels().to_vec(),
    })
}

/// One entry per worker process: each device `workers` times.
pub(crate) fn per_worker(devices: &[DeviceSpec], workers: usize) -> Vec<DeviceSpec> {
    devices
        .iter()
        .flat_map(|d| std::iter::repeat_n(d.clone(), workers))
        .collect()
}

/// `--io-concurrency`, `--io-timeout`, `--io-retries`.
fn remote_spec(args: &RunArgs) -> Result<RemoteSpec, String> {
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
