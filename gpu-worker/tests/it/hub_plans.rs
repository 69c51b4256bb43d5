//! Hugging Face repos on the CUDA engine (#42): the engine's plan of each
//! repo of `cli/tests/hub_repos/` (transformers' own `save_pretrained` of
//! seeded ViT, DINOv2, CLIP and SigLIP models and classifiers at sizes no
//! built-in name has, `scripts/make_hub_fixtures.py`), built from its
//! `config.json` as the worker builds it and run by its f32 reference on
//! the CPU, gives the burn engine's embeddings and scores for the same
//! pixels; the burn engine's are held to transformers' own outputs by
//! `cli/tests/it/hub/`. So the lowering of transformers' layouts (the bare
//! `ViTModel`, `ViTForImageClassification`, `Dinov2ForImageClassification`
//! with its class-token and patch-mean head, CLIP's and SigLIP's vision
//! towers, `ConvNextForImageClassification`, `ResNetForImageClassification`
//! of bottleneck and basic blocks, timm's ViT) is right before any GPU runs
//! it.

use std::path::{Path, PathBuf};

use crate::common;

use gpu_worker::{Architecture, BurnEngine, Engine, Model, PixelBatch};
use pipeline_core::{DeviceSpec, Normalize, Prediction, Scores, Task, hub_config};

/// Cosine at least this, per image.
const MIN_COSINE: f64 = 0.99999;
/// Largest |Δ| relative to the burn engine's largest |value|, per image.
const MAX_RELATIVE: f64 = 1e-4;

fn repos() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/hub_repos")
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let dot: f64 = got.iter().zip(want).map(|(a, b)| f64::from(a * b)).sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(x * x)).sum::<f64>().sqrt();
    let cosine = dot / (norm(got) * norm(want)).max(1e-30);
    let largest = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let worst = got
        .iter()
        .zip(want)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        cosine >= MIN_COSINE && f64::from(worst) <= MAX_RELATIVE * f64::from(largest),
        "{what}: cosine {cosine}, max |Δ| {worst} of {largest}"
    );
}

/// Two images of `side × side`, every pixel different.
fn images(side: usize) -> Vec<u8> {
    (0..2 * 3 * side * side)
        .map(|i| ((i * 37 + (i / side) * 11 + i / (3 * side * side) * 101) % 256) as u8)
        .collect()
}

/// A head's logits scored as the hub model's config says (a hub config
/// never asks for raw logits).
fn scored(logits: &[f32], scores: Scores) -> Vec<f32> {
    match scores {
        Scores::Sigmoid => logits.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect(),
        Scores::Softmax | Scores::Raw => {
            let top = logits.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
            let exp: Vec<f32> = logits.iter().map(|v| (v - top).exp()).collect();
            let sum: f32 = exp.iter().sum();
            exp.iter().map(|v| v / sum).collect()
        }
    }
}

#[test]
fn the_cuda_engines_plans_of_hub_repos_give_the_burn_engines_outputs() {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repos())
        .expect("cli/tests/hub_repos is committed")
        .map(|e| e.expect("entry").path())
        .filter(|p| common::hub_repo_config(p).is_some())
        .collect();
    dirs.sort();
    let device = gpu_worker::open(&DeviceSpec::Cpu).expect("the CPU opens");
    let normalize = Normalize {
        mean: [0.48, 0.46, 0.41],
        std: [0.27, 0.26, 0.28],
    };
    let (mut checked, mut classifiers) = (0, 0);
    for dir in dirs {
        let repo = dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a repo folder")
            .replace("--", "/");
        // A model type that is not built in (BEiT) is the CLI's one-line
        // refusal, tested there.
        let Some(Ok(config)) = common::hub_repo_config(&dir) else {
            continue;
        };
        let arch = Architecture::of_hub(&config.shape);
        let weights = common::hub_repo_weights(&dir);
        let side = config.shape.image;
        let pixels = images(side);
        let plan_error =
            |e: gpu_worker::WeightsError| -> ! { panic!("{repo}: the CUDA engine's plan: {e}") };
        let (features, logits) = match arch {
            Architecture::ConvNext(_) => {
                let plan = gpu_worker::cuda::plan::convnext_plan(&arch, &repo, &weights)
                    .unwrap_or_else(|e| plan_error(e));
                let (features, logits) =
                    plan.reference(&pixels, side, normalize.mean, normalize.std);
                (features, (!logits.is_empty()).then_some(logits))
            }
            Architecture::ResNet(_) => {
                let plan =
                    gpu_worker::cnn_plan(&arch, &repo, &weights).unwrap_or_else(|e| plan_error(e));
                let (features, logits) =
                    plan.reference(&pixels, side, normalize.mean, normalize.std);
                (features, (!logits.is_empty()).then_some(logits))
            }
            _ => gpu_worker::cuda::plan::vit_plan(&arch, &repo, &weights)
                .unwrap_or_else(|e| plan_error(e))
                .reference(&pixels, side, normalize.mean, normalize.std),
        };
        let burn = |task: Task| -> Vec<Prediction> {
            let mut model = Model::load_architecture(&arch, &repo, &weights, &device)
                .unwrap_or_else(|e| panic!("{repo}: the burn engine's model: {e}"));
            if config.scores == Scores::Sigmoid {
                model = model.with_sigmoid_scores();
            }
            BurnEngine::for_device(&DeviceSpec::Cpu, device.clone(), model, task)
                .infer(&PixelBatch::new(&pixels, 2, 2, side, &normalize))
                .unwrap_or_else(|e| panic!("{repo}: {e}"))
        };
        let dim = features.len() / 2;
        for (i, p) in burn(Task::Embed).into_iter().enumerate() {
            let Prediction::Embedding(want) = p else {
                panic!("{repo}: an embedding")
            };
            assert_close(
                &features[i * dim..(i + 1) * dim],
                &want,
                &format!("{repo}, embedding {i}"),
            );
        }
        if let Some(classes) = config.shape.classes {
            let logits = logits.unwrap_or_else(|| panic!("{repo}: the plan has its head"));
            let task = Task::Classify { top_k: classes };
            for (i, p) in burn(task).into_iter().enumerate() {
                let Prediction::TopK(top) = p else {
                    panic!("{repo}: classes")
                };
                let mut want = vec![0.0; classes];
                for s in top {
                    want[s.class as usize] = s.prob;
                }
                let got = scored(&logits[i * classes..(i + 1) * classes], config.scores);
                assert_close(&got, &want, &format!("{repo}, scores {i}"));
            }
            classifiers += 1;
        } else {
            assert!(logits.is_none(), "{repo}: no head in the checkpoint");
        }
        checked += 1;
    }
    // vit-backbone, vit-2labels, vit-sharded, dinov2-multilabel,
    // dinov2-registers, dinov2-registers-3labels, dinov2-swiglu,
    // dinov2-swiglu-2labels, vit-2labels-bin, resnet-basic-bin, clip-small,
    // clip-vision-bare,
    // siglip-small, clip-vision, siglip-vision, clip-classifier,
    // siglip-classifier, convnext-5labels, convnext-bare, timm-convnext,
    // timm-convnext-bare, timm-resnet18, timm-resnet50-bare,
    // resnet-3labels, resnet-basic, resnet-bare,
    // timm-vit, open-clip.
    assert_eq!((checked, classifiers), (28, 15), "repos planned");
}

/// A hub ResNet is checked before any worker starts by its file's names
/// and shapes against those transformers saves for its config (no layout,
/// no load): each fixture passes for its own config and is refused, in one
/// line naming the tensors, for the other's.
#[test]
fn a_hub_resnet_is_checked_by_names_and_shapes() {
    let shape = |repo: &str| {
        let text =
            std::fs::read_to_string(repos().join(repo).join("config.json")).expect("config.json");
        hub_config(&text).expect("a ResNet").shape
    };
    let weights = |repo: &str| repos().join(repo).join("model.safetensors");
    for repo in ["tiny-org--resnet-3labels", "tiny-org--resnet-basic"] {
        Model::resolve_hub_file(&shape(repo), repo, &weights(repo))
            .unwrap_or_else(|e| panic!("{repo}: {e}"));
    }
    let error = Model::resolve_hub_file(
        &shape("tiny-org--resnet-basic"),
        "basic",
        &weights("tiny-org--resnet-3labels"),
    )
    .expect_err("a bottleneck file for a basic config")
    .to_string();
    assert!(
        error.contains("tensors do not match") && error.contains("resnet.embedder"),
        "{error}"
    );
}

/// The CUDA engine's plan is built from what the coordinator resolved
/// (#42 item 7), as the burn engine's network is: the resolution the
/// coordinator makes (`Model::resolve_hub_file`) gives the plan the
/// wrapper gives; another activation than the config's is the plan's;
/// weights unresolved are refused.
#[test]
fn the_cuda_plan_takes_the_resolved_weights() {
    use gpu_worker::cuda::plan::{vit_plan, vit_plan_resolved};
    use pipeline_core::{HubActivation, ResolvedWeights};
    let repo = "tiny-org--clip-small";
    let text =
        std::fs::read_to_string(repos().join(repo).join("config.json")).expect("config.json");
    let shape = hub_config(&text).expect("a CLIP config").shape;
    let arch = Architecture::of_hub(&shape);
    let weights = repos().join(repo).join("model.safetensors");
    let resolved = Model::resolve_hub_file(&shape, repo, &weights).expect("resolves");
    let wrapped = vit_plan(&arch, repo, &weights).expect("a plan");
    let engine = vit_plan_resolved(&arch, repo, &weights, &resolved).expect("a plan");
    assert_eq!(engine, wrapped);
    assert_eq!(engine.config.activation, gpu_worker::Activation::QuickGelu);
    let gelu = ResolvedWeights {
        activation: Some(HubActivation::Gelu),
        ..resolved
    };
    let told = vit_plan_resolved(&arch, repo, &weights, &gelu).expect("a plan");
    assert_eq!(told.config.activation, gpu_worker::Activation::Gelu);
    let error = vit_plan_resolved(&arch, repo, &weights, &ResolvedWeights::default())
        .expect_err("unresolved weights")
        .to_string();
    assert!(error.contains("not resolved"), "{error}");
}
