//! Models by their Hugging Face repo ids (#42), against a hub on 127.0.0.1
//! (`scripts/hub_server.py`, the download protocol `huggingface_hub` and
//! the `hf-hub` crate speak) serving the repos of `cli/tests/hub_repos/`
//! (`scripts/make_hub_fixtures.py`: seeded models saved by transformers at
//! sizes none of the built-in names has, with transformers' own outputs
//! on `samples/` through its PIL image processors):
//! - every family's outputs match transformers' (open_clip's for an
//!   open_clip repo): the same classes in the same order with |Δprob| ≤
//!   1e-4, embeddings at cosine ≥ 0.99999 (the issue asks 0.9999, but a
//!   2-layer fixture run with QuickGELU for GELU is still at 0.99997),
//!   and only the files the model needs are fetched;
//! - Python's `huggingface_hub` and the tool share one cache, each reading
//!   offline what the other downloaded;
//! - two processes downloading one model at once, and a body cut in
//!   mid-download, leave the cache whole;
//! - a missing repo or revision, a gated repo without a token, an
//!   uncached file offline and a family not built in are one line, exit 2;
//! - a hub gone quiet is one line, exit 2, after `HF_HUB_DOWNLOAD_TIMEOUT`
//!   (`stall.rs`);
//! - a model Python's `snapshot_download` cached runs with the hub out of
//!   reach, giving the records of a run with the hub up (`offline.rs`);
//! - headers that would name a path outside the cache, wrong or short
//!   bodies and a hub that stops listening mid-run are one line, exit 2,
//!   and leave nothing a later run trusts (`faults.rs`);
//! - CLIP's and SigLIP's text towers (`text.rs`): `embed-text` and
//!   zero-shot `--classes` from the repo's own tokenizer match
//!   transformers'.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

use crate::common;
mod faults;
mod offline;
mod open_clip_cache;
mod stall;
mod text;

use common::data::{repo, stderr};

/// The hub, killed when dropped.
struct Hub {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Hub {
    /// Serves `root`'s repos, with the server's `extra` flags.
    fn start(root: &Path, log: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new("python3")
            .arg(repo().join("scripts/hub_server.py"))
            .arg(root)
            .arg(log)
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the hub server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the server prints its port");
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("a port: {line:?}"));
        Self {
            child,
            port,
            log: log.to_owned(),
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The requests served so far, one `METHOD PATH RANGE` each.
    fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The fixtures' repos copied under `dir/hub`, the first with a file no
/// model needs (which must never be fetched), and the photos under
/// `dir/data`.
fn layout(dir: &Path) -> (PathBuf, PathBuf) {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hub_repos");
    let root = dir.join("hub");
    for entry in std::fs::read_dir(&fixtures).expect("hub_repos") {
        let entry = entry.expect("entry");
        if !entry.path().is_dir() {
            continue;
        }
        let to = root.join(entry.file_name());
        std::fs::create_dir_all(&to).expect("mkdir");
        for file in std::fs::read_dir(entry.path()).expect("repo") {
            let file = file.expect("file");
            std::fs::copy(file.path(), to.join(file.file_name())).expect("copy");
        }
    }
    std::fs::write(
        root.join("tiny-org--vit-2labels/tf_model.h5"),
        vec![7u8; 4096],
    )
    .expect("an unneeded file");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    for name in images() {
        std::fs::copy(repo().join("samples").join(&name), data.join(&name)).expect("copy");
    }
    (root, data)
}

/// The fixtures served by a hub on 127.0.0.1, with an empty cache, under
/// `dir`: the photos' folder, the hub, and the environment that points the
/// tool at both.
fn serve(dir: &Path) -> (PathBuf, Hub, Vec<(&'static str, String)>) {
    let (root, data) = layout(dir);
    let hub = Hub::start(&root, &dir.join("log"), &[]);
    let env = vec![
        ("HF_ENDPOINT", hub.endpoint()),
        ("HF_HUB_CACHE", dir.join("cache").display().to_string()),
    ];
    (data, hub, env)
}

fn reference() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hub_repos/reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("reference.json")).expect("json")
}

fn images() -> Vec<String> {
    serde_json::from_value(reference()["tiny-org--vit-2labels"]["images"].clone()).expect("names")
}

/// `pipeline infer --model MODEL` over `data` on the CPU with `env`.
fn infer(cwd: &Path, data: &Path, model: &str, out: &str, env: &[(&str, &str)]) -> Output {
    infer_with(cwd, data, (model, out), env, &[])
}

/// [`infer`] with `extra` flags.
fn infer_with(
    cwd: &Path,
    data: &Path,
    (model, out): (&str, &str),
    env: &[(&str, &str)],
    extra: &[&str],
) -> Output {
    common::pipeline(cwd)
        .args(["infer", "--data"])
        .arg(data)
        .args(["--out", out, "--model", model, "--gpus", "cpu", "--quiet"])
        .args(["--batch-size", "2", "--chunk-size", "3", "--top-k", "3"])
        .args(extra)
        .env("NO_PROXY", "127.0.0.1")
        // No token from the user's ~/.cache/huggingface reaches the hub.
        .env("HF_HOME", cwd.join("hf-home-unset"))
        .envs(env.iter().copied())
        .output()
        .expect("the pipeline binary runs")
}

/// Its output, checked: every image once, in input order.
fn records(cwd: &Path, out: &str, what: &str) -> Vec<Value> {
    let records = common::records(&cwd.join(out));
    let names: Vec<&str> = records
        .iter()
        .map(|r| r["path"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, images(), "{what}: every image once, in order");
    records
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// `records` against transformers' rows for `repo`: classes in the same
/// order with |Δprob| ≤ 1e-4, or embeddings at cosine ≥ 0.99999 (and unit
/// length where the reference is).
fn matches_transformers(records: &[Value], repo: &str) {
    let reference = &reference()[repo];
    if let Some(rows) = reference["probs"].as_array() {
        matches_probs(records, rows, repo);
        return;
    }
    let rows = reference["embed"].as_array().expect("embed rows");
    for (record, row) in records.iter().zip(rows) {
        let want: Vec<f64> = serde_json::from_value(row.clone()).expect("row");
        let got: Vec<f64> =
            serde_json::from_value(record["embedding"].clone()).expect("an embedding");
        matches_embedding(&got, &want, repo);
    }
}

/// An embedding against transformers': cosine ≥ 0.99999, the same length.
fn matches_embedding(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let c = cosine(got, want);
    assert!(c >= 0.999_99, "{what}: cosine {c}");
    let length = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!(
        (length(got) - length(want)).abs() <= 1e-3 * length(want),
        "{what}"
    );
}

/// Each record's top 3 against transformers' probabilities `rows`: the
/// same classes in the same order, |Δprob| ≤ 1e-4.
fn matches_probs(records: &[Value], rows: &[Value], repo: &str) {
    assert_eq!(records.len(), rows.len(), "{repo}");
    for (record, row) in records.iter().zip(rows) {
        let row: Vec<f64> = serde_json::from_value(row.clone()).expect("probs");
        let mut order: Vec<usize> = (0..row.len()).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
        let top = record["top_k"].as_array().expect("top_k");
        assert_eq!(top.len(), row.len().min(3), "{repo}: {record}");
        for (got, &class) in top.iter().zip(&order) {
            assert_eq!(got["class"], class, "{repo}: class order {record}");
            let prob = got["prob"].as_f64().expect("prob");
            assert!(
                (prob - row[class]).abs() <= 1e-4,
                "{repo}: {record} vs {row:?}"
            );
        }
    }
}

const REPOS: [&str; 28] = [
    "tiny-org/vit-2labels",
    "tiny-org/vit-2labels-bin",
    "tiny-org/vit-backbone",
    "tiny-org/vit-sharded",
    "tiny-org/dinov2-multilabel",
    "tiny-org/dinov2-registers",
    "tiny-org/dinov2-registers-3labels",
    "tiny-org/dinov2-swiglu",
    "tiny-org/dinov2-swiglu-2labels",
    "tiny-org/clip-small",
    "tiny-org/siglip-small",
    "tiny-org/clip-vision",
    "tiny-org/clip-vision-bare",
    "tiny-org/clip-classifier",
    "tiny-org/siglip-classifier",
    "tiny-org/siglip-vision",
    "tiny-org/convnext-5labels",
    "tiny-org/timm-convnext",
    "tiny-org/convnext-bare",
    "tiny-org/resnet-bare",
    "tiny-org/timm-convnext-bare",
    "tiny-org/timm-resnet18",
    "tiny-org/timm-resnet50-bare",
    "tiny-org/resnet-3labels",
    "tiny-org/resnet-basic",
    "tiny-org/resnet-basic-bin",
    "tiny-org/timm-vit",
    "tiny-org/open-clip",
];

#[test]
fn every_family_at_its_config_s_size_matches_transformers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, hub, env) = serve(dir.path());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for model in REPOS {
        let out = format!("{}.jsonl", model.replace('/', "_"));
        let run = infer(dir.path(), &data, model, &out, &env);
        assert_eq!(run.status.code(), Some(0), "{model}: {}", stderr(&run));
        let records = records(dir.path(), &out, model);
        matches_transformers(&records, &model.replace('/', "--"));
    }
    // The classifier names its labels; the multi-label one scores each
    // class by its own sigmoid (they need not sum to 1).
    let vit = common::records(&dir.path().join("tiny-org_vit-2labels.jsonl"));
    assert!(
        ["normal", "nsfw"].contains(&vit[0]["top_k"][0]["label"].as_str().unwrap_or("")),
        "{}",
        vit[0]
    );
    // The ConvNeXt's 5 labels, from its id2label.
    let convnext = common::records(&dir.path().join("tiny-org_convnext-5labels.jsonl"));
    let label = convnext[0]["top_k"][0]["label"].as_str().unwrap_or("");
    assert!(
        ["daisy", "dandelion", "rose", "sunflower", "tulip"].contains(&label),
        "{}",
        convnext[0]
    );
    // CLIP's and SigLIP's classifiers name their labels.
    let clip = common::records(&dir.path().join("tiny-org_clip-classifier.jsonl"));
    let label = clip[0]["top_k"][0]["label"].as_str().unwrap_or("");
    assert!(["anime", "photo", "sketch"].contains(&label), "{}", clip[0]);
    // transformers' ResNets: the id2label of one, the default names of
    // the other.
    let resnet = common::records(&dir.path().join("tiny-org_resnet-3labels.jsonl"));
    let label = resnet[0]["top_k"][0]["label"].as_str().unwrap_or("");
    assert!(["cat", "dog", "bird"].contains(&label), "{}", resnet[0]);
    let basic = common::records(&dir.path().join("tiny-org_resnet-basic.jsonl"));
    let label = basic[0]["top_k"][0]["label"].as_str().unwrap_or("");
    assert!(label.starts_with("LABEL_"), "{}", basic[0]);
    // timm's ViT names its classes by its label_names.
    let timm_vit = common::records(&dir.path().join("tiny-org_timm-vit.jsonl"));
    let label = timm_vit[0]["top_k"][0]["label"].as_str().unwrap_or("");
    assert!(
        ["ant", "bee", "fly", "moth", "wasp"].contains(&label),
        "{}",
        timm_vit[0]
    );
    // timm's ResNet names its classes by its label_names.
    let timm_resnet = common::records(&dir.path().join("tiny-org_timm-resnet18.jsonl"));
    let label = timm_resnet[0]["top_k"][0]["label"].as_str().unwrap_or("");
    assert!(
        ["red", "green", "blue"].contains(&label),
        "{}",
        timm_resnet[0]
    );
    // timm's ConvNeXt names its 7 classes by number (no label_names).
    let timm = common::records(&dir.path().join("tiny-org_timm-convnext.jsonl"));
    let label = timm[0]["top_k"][0]["label"].as_str().unwrap_or("");
    assert!(label.parse::<u32>().is_ok_and(|n| n < 7), "{}", timm[0]);
    // Only what the models need was fetched, never the whole repo.
    let requests = hub.requests();
    assert!(
        !requests.iter().any(|r| r.contains("tf_model.h5")),
        "{requests:?}"
    );
    // Each file a model needs was fetched; a file the repo's listing does
    // not have (timm's repo: no preprocessor_config.json) was not asked for.
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hub_repos");
    for model in REPOS {
        for file in [
            "config.json",
            "preprocessor_config.json",
            "model.safetensors",
        ] {
            let has = fixtures.join(model.replace('/', "--")).join(file).is_file();
            let asked = requests.iter().any(|r| {
                r.contains(&format!("{model}/resolve/")) && r.contains(&format!("/{file} "))
            });
            assert_eq!(asked, has, "{model}/{file} fetched: {requests:?}");
        }
    }
    // A sharded checkpoint: its index and every shard it names.
    for shard in 1..=3 {
        let file = format!("model-0000{shard}-of-00003.safetensors");
        assert!(
            requests
                .iter()
                .any(|r| r.contains("tiny-org/vit-sharded/resolve/") && r.contains(&file)),
            "{file}: {requests:?}"
        );
    }
    // Nor are the text towers' tokenizers, which only text needs.
    for file in ["tokenizer.json", "spiece.model"] {
        assert!(
            !requests.iter().any(|r| r.contains(file)),
            "{file}: {requests:?}"
        );
    }
    // A second run reads the cache alone: no request at all.
    let before = hub.requests().len();
    let run = infer(dir.path(), &data, REPOS[0], "again.jsonl", &env);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert_eq!(hub.requests().len(), before, "a cached model asks nothing");
    assert_eq!(
        common::records(&dir.path().join("again.jsonl")),
        vit,
        "the same bytes from the cache"
    );
}

/// `huggingface_hub` in Python, with `env` and the hub's endpoint:
/// `hf_hub_download` of each file of `model`, printing each path.
fn python_download(model: &str, env: &[(&str, &str)]) -> Output {
    python_download_files(
        model,
        &[
            "config.json",
            "preprocessor_config.json",
            "model.safetensors",
        ],
        env,
    )
}

/// Python's `hf_hub_download` of `files` of `model` into the cache `env`
/// names.
fn python_download_files(model: &str, files: &[&str], env: &[(&str, &str)]) -> Output {
    let script = format!(
        "from huggingface_hub import hf_hub_download\n\
         for f in {files:?}:\n    \
         print(hf_hub_download({model:?}, f))\n"
    );
    let home = tempfile::tempdir().expect("tempdir");
    Command::new("python3")
        .args(["-c", &script])
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("TRANSFORMERS_OFFLINE")
        .env_remove("HF_TOKEN")
        .env("HF_HOME", home.path())
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("NO_PROXY", "127.0.0.1")
        .envs(env.iter().copied())
        .output()
        .expect("python3 runs")
}

#[test]
fn python_and_the_tool_share_one_cache_each_reading_the_other_s_offline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, data) = layout(dir.path());
    let hub = Hub::start(&root, &dir.path().join("log"), &[]);
    let endpoint = hub.endpoint();
    let model = "tiny-org/vit-2labels";

    // Python downloads; the tool runs offline, with no hub to reach.
    let python_cache = dir.path().join("python-cache").display().to_string();
    let out = python_download(
        model,
        &[("HF_ENDPOINT", &endpoint), ("HF_HUB_CACHE", &python_cache)],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = hub.requests().len();
    let offline = [
        ("HF_HUB_OFFLINE", "1"),
        ("HF_ENDPOINT", "http://127.0.0.1:9"),
        ("HF_HUB_CACHE", python_cache.as_str()),
    ];
    let run = infer(dir.path(), &data, model, "offline.jsonl", &offline);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    matches_transformers(
        &records(dir.path(), "offline.jsonl", "offline"),
        "tiny-org--vit-2labels",
    );
    assert_eq!(hub.requests().len(), before, "offline asks nothing");
    // A commit names its snapshot without refs/ (Python writes no ref
    // for a commit).
    let commit = std::fs::read_to_string(
        Path::new(&python_cache).join("models--tiny-org--vit-2labels/refs/main"),
    )
    .expect("refs/main");
    let pinned = format!("{model}@{}", commit.trim());
    let run = infer(dir.path(), &data, &pinned, "pinned.jsonl", &offline);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));

    // The tool downloads; Python reads each file offline, the same bytes.
    let tool_cache = dir.path().join("tool-cache").display().to_string();
    let run = infer(
        dir.path(),
        &data,
        model,
        "online.jsonl",
        &[("HF_ENDPOINT", &endpoint), ("HF_HUB_CACHE", &tool_cache)],
    );
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let out = python_download(
        model,
        &[
            ("HF_HUB_OFFLINE", "1"),
            ("HF_ENDPOINT", "http://127.0.0.1:9"),
            ("HF_HUB_CACHE", &tool_cache),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let paths = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(paths.lines().count(), 3, "a path per file: {paths}");
    for (line, file) in paths.lines().zip([
        "config.json",
        "preprocessor_config.json",
        "model.safetensors",
    ]) {
        assert_eq!(
            std::fs::read(line).expect("Python's path"),
            std::fs::read(root.join("tiny-org--vit-2labels").join(file)).expect("the repo's"),
            "{file}"
        );
    }
}

#[test]
fn two_downloads_at_once_and_a_body_cut_midway_leave_the_cache_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, data) = layout(dir.path());
    let hub = Hub::start(
        &root,
        &dir.path().join("log"),
        &["--cut-once", "model.safetensors"],
    );
    let cache = dir.path().join("cache").display().to_string();
    let endpoint = hub.endpoint();
    let env = [
        ("HF_ENDPOINT", endpoint.as_str()),
        ("HF_HUB_CACHE", cache.as_str()),
    ];
    let model = "tiny-org/dinov2-multilabel";
    let spawn = |out: &str| {
        common::pipeline(dir.path())
            .args(["infer", "--data"])
            .arg(&data)
            .args(["--out", out, "--model", model, "--gpus", "cpu", "--quiet"])
            .env("NO_PROXY", "127.0.0.1")
            .env("HF_HOME", dir.path().join("hf-home-unset"))
            .envs(env)
            .stderr(Stdio::piped())
            .spawn()
            .expect("pipeline starts")
    };
    let (a, b) = (spawn("a.jsonl"), spawn("b.jsonl"));
    for (child, out) in [(a, "a.jsonl"), (b, "b.jsonl")] {
        let done = child.wait_with_output().expect("waits");
        assert_eq!(done.status.code(), Some(0), "{out}: {}", stderr(&done));
        matches_transformers(
            &records(dir.path(), out, out),
            "tiny-org--dinov2-multilabel",
        );
    }
    // The cut body was resumed where it stopped, not fetched again.
    let requests = hub.requests();
    assert!(
        requests.iter().any(|r| r.starts_with("GET /cdn/")
            && r.contains("bytes=")
            && !r.ends_with("bytes=0-")
            && !r.ends_with("bytes=0-0")),
        "a resumed range: {requests:?}"
    );
    // Every blob is whole: its name is its checksum.
    let blobs = Path::new(&cache).join("models--tiny-org--dinov2-multilabel/blobs");
    let mut checked = 0;
    for entry in std::fs::read_dir(&blobs).expect("blobs") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        if name.len() != 64 {
            continue;
        }
        let out = Command::new("sha256sum")
            .arg(&path)
            .output()
            .expect("sha256sum");
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with(&name),
            "{name}"
        );
        checked += 1;
    }
    assert_eq!(checked, 1, "the one LFS file");
}

#[test]
fn what_cannot_run_is_one_line_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, data) = layout(dir.path());
    let hub = Hub::start(
        &root,
        &dir.path().join("log"),
        &["--gated", "tiny-org/siglip-small", "--token", "hf_good"],
    );
    let cache = dir.path().join("cache").display().to_string();
    let endpoint = hub.endpoint();
    let online = [
        ("HF_ENDPOINT", endpoint.as_str()),
        ("HF_HUB_CACHE", cache.as_str()),
    ];
    let offline = [
        ("HF_HUB_OFFLINE", "1"),
        ("HF_ENDPOINT", endpoint.as_str()),
        ("HF_HUB_CACHE", cache.as_str()),
    ];
    type Env<'a> = &'a [(&'a str, &'a str)];
    let cases: [(&str, Env<'_>, &str); 6] = [
        (
            "tiny-org/nothing",
            &online,
            "no such repo, or a private one",
        ),
        (
            "tiny-org/vit-2labels@v9",
            &online,
            "no such repo or revision",
        ),
        (
            "tiny-org/siglip-small",
            &online,
            "refused config.json (a gated or private repo): set HF_TOKEN",
        ),
        (
            "tiny-org/beit-small",
            &online,
            "model_type beit is not built in",
        ),
        ("tiny-org/clip-small", &offline, "HF_HUB_OFFLINE"),
        ("tiny-org/vit-backbone", &online, "no classifier head"),
    ];
    for (model, env, says) in cases {
        let mut env = env.to_vec();
        let extra = if model.ends_with("backbone") {
            vec!["--task", "classify"]
        } else {
            Vec::new()
        };
        env.push(("HF_HOME", "/nonexistent"));
        let run = common::pipeline(dir.path())
            .args(["infer", "--data"])
            .arg(&data)
            .args(["--out", "x.jsonl", "--model", model, "--gpus", "cpu"])
            .args(&extra)
            .env("NO_PROXY", "127.0.0.1")
            .envs(env.iter().copied())
            .output()
            .expect("runs");
        let text = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{model}: {text}");
        assert!(text.contains(says), "{model}: {text}");
        assert_eq!(text.trim().lines().count(), 1, "{model}: one line: {text}");
    }
    // Flags of the built-in models' machinery, and a precision the CUDA
    // engine does not compute in, are refused, not ignored.
    for (extra, says) in [
        (
            &["--classes", "cat,dog"][..],
            "--classes needs a CLIP or SigLIP model; tiny-org/vit-backbone",
        ),
        (
            &["--prompt", "a {}"][..],
            "--prompt and --tokenizer go with --classes labels",
        ),
        (
            &["--task", "raw"][..],
            "--task raw does not go with a hub model",
        ),
        (
            &["--engine", "cuda", "--precision", "f32"][..],
            "--engine cuda: the CUDA engine computes in f16",
        ),
    ] {
        let run = common::pipeline(dir.path())
            .args(["infer", "--data"])
            .arg(&data)
            .args(["--out", "y.jsonl", "--model", "tiny-org/vit-backbone"])
            .args(extra)
            .env("NO_PROXY", "127.0.0.1")
            .env("HF_HOME", "/nonexistent")
            .envs(online)
            .output()
            .expect("runs");
        let text = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{extra:?}: {text}");
        assert!(text.contains(says), "{extra:?}: {text}");
        assert_eq!(text.trim().lines().count(), 1, "{extra:?}: {text}");
    }
    // What is refused is refused before the weights download.
    let requests = hub.requests();
    for model in ["vit-backbone", "beit-small"] {
        assert!(
            !requests
                .iter()
                .any(|r| r.contains(model) && r.contains("model.safetensors")),
            "{model}: {requests:?}"
        );
    }
    // The token opens the gated repo, from HF_TOKEN or the token file.
    let home = dir.path().join("hf-home");
    std::fs::create_dir_all(&home).expect("mkdir");
    std::fs::write(home.join("token"), "hf_good\n").expect("token file");
    let home = home.display().to_string();
    for token in [("HF_TOKEN", "hf_good"), ("HF_HOME", home.as_str())] {
        let fresh = dir
            .path()
            .join(format!("cache-{}", token.0))
            .display()
            .to_string();
        let out = format!("siglip-{}.jsonl", token.0);
        let run = infer(
            dir.path(),
            &data,
            "tiny-org/siglip-small",
            &out,
            &[("HF_ENDPOINT", &endpoint), ("HF_HUB_CACHE", &fresh), token],
        );
        assert_eq!(run.status.code(), Some(0), "{token:?}: {}", stderr(&run));
    }
}

/// The hub's CDN is another origin: a weight file's redirect leads there,
/// and the token (which opens a gated repo on the hub) never reaches it,
/// as `huggingface_hub` drops it for another host; the download still
/// works, its size asked of the CDN.
#[test]
fn the_token_goes_to_the_hub_alone_never_to_where_it_redirects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, data) = layout(dir.path());
    let model = "tiny-org/vit-2labels";
    let hub = Hub::start(
        &root,
        &dir.path().join("log"),
        &["--cdn", "--gated", model, "--token", "hf_good"],
    );
    let cache = dir.path().join("cache").display().to_string();
    let run = infer(
        dir.path(),
        &data,
        model,
        "out.jsonl",
        &[
            ("HF_ENDPOINT", &hub.endpoint()),
            ("HF_HUB_CACHE", &cache),
            ("HF_TOKEN", "hf_good"),
        ],
    );
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    records(dir.path(), "out.jsonl", model);
    let requests = hub.requests();
    let cdn: Vec<&String> = requests.iter().filter(|r| r.starts_with("CDN ")).collect();
    assert!(
        cdn.iter().any(|r| r.contains("/cdn/")),
        "the weights came from the CDN: {requests:?}"
    );
    for request in &cdn {
        assert!(
            request.ends_with(" -") && !request.contains("hf_good"),
            "the token reached the CDN: {request}"
        );
    }
}
