//! The transformer and ConvNeXt families against PyTorch: small
//! configurations of the real upstream classes (torchvision, open_clip,
//! transformers), saved by upstream code in each published layout, and
//! their upstream forward passes as references
//! (`scripts/make_family_vectors.py`). Also the one-line errors for
//! checkpoints that do not fit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::common;

use gpu_worker::zero_shot::{ClassMatrix, ZeroShotRule};
use gpu_worker::{
    Activation, Architecture, BurnEngine, ConvNextConfig, Engine, Model, PixelBatch, Pooling,
    PosInterpolation, VitConfig, WeightsError,
};
use pipeline_core::{DeviceSpec, Family, Normalize, Prediction, Task};
use serde::Deserialize;
use serde_json::Value;

/// Cosine similarity at least this, per image.
const MIN_COSINE: f64 = 0.99999;
/// Largest |Δ| relative to the reference's largest |value|, per image.
const MAX_RELATIVE: f64 = 1e-4;

#[derive(Deserialize)]
struct Reference {
    cases: HashMap<String, Case>,
}

#[derive(Deserialize)]
struct Case {
    config: Value,
    files: Vec<String>,
    mean: [f32; 3],
    std: [f32; 3],
    images: String,
    side: usize,
    embed: Vec<Vec<f32>>,
    logits: Option<Vec<Vec<f32>>>,
    embed_mean: Option<Vec<Vec<f32>>>,
    embed_cls_mean: Option<Vec<Vec<f32>>>,
}

fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/families")
}

fn reference() -> Reference {
    let json = std::fs::read_to_string(vectors().join("reference.json"))
        .expect("families/reference.json is committed");
    serde_json::from_str(&json).expect("reference.json parses")
}

/// The architecture a case's `config` describes.
fn architecture(config: &Value) -> Architecture {
    if let Some(c) = config.get("convnext") {
        let list = |k: &str| -> Vec<usize> {
            c[k].as_array()
                .expect("a list")
                .iter()
                .map(|v| v.as_u64().expect("a count") as usize)
                .collect()
        };
        return Architecture::ConvNext(ConvNextConfig {
            dims: list("dims"),
            depths: list("depths"),
            classes: c["classes"].as_u64().expect("classes") as usize,
            head_eps: 1e-6,
        });
    }
    let c = &config["vit"];
    let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{k}")) as usize;
    let b = |k: &str| c[k].as_bool().unwrap_or_else(|| panic!("{k}"));
    let opt = |k: &str| c[k].as_u64().map(|v| v as usize);
    Architecture::Vit(VitConfig {
        patch: n("patch"),
        width: n("width"),
        depth: n("depth"),
        heads: n("heads"),
        mlp: n("mlp"),
        class_token: b("class_token"),
        registers: n("registers"),
        pos_grid: n("pos_grid"),
        image: n("image"),
        patch_bias: b("patch_bias"),
        pre_norm: b("pre_norm"),
        eps: c["eps"].as_f64().expect("eps"),
        activation: match c["activation"].as_str() {
            Some("gelu") => Activation::Gelu,
            Some("gelu_tanh") => Activation::GeluTanh,
            Some("quick_gelu") => Activation::QuickGelu,
            other => panic!("activation {other:?}"),
        },
        layer_scale: b("layer_scale"),
        final_norm: true,
        pooling: match c["pooling"].as_str() {
            Some("class") => Pooling::Class,
            Some("map") => Pooling::Map,
            other => panic!("pooling {other:?}"),
        },
        interpolation: PosInterpolation::Size,
        projection: opt("projection"),
        classes: opt("classes"),
        normalize: b("normalize"),
        hub: false,
    })
}

fn with_pooling(arch: &Architecture, pooling: Pooling) -> Architecture {
    match arch {
        Architecture::Vit(c) => Architecture::Vit(VitConfig {
            pooling,
            ..c.clone()
        }),
        other => other.clone(),
    }
}

fn run(engine: &dyn Engine, case: &Case, task: Task) -> Vec<Prediction> {
    let images = std::fs::read(vectors().join(&case.images)).expect("case images are committed");
    let normalize = Normalize {
        mean: case.mean,
        std: case.std,
    };
    let predictions = engine
        .infer(&PixelBatch::new(&images, 2, 2, case.side, &normalize))
        .unwrap_or_else(|e| panic!("forward pass ({task:?}): {e}"));
    assert_eq!(predictions.len(), 2);
    predictions
}

/// Cosine ≥ [`MIN_COSINE`] and max |Δ| ≤ [`MAX_RELATIVE`] × max |want|.
fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let dot: f64 = got
        .iter()
        .zip(want)
        .map(|(a, b)| f64::from(*a) * f64::from(*b))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let cosine = dot / (norm(got) * norm(want));
    let scale = want.iter().map(|v| f64::from(v.abs())).fold(0.0, f64::max);
    let worst = got
        .iter()
        .zip(want)
        .map(|(a, b)| f64::from((a - b).abs()))
        .fold(0.0, f64::max);
    assert!(
        cosine >= MIN_COSINE && worst <= MAX_RELATIVE * scale,
        "{what}: cosine {cosine:.8}, max |Δ| {worst:.3e} against max |ref| {scale:.3e}"
    );
}

fn softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f64> = logits.iter().map(|l| f64::from(l - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|e| (e / sum) as f32).collect()
}

fn check_case(name: &str, case: &Case, spec: &DeviceSpec, files: &[String]) {
    let device = gpu_worker::open(spec).expect("device opens");
    let arch = architecture(&case.config);
    for file in files {
        let path = vectors().join(file);
        let what = format!("{name} ({file}) on {spec}");
        let model = Model::load_architecture(&arch, name, &path, &device)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let engine = BurnEngine::for_device(spec, device.clone(), model, Task::Embed);
        for (i, p) in run(&engine, case, Task::Embed).into_iter().enumerate() {
            let Prediction::Embedding(v) = p else {
                panic!("{what}: an embedding")
            };
            assert_close(&v, &case.embed[i], &format!("{what}, embedding {i}"));
        }
        if let Some(logits) = &case.logits {
            let classes = logits[0].len();
            let model = Model::load_architecture(&arch, name, &path, &device)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let task = Task::Classify { top_k: classes };
            let engine = BurnEngine::for_device(spec, device.clone(), model, task);
            for (i, p) in run(&engine, case, task).into_iter().enumerate() {
                let Prediction::TopK(scores) = p else {
                    panic!("{what}: classes")
                };
                let mut probs = vec![0.0; classes];
                for s in scores {
                    probs[s.class as usize] = s.prob;
                }
                assert_close(
                    &probs,
                    &softmax(&logits[i]),
                    &format!("{what}, probabilities {i}"),
                );
            }
        }
    }
}

#[test]
fn every_family_and_layout_matches_pytorch_on_the_cpu() {
    let reference = reference();
    assert_eq!(
        reference.cases.len(),
        7,
        "every family and layout has a case"
    );
    let mut names: Vec<&String> = reference.cases.keys().collect();
    names.sort();
    for name in names {
        let case = &reference.cases[name];
        check_case(name, case, &DeviceSpec::Cpu, &case.files);
    }
}

#[test]
fn dinov2_pools_class_mean_or_both() {
    let reference = reference();
    let case = &reference.cases["hf_dinov2"];
    let device = gpu_worker::open(&DeviceSpec::Cpu).expect("cpu opens");
    let arch = architecture(&case.config);
    let wants = [
        (
            Pooling::Mean,
            case.embed_mean.as_ref().expect("mean reference"),
        ),
        (
            Pooling::ClassAndMean,
            case.embed_cls_mean.as_ref().expect("cls+mean reference"),
        ),
    ];
    for (pooling, want) in wants {
        let arch = with_pooling(&arch, pooling);
        let path = vectors().join(&case.files[0]);
        let model = Model::load_architecture(&arch, "dinov2", &path, &device).expect("loads");
        let engine = BurnEngine::for_device(&DeviceSpec::Cpu, device.clone(), model, Task::Embed);
        for (i, p) in run(&engine, case, Task::Embed).into_iter().enumerate() {
            let Prediction::Embedding(v) = p else {
                panic!("an embedding")
            };
            assert_close(&v, &want[i], &format!("{pooling:?} {i}"));
        }
    }
}

#[derive(Deserialize)]
struct ZeroShotReference {
    labels: Vec<String>,
    cases: HashMap<String, ZeroShotCase>,
}

#[derive(Deserialize)]
struct ZeroShotCase {
    checkpoint: String,
    classes: String,
    probs: Vec<Vec<f32>>,
}

/// Zero-shot classification against upstream's own scores
/// (`zero_shot.json`): open_clip's softmax with the file's logit_scale, HF
/// CLIPModel's logits_per_image, a CLIP vision tower with the default 100,
/// and SigLIP's sigmoid with its learned scale and bias; class matrices as
/// .npy with a .txt beside and .safetensors with labels in its metadata.
fn check_zero_shot(spec: &DeviceSpec, only: &[&str]) {
    let json = std::fs::read_to_string(vectors().join("zero_shot.json"))
        .expect("families/zero_shot.json is committed");
    let zero_shot: ZeroShotReference = serde_json::from_str(&json).expect("zero_shot.json parses");
    let reference = reference();
    let device = gpu_worker::open(spec).expect("device opens");
    let mut names: Vec<&String> = zero_shot.cases.keys().collect();
    names.sort();
    names.retain(|n| only.is_empty() || only.contains(&n.as_str()));
    assert!(!names.is_empty());
    for name in names {
        let zs = &zero_shot.cases[name];
        let (images, family) = match name.as_str() {
            "hf_siglip" => ("hf_siglip", Family::Siglip),
            "open_clip" => ("open_clip", Family::Clip),
            _ => ("hf_clip", Family::Clip),
        };
        let case = &reference.cases[images];
        let what = format!("zero-shot {name} on {spec}");
        let weights = vectors().join(&zs.checkpoint);
        let classes = ClassMatrix::open(&vectors().join(&zs.classes))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(classes.labels(), zero_shot.labels.as_slice(), "{what}");
        let rule = ZeroShotRule::of(family).expect("CLIP and SigLIP classify zero-shot");
        let model = Model::load_architecture(&architecture(&case.config), name, &weights, &device)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .with_zero_shot(&classes, &rule, name, Some(&weights), &device)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let task = Task::Classify {
            top_k: classes.rows(),
        };
        let engine = BurnEngine::for_device(spec, device.clone(), model, task);
        check_probabilities(&engine, case, classes.rows(), &zs.probs, &what);
    }
}

/// Every class's probability for the case's images, against `want`.
fn check_probabilities(engine: &BurnEngine, case: &Case, k: usize, want: &[Vec<f32>], what: &str) {
    let task = Task::Classify { top_k: k };
    for (i, p) in run(engine, case, task).into_iter().enumerate() {
        let Prediction::TopK(scores) = p else {
            panic!("{what}: classes")
        };
        let mut probs = vec![f32::NAN; k];
        for s in scores {
            probs[s.class as usize] = s.prob;
        }
        assert_close(&probs, &want[i], &format!("{what}, probabilities {i}"));
    }
}

#[test]
fn zero_shot_classification_matches_upstream_on_the_cpu() {
    check_zero_shot(&DeviceSpec::Cpu, &[]);
}

#[test]
fn a_siglip_vision_tower_alone_cannot_classify_zero_shot() {
    let reference = reference();
    let arch = architecture(&reference.cases["hf_siglip"].config);
    let device = gpu_worker::open(&DeviceSpec::Cpu).expect("cpu opens");
    let weights = vectors().join("hf_siglip_vision/model.safetensors");
    let classes = ClassMatrix::open(&vectors().join("zs_hf_siglip.npy")).expect("committed");
    let rule = ZeroShotRule::of(Family::Siglip).expect("a rule");
    let model = Model::load_architecture(&arch, "siglip", &weights, &device).expect("loads");
    let error = model
        .with_zero_shot(&classes, &rule, "siglip", Some(&weights), &device)
        .expect_err("no logit_scale or logit_bias")
        .to_string();
    assert!(
        error.contains("no logit_scale and logit_bias") && !error.contains('\n'),
        "{error}"
    );
    // A matrix of another width is refused too.
    let clip_classes = ClassMatrix::open(&vectors().join("zs_open_clip.npy")).expect("committed");
    let full = vectors().join("hf_siglip/model.safetensors");
    let model = Model::load_architecture(&arch, "siglip", &full, &device).expect("loads");
    let error = model
        .with_zero_shot(&clip_classes, &rule, "siglip", Some(&full), &device)
        .expect_err("16 wide rows for a 32 wide embedding")
        .to_string();
    assert!(error.contains("16 wide") && error.contains("32"), "{error}");
}

/// The GPU code path: Mesa's lavapipe runs the small CLIP (class token,
/// pre-norm, projection, normalised output) and SigLIP (attention-pooling
/// head) transformers and the ConvNeXt stack.
/// It runs in a child process, so that a crash inside the driver fails this
/// test by its signal instead of killing the test binary.
#[test]
fn a_transformer_and_a_convnext_match_pytorch_on_the_software_adapter() {
    let test = "a_transformer_and_a_convnext_match_pytorch_on_the_software_adapter";
    let signal = common::in_child(module_path!(), test, || {
        if gpu_worker::open(&DeviceSpec::Software).is_err() {
            panic!("Mesa's lavapipe (mesa-vulkan-drivers) is needed; scripts/test.sh installs it");
        }
        let reference = reference();
        for name in ["hf_clip", "hf_siglip", "torchvision_convnext"] {
            let case = &reference.cases[name];
            check_case(name, case, &DeviceSpec::Software, &case.files[..1]);
        }
        // Zero-shot heads without a matmul, softmax and sigmoid.
        check_zero_shot(&DeviceSpec::Software, &["hf_clip", "hf_siglip"]);
    });
    assert_eq!(signal, None, "{test}: lavapipe died of signal {signal:?}");
}

fn load_error(arch: &Architecture, file: &Path) -> String {
    let device = gpu_worker::open(&DeviceSpec::Cpu).expect("cpu opens");
    match Model::load_architecture(arch, "the model", file, &device) {
        Ok(_) => panic!("{} loaded, but should not fit", file.display()),
        Err(e) => {
            let line = e.to_string();
            assert!(!line.contains('\n'), "one line: {line}");
            assert!(line.len() < 800, "short: {line}");
            line
        }
    }
}

#[test]
fn checkpoints_that_do_not_fit_are_one_line_errors() {
    let reference = reference();
    let clip = architecture(&reference.cases["hf_clip"].config);
    let siglip = architecture(&reference.cases["hf_siglip"].config);

    // Another size: patch 16 asked of patch-8 weights.
    let Architecture::Vit(c) = &clip else {
        panic!("CLIP is a ViT")
    };
    let other_size = Architecture::Vit(VitConfig {
        patch: 16,
        pos_grid: 2,
        ..c.clone()
    });
    let line = load_error(&other_size, &vectors().join("hf_clip/model.safetensors"));
    assert!(line.contains("looks like a Hugging Face CLIP"), "{line}");
    assert!(
        line.contains("patch_embedding.weight is [32, 3, 8, 8], expected [32, 3, 16, 16]"),
        "{line}"
    );

    // Another family: SigLIP weights for CLIP, CLIP for SigLIP.
    let line = load_error(&clip, &vectors().join("hf_siglip/model.safetensors"));
    assert!(
        line.contains("looks like a Hugging Face SigLIP checkpoint, not an OpenCLIP"),
        "{line}"
    );
    let line = load_error(&siglip, &vectors().join("open_clip_model.safetensors"));
    assert!(line.contains("looks like an OpenCLIP"), "{line}");

    // A text tower alone.
    let line = load_error(&clip, &vectors().join("clip_text_only.safetensors"));
    assert!(line.contains("text tower only"), "{line}");

    // OpenAI's TorchScript archive.
    let line = load_error(&clip, &vectors().join("openai_torchscript.pt"));
    assert!(line.contains("TorchScript"), "{line}");

    // Truncated files, in both containers.
    let dir = tempfile::tempdir().expect("temp dir");
    for file in ["hf_clip/model.safetensors", "open_clip_pytorch_model.bin"] {
        let bytes = std::fs::read(vectors().join(file)).expect("committed");
        let cut = dir.path().join(file.replace('/', "_"));
        std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).expect("write");
        let device = gpu_worker::open(&DeviceSpec::Cpu).expect("cpu opens");
        match Model::load_architecture(&clip, "clip", &cut, &device) {
            Err(e @ WeightsError::Unreadable { .. }) => {
                let line = e.to_string();
                assert!(!line.contains('\n'), "one line: {line}");
            }
            Err(other) => panic!("{file} cut: {other}"),
            Ok(_) => panic!("{file} cut short still loaded"),
        }
    }
}

#[test]
fn a_mismatch_lists_a_few_tensors_and_counts_the_rest() {
    // ResNet-style weights for a ViT: every tensor differs.
    let reference = reference();
    let vit = architecture(&reference.cases["torchvision_vit"].config);
    let line = load_error(&vit, &vectors().join("convnext_tiny_small.pth"));
    assert!(line.contains("looks like a torchvision ConvNeXt"), "{line}");
    let dinov2 = architecture(&reference.cases["hf_dinov2"].config);
    let Architecture::Vit(c) = &dinov2 else {
        panic!("DINOv2 is a ViT")
    };
    let deeper = Architecture::Vit(VitConfig {
        depth: 12,
        ..c.clone()
    });
    let line = load_error(&deeper, &vectors().join("hf_dinov2/model.safetensors"));
    assert!(line.contains("encoder.layer.2."), "{line}");
    assert!(line.contains("more mismatched tensors"), "{line}");
}

#[derive(Deserialize)]
struct LabelsReference {
    labels: Vec<String>,
    templates: Vec<String>,
    probs: Vec<Vec<f32>>,
    classifier: Vec<Vec<f32>>,
    texts: Vec<String>,
    text_embeddings: Vec<Vec<f32>>,
}

/// Zero-shot from plain labels (`--classes "…" --prompt …`): open_clip's
/// tokenizer on its real vocabulary, a checkpoint whose text tower reads it
/// (`text/open_clip_text.bin`, width 8), several templates averaged as
/// `build_zero_shot_classifier` does, then the image side as above.
fn check_zero_shot_from_labels(spec: &DeviceSpec) {
    use gpu_worker::text::{TextEncoder, TextTokenizer};
    use gpu_worker::{TextConfig, TextPooling, TextTower};

    let text = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/text");
    let json = std::fs::read_to_string(text.join("zero_shot_labels.json"))
        .expect("text/zero_shot_labels.json is committed");
    let reference: LabelsReference = serde_json::from_str(&json).expect("it parses");
    let weights = text.join("open_clip_text.bin");
    let device = gpu_worker::open(spec).expect("device opens");
    let config = TextConfig {
        vocab: 49408,
        context: 77,
        width: 8,
        depth: 1,
        heads: 2,
        mlp: 32,
        eps: 1e-5,
        activation: Activation::QuickGelu,
        causal: true,
        pooling: TextPooling::EndOfText,
        projection: 16,
        projection_bias: false,
        tokenizer: gpu_worker::text::TokenizerFamily::Clip,
    };
    let tower = TextTower::load(config, "clip", &weights, &device).expect("the text tower loads");
    let encoder = TextEncoder::of(tower, TextTokenizer::OpenClip);
    let what = format!("zero-shot from labels on {spec}");
    let family = (Family::Clip, "open_clip", "clip");
    check_labels(spec, &device, &encoder, &reference, family, &weights, &what);
}

/// `encoder` on `reference`'s texts alone, its class embeddings of the
/// labels through the templates, then the image model of the reference
/// case `family.1` with those classes, scored against `reference.probs`.
fn check_labels(
    spec: &DeviceSpec,
    device: &burn::tensor::Device,
    encoder: &gpu_worker::text::TextEncoder,
    reference: &LabelsReference,
    (family, case, name): (Family, &str, &str),
    weights: &Path,
    what: &str,
) {
    use gpu_worker::text::prompts;
    let dim = encoder.dim();
    // Texts alone: the empty one and one past the context too.
    let got = encoder.embed(&reference.texts).expect("burn's pass");
    for (row, want) in got.chunks_exact(dim).zip(&reference.text_embeddings) {
        assert_close(row, want, &format!("{what}: a text's embedding"));
    }
    let rows = prompts::class_embeddings(&reference.labels, &reference.templates, dim, |texts| {
        encoder.embed(texts)
    })
    .expect("burn's pass");
    for (row, want) in rows.chunks_exact(dim).zip(&reference.classifier) {
        assert_close(row, want, &format!("{what}: class embeddings"));
    }
    let classes = ClassMatrix::new(reference.labels.clone(), dim, rows);
    let case = &reference_cases()[case];
    let rule = ZeroShotRule::of(family).expect("the family classifies zero-shot");
    let model = Model::load_architecture(&architecture(&case.config), name, weights, device)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .with_zero_shot(&classes, &rule, name, Some(weights), device)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let task = Task::Classify {
        top_k: classes.rows(),
    };
    let engine = BurnEngine::for_device(spec, device.clone(), model, task);
    check_probabilities(&engine, case, classes.rows(), &reference.probs, what);
}

/// SigLIP from plain labels: transformers' `SiglipTokenizer` on the
/// `spiece.model` beside the checkpoint (`text/siglip/`, trained by
/// `make_siglip_text_vectors.py`), its text tower (no causal mask, the last
/// token, a head with a bias), several templates averaged, then sigmoid
/// scores with the checkpoint's scale and bias, against SiglipModel's.
fn check_siglip_from_labels(spec: &DeviceSpec) {
    use gpu_worker::text::{TextEncoder, TokenizerFamily, tokenizer_for};
    use gpu_worker::{TextConfig, TextPooling, TextTower};

    let text = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/text");
    let json = std::fs::read_to_string(text.join("siglip_labels.json"))
        .expect("text/siglip_labels.json is committed");
    let reference: LabelsReference = serde_json::from_str(&json).expect("it parses");
    let weights = text.join("siglip/model.safetensors");
    let device = gpu_worker::open(spec).expect("device opens");
    let config = TextConfig {
        vocab: 1000,
        context: 64,
        width: 32,
        depth: 2,
        heads: 4,
        mlp: 64,
        eps: 1e-6,
        activation: Activation::GeluTanh,
        causal: false,
        pooling: TextPooling::Last,
        projection: 32,
        projection_bias: true,
        tokenizer: TokenizerFamily::Siglip,
    };
    let tokenizer = tokenizer_for(Some(&weights), None, &config)
        .unwrap_or_else(|e| panic!("the spiece.model beside the weights: {e}"));
    assert!(
        tokenizer.describe().starts_with("spiece.model"),
        "{}",
        tokenizer.describe()
    );
    let tower = TextTower::load(config, "siglip", &weights, &device).expect("the text tower loads");
    let encoder = TextEncoder::of(tower, tokenizer);
    let what = format!("SigLIP zero-shot from labels on {spec}");
    let family = (Family::Siglip, "hf_siglip", "siglip");
    check_labels(spec, &device, &encoder, &reference, family, &weights, &what);
}

#[test]
fn siglip_zero_shot_from_labels_matches_transformers_on_the_cpu() {
    check_siglip_from_labels(&DeviceSpec::Cpu);
}

#[test]
fn siglip_zero_shot_from_labels_matches_transformers_on_the_software_adapter() {
    let test = "siglip_zero_shot_from_labels_matches_transformers_on_the_software_adapter";
    let signal = common::in_child(module_path!(), test, || {
        check_siglip_from_labels(&DeviceSpec::Software)
    });
    assert_eq!(signal, None, "{test}: lavapipe died of signal {signal:?}");
}

fn reference_cases() -> HashMap<String, Case> {
    reference().cases
}

#[test]
fn zero_shot_from_labels_and_templates_matches_open_clip_on_the_cpu() {
    check_zero_shot_from_labels(&DeviceSpec::Cpu);
}

#[test]
fn zero_shot_from_labels_matches_open_clip_on_the_software_adapter() {
    let test = "zero_shot_from_labels_matches_open_clip_on_the_software_adapter";
    let signal = common::in_child(module_path!(), test, || {
        check_zero_shot_from_labels(&DeviceSpec::Software)
    });
    assert_eq!(signal, None, "{test}: lavapipe died of signal {signal:?}");
}

#[derive(Deserialize)]
struct GeluReference {
    ids: Vec<Vec<u32>>,
    cases: HashMap<String, GeluCase>,
}

#[derive(Deserialize)]
struct GeluCase {
    weights: String,
    images: String,
    image: Vec<Vec<f32>>,
    text: Vec<Vec<f32>>,
}

/// The image embeddings of `weights` loaded as the (QuickGELU) reference
/// case `case`'s architecture, and its text tower's embeddings of `ids`.
fn clip_embeddings(
    case: &Case,
    weights: &Path,
    ids: &[Vec<u32>],
    device: &burn::tensor::Device,
) -> (Vec<Vec<f32>>, Vec<f32>) {
    use gpu_worker::text::TokenizerFamily;
    use gpu_worker::{TextConfig, TextPooling, TextTower};
    let model = Model::load_architecture(&architecture(&case.config), "clip", weights, device)
        .unwrap_or_else(|e| panic!("{}: {e}", weights.display()));
    let engine = BurnEngine::for_device(&DeviceSpec::Cpu, device.clone(), model, Task::Embed);
    let images = run(&engine, case, Task::Embed)
        .into_iter()
        .map(|p| match p {
            Prediction::Embedding(v) => v,
            other => panic!("an embedding, not {other:?}"),
        })
        .collect();
    let config = TextConfig {
        vocab: 64,
        context: 8,
        width: 32,
        depth: 1,
        heads: 4,
        mlp: if case.images.starts_with("open_clip") {
            128
        } else {
            64
        },
        eps: 1e-5,
        activation: Activation::QuickGelu,
        causal: true,
        pooling: TextPooling::EndOfText,
        projection: 16,
        projection_bias: false,
        tokenizer: TokenizerFamily::Clip,
    };
    let tower = TextTower::load(config, "clip", weights, device)
        .unwrap_or_else(|e| panic!("{}: {e}", weights.display()));
    (images, tower.embed(ids))
}

/// A CLIP checkpoint whose config beside it says GELU (LAION's OpenCLIP
/// `open_clip_config.json`, a Hugging Face `config.json`) runs GELU in both
/// towers, as open_clip and transformers do, though the architecture by
/// name is OpenAI's QuickGELU; the same weights without their config run
/// QuickGELU and differ.
#[test]
fn clip_towers_take_gelu_or_quick_gelu_from_the_checkpoints_config() {
    let json = std::fs::read_to_string(vectors().join("gelu.json"))
        .expect("families/gelu.json is committed");
    let reference: GeluReference = serde_json::from_str(&json).expect("gelu.json parses");
    let device = gpu_worker::open(&DeviceSpec::Cpu).expect("the CPU opens");
    let cases = reference_cases();
    assert_eq!(reference.cases.len(), 2);
    for (name, gelu) in &reference.cases {
        let case = &cases[&gelu.images];
        let weights = vectors().join(&gelu.weights);
        let what = format!("{name} with GELU in its config");
        let (images, text) = clip_embeddings(case, &weights, &reference.ids, &device);
        for (got, want) in images.iter().zip(&gelu.image) {
            assert_close(got, want, &format!("{what}: image"));
        }
        for (got, want) in text.chunks_exact(16).zip(&gelu.text) {
            assert_close(got, want, &format!("{what}: text"));
        }
        let alone = tempfile::tempdir().expect("a temp dir");
        let copy = alone.path().join(weights.file_name().expect("a file name"));
        std::fs::copy(&weights, &copy).expect("copy the weights alone");
        let (images, text) = clip_embeddings(case, &copy, &reference.ids, &device);
        let apart = |got: &[f32], want: &[f32]| {
            got.iter()
                .zip(want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max)
        };
        assert!(
            apart(&images[0], &gelu.image[0]) > 1e-3,
            "{name}: without its config the image tower still ran GELU"
        );
        assert!(
            apart(&text[..16], &gelu.text[0]) > 1e-3,
            "{name}: without its config the text tower still ran GELU"
        );
    }
}

/// A config beside the weights that does not read, or names an activation
/// not run here, is a one-line error.
#[test]
fn a_clip_config_that_cannot_be_used_is_a_one_line_error() {
    let device = gpu_worker::open(&DeviceSpec::Cpu).expect("the CPU opens");
    let case = &reference_cases()["hf_clip"];
    let dir = tempfile::tempdir().expect("a temp dir");
    let weights = dir.path().join("model.safetensors");
    std::fs::copy(vectors().join("gelu/hf_clip/model.safetensors"), &weights).expect("copy");
    for (config, says) in [
        ("{not json", "config.json beside it is not JSON"),
        (
            r#"{"vision_config": {"hidden_act": "silu"}}"#,
            "names hidden_act \"silu\"",
        ),
    ] {
        std::fs::write(dir.path().join("config.json"), config).expect("write");
        let arch = architecture(&case.config);
        let error = match Model::load_architecture(&arch, "clip", &weights, &device) {
            Ok(_) => panic!("{config}: refused"),
            Err(e) => e.to_string(),
        };
        assert!(error.contains(says), "{error}");
        assert!(!error.contains('\n'), "{error}");
    }
}

/// The CUDA engine's plan of every ViT layout (#28: the patch convolution
/// as a GEMM, q/k/v fused, DINOv2's layer scales folded into the GEMMs,
/// SigLIP's attention-pooling head, the CLIP config's activation), run by
/// its f32 reference on the CPU, gives PyTorch's embeddings and logits:
/// the lowering and the packing are right before any GPU runs them.
#[test]
fn the_cuda_engines_vit_plans_give_pytorchs_outputs() {
    let checked = for_each_vit_plan(|name, file, case, plan, images| {
        let what = format!("{name} ({file}), the CUDA engine's plan");
        let dim = plan.config.feature_dim();
        let (features, logits) = plan.reference(images, case.side, case.mean, case.std);
        assert_eq!(features.len(), case.embed.len() * dim, "{what}");
        for (i, want) in case.embed.iter().enumerate() {
            assert_close(
                &features[i * dim..(i + 1) * dim],
                want,
                &format!("{what}, {i}"),
            );
        }
        if let Some(want) = &case.logits {
            let logits = logits.unwrap_or_else(|| panic!("{what}: logits"));
            let k = want[0].len();
            for (i, want) in want.iter().enumerate() {
                assert_close(
                    &logits[i * k..(i + 1) * k],
                    want,
                    &format!("{what}, logits {i}"),
                );
            }
        }
    });
    assert!(checked >= 8, "ViT checkpoints planned: {checked}");
}

/// Calls `check` with each ViT checkpoint of the reference cases (name,
/// file, case, its CUDA plan, the case's images), in name order; gives
/// how many.
fn for_each_vit_plan(
    mut check: impl FnMut(&str, &str, &Case, &gpu_worker::cuda::plan::VitPlan, &[u8]),
) -> usize {
    let cases = reference_cases();
    let mut names: Vec<&String> = cases.keys().collect();
    names.sort();
    let mut checked = 0;
    for name in names {
        let case = &cases[name];
        let arch = architecture(&case.config);
        if !matches!(arch, Architecture::Vit(_)) {
            continue;
        }
        let images = std::fs::read(vectors().join(&case.images)).expect("case images");
        for file in &case.files {
            let plan = gpu_worker::cuda::plan::vit_plan(&arch, name, &vectors().join(file))
                .unwrap_or_else(|e| panic!("{name} ({file}): {e}"));
            check(name, file, case, &plan, &images);
            checked += 1;
        }
    }
    checked
}

/// The CUDA engine's plan of torchvision's ConvNeXt (#28: the stem and
/// the downsamplings as GEMMs over patches, channels last, the depthwise
/// filters as `[7, 7, C]`, the layer scales folded), run by its f32
/// reference, gives PyTorch's features and logits.
#[test]
fn the_cuda_engines_convnext_plan_gives_pytorchs_outputs() {
    use gpu_worker::cuda::plan::convnext_plan;
    let case = &reference_cases()["torchvision_convnext"];
    let arch = architecture(&case.config);
    let images = std::fs::read(vectors().join(&case.images)).expect("case images");
    let plan = convnext_plan(&arch, "convnext", &vectors().join(&case.files[0]))
        .unwrap_or_else(|e| panic!("{e}"));
    let (features, logits) = plan.reference(&images, case.side, case.mean, case.std);
    let dim = case.embed[0].len();
    for (i, want) in case.embed.iter().enumerate() {
        assert_close(
            &features[i * dim..(i + 1) * dim],
            want,
            &format!("features {i}"),
        );
    }
    let want = case.logits.as_ref().expect("ConvNeXt has logits");
    let k = want[0].len();
    for (i, want) in want.iter().enumerate() {
        assert_close(&logits[i * k..(i + 1) * k], want, &format!("logits {i}"));
    }
}
