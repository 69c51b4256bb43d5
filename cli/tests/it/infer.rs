//! `pipeline infer` end to end: the real binary, real worker processes, real
//! files from `fixtures` (good and broken), and lavapipe as the Vulkan device.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use fixtures::{Dataset, DatasetSpec};
use serde_json::Value;
use tempfile::TempDir;

use crate::common;

fn pipeline(args: &[&str], cwd: &Path, weights_dir: &Path) -> Output {
    common::pipeline(cwd)
        .args(args)
        .env("PIPELINE_WEIGHTS_DIR", weights_dir)
        .output()
        .expect("the pipeline binary runs")
}

/// A dataset with good and broken files, in a temporary folder.
fn dataset(images: usize) -> (TempDir, Dataset) {
    dataset_of(DatasetSpec {
        images,
        seed: 11,
        broken: true,
    })
}

/// The dataset `spec` describes, in a temporary folder (`data/` in it).
fn dataset_of(spec: DatasetSpec) -> (TempDir, Dataset) {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = fixtures::generate(&dir.path().join("data"), &spec).expect("fixtures are written");
    (dir, data)
}

fn infer(dir: &Path, data: &Path, out: &str, extra: &[&str]) -> (Output, PathBuf) {
    let out_path = dir.join(out);
    let mut args = vec![
        "infer",
        "--data",
        data.to_str().expect("utf-8 temp path"),
        "--out",
        out_path.to_str().expect("utf-8 temp path"),
        "--model",
        "tiny",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let empty = dir.join("no-weights");
    (pipeline(&args, dir, &empty), out_path)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_bytes_do_not_depend_on_workers_chunks_or_batch_size() {
    let (dir, data) = dataset(30);
    let root = &data.root;
    let (one, one_out) = infer(
        dir.path(),
        root,
        "one.jsonl",
        &["--gpus", "cpu", "--chunk-size", "7", "--batch-size", "4"],
    );
    assert_eq!(one.status.code(), Some(1), "{}", stderr(&one));
    let (three, three_out) = infer(
        dir.path(),
        root,
        "three.jsonl",
        &[
            "--gpus",
            "cpu",
            "--workers-per-gpu",
            "3",
            "--chunk-size",
            "3",
            "--batch-size",
            "8",
        ],
    );
    assert_eq!(three.status.code(), Some(1), "{}", stderr(&three));
    let want = fs::read(&one_out).expect("one worker's output");
    assert!(!want.is_empty());
    if fs::read(&three_out).expect("three workers' output") != want {
        let (a, b) = (common::records(&one_out), common::records(&three_out));
        let first = a.iter().zip(&b).find(|(x, y)| x != y);
        panic!("3 workers, other chunk and batch sizes: output differs at {first:#?}");
    }
}

/// Three lavapipe workers run the Vulkan code path and agree with the CPU
/// backend record for record. Not byte for byte: the two backends sum in
/// different orders (im2col GEMM on the CPU, direct convolution kernels on
/// Vulkan), so probabilities differ around 1e-6 relative.
#[test]
fn three_software_vulkan_workers_agree_with_the_cpu() {
    let (dir, data) = dataset(12);
    let root = &data.root;
    let (cpu, cpu_out) = infer(
        dir.path(),
        root,
        "cpu.jsonl",
        &["--gpus", "cpu", "--chunk-size", "5"],
    );
    assert_eq!(cpu.status.code(), Some(1), "{}", stderr(&cpu));
    let (sw, sw_out) = infer(
        dir.path(),
        root,
        "software.jsonl",
        &[
            "--gpus",
            "software",
            "--workers-per-gpu",
            "3",
            "--chunk-size",
            "2",
            "--batch-size",
            "3",
        ],
    );
    assert_eq!(sw.status.code(), Some(1), "{}", stderr(&sw));
    let (want, got) = (common::records(&cpu_out), common::records(&sw_out));
    assert_eq!(want.len(), got.len());
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(
            (&w["index"], &w["path"], &w["error"]),
            (&g["index"], &g["path"], &g["error"])
        );
        let (Some(wk), Some(gk)) = (w["top_k"].as_array(), g["top_k"].as_array()) else {
            assert_eq!(w.get("top_k"), g.get("top_k"), "{w} vs {g}");
            continue;
        };
        let probs = |top: &[Value]| -> BTreeMap<u64, f64> {
            top.iter()
                .map(|c| {
                    (
                        c["class"].as_u64().expect("class"),
                        c["prob"].as_f64().expect("prob"),
                    )
                })
                .collect()
        };
        let (wp, gp) = (probs(wk), probs(gk));
        let shared: Vec<u64> = wp.keys().filter(|c| gp.contains_key(c)).copied().collect();
        // Near-ties may trade places at the bottom of the top-k, no more.
        assert!(shared.len() + 1 >= wp.len(), "{w}\nvs\n{g}");
        for class in shared {
            let (a, b) = (wp[&class], gp[&class]);
            assert!(
                (a - b).abs() <= 1e-4 * a.max(b),
                "class {class}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn every_item_once_in_order_with_broken_files_as_error_records_and_exit_1() {
    let (dir, data) = dataset(26);
    let (out, path) = infer(
        dir.path(),
        &data.root,
        "p.jsonl",
        &["--gpus", "cpu", "--chunk-size", "5", "--top-k", "3"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let recs = common::records(&path);
    let broken_present: Vec<_> = data.broken.iter().filter(|b| b.path.exists()).collect();
    assert_eq!(recs.len(), data.good.len() + broken_present.len());
    let mut paths = Vec::new();
    for (i, rec) in recs.iter().enumerate() {
        assert_eq!(rec["index"], i as u64, "{rec}");
        let rel = rec["path"].as_str().expect("path is a string");
        paths.push(rel.to_owned());
        let file = data.root.join(rel);
        match broken_present.iter().find(|b| b.path == file) {
            Some(b) if !(b.needs_unprivileged && is_root()) => {
                assert_eq!(rec["error"]["kind"], b.expected.as_str(), "{rec}");
                assert!(
                    rec["error"]["message"]
                        .as_str()
                        .is_some_and(|m| !m.is_empty())
                );
                assert!(rec.get("top_k").is_none(), "{rec}");
            }
            Some(_) => {}
            None => {
                let top = rec["top_k"].as_array().expect("good items have top_k");
                assert_eq!(top.len(), 3, "{rec}");
                let probs: Vec<f64> = top
                    .iter()
                    .map(|c| c["prob"].as_f64().expect("prob"))
                    .collect();
                assert!(probs.windows(2).all(|w| w[0] >= w[1]), "{rec}");
                assert!(top[0]["label"].as_str().is_some_and(|l| !l.is_empty()));
            }
        }
    }
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted, "records are in sorted path order");
}

fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn csv_and_parquet_hold_what_jsonl_holds() {
    let (dir, data) = dataset(14);
    let common = ["--gpus", "cpu", "--chunk-size", "4", "--top-k", "2"];
    let (j, jsonl) = infer(dir.path(), &data.root, "p.jsonl", &common);
    let (c, csv_path) = infer(dir.path(), &data.root, "p.csv", &common);
    let (p, parquet_path) = infer(dir.path(), &data.root, "p.parquet", &common);
    for out in [&j, &c, &p] {
        assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    }
    let want = common::records(&jsonl);

    let mut reader = csv::Reader::from_path(&csv_path).expect("csv opens");
    let header: Vec<String> = reader
        .headers()
        .expect("header")
        .iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        header[..5],
        ["index", "path", "class_1", "label_1", "prob_1"]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("csv row")).collect();
    assert_eq!(rows.len(), want.len());
    for (row, rec) in rows.iter().zip(&want) {
        let field = |name: &str| &row[header.iter().position(|h| h == name).expect("column")];
        assert_eq!(field("index"), rec["index"].to_string());
        assert_eq!(field("path"), rec["path"].as_str().expect("path"));
        match rec.get("top_k").and_then(Value::as_array) {
            Some(top) => {
                for (k, class) in top.iter().enumerate() {
                    assert_eq!(
                        field(&format!("class_{}", k + 1)),
                        class["class"].to_string()
                    );
                    assert_eq!(
                        field(&format!("label_{}", k + 1)),
                        class["label"].as_str().expect("label")
                    );
                    let prob: f32 = field(&format!("prob_{}", k + 1)).parse().expect("prob");
                    assert_eq!(prob, class["prob"].as_f64().expect("prob") as f32);
                }
                assert_eq!(field("error_kind"), "");
            }
            None => {
                assert_eq!(
                    field("error_kind"),
                    rec["error"]["kind"].as_str().expect("kind")
                );
                assert_eq!(
                    field("error_message"),
                    rec["error"]["message"].as_str().expect("msg")
                );
                assert_eq!(field("class_1"), "");
            }
        }
    }

    let parquet = parquet_rows(&parquet_path);
    assert_eq!(
        parquet, want,
        "parquet rows, rebuilt as JSON, equal the JSONL records"
    );
}

/// Reads the Parquet file back with the arrow reader and rebuilds each row
/// as the JSONL record it should equal.
fn parquet_rows(path: &Path) -> Vec<Value> {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float32Type, UInt32Type, UInt64Type};
    let file = fs::File::open(path).expect("parquet opens");
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("a parquet file")
        .build()
        .expect("a reader");
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.expect("a record batch");
        let index = batch
            .column_by_name("index")
            .expect("index")
            .as_primitive::<UInt64Type>();
        let paths = batch
            .column_by_name("path")
            .expect("path")
            .as_string::<i32>();
        let top = batch
            .column_by_name("top_k")
            .expect("top_k")
            .as_list::<i32>();
        let kind = batch
            .column_by_name("error_kind")
            .expect("kind")
            .as_string::<i32>();
        let message = batch
            .column_by_name("error_message")
            .expect("msg")
            .as_string::<i32>();
        for r in 0..batch.num_rows() {
            let mut rec = serde_json::Map::new();
            rec.insert("index".into(), index.value(r).into());
            rec.insert("path".into(), paths.value(r).into());
            if top.is_valid(r) {
                let entries = top.value(r);
                let s = entries.as_struct();
                let class = s.column(0).as_primitive::<UInt32Type>();
                let label = s.column(1).as_string::<i32>();
                let prob = s.column(2).as_primitive::<Float32Type>();
                let list: Vec<Value> = (0..s.len())
                    .map(|k| {
                        serde_json::json!({
                            "class": class.value(k),
                            "label": label.value(k),
                            // As JSONL writes it: the shortest f32 digits.
                            "prob": prob.value(k).to_string().parse::<f64>().expect("a number"),
                        })
                    })
                    .collect();
                rec.insert("top_k".into(), list.into());
            }
            if kind.is_valid(r) {
                rec.insert(
                    "error".into(),
                    serde_json::json!({"kind": kind.value(r), "message": message.value(r)}),
                );
            }
            rows.push(Value::Object(rec));
        }
    }
    rows
}

#[test]
fn embed_writes_the_pooled_features() {
    let (dir, data) = dataset(5);
    let (out, path) = infer(
        dir.path(),
        &data.root,
        "e.jsonl",
        &["--gpus", "cpu", "--task", "embed"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let recs = common::records(&path);
    let good: Vec<&Value> = recs.iter().filter(|r| r.get("error").is_none()).collect();
    let readable_by_root = data
        .broken
        .iter()
        .filter(|b| b.needs_unprivileged && b.path.exists() && is_root())
        .count();
    assert_eq!(good.len(), data.good.len() + readable_by_root);
    for rec in good {
        let e = rec["embedding"].as_array().expect("embedding");
        assert_eq!(e.len(), 128, "tiny's feature width");
        assert!(e.iter().any(|v| v.as_f64().is_some_and(|v| v != 0.0)));
    }
}

/// The README's main job: no flags but `--data`, on a machine with no GPU,
/// with EfficientNet-Lite0's real weights in the cache folder.
#[test]
fn infer_with_only_data_runs_on_the_cpu_and_names_the_photos() {
    let weights = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/weights");
    assert!(
        weights.join("efficientnet-lite0-57934424.pth").is_file(),
        "run scripts/fetch-weights.sh first (scripts/test.sh does)"
    );
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples");
    let dir = tempfile::tempdir().expect("temp dir");
    let out = pipeline(
        &["infer", "--data", samples.to_str().expect("utf-8 path")],
        dir.path(),
        &weights,
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("no GPU found; running on the CPU"), "{err}");
    assert!(err.contains("efficientnet_lite0 weights from"), "{err}");
    let recs = common::records(&dir.path().join("predictions.jsonl"));
    let top1: BTreeMap<String, String> = recs
        .iter()
        .map(|r| {
            (
                r["path"].as_str().expect("path").to_owned(),
                r["top_k"][0]["label"].as_str().expect("label").to_owned(),
            )
        })
        .collect();
    assert_eq!(top1.len(), 5, "{top1:?}");
    assert!(top1["cat_chelsea.jpg"].contains("cat"), "{top1:?}");
    assert_eq!(top1["coffee.jpg"], "espresso", "{top1:?}");
}

#[test]
fn bad_flags_paths_and_weights_are_one_line_errors_with_exit_2() {
    let (dir, data) = dataset(3);
    let root = data.root.to_str().expect("utf-8 path");
    let garbage = dir.path().join("garbage.pth");
    fs::write(&garbage, b"this is not a checkpoint").expect("write");
    let garbage = garbage.to_str().expect("utf-8 path");
    let vectors =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../gpu-worker/tests/vectors/families");
    let vector = |name: &str| vectors.join(name).to_str().expect("utf-8 path").to_owned();
    let (text_only, siglip, small_clip) = (
        vector("clip_text_only.safetensors"),
        vector("hf_siglip/model.safetensors"),
        vector("hf_clip/model.safetensors"),
    );
    let model_weights = |model: &'static str, weights: &str| -> Vec<String> {
        [
            "infer",
            "--data",
            root,
            "--gpus",
            "cpu",
            "--model",
            model,
            "--weights",
            weights,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let owned: Vec<(Vec<String>, &str)> = vec![
        (model_weights("tiny", garbage), "garbage.pth"),
        (
            model_weights("clip_vit_b_32", &text_only),
            "text tower only",
        ),
        (
            model_weights("clip_vit_b_32", &siglip),
            "looks like a Hugging Face SigLIP",
        ),
        (
            model_weights("clip_vit_b_32", &small_clip),
            "vision_model.embeddings.patch_embedding.weight is [32, 3, 8, 8], expected [768, 3, 32, 32]",
        ),
    ];
    // Its own output: a failed setup leaves a part folder behind.
    let f16_out = dir
        .path()
        .join("f16.jsonl")
        .to_str()
        .expect("utf-8 path")
        .to_owned();
    let mut cases: Vec<(Vec<&str>, &str)> = owned
        .iter()
        .map(|(args, needle)| (args.iter().map(String::as_str).collect(), *needle))
        .collect();
    cases.extend([
        (
            vec![
                "infer",
                "--data",
                root,
                "--model",
                "dinov2_vits14",
                "--task",
                "classify",
            ],
            "no classifier head",
        ),
        (
            vec![
                "infer",
                "--data",
                root,
                "--model",
                "resnet50",
                "--pooling",
                "mean",
            ],
            "--pooling",
        ),
        (
            vec![
                "infer",
                "--data",
                root,
                "--model",
                "dinov2_vits14",
                "--pooling",
                "max",
            ],
            "cls, mean or cls+mean",
        ),
        (
            vec!["infer", "--data", root, "--precision", "f8"],
            "expected auto, f32, f16 or bf16",
        ),
        (
            vec![
                "infer",
                "--data",
                root,
                "--gpus",
                "software",
                "--model",
                "tiny",
                "--precision",
                "f16",
                "--out",
                &f16_out,
            ],
            "lavapipe crashes compiling f16 kernels",
        ),
    ]);
    let narrow = class_matrix(dir.path(), "narrow", &["a", "b"], 16);
    let narrow = narrow.to_str().expect("utf-8 path");
    cases.extend([
        (
            vec![
                "infer",
                "--data",
                root,
                "--model",
                "clip_vit_b_32",
                "--task",
                "classify",
            ],
            "classify zero-shot with --classes",
        ),
        (
            vec![
                "infer",
                "--data",
                root,
                "--model",
                "resnet50",
                "--classes",
                narrow,
            ],
            "--classes needs a CLIP or SigLIP model",
        ),
        (
            vec![
                "infer",
                "--data",
                root,
                "--model",
                "clip_vit_b_32",
                "--classes",
                narrow,
            ],
            "rows are 16 wide, but clip_vit_b_32's image embedding is 512",
        ),
        (
            vec![
                "infer",
                "--data",
                root,
                "--model",
                "clip_vit_b_32",
                "--classes",
                narrow,
                "--task",
                "embed",
            ],
            "--classes goes with --task classify",
        ),
        (
            vec![
                "infer",
                "--data",
                root,
                "--model",
                "clip_vit_b_32",
                "--classes",
                garbage,
            ],
            "expected a .npy or .safetensors",
        ),
    ]);
    cases.extend(vec![
        (vec!["infer", "--data", "/no/such/folder"], "--data"),
        (vec!["infer", "--data", root, "--model", "vgg16"], "--model"),
        (
            vec!["infer", "--data", root, "--weights", "/no/such.pth"],
            "--weights",
        ),
        (vec!["infer", "--data", root, "--gpus", "7"], "--gpus 7"),
        (vec!["infer", "--data", root, "--gpus", "tpu"], "--gpus"),
        (
            vec!["infer", "--data", root, "--gpus", "0000:41:00.0"],
            "PCI bus id",
        ),
        (
            vec!["infer", "--data", root, "--batch-size", "0"],
            "--batch-size",
        ),
        (vec!["infer", "--data", root, "--format", "xml"], "--format"),
        (
            vec!["infer", "--data", root, "--out", "/no/such/dir/p.jsonl"],
            "--out",
        ),
    ]);
    for (args, needle) in cases {
        let out = pipeline(&args, dir.path(), &dir.path().join("none"));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        let errors: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("pipeline: error:"))
            .collect();
        assert_eq!(errors.len(), 1, "{args:?}: {err}");
        assert!(errors[0].contains(needle), "{args:?}: {err}");
        assert!(
            !dir.path().join("predictions.jsonl").exists(),
            "{args:?} wrote output"
        );
    }
}

/// What `devices` says is checked against what it found, so the test holds
/// on a machine with a GPU as on one without.
#[test]
fn devices_lists_every_adapter_and_says_when_there_is_no_gpu() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = pipeline(&["devices", "--json"], dir.path(), dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listing: Value = serde_json::from_slice(&out.stdout).expect("devices --json is JSON");
    assert!(
        listing["cpu"]["cores"].as_u64().is_some_and(|n| n >= 1),
        "{listing}"
    );
    let adapters = listing["adapters"].as_array().expect("adapters");
    assert!(
        adapters
            .iter()
            .any(|a| a["kind"] == "cpu" && a["spec"] == "software"),
        "lavapipe is listed as --gpus software: {listing}"
    );
    let table = pipeline(&["devices"], dir.path(), dir.path());
    assert_eq!(table.status.code(), Some(0));
    let text = String::from_utf8_lossy(&table.stdout);
    let gpus = adapters
        .iter()
        .filter(|a| a["kind"] != "cpu" && a["kind"] != "other")
        .count();
    assert_eq!(
        text.contains("no GPU found"),
        gpus == 0,
        "{gpus} GPUs listed: {text}"
    );
    for a in adapters {
        let name = a["name"].as_str().expect("an adapter's name");
        assert!(text.contains(name), "{name} is in the table: {text}");
    }
    // The JPEG decoder, and whether its SIMD code was built: the same in
    // both forms.
    let simd = listing["jpeg_decoder"]["simd"]
        .as_bool()
        .expect("jpeg_decoder.simd");
    let line = text
        .lines()
        .find(|l| l.starts_with("JPEG decoder: libjpeg-turbo"))
        .unwrap_or_else(|| panic!("the decoder's line: {text}"));
    assert_eq!(line.contains("without SIMD"), !simd, "{line}");
    // NVIDIA's libraries for the CUDA engine: each found where it loaded
    // from, or missing with its fix, the same in both forms.
    let libraries = listing["cuda"]["libraries"]
        .as_array()
        .expect("cuda.libraries");
    assert_eq!(libraries.len(), 5, "{listing}");
    for lib in libraries {
        let name = lib["name"].as_str().expect("a name");
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name}'s line: {text}"));
        match lib["found"].as_str() {
            Some(path) => assert!(line.ends_with(path), "{line}"),
            None => assert!(
                line.contains(&format!("missing: {}", lib["fix"].as_str().expect("a fix"))),
                "{line}"
            ),
        }
    }
}

/// `--engine` picks the engine or refuses in one line, exit 2: `cuda`
/// refuses a model it does not run, and for one it runs names what it
/// lacks (NVIDIA's libraries, or a GPU), `vulkan` will not fall back to
/// the CPU, `cpu` takes no GPU list.
#[test]
fn the_engine_flag_runs_or_refuses_in_one_line() {
    let (dir, data) = dataset(6);
    let (cpu, cpu_out) = infer(dir.path(), &data.root, "cpu.jsonl", &["--engine", "cpu"]);
    assert_eq!(cpu.status.code(), Some(1), "broken files: {}", stderr(&cpu));
    let (plain, plain_out) = infer(dir.path(), &data.root, "plain.jsonl", &["--gpus", "cpu"]);
    assert_eq!(plain.status.code(), Some(1), "{}", stderr(&plain));
    assert_eq!(
        fs::read(&cpu_out).expect("read"),
        fs::read(&plain_out).expect("read"),
        "--engine cpu is --gpus cpu"
    );
    let listing: Value =
        serde_json::from_slice(&pipeline(&["devices", "--json"], dir.path(), dir.path()).stdout)
            .expect("devices --json");
    let driver_missing = listing["cuda"]["libraries"][0]["found"].is_null();
    for (flags, says) in [
        (
            &["--engine", "cpu", "--gpus", "0"][..],
            "--engine cpu runs on the CPU",
        ),
        (
            &["--engine", "vulkan", "--gpus", "cpu"],
            "--engine vulkan: no Vulkan GPU",
        ),
        (
            &["--engine", "cuda"],
            "--engine cuda: the CUDA engine does not run tiny (a test model)",
        ),
        (&["--engine", "metal"], "invalid value 'metal'"),
    ] {
        let (out, path) = infer(dir.path(), &data.root, "refused.jsonl", flags);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(says), "{flags:?}: {err}");
        assert!(!path.exists(), "{flags:?} wrote output");
        if flags[1] == "cuda" {
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        }
    }
    // A model the CUDA engine runs: here it lacks NVIDIA's libraries (or,
    // with them, an NVIDIA GPU), named in one line, before any work.
    let out_path = dir.path().join("vit.jsonl");
    let vit_on_cuda = |more: &[&str]| {
        let mut args = vec![
            "infer",
            "--data",
            data.root.to_str().expect("utf-8 path"),
            "--out",
            out_path.to_str().expect("utf-8 path"),
            "--model",
            "vit_b_16",
            "--engine",
            "cuda",
            "--quiet",
        ];
        args.extend(more);
        pipeline(&args, dir.path(), &dir.path().join("no-weights"))
    };
    let out = vit_on_cuda(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("--engine cuda: "), "{err}");
    if driver_missing {
        assert!(err.contains("libcuda: install NVIDIA's driver"), "{err}");
    }
    assert!(!out_path.exists(), "--engine cuda wrote output");
    // The CUDA engine computes in f16: asked for f32 or bf16, it refuses
    // in one line, before looking for a GPU or a library.
    for precision in ["f32", "bf16"] {
        let out = vit_on_cuda(&["--precision", precision]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(
            err.trim_end(),
            format!(
                "pipeline: error: --engine cuda: the CUDA engine computes in f16 (f32 \
                 accumulation), not {precision}; --engine vulkan or cpu runs --precision \
                 {precision}"
            )
        );
        assert!(!out_path.exists(), "--engine cuda wrote output");
    }
}

/// A worker that dies mid-run (SIGABRT, injected) costs its chunk, not the
/// run: it is reported, restarted, the chunk runs again, and the output is
/// the same as a clean run's.
#[test]
fn a_dead_worker_is_reported_restarted_and_costs_nothing_in_the_output() {
    let (dir, data) = dataset(16);
    let common = ["--gpus", "cpu", "--chunk-size", "4", "--batch-size", "4"];
    let (clean, clean_out) = infer(dir.path(), &data.root, "clean.jsonl", &common);
    assert_eq!(clean.status.code(), Some(1), "{}", stderr(&clean));

    let marker = dir.path().join("crashed-once");
    let report = dir.path().join("report.json");
    let mut args = common.to_vec();
    args.extend(["--report", report.to_str().expect("utf-8 path")]);
    let out_path = dir.path().join("crash.jsonl");
    let mut cmd = common::pipeline(dir.path());
    cmd.args(["infer", "--data", data.root.to_str().expect("utf-8 path")])
        .args([
            "--out",
            out_path.to_str().expect("utf-8 path"),
            "--model",
            "tiny",
        ])
        .args(&args)
        .env("PIPELINE_WEIGHTS_DIR", dir.path().join("none"))
        .env(
            "FAILPOINTS",
            format!("worker-crash=return({})", marker.display()),
        );
    let crashed = cmd.output().expect("the pipeline binary runs");
    let err = stderr(&crashed);
    assert!(
        marker.exists(),
        "the failpoint fired (is the failpoints feature on?): {err}"
    );
    assert_eq!(crashed.status.code(), Some(1), "{err}");
    assert!(err.contains("exited with signal 6 (SIGABRT)"), "{err}");
    assert_eq!(
        fs::read(&out_path).expect("output"),
        fs::read(&clean_out).expect("clean output"),
        "the output after a crash equals a clean run's"
    );
    let report: Value = serde_json::from_slice(&fs::read(&report).expect("report")).expect("json");
    // The chunks it held (at most the two it keeps queued) ran again.
    let retries = report["summary"]["retries"].as_u64().expect("retries");
    assert!((1..=2).contains(&retries), "{report}");
    assert_eq!(report["summary"]["restarts"], 1, "{report}");
    // The whole command's rate beside the steady window's: every record
    // of this fresh run, over the command's time.
    let command = &report["command"];
    assert_eq!(command["images"], report["summary"]["images"], "{report}");
    let wall = command["wall_s"].as_f64().expect("wall_s");
    let rate = command["images_per_s"].as_f64().expect("images_per_s");
    let images = command["images"].as_f64().expect("images");
    assert!(images > 0.0 && wall > 0.0, "{report}");
    assert!((rate * wall - images).abs() < 1e-6, "{report}");
}

/// The transformer families through the whole pipeline, at full size with
/// seeded random weights on the CPU: CLIP's embeddings are unit vectors of
/// 512, DINOv2's class token + patch mean 2 × 384, ConvNeXt classifies,
/// and every image appears once, in order.
#[test]
fn transformer_and_convnext_models_run_through_infer() {
    let (dir, data) = dataset_of(DatasetSpec {
        images: 3,
        seed: 5,
        broken: false,
    });
    let cases: [(&str, &[&str], usize); 3] = [
        ("clip_vit_b_32", &[], 512),
        ("dinov2_vits14", &["--pooling", "cls+mean"], 768),
        ("convnext_tiny", &["--task", "classify", "--top-k", "3"], 0),
    ];
    for (model, extra, dim) in cases {
        let out = dir.path().join(format!("{model}.jsonl"));
        let mut args = vec![
            "infer",
            "--data",
            data.root.to_str().expect("utf-8 path"),
            "--out",
            out.to_str().expect("utf-8 path"),
            "--model",
            model,
            "--gpus",
            "cpu",
            "--batch-size",
            "2",
            "--quiet",
        ];
        args.extend_from_slice(extra);
        let run = pipeline(&args, dir.path(), &dir.path().join("none"));
        assert_eq!(run.status.code(), Some(0), "{model}: {}", stderr(&run));
        let records = common::records(&out);
        assert_eq!(records.len(), data.good.len(), "{model}");
        for (i, record) in records.iter().enumerate() {
            assert_eq!(record["index"], i as u64, "{model}");
            if dim == 0 {
                assert_eq!(record["top_k"].as_array().map(Vec::len), Some(3), "{model}");
                continue;
            }
            let v: Vec<f64> = record["embedding"]
                .as_array()
                .expect("an embedding")
                .iter()
                .map(|x| x.as_f64().expect("a number"))
                .collect();
            assert_eq!(v.len(), dim, "{model}");
            if model.starts_with("clip") {
                let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                assert!((norm - 1.0).abs() < 1e-4, "{model}: norm {norm}");
            }
        }
    }
}

/// `labels` × `dim` class matrix as a .npy, labels in the .txt beside.
fn class_matrix(dir: &Path, name: &str, labels: &[&str], dim: usize) -> PathBuf {
    use npyz::WriterBuilder;
    let mut x: u32 = 0x9e37_79b9;
    let values: Vec<f32> = (0..labels.len() * dim)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect();
    let mut bytes = Vec::new();
    let mut writer = npyz::WriteOptions::<f32>::new()
        .default_dtype()
        .shape(&[labels.len() as u64, dim as u64])
        .writer(&mut bytes)
        .begin_nd()
        .expect("npy header");
    writer.extend(values).expect("npy data");
    writer.finish().expect("npy written");
    let path = dir.join(format!("{name}.npy"));
    fs::write(&path, bytes).expect("write");
    fs::write(dir.join(format!("{name}.txt")), labels.join("\n") + "\n").expect("write");
    path
}

/// Zero-shot CLIP through `pipeline infer`: the user's labels in every
/// record (JSONL, and CSV re-encoded by `pipeline merge` from a sharded
/// run's parts), softmax probabilities over the user's classes, and a
/// changed class file refused on resume.
#[test]
fn clip_classifies_zero_shot_with_the_users_classes() {
    let (dir, data) = dataset_of(DatasetSpec {
        images: 3,
        seed: 8,
        broken: true,
    });
    let labels = ["tabby cat", "dog, running", "a \"red\" car"];
    let classes = class_matrix(dir.path(), "classes", &labels, 512);
    let classes = classes.to_str().expect("utf-8 path");
    let root = data.root.to_str().expect("utf-8 path");
    let args = |out: &str, extra: &[&'static str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "infer",
            "--data",
            root,
            "--out",
            out,
            "--model",
            "clip_vit_b_32",
            "--classes",
            classes,
            "--gpus",
            "cpu",
            "--batch-size",
            "2",
            "--chunk-size",
            "2",
            "--quiet",
        ]
        .map(str::to_owned)
        .to_vec();
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    };
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        pipeline(&args, dir.path(), &dir.path().join("none"))
    };
    let out = run(args("zs.jsonl", &[]));
    assert_eq!(out.status.code(), Some(1), "broken files: {}", stderr(&out));
    let records = common::records(&dir.path().join("zs.jsonl"));
    let broken = data.broken.iter().filter(|b| b.path.exists()).count();
    assert_eq!(records.len(), data.good.len() + broken);
    let mut classified = 0;
    for record in &records {
        let Some(top) = record["top_k"].as_array() else {
            assert!(record["error"].is_object(), "{record}");
            continue;
        };
        classified += 1;
        assert_eq!(top.len(), 3, "top-k 5 keeps the 3 classes there are");
        let sum: f64 = top.iter().map(|c| c["prob"].as_f64().expect("prob")).sum();
        assert!((sum - 1.0).abs() < 1e-5, "softmax sums to 1: {sum}");
        for c in top {
            let class = c["class"].as_u64().expect("class") as usize;
            assert_eq!(c["label"], labels[class], "{record}");
        }
    }
    // (As root, the unreadable-file case reads fine and is classified too.)
    assert!(classified >= data.good.len(), "{classified} classified");

    // A changed class file: resume refuses, saying which flag changed.
    let changed = class_matrix(dir.path(), "changed", &["cat", "dog", "car"], 512);
    let first = run(args("partial.jsonl", &["--shard", "0/2"]));
    assert!(
        matches!(first.status.code(), Some(0 | 1)),
        "{}",
        stderr(&first)
    );
    let mut other = args("partial.jsonl", &["--shard", "1/2"]);
    let at = other
        .iter()
        .position(|a| a == classes)
        .expect("--classes value");
    other[at] = changed.to_str().expect("utf-8 path").to_owned();
    let refused = run(other);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("other --classes (file, labels, --prompt or tokenizer)"),
        "{}",
        stderr(&refused)
    );

    // Sharded into CSV: `pipeline merge` names the classes from run.json.
    for shard in ["0/2", "1/2"] {
        let run = run(args("zs.csv", &["--shard", shard]));
        assert!(matches!(run.status.code(), Some(0 | 1)), "{}", stderr(&run));
    }
    let merged = pipeline(&["merge", "--out", "zs.csv"], dir.path(), dir.path());
    assert_eq!(merged.status.code(), Some(1), "{}", stderr(&merged));
    let mut csv = csv::Reader::from_path(dir.path().join("zs.csv")).expect("csv output");
    let headers = csv.headers().expect("a header").clone();
    let label_1 = headers
        .iter()
        .position(|h| h == "label_1")
        .expect("label_1");
    let class_1 = headers
        .iter()
        .position(|h| h == "class_1")
        .expect("class_1");
    let mut named = 0;
    for row in csv.records() {
        let row = row.expect("a row");
        if let Ok(class) = row[class_1].parse::<usize>() {
            assert_eq!(&row[label_1], labels[class]);
            named += 1;
        }
    }
    assert_eq!(named, classified);
}

#[test]
fn models_lists_every_model_with_its_preprocessing_and_layouts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = pipeline(&["models", "--json"], dir.path(), dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let models: Value = serde_json::from_slice(&out.stdout).expect("models --json is JSON");
    let models = models.as_array().expect("a list");
    let find = |name: &str| {
        models
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("{name} listed"))
    };
    for name in [
        "vit_b_16",
        "convnext_base",
        "clip_vit_l_14",
        "siglip_base_patch16_224",
        "dinov2_vitl14",
    ] {
        let m = find(name);
        assert!(
            m["checkpoint_layouts"]
                .as_array()
                .is_some_and(|l| !l.is_empty()),
            "{m}"
        );
        assert!(
            m["official_weights"]
                .as_str()
                .is_some_and(|w| !w.is_empty()),
            "{m}"
        );
    }
    assert_eq!(find("dinov2_vits14")["tasks"], serde_json::json!(["embed"]));
    assert_eq!(find("siglip_base_patch16_224")["zero_shot"], true);
    assert_eq!(find("vit_b_16")["zero_shot"], false);
    assert_eq!(find("clip_vit_l_14")["embedding_dim"], 768);
    assert_eq!(find("vit_l_16")["preprocess_spec"]["resize_shorter"], 242);
    // Every registry row, each with the engines that run it.
    assert_eq!(models.len(), 20);
    // The CUDA engine runs every family but the test CNN (#28).
    for m in models {
        let name = m["name"].as_str().expect("a name");
        let want = if name != "tiny" {
            serde_json::json!(["burn", "cuda"])
        } else {
            serde_json::json!(["burn"])
        };
        assert_eq!(m["engines"], want, "{m}");
    }
    let table = pipeline(&["models"], dir.path(), dir.path());
    assert_eq!(table.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&table.stdout).contains("dinov2_vitb14"));
}

/// Without Mesa's lavapipe, `--gpus software` says so and names the
/// package; with it, a run prints none of the driver's chatter about
/// XDG_RUNTIME_DIR, even where that is unset (batch jobs, containers).
#[test]
fn software_without_lavapipe_is_one_line_and_driver_chatter_stays_hidden() {
    let (dir, data) = dataset(2);
    let root = data.root.to_str().expect("utf-8 path");
    let missing = common::pipeline(dir.path())
        .args([
            "infer", "--data", root, "--gpus", "software", "--model", "tiny",
        ])
        .current_dir(dir.path())
        .env("VK_DRIVER_FILES", "/nonexistent/icd.json")
        .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
        .output()
        .expect("the pipeline binary runs");
    let err = stderr(&missing);
    assert_eq!(missing.status.code(), Some(2), "{err}");
    assert!(
        err.contains("lavapipe") && err.contains("mesa-vulkan-drivers"),
        "{err}"
    );
    let out = dir.path().join("quiet.jsonl");
    let run = common::pipeline(dir.path())
        .args([
            "infer", "--data", root, "--gpus", "software", "--model", "tiny",
        ])
        .args(["--out", out.to_str().expect("utf-8 path")])
        .current_dir(dir.path())
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("the pipeline binary runs");
    let err = stderr(&run);
    assert!(matches!(run.status.code(), Some(0 | 1)), "{err}");
    assert!(!err.contains("XDG_RUNTIME_DIR"), "{err}");
    let devices = common::pipeline(dir.path())
        .arg("devices")
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("the pipeline binary runs");
    assert!(!stderr(&devices).contains("XDG_RUNTIME_DIR"));
    assert!(String::from_utf8_lossy(&devices.stdout).contains("software"));
    // `bench --model-only` opens the device in its own process.
    let bench = common::pipeline(dir.path())
        .args([
            "bench",
            "--model-only",
            "--gpus",
            "software",
            "--model",
            "tiny",
        ])
        .args(["--batch-size", "2", "--batches", "1", "--repeat", "1", "-q"])
        .current_dir(dir.path())
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("the pipeline binary runs");
    let err = stderr(&bench);
    assert_eq!(bench.status.code(), Some(0), "{err}");
    assert!(!err.contains("XDG_RUNTIME_DIR"), "{err}");
    // lavapipe autotunes; the results persist in PIPELINE_AUTOTUNE_DIR
    // (the harness points it at `cwd/autotune`) for the next run.
    let stored: u64 = walk(&dir.path().join("autotune"))
        .iter()
        .filter_map(|p| fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    assert!(stored > 0, "no autotune results were persisted");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
