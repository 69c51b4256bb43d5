//! Models as their upstreams export them (#41), from
//! `cli/tests/onnx_upstream/` (`scripts/make_onnx_upstream.py`): a
//! transformers ViT classifier with `id2label` and its image processor's
//! `preprocessor_config.json`, a transformers DINOv2 embedder, timm's ViT
//! and ConvNeXt with 7-class heads and timm's hub `config.json`. Each
//! image's output matches what onnxruntime's Python API gives over the
//! upstream's own Pillow preprocessing (transformers' `…ImageProcessorPil`,
//! timm's transforms): the same classes in the same order, |Δprob| ≤ 1e-5,
//! embedding cosine ≥ 0.99999. And the class names come from where the
//! model keeps them, or `--labels`; a list that cannot be right is one line.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{infer, runtime_or_skip, stderr};

fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/onnx_upstream")
}

fn onnx(name: &str) -> String {
    folder()
        .join(name)
        .join("model.onnx")
        .to_str()
        .expect("utf-8 path")
        .to_owned()
}

/// The reference's entry `key`: the image names, in the folder's order,
/// or a model's rows, one per image.
fn reference<T: serde::de::DeserializeOwned>(key: &str) -> Vec<T> {
    let text = std::fs::read_to_string(folder().join("reference.json")).expect("reference.json");
    let all: Value = serde_json::from_str(&text).expect("json");
    serde_json::from_value(all[key].clone()).expect("rows")
}

fn softmax(row: &[f64]) -> Vec<f64> {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = row.iter().map(|v| (v - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|v| v / sum).collect()
}

/// `pipeline infer` over the images with `args`; its records.
fn run(cwd: &Path, name: &str, args: &[&str]) -> Vec<Value> {
    let out = cwd.join(format!("{name}.jsonl"));
    let run = infer(cwd, &folder().join("images"), &out, args);
    assert_eq!(run.status.code(), Some(0), "{name}: {}", stderr(&run));
    let records = crate::common::records(&out);
    let images: Vec<String> = reference("images");
    assert_eq!(records.len(), images.len(), "{name}: every image once");
    for (record, image) in records.iter().zip(&images) {
        assert_eq!(record["path"], image.as_str(), "{name}: input order");
    }
    records
}

/// Every class of every image, in the reference's order of probability,
/// each within 1e-5 of its softmax, named `labels[class]`.
fn assert_classes(name: &str, records: &[Value], labels: &[&str]) {
    for (i, (record, logits)) in records.iter().zip(reference::<Vec<f64>>(name)).enumerate() {
        assert_eq!(record["index"], i, "{name}: input order");
        let probs = softmax(&logits);
        let mut order: Vec<usize> = (0..probs.len()).collect();
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
        let top = record["top_k"].as_array().expect("top_k");
        let classes: Vec<usize> = top
            .iter()
            .map(|t| t["class"].as_u64().expect("class") as usize)
            .collect();
        assert_eq!(classes, order, "{name} image {i}: the classes' order");
        for t in top {
            let class = t["class"].as_u64().expect("class") as usize;
            let prob = t["prob"].as_f64().expect("prob");
            assert!(
                (prob - probs[class]).abs() <= 1e-5,
                "{name} image {i} class {class}: {prob} vs {}",
                probs[class]
            );
            let label = labels.get(class).copied().unwrap_or("");
            assert_eq!(t["label"].as_str().unwrap_or(""), label, "{name}: label");
        }
    }
}

#[test]
fn upstream_exports_match_onnxruntime_over_their_own_preprocessing() {
    if !runtime_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    // id2label makes it a classifier, with its names.
    let hf_vit = onnx("hf_vit");
    let records = run(cwd, "hf_vit", &["--model", &hf_vit, "--top-k", "3"]);
    assert_classes("hf_vit", &records, &["cat", "dog", "red car"]);
    // timm's label_names, likewise.
    let convnext = onnx("timm_convnext");
    let records = run(
        cwd,
        "timm_convnext",
        &["--model", &convnext, "--top-k", "7"],
    );
    let names: Vec<String> = (0..7).map(|i| format!("class {i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_classes("timm_convnext", &records, &names);
    // No names: class indices, and a classifier only when asked.
    let vit = onnx("timm_vit");
    let args = ["--model", &vit, "--task", "classify", "--top-k", "7"];
    assert_classes("timm_vit", &run(cwd, "timm_vit", &args), &[]);
    // An embedder: each row as onnxruntime gives it over transformers'
    // resize, crop and normalisation.
    let dinov2 = onnx("hf_dinov2");
    let records = run(cwd, "hf_dinov2", &["--model", &dinov2]);
    for (i, (record, want)) in records
        .iter()
        .zip(reference::<Vec<f64>>("hf_dinov2"))
        .enumerate()
    {
        let got: Vec<f64> = serde_json::from_value(record["embedding"].clone()).expect("row");
        assert_eq!(got.len(), want.len(), "dinov2 image {i}: width");
        let dot: f64 = got.iter().zip(&want).map(|(a, b)| a * b).sum();
        let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let cosine = dot / (norm(&got) * norm(&want));
        assert!(cosine >= 0.99999, "dinov2 image {i}: cosine {cosine}");
    }
    // --normalize: the same rows at unit length.
    let unit = run(cwd, "hf_dinov2_unit", &["--model", &dinov2, "--normalize"]);
    for (i, (record, want)) in unit
        .iter()
        .zip(reference::<Vec<f64>>("hf_dinov2"))
        .enumerate()
    {
        let got: Vec<f64> = serde_json::from_value(record["embedding"].clone()).expect("row");
        let norm = want.iter().map(|x| x * x).sum::<f64>().sqrt();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w / norm).abs() <= 1e-5,
                "dinov2 image {i}: {g} vs {}",
                w / norm
            );
        }
    }
}

/// `--labels FILE` names the classes over the model's own; `--task embed`
/// keeps a named model an embedder; a list that cannot be right (another
/// count, a blank line, with `--task embed` or a built-in model) is one
/// line, exit 2.
#[test]
fn class_names_come_from_labels_or_the_models_config() {
    if !runtime_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let hf_vit = onnx("hf_vit");
    let file = |name: &str, text: &str| {
        let path = cwd.join(name);
        std::fs::write(&path, text).expect("labels file");
        path.to_str().expect("utf-8 path").to_owned()
    };
    let three = file("three.txt", "tabby\r\nbeagle\nsports car\n");
    let args = ["--model", &hf_vit, "--labels", &three, "--top-k", "3"];
    let records = run(cwd, "labelled", &args);
    assert_classes("hf_vit", &records, &["tabby", "beagle", "sports car"]);
    let records = run(cwd, "embedded", &["--model", &hf_vit, "--task", "embed"]);
    let width = records[0]["embedding"].as_array().map(Vec::len);
    assert_eq!(width, Some(3), "--task embed: the logits as a row");
    // --normalize asks for embeddings: unit rows, though the model has names.
    let records = run(cwd, "unit", &["--model", &hf_vit, "--normalize"]);
    let row: Vec<f64> = serde_json::from_value(records[0]["embedding"].clone()).expect("a row");
    let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-6, "{row:?}");

    let two = file("two.txt", "cat\ndog\n");
    let blank = file("blank.txt", "cat\n\ndog\n");
    let convnext = onnx("timm_convnext");
    let cases: [(&[&str], String); 7] = [
        (
            &["--model", &hf_vit, "--labels", &two],
            format!("--labels {two}: 2 class names for output logits's 3 values"),
        ),
        (
            &["--model", &hf_vit, "--labels", &blank],
            format!("--labels {blank}: line 2 is blank"),
        ),
        (
            &["--model", &hf_vit, "--labels", &three, "--task", "embed"],
            "--labels goes with --task classify".into(),
        ),
        (
            &["--model", "resnet18", "--labels", &three],
            "--output, --scores, --labels and --normalize go with --model FILE.onnx".into(),
        ),
        (
            &["--model", &hf_vit, "--normalize", "--task", "classify"],
            "--normalize goes with --task embed".into(),
        ),
        (
            &["--model", "resnet18", "--channels", "bgr"],
            "--channels bgr: the built-in models take RGB".into(),
        ),
        (
            &["--model", &convnext, "--labels", &three],
            format!("--labels {three}: 3 class names for output logits's 7 values"),
        ),
    ];
    for (args, want) in cases {
        let out = cwd.join("refused.jsonl");
        let run = infer(cwd, &folder().join("images"), &out, args);
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(&want), "{args:?}: {err}");
    }
}

/// `pipeline infer` over the images into `cwd/out` with `--model model`,
/// remote models cached in `cwd/models`, reads retried three times.
fn infer_cached(cwd: &Path, out: &str, model: &str) -> std::process::Output {
    crate::common::pipeline(cwd)
        .env("PIPELINE_MODELS_DIR", cwd.join("models"))
        .args(["infer", "--quiet", "--gpus", "cpu", "--io-retries", "3"])
        .arg("--data")
        .arg(folder().join("images"))
        .arg("--out")
        .arg(cwd.join(out))
        .args(["--model", model])
        .output()
        .expect("pipeline runs")
}

/// `--model URL`: the model and the config files beside it fetched from an
/// HTTP server on 127.0.0.1 (through two 5xx answers, retried) into the
/// model cache, then the same records as the local file; a location with
/// no model is one line, exit 2.
#[test]
fn a_model_at_a_url_runs_as_its_local_copy() {
    if !runtime_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let server = fixtures::fault_server::start(&folder(), 0).expect("server starts");
    let base = server.base();
    let run = |out: &str, model: &str| infer_cached(cwd, out, model);
    let local = run("local.jsonl", &onnx("hf_vit"));
    assert_eq!(local.status.code(), Some(0), "{}", stderr(&local));
    let url = format!("{base}/flaky/2/hf_vit/model.onnx");
    let remote = run("remote.jsonl", &url);
    assert_eq!(remote.status.code(), Some(0), "{}", stderr(&remote));
    // Its labels and preprocessing came with it: the same bytes.
    assert_eq!(
        std::fs::read(cwd.join("remote.jsonl")).ok(),
        std::fs::read(cwd.join("local.jsonl")).ok()
    );
    // models/<location>/<content>/: the model and its config files.
    let folders = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .expect("a folder")
            .map(|d| d.expect("entry").path())
            .collect()
    };
    let cached: Vec<String> = folders(&cwd.join("models"))
        .iter()
        .flat_map(|location| folders(location))
        .flat_map(|content| folders(&content))
        .map(|f| {
            f.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    for file in ["model.onnx", "config.json", "preprocessor_config.json"] {
        assert!(cached.iter().any(|c| c == file), "{file} in {cached:?}");
    }
    let missing = format!("{base}/ok/nowhere/model.onnx");
    let refused = run("missing.jsonl", &missing);
    let err = stderr(&refused);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(&format!("--model {missing}: ")), "{err}");
}

/// A model that keeps its weights in an external-data file beside it
/// (`hf_vit_external/`, `hf_vit/`'s model saved by `onnx` with
/// `save_as_external_data`): from a local path and from a URL, where the
/// file comes with it into the model cache, it gives `hf_vit/`'s records
/// byte for byte. Without its file beside it, and at a URL with a query
/// (a presigned one, whose signature a sibling cannot share), it is one
/// line, exit 2, naming the file.
#[test]
fn a_model_with_external_data_runs_with_its_file() {
    if !runtime_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let server = fixtures::fault_server::start(&folder(), 0).expect("server starts");
    let base = server.base();
    let run = |out: &str, model: &str| infer_cached(cwd, out, model);
    let read = |out: &str| std::fs::read(cwd.join(out)).expect("output");
    let whole = run("whole.jsonl", &onnx("hf_vit"));
    assert_eq!(whole.status.code(), Some(0), "{}", stderr(&whole));
    let local = run("local.jsonl", &onnx("hf_vit_external"));
    assert_eq!(local.status.code(), Some(0), "{}", stderr(&local));
    assert_eq!(read("local.jsonl"), read("whole.jsonl"));
    let url = format!("{base}/flaky/2/hf_vit_external/model.onnx");
    let remote = run("remote.jsonl", &url);
    assert_eq!(remote.status.code(), Some(0), "{}", stderr(&remote));
    assert_eq!(read("remote.jsonl"), read("whole.jsonl"));
    let cached: Vec<std::path::PathBuf> = walk(&cwd.join("models"));
    assert!(
        cached.iter().any(|f| f.ends_with("model.onnx_data")),
        "{cached:?}"
    );

    let refused = |out: &str, model: &str, want: &str| {
        let run = run(out, model);
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{model}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{model}: {err}");
        assert!(err.contains(want), "{model}: {err}");
        assert!(!cwd.join(out).exists(), "{model}: wrote {out}");
    };
    refused(
        "presigned.jsonl",
        &format!("{url}?X-Amz-Signature=0"),
        "keeps its weights in model.onnx_data beside it",
    );
    let bare = cwd.join("bare");
    std::fs::create_dir(&bare).expect("mkdir");
    for file in ["model.onnx", "config.json", "preprocessor_config.json"] {
        std::fs::copy(folder().join("hf_vit_external").join(file), bare.join(file)).expect("copy");
    }
    let bare_model = bare.join("model.onnx");
    refused(
        "bare.jsonl",
        bare_model.to_str().expect("utf-8"),
        "keeps its weights in model.onnx_data beside it (its external data), which is not there",
    );
}

/// Every file under `dir`, at any depth.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a folder") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
