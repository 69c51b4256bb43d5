//! An ONNX classifier scores as the `config.json` beside it says, end to
//! end, over optimum's exports of `cli/tests/onnx_upstream/`
//! (`scripts/make_onnx_multi_label.py`): a transformers ViT with
//! `problem_type: multi_label_classification`, and one with a single
//! logit, each class scored with the sigmoid transformers'
//! image-classification pipeline gives it (its scores stored beside each
//! model, from transformers itself), within 1e-5, named from `id2label`;
//! and `--scores softmax` overrides the config: the softmax of the
//! PyTorch model's logits.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{infer, runtime_or_skip, stderr};

fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/onnx_upstream")
}

/// `name`'s `reference.json`: the images in order, the labels, the PyTorch
/// model's logits and the pipeline's scores, a row per image.
struct Reference {
    images: Vec<String>,
    labels: Vec<String>,
    logits: Vec<Vec<f64>>,
    scores: Vec<Vec<f64>>,
}

fn reference(name: &str) -> Reference {
    let path = folder().join(name).join("reference.json");
    let text = std::fs::read_to_string(&path).expect("reference.json beside the model");
    let all: Value = serde_json::from_str(&text).expect("json");
    let field = |key: &str| all[key].clone();
    Reference {
        images: serde_json::from_value(field("images")).expect("images"),
        labels: serde_json::from_value(field("labels")).expect("labels"),
        logits: serde_json::from_value(field("logits")).expect("logits"),
        scores: serde_json::from_value(field("scores")).expect("scores"),
    }
}

fn softmax(row: &[f64]) -> Vec<f64> {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = row.iter().map(|v| (v - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|v| v / sum).collect()
}

/// Each image once in order, every class in the order of `want`'s
/// scores, each within 1e-5 of its score and named as the model names it.
fn assert_scores(cwd: &Path, name: &str, extra: &[&str], want: &[Vec<f64>]) {
    let reference = reference(name);
    let model = folder().join(name).join("model.onnx");
    let k = reference.labels.len().to_string();
    let mut args = vec![
        "--model",
        model.to_str().expect("utf-8 path"),
        "--top-k",
        &k,
    ];
    args.extend_from_slice(extra);
    let out = cwd.join(format!("{name}{}.jsonl", extra.join("")));
    let run = infer(cwd, &folder().join("images"), &out, &args);
    assert_eq!(run.status.code(), Some(0), "{name}: {}", stderr(&run));
    let records = crate::common::records(&out);
    assert_eq!(records.len(), reference.images.len(), "{name}: every image");
    for (i, (record, want)) in records.iter().zip(want).enumerate() {
        assert_eq!(record["path"], reference.images[i].as_str(), "{name}");
        let mut order: Vec<usize> = (0..want.len()).collect();
        order.sort_by(|&a, &b| want[b].total_cmp(&want[a]));
        let top = record["top_k"].as_array().expect("top_k");
        let classes: Vec<usize> = top
            .iter()
            .map(|t| t["class"].as_u64().expect("class") as usize)
            .collect();
        assert_eq!(classes, order, "{name} {extra:?} image {i}: the order");
        for t in top {
            let class = t["class"].as_u64().expect("class") as usize;
            let prob = t["prob"].as_f64().expect("prob");
            assert!(
                (prob - want[class]).abs() <= 1e-5,
                "{name} {extra:?} image {i} class {class}: {prob} vs {}",
                want[class]
            );
            assert_eq!(t["label"], reference.labels[class].as_str(), "{name}");
        }
    }
}

#[test]
fn an_onnx_classifier_scores_as_its_config_says() {
    if !runtime_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    for name in ["hf_vit_multi_label", "hf_vit_one_logit"] {
        let reference = reference(name);
        assert_scores(cwd, name, &[], &reference.scores);
        let softmax: Vec<Vec<f64>> = reference.logits.iter().map(|l| softmax(l)).collect();
        assert_scores(cwd, name, &["--scores", "softmax"], &softmax);
    }
}
