//! `pipeline infer --model FILE.onnx` (#41) end to end, over the small
//! models of `gpu-worker/onnx/tests/models/` whose outputs are known in closed
//! form (channel means of what the model was fed): every image once in
//! input order, a broken file an error record; the model sees the exact
//! loader's crop under the preprocessing given (flags, else a resize to its
//! fixed input with ImageNet's statistics); a classifier's softmax; bytes
//! that do not depend on chunks or workers; resume refusing a changed
//! model file; and one line, exit 2, for what cannot run. CI installs ONNX
//! Runtime and sets `PIPELINE_REQUIRE_ORT`.

use std::path::{Path, PathBuf};

use fixtures::{DatasetSpec, generate};
use loader::{Loader, LoaderConfig};
use pipeline_core::{DecodeLimits, Normalize, PreprocessSpec};

use crate::common;
mod config_limits;
mod cuda_trial;
mod raw;
mod scores;
mod upstream;

fn model(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../gpu-worker/onnx/tests/models")
        .join(format!("{name}.onnx"))
}

/// Whether ONNX Runtime is there; where it must be (CI) and is not, a
/// failure.
fn runtime_or_skip() -> bool {
    match gpu_worker::onnx::runtime::onnx_runtime() {
        Ok(_) => true,
        Err(e) => {
            assert!(
                std::env::var_os("PIPELINE_REQUIRE_ORT").is_none(),
                "ONNX Runtime must load here: {e}"
            );
            eprintln!("skipped, no ONNX Runtime ({e})");
            false
        }
    }
}

/// The loader's crop of `path` under `spec`, NCHW.
fn crop(spec: &PreprocessSpec, path: &Path) -> Vec<u8> {
    Loader::new(LoaderConfig {
        threads: 1,
        batch_size: 1,
        spec: spec.clone(),
        limits: DecodeLimits::default(),
        remote: Default::default(),
    })
    .expect("a loader")
    .load_one(path)
    .expect("a good image loads")
}

/// The channel means of `crop`'s values normalised by `n`.
fn channel_means(crop: &[u8], n: &Normalize) -> Vec<f64> {
    let plane = crop.len() / 3;
    (0..3)
        .map(|c| {
            crop[c * plane..(c + 1) * plane]
                .iter()
                .map(|&b| (f64::from(b) - f64::from(n.mean[c])) / f64::from(n.std[c]))
                .sum::<f64>()
                / plane as f64
        })
        .collect()
}

/// `images` generated images under `cwd/data` (and Pillow's broken files
/// with `broken`).
fn dataset(cwd: &Path, images: usize, seed: u64, broken: bool) -> fixtures::Dataset {
    generate(
        &cwd.join("data"),
        &DatasetSpec {
            images,
            seed,
            broken,
        },
    )
    .expect("dataset")
}

fn infer(cwd: &Path, data: &Path, out: &Path, args: &[&str]) -> std::process::Output {
    common::pipeline(cwd)
        .args(["infer", "--quiet", "--gpus", "cpu", "--data"])
        .arg(data)
        .arg("--out")
        .arg(out)
        .args(args)
        .output()
        .expect("pipeline runs")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A classifier: each image once in input order with the softmax of its
/// known logits (the crop's three channel means under ImageNet's
/// statistics, then 0.5 and -0.5), the broken files error records; the
/// same bytes whatever the chunks and workers.
#[test]
fn an_onnx_classifier_runs_every_image_once_in_order_on_the_exact_crop() {
    if !runtime_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let data = dataset(cwd, 10, 41, true);
    let onnx = model("classifier_known");
    let onnx = onnx.to_str().expect("utf-8 path");
    let args = ["--model", onnx, "--task", "classify", "--top-k", "5"];
    let out = cwd.join("a.jsonl");
    let run = infer(cwd, &data.root, &out, &args);
    assert_eq!(run.status.code(), Some(1), "broken files: {}", stderr(&run));
    let records = common::records(&out);
    let spec = PreprocessSpec {
        resize_shorter: 8,
        crop: 8,
        ..PreprocessSpec::IMAGENET
    };
    // Broken files the folder holds (one kind of broken item exists only
    // in a list: a missing file).
    let total = data.good.len() + data.broken.iter().filter(|b| b.path.exists()).count();
    assert_eq!(records.len(), total);
    let mut good = 0;
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record["index"], i, "input order");
        let path = data.root.join(record["path"].as_str().expect("path"));
        if record.get("error").is_some() {
            assert!(data.broken.iter().any(|b| b.path == path), "{record}");
            continue;
        }
        good += 1;
        let mut logits = channel_means(&crop(&spec, &path), &spec.normalize);
        logits.extend([0.5, -0.5]);
        let max = logits.iter().copied().fold(f64::MIN, f64::max);
        let sum: f64 = logits.iter().map(|l| (l - max).exp()).sum();
        let probs: Vec<f64> = logits.iter().map(|l| (l - max).exp() / sum).collect();
        let top = record["top_k"].as_array().expect("top_k");
        assert_eq!(top.len(), 5, "{record}");
        let mut previous = f64::MAX;
        for score in top {
            let class = score["class"].as_u64().expect("class") as usize;
            let prob = score["prob"].as_f64().expect("prob");
            assert!((prob - probs[class]).abs() < 1e-5, "{record}: {probs:?}");
            assert!(prob <= previous, "largest first: {record}");
            assert_eq!(
                score["label"], "",
                "an ONNX model's classes are not ImageNet's"
            );
            previous = prob;
        }
    }
    // Every good file ran (a broken one may decode as well).
    for file in &data.good {
        let name = file.strip_prefix(&data.root).expect("under the root");
        assert!(
            records
                .iter()
                .any(|r| r["path"] == name.to_str().expect("utf-8") && r.get("top_k").is_some()),
            "{}",
            name.display()
        );
    }
    assert!(good >= data.good.len());
    // Other chunks and two workers: the same bytes.
    let other = cwd.join("b.jsonl");
    let more = [&args[..], &["--chunk-size", "3", "--workers-per-gpu", "2"]].concat();
    let run = infer(cwd, &data.root, &other, &more);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert_eq!(
        std::fs::read(&out).expect("read"),
        std::fs::read(&other).expect("read")
    );
}

/// The coordinator finds ONNX Runtime once: its worker loads the library
/// it found, and does not search again. The search asks the `python3` on
/// `PATH` where pip's packages are (half a second through a pyenv shim),
/// and only when no nearer folder (an active virtual environment's) holds
/// the runtime; here that `python3` is a script that logs each call and
/// answers with a folder holding pip's layout of the runtime.
#[test]
fn the_worker_loads_the_runtime_the_coordinator_found() {
    if !runtime_or_skip() {
        return;
    }
    let found = &gpu_worker::onnx::runtime::onnx_runtime()
        .as_ref()
        .expect("loads")
        .library;
    let library = Path::new(found);
    if !library.is_absolute() {
        eprintln!("skipped: the system's loader finds ONNX Runtime here ({found})");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let data = dataset(cwd, 4, 43, false);
    let packages = cwd.join("site-packages");
    let venv = cwd.join("venv");
    for packages in [&packages, &venv.join("lib/python3.11/site-packages")] {
        let capi = packages.join("onnxruntime/capi");
        std::fs::create_dir_all(&capi).expect("mkdir");
        std::os::unix::fs::symlink(library, capi.join(library.file_name().expect("a file")))
            .expect("link");
    }
    let bin = cwd.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let log = cwd.join("python3.log");
    let python = bin.join("python3");
    std::fs::write(
        &python,
        format!(
            "#!/bin/sh\necho asked >> '{}'\necho '{}'\n",
            log.display(),
            packages.display()
        ),
    )
    .expect("write");
    std::fs::set_permissions(&python, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let onnx = model("classifier_known");
    let asked = |venv: Option<&Path>| {
        let _ = std::fs::remove_file(&log);
        let out = cwd.join("out.jsonl");
        let mut cmd = common::pipeline(cwd);
        if let Some(venv) = venv {
            cmd.env("VIRTUAL_ENV", venv);
        }
        let run = cmd
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("HOME", cwd.join("home"))
            .args(["infer", "--quiet", "--overwrite", "--gpus", "cpu", "--data"])
            .arg(&data.root)
            .arg("--out")
            .arg(&out)
            .arg("--model")
            .arg(&onnx)
            .output()
            .expect("pipeline runs");
        assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
        assert_eq!(common::records(&out).len(), data.good.len());
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert_eq!(asked(Some(&venv)), 0, "the virtual environment holds it");
    assert!(asked(None) <= 1, "the search ran in the worker too");
}

/// An embedding model of any input size runs at `--size` with the
/// statistics given (resume's refusal of a changed file is
/// `coordinator/src/identity.rs`'s test).
#[test]
fn an_onnx_embedder_takes_the_flags_preprocessing() {
    if !runtime_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let data = dataset(cwd, 4, 7, false);
    let onnx = model("dynamic_size");
    let onnx = onnx.to_str().expect("utf-8 path");
    let args = [
        "--model",
        onnx,
        "--size",
        "20",
        "--interpolation",
        "bicubic",
        "--mean",
        "0.5,0.5,0.5",
        "--std",
        "0.25,0.25,0.25",
    ];
    let out = cwd.join("e.jsonl");
    let run = infer(cwd, &data.root, &out, &args);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let spec = PreprocessSpec {
        resize_shorter: 20,
        crop: 20,
        filter: pipeline_core::ResizeFilter::Bicubic,
        normalize: Normalize {
            mean: [127.5; 3],
            std: [63.75; 3],
        },
        ..PreprocessSpec::IMAGENET
    };
    let records = common::records(&out);
    assert_eq!(records.len(), 4);
    for record in &records {
        let path = data.root.join(record["path"].as_str().expect("path"));
        let want = channel_means(&crop(&spec, &path), &spec.normalize);
        let got: Vec<f64> = record["embedding"]
            .as_array()
            .expect("embedding")
            .iter()
            .map(|v| v.as_f64().expect("a number"))
            .collect();
        assert_eq!(got.len(), 3);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-5, "{record}: {want:?}");
        }
    }
}

/// What cannot run is one line, exit 2, before any work.
#[test]
fn what_an_onnx_model_cannot_run_is_one_line() {
    if !runtime_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let data = dataset(cwd, 2, 3, false);
    let path = |name: &str| model(name).to_str().expect("utf-8 path").to_owned();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--model".into(), "missing.onnx".into()],
            "--model missing.onnx: no such file",
        ),
        (
            vec!["--model".into(), path("dynamic_size")],
            "takes images of any size: give --size N",
        ),
        (
            vec!["--model".into(), path("two_images")],
            "the tool feeds one image input",
        ),
        (
            vec![
                "--model".into(),
                path("two_outputs_f16"),
                "--output".into(),
                "probs".into(),
            ],
            "--output probs: ",
        ),
        (
            vec![
                "--model".into(),
                path("classifier_known"),
                "--size".into(),
                "16".into(),
            ],
            "takes 8×8 images, and the preprocessing crops 16×16",
        ),
        (
            vec![
                "--model".into(),
                path("classifier_known"),
                "--engine".into(),
                "vulkan".into(),
            ],
            "--engine vulkan: an ONNX model runs on ONNX Runtime",
        ),
        (
            vec![
                "--model".into(),
                path("classifier_known"),
                "--precision".into(),
                "f16".into(),
            ],
            "--precision goes with the built-in models",
        ),
        (
            vec![
                "--model".into(),
                "resnet50".into(),
                "--output".into(),
                "logits".into(),
            ],
            "--output, --scores, --labels and --normalize go with --model FILE.onnx",
        ),
        (
            vec![
                "--model".into(),
                "vit_b_16".into(),
                "--size".into(),
                "384".into(),
            ],
            "vit_b_16 takes 224×224 crops, its input's size",
        ),
        (
            vec![
                "--model".into(),
                path("nhwc_u8_batch_2"),
                "--mean".into(),
                "0.5,0.5,0.5".into(),
                "--std".into(),
                "0.5,0.5,0.5".into(),
            ],
            "takes bytes (u8) and normalises them itself",
        ),
        (
            vec![
                "--model".into(),
                path("dynamic_width"),
                "--size".into(),
                "4".into(),
                "--format".into(),
                "csv".into(),
            ],
            "output has no fixed width per image, which its columns need; use --format jsonl",
        ),
    ];
    for (args, says) in cases {
        let out = cwd.join("refused.jsonl");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = infer(cwd, &data.root, &out, &args);
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} wrote output");
    }
    // An output of no fixed width goes to JSONL: its rows as they come.
    let out = cwd.join("flat.jsonl");
    let run = infer(
        cwd,
        &data.root,
        &out,
        &["--model", &path("dynamic_width"), "--size", "4"],
    );
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    for record in common::records(&out) {
        assert_eq!(
            record["embedding"].as_array().map(Vec::len),
            Some(48),
            "{record}"
        );
    }
    // --gpus naming a GPU: ONNX Runtime's CUDA provider, which the CPU
    // build CI installs has not.
    let out = cwd.join("gpu.jsonl");
    let run = common::pipeline(cwd)
        .args([
            "infer",
            "--quiet",
            "--gpus",
            "0",
            "--model",
            &path("classifier_known"),
        ])
        .arg("--data")
        .arg(&data.root)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("pipeline runs");
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(2), "{err}");
    let cuda = gpu_worker::onnx::runtime::onnx_runtime()
        .as_ref()
        .is_ok_and(|r| r.providers.iter().any(|p| p == "CUDAExecutionProvider"));
    let says = if cuda {
        "--gpus 0: ONNX Runtime's CUDA provider runs NVIDIA GPUs"
    } else {
        "--gpus 0: this ONNX Runtime has no CUDA provider (pip install onnxruntime-gpu"
    };
    assert!(err.contains(says), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}
