//! `--model FILE.onnx` (#41): a user's ONNX model resolved once, before any
//! worker starts, into the run's model description: the file and its
//! fingerprint (over the external-data files it keeps its weights in too,
//! each checked beside it), the output read, the preprocessing (flags, else a
//! `preprocessor_config.json` or timm `config.json` beside the model, else
//! a resize to the input's fixed size with ImageNet's statistics, said in
//! a warning), the task; or one line saying why not, exit 2.
//!
//! Decisions where the issue is silent: the task is `classify` where the
//! model names its classes (`--labels`, or `id2label` / `label_names` in a
//! `config.json` beside it), else `embed`, unless `--task` says; a label
//! file's blank line and a count that differs from the output's width are
//! errors (an off-by-one list would name every class wrongly); a
//! classifier scores as transformers' pipeline scores the model its
//! `config.json` describes (a sigmoid for a multi-label or single-logit
//! head, softmax otherwise) unless `--scores` says; ONNX models
//! run on ONNX Runtime's CUDA provider on NVIDIA GPUs where the loaded
//! runtime has it (`onnxruntime-gpu`), else `--gpus all` takes the CPU and
//! says so and a GPU named is refused; the flags of the built-in
//! models' own machinery (`--weights`, `--classes`, `--pooling`,
//! `--precision`) are refused rather than ignored.

use std::io::Read;
use std::path::{Path, PathBuf};

use gpu_worker::onnx::graph::Graph;
use pipeline_core::{
    DeviceSpec, EngineKind, Fnv64, ModelRef, OnnxModel, PreprocessSpec, Task, WorkerConfig,
};

use super::{ModelFlags, Planned, batch_size, decode_limits, loader_threads, per_worker};
use crate::args::{EngineArg, RunArgs, TaskArg};

/// Whether `--model` names an ONNX file (a path, or a URL with or without
/// a query).
pub(super) fn is_onnx(model: &str) -> bool {
    let file = if super::remote_model::is_remote(model) {
        model.split('?').next().unwrap_or(model)
    } else {
        model
    };
    file.to_ascii_lowercase().ends_with(".onnx")
}

/// The run of `args` with the ONNX model it names.
pub(super) fn plan(args: &RunArgs, flags: &ModelFlags) -> Result<Planned, String> {
    let name = &args.model;
    // What is refused costs nothing: before any download.
    for (given, flag) in [
        (args.weights.is_some(), "--weights"),
        (args.classes.is_some(), "--classes"),
        (args.pooling.is_some(), "--pooling"),
        (!args.prompts.is_empty(), "--prompt"),
        (args.tokenizer.is_some(), "--tokenizer"),
        (args.precision.trim() != "auto", "--precision"),
    ] {
        if given {
            return Err(format!(
                "{flag} goes with the built-in models, not an ONNX model"
            ));
        }
    }
    let remote = super::remote_spec(args)?;
    let path = if super::remote_model::is_remote(name) {
        super::remote_model::fetch(name, remote)?
    } else {
        PathBuf::from(name)
    };
    if !path.is_file() {
        return Err(format!("--model {name}: no such file"));
    }
    // Absolute, links kept: a Hugging Face cache's snapshot links to a blob
    // whose folder holds neither the config nor external weights.
    let path = std::path::absolute(&path).map_err(|e| format!("--model {name}: {e}"))?;
    let (fnv64, _external) = identify(&path, name)?;
    let (devices, device_notice) = devices(args.engine, &args.gpus, &path)?;
    let graph = gpu_worker::onnx::graph::describe(&path).map_err(|e| format!("--model: {e}"))?;
    // --task raw reads a list of outputs (--output A,B, else all), the
    // other tasks one float output.
    let mut raw_notice = None;
    let mut raw_bytes = None;
    let (output, width, raw) = if args.task == Some(TaskArg::Raw) {
        let wanted: Vec<String> = flags
            .output
            .iter()
            .flat_map(|o| o.split(','))
            .map(|o| o.trim().to_owned())
            .filter(|o| !o.is_empty())
            .collect();
        let (raw, left_out) =
            gpu_worker::onnx::raw::raw_outputs(&graph.outputs, &graph.input, &wanted)
                .map_err(|e| format!("--model {name}: {e}"))?;
        if !left_out.is_empty() {
            raw_notice = Some(format!(
                "pipeline: --task raw leaves out {}",
                left_out.join(", ")
            ));
        }
        let first = raw
            .first()
            .cloned()
            .ok_or_else(|| format!("--model {name}: the model has no output"))?;
        raw_bytes = raw_image_bytes(&graph.outputs, &raw);
        (first, None, raw)
    } else {
        let (output, width) = output(&graph, flags.output.as_deref(), name)?;
        (output, width, Vec::new())
    };
    let (preprocess, preprocess_notice) = preprocessing(&graph, &path, args, flags)?;
    // --normalize asks for embeddings: the model's names do not make it a
    // classifier then.
    let asked = args.task.or(flags.normalize.then_some(TaskArg::Embed));
    let labels = labels(&path, flags.labels.as_deref(), asked, &output, width)?;
    // A model that names its classes is a classifier unless told otherwise.
    let task = match (asked, labels.is_empty()) {
        (Some(TaskArg::Raw), _) => Task::Raw,
        (Some(TaskArg::Classify), _) | (None, false) => Task::Classify {
            top_k: args.top_k as usize,
        },
        (Some(TaskArg::Embed), _) | (None, true) => Task::Embed,
    };
    if flags.normalize && task != Task::Embed {
        return Err(
            "--normalize goes with --task embed (a classifier's rows are scores)".to_owned(),
        );
    }
    if flags.scores.is_some() && !matches!(task, Task::Classify { .. }) {
        return Err("--scores goes with --task classify".to_owned());
    }
    let scores = match flags.scores {
        Some(given) => given,
        None if matches!(task, Task::Classify { .. }) => config_scores(&path, width, labels.len())?,
        None => pipeline_core::Scores::default(),
    };
    let worker_devices = per_worker(&devices, args.workers_per_gpu as usize);
    let cuda_uuids = crate::devices::cuda_uuids(&devices);
    let loader_threads = loader_threads(args, &worker_devices);
    Ok(Planned {
        devices,
        worker_devices,
        worker: WorkerConfig {
            name: String::new(),
            device: DeviceSpec::Cpu,
            model: ModelRef::Onnx(OnnxModel {
                fnv64,
                onnx: path,
                output,
                width,
                scores,
                labels,
                raw,
                channels: if flags.preprocess.bgr {
                    pipeline_core::Channels::Bgr
                } else {
                    pipeline_core::Channels::Rgb
                },
                normalize: flags.normalize,
            }),
            weights: None,
            resolved: Default::default(),
            seed: args.seed,
            task,
            pooling: None,
            classes: None,
            precision: pipeline_core::Precision::Auto,
            engine: EngineKind::Onnx,
            batch_size: batch_size(args)?,
            loader_threads,
            preprocess,
            limits: decode_limits(&args.limits),
            remote: super::remote_spec(args)?,
            cuda_uuids,
            // Loaded by `describe` above: each worker loads the same
            // library without searching again.
            onnx_runtime: gpu_worker::onnx::runtime::onnx_runtime()
                .as_ref()
                .ok()
                .map(|r| r.library.clone()),
        },
        notices: vec![
            device_notice.unwrap_or_default(),
            preprocess_notice.unwrap_or_default(),
            raw_notice.unwrap_or_default(),
        ],
        class_dir: None,
        raw_bytes,
    })
}

/// The devices an ONNX model runs on, and a notice saying how `all`
/// chose: ONNX Runtime's CPU provider, or its CUDA provider on NVIDIA GPUs
/// where the loaded runtime has one (`onnxruntime-gpu`); `all` takes the
/// GPUs then, else the CPU and says why; a GPU named without the provider,
/// or another engine, is one line.
fn devices(
    engine: EngineArg,
    gpus: &str,
    model: &Path,
) -> Result<(Vec<DeviceSpec>, Option<String>), String> {
    let flag = gpus.trim();
    let lower = flag.to_ascii_lowercase();
    let cpu = matches!(lower.as_str(), "cpu" | "none");
    match engine {
        EngineArg::Auto | EngineArg::Cuda => {}
        EngineArg::Cpu if cpu || lower == "all" => return Ok((vec![DeviceSpec::Cpu], None)),
        EngineArg::Cpu => {
            return Err(format!(
                "--engine cpu runs on the CPU; --gpus {flag} names GPUs (leave --gpus out)"
            ));
        }
        EngineArg::Vulkan => {
            return Err(
                "--engine vulkan: an ONNX model runs on ONNX Runtime (its CPU provider, or its \
                 CUDA provider on NVIDIA GPUs): --engine auto"
                    .to_owned(),
            );
        }
    }
    if cpu {
        return match engine {
            EngineArg::Cuda => Err(format!(
                "--engine cuda runs NVIDIA GPUs; --gpus {flag} names the CPU (leave --gpus out)"
            )),
            _ => Ok((vec![DeviceSpec::Cpu], None)),
        };
    }
    let provider = gpu_worker::onnx::runtime::onnx_runtime()
        .as_ref()
        .is_ok_and(|r| r.providers.iter().any(|p| p == "CUDAExecutionProvider"));
    let no_provider = "this ONNX Runtime has no CUDA provider (pip install onnxruntime-gpu \
                       runs NVIDIA GPUs)";
    if lower == "all" && engine == EngineArg::Auto {
        if !provider {
            return Ok((
                vec![DeviceSpec::Cpu],
                Some(format!(
                    "pipeline: ONNX models run on the CPU here: {no_provider}"
                )),
            ));
        }
        let (devices, notice) =
            crate::devices::chosen_devices(flag, crate::devices::Runs::Cuda, None)?;
        if !devices.iter().all(|d| matches!(d, DeviceSpec::Gpu(_))) {
            let why = notice
                .as_deref()
                .and_then(|n| n.strip_prefix("pipeline: "))
                .map(|n| n.split("; running on the CPU").next().unwrap_or(n))
                .unwrap_or("no NVIDIA GPU found");
            return Ok((
                vec![DeviceSpec::Cpu],
                Some(format!("pipeline: {why}; ONNX models run on the CPU")),
            ));
        }
        // The provider listed is not the provider started: onnxruntime-gpu
        // lists it without the CUDA and cuDNN of its build. `all` tries it
        // once, on the first GPU the run takes, and runs the CPU if it
        // cannot: in a child process, since a provider started here would
        // keep a CUDA context and memory on that GPU for the whole run.
        let first = devices.iter().find_map(|d| match d {
            DeviceSpec::Gpu(i) => Some(*i),
            _ => None,
        });
        let uuid = first.and_then(|i| crate::devices::cuda_uuids(&devices).remove(&i));
        let runtime = gpu_worker::onnx::runtime::onnx_runtime()
            .as_ref()
            .ok()
            .map(|r| r.library.as_str());
        if let Err(why) = crate::probe::onnx_cuda_starts(model, runtime, uuid.as_deref()) {
            return Ok((
                vec![DeviceSpec::Cpu],
                Some(format!("pipeline: {why}; ONNX models run on the CPU")),
            ));
        }
        return Ok((devices, notice));
    }
    let named = if engine == EngineArg::Cuda {
        format!("--engine cuda (--gpus {flag})")
    } else {
        format!("--gpus {flag}")
    };
    if !provider {
        return Err(format!("{named}: {no_provider}; --gpus cpu runs the CPU"));
    }
    let (devices, notice) = crate::devices::chosen_devices(flag, crate::devices::Runs::Cuda, None)?;
    if devices.is_empty() || devices.iter().any(|d| !matches!(d, DeviceSpec::Gpu(_))) {
        return Err(format!(
            "{named}: ONNX Runtime's CUDA provider runs NVIDIA GPUs, and none is picked here"
        ));
    }
    Ok((devices, notice))
}

/// The bytes one image's slices of the outputs `names` take in a worker's
/// message (4 a float, 8 an integer, beside names and shapes), where the
/// graph fixes every axis but the batch.
fn raw_image_bytes(outputs: &[gpu_worker::onnx::graph::Output], names: &[String]) -> Option<usize> {
    names.iter().try_fold(0usize, |total, name| {
        let o = outputs.iter().find(|o| &o.name == name)?;
        let values = o.shape.get(1..)?.iter().try_fold(1usize, |n, &d| {
            usize::try_from(d).ok().and_then(|d| n.checked_mul(d))
        })?;
        let each = if o.element.starts_with("Float") { 4 } else { 8 };
        total.checked_add(values.checked_mul(each)?.checked_add(64 + name.len())?)
    })
}

/// The output read (`--output`, else the graph's first) and its values per
/// image where the graph fixes them.
fn output(
    graph: &Graph,
    wanted: Option<&str>,
    name: &str,
) -> Result<(String, Option<usize>), String> {
    let listed = || gpu_worker::onnx::graph::listed(&graph.outputs);
    let output = match wanted {
        Some(w) => graph.outputs.iter().find(|o| o.name == w).ok_or_else(|| {
            format!(
                "--output {w}: {name} has no such output; its outputs: {}",
                listed()
            )
        })?,
        None => graph
            .outputs
            .first()
            .ok_or_else(|| format!("--model {name}: the model has no output"))?,
    };
    if output.element != "Float32" && output.element != "Float16" {
        return Err(format!(
            "--model {name}: output {output} is not floats (pick a Float32 or Float16 one with \
             --output; its outputs: {})",
            listed()
        ));
    }
    let width = output
        .shape
        .get(1..)
        .filter(|rest| !rest.is_empty())
        .and_then(|rest| {
            rest.iter()
                .map(|&d| usize::try_from(d).ok().filter(|&d| d > 0))
                .product::<Option<usize>>()
        });
    Ok((output.name.clone(), width))
}

/// A classifier's class names: `--labels`' lines, else the `id2label` or
/// `label_names` of a `config.json` beside the model (unless `--task
/// embed`), else none; as many as the output's values where the graph
/// fixes them.
fn labels(
    model: &Path,
    file: Option<&Path>,
    task: Option<TaskArg>,
    output: &str,
    width: Option<usize>,
) -> Result<Vec<String>, String> {
    let (labels, source) = match (file, task) {
        (Some(_), Some(TaskArg::Embed | TaskArg::Raw)) => {
            return Err("--labels goes with --task classify".to_owned());
        }
        (Some(file), _) => {
            let shown = file.display();
            let text =
                std::fs::read_to_string(file).map_err(|e| format!("--labels {shown}: {e}"))?;
            let labels: Vec<String> = text
                .lines()
                .map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned())
                .collect();
            if let Some(blank) = labels.iter().position(|l| l.trim().is_empty()) {
                return Err(format!(
                    "--labels {shown}: line {} is blank (one class name per line, in class order)",
                    blank + 1
                ));
            }
            if labels.is_empty() {
                return Err(format!("--labels {shown}: the file is empty"));
            }
            (labels, format!("--labels {shown}"))
        }
        (None, Some(TaskArg::Embed | TaskArg::Raw)) => return Ok(Vec::new()),
        (None, _) => {
            let config = model.parent().unwrap_or(Path::new(".")).join("config.json");
            let Ok(text) = std::fs::read_to_string(&config) else {
                return Ok(Vec::new());
            };
            let shown = config.display();
            match pipeline_core::labels_from_config(&text).map_err(|e| format!("{shown}: {e}"))? {
                Some(labels) => (labels, shown.to_string()),
                None => return Ok(Vec::new()),
            }
        }
    };
    match width {
        Some(w) if w != labels.len() => Err(format!(
            "{source}: {} class names for output {output}'s {w} values{}",
            labels.len(),
            // Names a config file gave, on a model that may not classify.
            if file.is_none() {
                " (--task embed reads the output as it is)"
            } else {
                ""
            }
        )),
        _ => Ok(labels),
    }
}

/// How a classifier's values become scores unless `--scores` says: as
/// transformers' image-classification pipeline scores the model the
/// `config.json` beside it describes (`pipeline_core::scores_from_config`,
/// the hub path's rule): a sigmoid per class for `problem_type`
/// `multi_label_classification` or a single-logit head, the values as they
/// are for `regression`, else softmax. The head's width is the output's
/// where the graph fixes it, else the count of its class names.
fn config_scores(
    model: &Path,
    width: Option<usize>,
    names: usize,
) -> Result<pipeline_core::Scores, String> {
    let classes = width.or((names > 0).then_some(names));
    let config = model.parent().unwrap_or(Path::new(".")).join("config.json");
    // No config: only the head's width says anything.
    let text = std::fs::read_to_string(&config).unwrap_or_else(|_| "{}".to_owned());
    pipeline_core::scores_from_config(&text, classes)
        .map_err(|e| format!("{}: {e}", config.display()))
}

/// What the model sees: the flags over a config file beside the model,
/// else over a resize to the input's fixed size with ImageNet's
/// statistics (said in the notice); checked against the input's size.
fn preprocessing(
    graph: &Graph,
    path: &Path,
    args: &RunArgs,
    flags: &ModelFlags,
) -> Result<(PreprocessSpec, Option<String>), String> {
    let input = &graph.input;
    let shown = path.display();
    let f = &flags.preprocess;
    let bytes = input.pixels == gpu_worker::onnx::graph::PixelType::U8;
    if bytes && (f.mean.is_some() || f.std.is_some() || f.scale.is_some()) {
        return Err(format!(
            "--model {shown}: its input {} takes bytes (u8) and normalises them itself: \
             --mean, --std and --scale do not apply",
            input.name
        ));
    }
    // Flags that say everything need no config file (one the tool cannot
    // read is then passed over, with a notice).
    let complete =
        f.size.or(f.crop).is_some() && (bytes || f.mean.is_some() || f.scale == Some(255));
    let mut passed_over = None;
    let beside = match config_beside(path) {
        Ok(found) => found,
        Err(why) if complete => {
            passed_over = Some(format!(
                "pipeline: warning: {why}; the flags describe the preprocessing"
            ));
            None
        }
        Err(why) => {
            return Err(format!(
                "{why} (or give --size with --mean and --std to preprocess without it)"
            ));
        }
    };
    let (base, notice) = match (beside, input.size) {
        (Some((spec, file)), _) => (
            spec,
            Some(format!("pipeline: preprocessing from {}", file.display())),
        ),
        (None, Some((h, w))) if h == w => (
            PreprocessSpec {
                resize_shorter: h as u32,
                crop: w as u32,
                ..PreprocessSpec::IMAGENET
            },
            (!complete).then(|| {
                if f.size.or(f.crop).is_some() {
                    // The size is given: only the statistics are a guess.
                    return format!(
                        "pipeline: warning: no preprocessing file for {shown}: ImageNet's mean \
                         and std; give --mean and --std, or a preprocessor_config.json beside it"
                    );
                }
                let statistics = if bytes {
                    "its bytes as they are (a u8 input)"
                } else {
                    "ImageNet's mean and std unless given"
                };
                format!(
                    "pipeline: warning: no preprocessing file for {shown}: the shorter side \
                     resized to {h} unless given, a centre crop, {statistics}; give --size, \
                     --mean and --std, or a preprocessor_config.json beside it"
                )
            }),
        ),
        (None, Some((h, w))) => {
            return Err(format!(
                "--model {shown}: its input {} takes {h}×{w} images; the tool feeds square \
                 crops",
                input.name
            ));
        }
        (None, None) if flags.preprocess.size.or(flags.preprocess.crop).is_none() => {
            return Err(format!(
                "--model {shown}: its input {} takes images of any size: give --size N",
                input.name
            ));
        }
        (None, None) => (PreprocessSpec::IMAGENET, None),
    };
    let notice = passed_over.or(notice);
    // --channels bgr: the engine feeds the planes reversed; the loader's
    // crop is the same.
    let rgb = pipeline_core::PreprocessFlags {
        bgr: false,
        ..flags.preprocess.clone()
    };
    let spec = pipeline_core::spec_from_flags(&rgb, base)?;
    if let Some((h, w)) = input.size
        && (h, w) != (spec.crop as usize, spec.crop as usize)
    {
        return Err(format!(
            "--model {shown}: its input {} takes {h}×{w} images, and the preprocessing crops \
             {c}×{c}",
            input.name,
            c = spec.crop
        ));
    }
    // A u8 input gets the bytes: the run records no normalisation.
    let normalize = if bytes {
        pipeline_core::Normalize {
            mean: [0.0; 3],
            std: [1.0; 3],
        }
    } else {
        spec.normalize
    };
    Ok((
        PreprocessSpec {
            jpeg_draft: args.decode.jpeg_draft,
            fast: args.decode.fast_preprocess,
            normalize,
            ..spec
        },
        notice,
    ))
}

/// The preprocessing a `preprocessor_config.json` (Hugging Face) or a
/// `config.json` with a timm `pretrained_cfg` beside the model describes,
/// with the file's name; `None` when neither is there.
fn config_beside(model: &Path) -> Result<Option<(PreprocessSpec, PathBuf)>, String> {
    let dir = model.parent().unwrap_or(Path::new("."));
    for name in ["preprocessor_config.json", "config.json"] {
        let file = dir.join(name);
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        // A config.json without timm's pretrained_cfg describes no
        // preprocessing (a Hugging Face model config): passed over.
        if name == "config.json" && !text.contains("pretrained_cfg") {
            continue;
        }
        let (spec, _) = pipeline_core::spec_from_config(&text)
            .map_err(|e| format!("{}: {e}", file.display()))?;
        return Ok(Some((spec, file)));
    }
    Ok(None)
}

/// The model's fingerprint and its external-data files, from one read of
/// its bytes (a second read cost a tenth of a second per 100 MB).
fn identify(path: &Path, name: &str) -> Result<(String, Vec<(String, PathBuf)>), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("--model {name}: {e}"))?;
    let external = external_data(&bytes, path, name)?;
    Ok((fingerprint(&bytes, &external)?, external))
}

/// The external-data files the model at `path` (whose bytes are `bytes`)
/// keeps its weights in (`gpu_worker::onnx::external`), beside it, each
/// checked to be there: ONNX Runtime's own error names neither the file
/// nor what it is. A file that does not parse as a model names none here;
/// reading its graph says why it is no model.
fn external_data(bytes: &[u8], path: &Path, name: &str) -> Result<Vec<(String, PathBuf)>, String> {
    let files = gpu_worker::onnx::external::external_files(bytes)
        .map_err(|e| format!("--model {name}: {e}"))?
        .unwrap_or_default();
    let folder = path.parent().unwrap_or(Path::new("."));
    files
        .into_iter()
        .map(|file| {
            let beside = folder.join(&file);
            if beside.is_file() {
                Ok((file, beside))
            } else {
                Err(format!(
                    "--model {name}: the model keeps its weights in {file} beside it \
                     (its external data), which is not there; copy it from where the model \
                     came from"
                ))
            }
        })
        .collect()
}

/// FNV-1a 64 of the model's bytes, then of each external-data file's name
/// and bytes, as hex: a model without external data keeps the fingerprint
/// it always had, so earlier runs resume.
fn fingerprint(model: &[u8], external: &[(String, PathBuf)]) -> Result<String, String> {
    let mut hash = Fnv64::default();
    hash.write(model);
    for (name, file) in external {
        hash.write(name.as_bytes());
        hash_file(&mut hash, file)?;
    }
    Ok(format!("{:016x}", hash.finish()))
}

fn hash_file(hash: &mut Fnv64, path: &Path) -> Result<(), String> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buffer)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if n == 0 {
            return Ok(());
        }
        hash.write(&buffer[..n]);
    }
}

#[cfg(test)]
mod tests;
