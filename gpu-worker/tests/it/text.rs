//! The text towers against upstream: open_clip's `encode_text`, HF
//! `CLIPModel.get_text_features` and `SiglipModel.get_text_features` on the
//! small seeded checkpoints of `tests/vectors/families`, on token ids
//! (`scripts/make_text_vectors.py`), on the CPU and on Mesa's lavapipe.
//! Also the one-line refusals of checkpoints without a text tower.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::common;

use gpu_worker::text::TokenizerFamily;
use gpu_worker::{Activation, TextConfig, TextPooling, TextTower};
use pipeline_core::DeviceSpec;
use serde::Deserialize;

/// Cosine similarity at least this, per text.
const MIN_COSINE: f64 = 0.99999;
/// Largest |Δ|, per value (the embeddings are unit vectors).
const MAX_ABS: f64 = 1e-4;

#[derive(Deserialize)]
struct Towers {
    ids: Vec<Vec<u32>>,
    cases: HashMap<String, Case>,
}

#[derive(Deserialize)]
struct Case {
    files: Vec<String>,
    family: String,
    activation: String,
    embedding: Vec<Vec<f32>>,
}

fn families() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/families")
}

fn towers() -> Towers {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/text/towers.json");
    let json = std::fs::read_to_string(path).expect("text/towers.json is committed");
    serde_json::from_str(&json).expect("towers.json parses")
}

/// The small towers `make_family_vectors.py` saved: width 32, 4 heads, one
/// block, vocabulary 64, context 8, 16-wide CLIP projection.
fn config(case: &Case) -> TextConfig {
    let clip = case.family == "clip";
    TextConfig {
        vocab: 64,
        context: 8,
        width: 32,
        depth: 1,
        heads: 4,
        mlp: if case.files[0].starts_with("open_clip") || case.files[0].starts_with("clip") {
            128
        } else {
            64
        },
        eps: if clip { 1e-5 } else { 1e-6 },
        activation: match case.activation.as_str() {
            "quick_gelu" => Activation::QuickGelu,
            "gelu_pytorch_tanh" => Activation::GeluTanh,
            "gelu" => Activation::Gelu,
            other => panic!("activation {other}"),
        },
        causal: clip,
        pooling: if clip {
            TextPooling::EndOfText
        } else {
            TextPooling::Last
        },
        projection: if clip { 16 } else { 32 },
        projection_bias: !clip,
        tokenizer: if clip {
            TokenizerFamily::Clip
        } else {
            TokenizerFamily::Siglip
        },
    }
}

/// Cosine ≥ [`MIN_COSINE`] and max |Δ| ≤ [`MAX_ABS`].
fn assert_close(row: &[f32], want: &[f32], what: &str) {
    let dot: f64 = row.iter().zip(want).map(|(a, b)| f64::from(a * b)).sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(x * x)).sum::<f64>().sqrt();
    let cosine = dot / (norm(row) * norm(want));
    let worst = row
        .iter()
        .zip(want)
        .map(|(a, b)| f64::from((a - b).abs()))
        .fold(0.0, f64::max);
    assert!(cosine >= MIN_COSINE, "{what}: cosine {cosine}");
    assert!(worst <= MAX_ABS, "{what}: max |Δ| {worst}");
}

fn check(spec: &DeviceSpec, only: &[&str]) {
    let towers = towers();
    let device = gpu_worker::open(spec).expect("the device opens");
    let mut checked = 0;
    for (name, case) in &towers.cases {
        if !only.is_empty() && !only.contains(&name.as_str()) {
            continue;
        }
        for file in &case.files {
            let what = format!("{name} from {file} on {spec:?}");
            let tower = TextTower::load(config(case), name, &families().join(file), &device)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let got = tower.embed(&towers.ids);
            let dim = case.embedding[0].len();
            assert_eq!(got.len(), towers.ids.len() * dim, "{what}");
            for (row, want) in got.chunks_exact(dim).zip(&case.embedding) {
                assert_close(row, want, &what);
            }
            checked += 1;
        }
    }
    assert!(checked >= only.len().max(1), "cases ran: {checked}");
}

#[test]
fn text_towers_match_open_clip_and_transformers_on_the_cpu() {
    check(&DeviceSpec::Cpu, &[]);
}

/// Causal attention and the pooling gather on the GPU code path, in a
/// child process so that a crash in the driver fails by its signal.
#[test]
fn text_towers_match_upstream_on_the_software_adapter() {
    let test = "text_towers_match_upstream_on_the_software_adapter";
    let signal = common::in_child(module_path!(), test, || {
        if gpu_worker::open(&DeviceSpec::Software).is_err() {
            panic!("Mesa's lavapipe (mesa-vulkan-drivers) is needed; scripts/test.sh installs it");
        }
        check(&DeviceSpec::Software, &["open_clip", "hf_siglip"]);
    });
    assert_eq!(signal, None, "{test}: lavapipe died of signal {signal:?}");
}

#[test]
fn checkpoints_without_a_text_tower_are_one_line_errors() {
    let towers = towers();
    let device = gpu_worker::open(&DeviceSpec::Cpu).expect("cpu opens");
    let clip = config(&towers.cases["open_clip"]);
    for (file, says) in [
        ("hf_clip_vision/model.safetensors", "without a text tower"),
        ("hf_siglip_vision/model.safetensors", "without a text tower"),
        ("vit_b_tiny.pth", "has no text tower"),
        ("hf_siglip/model.safetensors", "its text tower does not fit"),
    ] {
        let error = match TextTower::load(clip.clone(), "clip", &families().join(file), &device) {
            Ok(_) => panic!("{file} gave a CLIP text tower"),
            Err(e) => e.to_string(),
        };
        assert!(error.contains(says), "{file}: {error}");
        assert!(
            !error.contains('\n') && error.len() < 600,
            "{file}: {error}"
        );
    }
}

/// The CUDA engine's plan of every text tower layout (#28: q/k/v fused,
/// CLIP's causal attention, the end-of-text or last token pooled, SigLIP's
/// head with its bias), run by its f32 reference over the whole padded
/// context, gives upstream's embeddings.
#[test]
fn the_cuda_engines_text_plans_give_upstreams_embeddings() {
    use gpu_worker::cuda::plan::text_plan;
    let towers = towers();
    let mut checked = 0;
    for (name, case) in &towers.cases {
        for file in &case.files {
            let what = format!("{name} from {file}, the CUDA engine's plan");
            let plan = text_plan(config(case), name, &families().join(file))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let got = plan.reference(&towers.ids);
            let dim = case.embedding[0].len();
            assert_eq!(got.len(), towers.ids.len() * dim, "{what}");
            for (row, want) in got.chunks_exact(dim).zip(&case.embedding) {
                assert_close(row, want, &what);
            }
            checked += 1;
        }
    }
    assert!(checked >= 6, "text checkpoints planned: {checked}");
}

/// Without `--weights`, `embed-text --engine cuda` plans the seeded
/// tensors the burn engine's tower draws: the seeded plan's reference
/// gives the burn tower's embeddings on the CPU, CLIP's and SigLIP's.
#[test]
fn the_cuda_engines_seeded_text_plans_are_the_burn_engines_seeded_towers() {
    use gpu_worker::cuda::plan::text_plan_seeded;
    let towers = towers();
    let device = gpu_worker::open(&DeviceSpec::Cpu).expect("the CPU opens");
    let mut names: Vec<&String> = towers.cases.keys().collect();
    names.sort();
    for name in names {
        let config = config(&towers.cases[name]);
        let plan = text_plan_seeded(config.clone(), name, 5);
        let tower = TextTower::seeded(config, name, 5, &device);
        let (got, want) = (plan.reference(&towers.ids), tower.embed(&towers.ids));
        assert_eq!(got.len(), want.len(), "{name}");
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5, "{name}, seeded: {g} against {w}");
        }
        // Another seed is another tower.
        let other = text_plan_seeded(plan.config.clone(), name, 6).reference(&towers.ids);
        assert!(other.iter().zip(&want).any(|(a, b)| (a - b).abs() > 1e-3));
    }
}
