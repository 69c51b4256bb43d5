//! `--model ORG/NAME[@REVISION]` (#42): a Hugging Face repo resolved once,
//! before any worker starts, into the run's model description
//! ([`pipeline_core::HubModel`]): its files from the cache or the hub
//! (`cache.rs`), the family and sizes from its `config.json`, the
//! classifier's labels and scoring, the preprocessing of its
//! `preprocessor_config.json` with the flags laid over it, and the weight
//! file checked by names and shapes; or one line saying why not, exit 2.
//!
//! A CLIP or SigLIP repo classifies zero-shot with `--classes`: labels go
//! through its own text tower and tokenizer (`text.rs`, fetched only
//! then), or a class matrix file is checked against its embedding.
//!
//! Decisions where the issue is silent:
//! - a repo with a classifier head classifies unless `--task embed`; its
//!   embedding is then what the head reads;
//! - the weights are `model.safetensors`, else a sharded checkpoint's
//!   index with its shards (`weights.rs`), else `pytorch_model.bin`;
//! - a ViT, CLIP or SigLIP is fed the config's own image size (their
//!   upstreams do not resample position embeddings unless asked), so a
//!   crop of another size is refused; DINOv2 resamples as transformers
//!   does; a ConvNeXt or ResNet takes the crop its processor gives;
//! - hub models run on every engine the built-in ViTs run on: burn's (CPU
//!   and Vulkan) and the CUDA engine, whose plan reads the checkpoint
//!   through the same layouts at the config's sizes; `--engine auto` takes
//!   the CUDA engine on NVIDIA GPUs as for a built-in name.

pub(crate) mod cache;
pub(crate) mod text;
mod weights;

use std::path::Path;

use pipeline_core::{
    DeviceSpec, Family, HubModel, ModelRef, Precision, PreprocessSpec, Task, WorkerConfig,
};

pub(crate) use self::cache::HubId;
pub(crate) use self::cache::offline_warning;
use self::cache::{HubEnv, Wanted};
use super::{ModelFlags, Planned, batch_size, decode_limits, loader_threads, per_worker};
use crate::args::{EngineArg, RunArgs, TaskArg};

/// open_clip's description of its model, in a repo with no transformers
/// `config.json`.
const OPEN_CLIP_CONFIG: &str = "open_clip_config.json";

/// The files that describe a repo's model (transformers' or timm's
/// `config.json`, else open_clip's own), fetched and checked first.
const DESCRIPTION: Wanted<'static> = Wanted {
    required: &[&["config.json", OPEN_CLIP_CONFIG]],
    optional: &["preprocessor_config.json"],
};

pub(super) use self::text::hub_id;

/// The run of `args` with the repo `id`'s model.
pub(super) fn plan(args: &RunArgs, flags: &ModelFlags, id: &HubId) -> Result<Planned, String> {
    for (given, flag, why) in [
        (args.weights.is_some(), "--weights", ": the repo holds them"),
        (flags.output.is_some(), "--output", ""),
        (
            flags.scores.is_some(),
            "--scores",
            ": the repo's problem_type says how its classes are scored",
        ),
        (
            flags.labels.is_some(),
            "--labels",
            ": the repo's id2label names its classes",
        ),
        (flags.normalize, "--normalize", ""),
        (
            args.task == Some(TaskArg::Raw),
            "--task raw",
            ": it reads an ONNX model's outputs",
        ),
    ] {
        if given {
            return Err(format!(
                "{flag} does not go with a hub model (--model {id}){why}"
            ));
        }
    }
    let env = HubEnv::from_env();
    let snapshot = cache::resolve(&env, id, &DESCRIPTION)?;
    // An open_clip repo without transformers' config.json.
    let open_clip = snapshot.file("config.json").is_none();
    let (config, preprocess) = if open_clip {
        let path = snapshot
            .file(OPEN_CLIP_CONFIG)
            .ok_or("open_clip_config.json resolved")?;
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--model {id}: {}: {e}", path.display()))?;
        pipeline_core::open_clip_config(&text).map_err(|e| format!("--model {id}: {e}"))?
    } else {
        described(id, &snapshot, flags)?
    };
    let spec = pipeline_core::spec_from_flags(&flags.preprocess, preprocess)?;
    let mut shape = config.shape;
    let crop = spec.crop as usize;
    if shape.family == Family::Dinov2 {
        if !crop.is_multiple_of(shape.patch) {
            return Err(format!(
                "--model {id}: a {crop}×{crop} crop is not a whole number of its {p}×{p} patches",
                p = shape.patch
            ));
        }
        shape.image = crop;
    } else if matches!(shape.family, Family::Convnext | Family::Resnet) {
        // A ConvNeXt or ResNet takes any size, as its processor's crop
        // gives it.
        shape.image = crop;
    } else if crop != config.image_size {
        return Err(format!(
            "--model {id}: it takes {s}×{s} images (its config's image_size), and the \
             preprocessing crops {crop}×{crop}",
            s = config.image_size
        ));
    }
    let classifier = shape.classes.is_some();
    if args.classes.is_none() && (!args.prompts.is_empty() || args.tokenizer.is_some()) {
        return Err("--prompt and --tokenizer go with --classes labels".to_owned());
    }
    if args.classes.is_some() && !matches!(shape.family, Family::Clip | Family::Siglip) {
        return Err(format!(
            "--classes needs a CLIP or SigLIP model; {id} is a {} with no text tower",
            family_name(shape.family)
        ));
    }
    if args.classes.is_some() && classifier {
        return Err(format!(
            "--classes: {id} classifies with its own head; zero-shot needs a CLIP or SigLIP \
             repo without one"
        ));
    }
    if args.classes.is_some() && shape.family == Family::Clip && shape.projection.is_none() {
        return Err(format!(
            "--classes: {id} is a CLIPVisionModel without its projection, which zero-shot \
             scores in; its CLIPModel repo classifies zero-shot"
        ));
    }
    let task = match args.task {
        Some(TaskArg::Embed) if args.classes.is_some() => {
            return Err("--classes goes with --task classify (zero-shot), not embed".to_owned());
        }
        Some(TaskArg::Classify) | None if args.classes.is_some() => Task::Classify {
            top_k: args.top_k as usize,
        },
        Some(TaskArg::Classify) if !classifier => {
            return Err(format!(
                "--task classify: {id} has no classifier head (its config names no \
                 …ForImageClassification); use --task embed"
            ));
        }
        Some(TaskArg::Embed) => Task::Embed,
        Some(TaskArg::Classify) | None if classifier => Task::Classify {
            top_k: args.top_k as usize,
        },
        _ => Task::Embed,
    };
    let pooling = match &args.pooling {
        None => None,
        Some(_) if shape.family != Family::Dinov2 => {
            return Err(format!("--pooling: only DINOv2 models take it, not {id}"));
        }
        Some(_) if task != Task::Embed || classifier => {
            return Err(
                "--pooling goes with --task embed of a DINOv2 without a classifier head".to_owned(),
            );
        }
        Some(p) => Some(
            p.parse::<pipeline_core::EmbedPooling>()
                .map_err(|e| format!("--pooling: {e}"))?,
        ),
    };
    let precision: Precision = args
        .precision
        .parse()
        .map_err(|e| format!("--precision: {e}"))?;
    let cuda_fits = super::cuda_precision(precision);
    if args.engine == EngineArg::Cuda
        && let Err(why) = &cuda_fits
    {
        return Err(format!("--engine cuda: {why}"));
    }
    let (devices, engine, device_notice) =
        crate::devices::engine_devices(args.engine, &args.gpus, cuda_fits)?;
    // The weights of the description's commit, whatever the branch now.
    let pinned = HubId {
        repo: id.repo.clone(),
        revision: snapshot.commit.clone(),
    };
    // Its weights, fetched once everything else is known to run.
    let (weights, weights_downloaded) = weights::resolve(&env, &pinned, open_clip)?;
    // Checked and resolved once: what every worker builds the network from.
    let resolved = gpu_worker::Model::resolve_hub_file(&shape, &id.to_string(), &weights)
        .map_err(|e| format!("--model {id}: {e}"))?;
    let (classes, class_dir) = match &args.classes {
        Some(value) => super::zero_shot::classes(
            value,
            args,
            &gpu_worker::zero_shot::ZeroShotModel {
                family: shape.family,
                name: &id.repo,
                dim: shape.feature_dim(),
                weights: Some(&weights),
                logit: resolved.logit,
            },
            || crate::embed_text::text_model(&pinned.to_string(), None, args.tokenizer.as_deref()),
            (&devices[0], engine),
        )?,
        None => (None, None),
    };
    let worker_devices = per_worker(&devices, args.workers_per_gpu as usize);
    let cuda_uuids = crate::devices::cuda_uuids(&devices);
    let loader_threads = loader_threads(args, &worker_devices);
    let model_notice = format!(
        "pipeline: {id} at {} ({}{}), {}",
        &snapshot.commit[..12],
        family_name(shape.family),
        shape
            .classes
            .map(|k| format!(", {k} classes"))
            .unwrap_or_default(),
        if snapshot.downloaded || weights_downloaded {
            format!("downloaded into {}", env.cache.display())
        } else {
            format!("from the cache {}", env.cache.display())
        }
    );
    Ok(Planned {
        devices,
        worker_devices,
        worker: WorkerConfig {
            name: String::new(),
            device: DeviceSpec::Cpu,
            model: ModelRef::Hub(HubModel {
                repo: id.repo.clone(),
                revision: snapshot.commit.clone(),
                weights,
                shape,
                labels: config.labels,
                scores: config.scores,
            }),
            weights: None,
            resolved,
            seed: args.seed,
            task,
            pooling,
            classes,
            precision,
            engine,
            batch_size: batch_size(args)?,
            loader_threads,
            preprocess: PreprocessSpec {
                jpeg_draft: args.decode.jpeg_draft,
                fast: args.decode.fast_preprocess,
                ..spec
            },
            limits: decode_limits(&args.limits),
            remote: super::remote_spec(args)?,
            cuda_uuids,
            onnx_runtime: None,
        },
        notices: vec![
            device_notice.unwrap_or_default(),
            // The hub could not be reached and the cache stood in.
            offline_warning().map(str::to_owned).unwrap_or_default(),
            model_notice,
        ],
        class_dir,
        raw_bytes: None,
    })
}

fn family_name(family: Family) -> &'static str {
    match family {
        Family::Vit => "ViT",
        Family::Dinov2 => "DINOv2",
        Family::Clip => "CLIP",
        Family::Siglip => "SigLIP",
        Family::Convnext => "ConvNeXt",
        Family::Resnet => "ResNet",
        _ => "a built-in family",
    }
}

/// The model and preprocessing a transformers or timm repo's
/// `config.json` (and `preprocessor_config.json`) describe.
fn described(
    id: &HubId,
    snapshot: &cache::Snapshot,
    flags: &ModelFlags,
) -> Result<(pipeline_core::HubConfig, PreprocessSpec), String> {
    let file = |name: &str| snapshot.file(name).map(Path::to_path_buf);
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|e| format!("--model {id}: {}: {e}", path.display()))
    };
    let config_path = file("config.json").ok_or("config.json resolved")?;
    let config_text = read(&config_path)?;
    let config =
        pipeline_core::hub_config(&config_text).map_err(|e| format!("--model {id}: {e}"))?;
    let preprocess = match file("preprocessor_config.json") {
        Some(path) => {
            pipeline_core::spec_from_config(&read(&path)?)
                .map_err(|e| format!("--model {id}: preprocessor_config.json: {e}"))?
                .0
        }
        // A timm repo's preprocessing is its config.json's pretrained_cfg.
        None if config_text.contains("\"pretrained_cfg\"") => {
            pipeline_core::spec_from_config(&config_text)
                .map_err(|e| format!("--model {id}: config.json: {e}"))?
                .0
        }
        None => {
            let p = &flags.preprocess;
            if p.size.or(p.crop).is_none() || p.mean.is_none() || p.std.is_none() {
                return Err(format!(
                    "--model {id}: the repo has no preprocessor_config.json; give --size, \
                     --mean and --std"
                ));
            }
            PreprocessSpec {
                crop_rounding: pipeline_core::CropRounding::Floor,
                ..PreprocessSpec::IMAGENET
            }
        }
    };
    Ok((config, preprocess))
}
