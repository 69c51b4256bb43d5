//! A model that Python's `snapshot_download` put in the cache (on a login
//! node, say) runs where the hub cannot be reached (an air-gapped compute
//! node): `snapshot_download` records no 404s, so the cache cannot say
//! whether the repo has a file it lacks (timm's repo has no
//! `preprocessor_config.json`, open_clip's no `config.json`) and the hub is
//! asked; refused, unresolvable or silent, the cache is used as it stands,
//! with one warning line, and the records are those of a run made while
//! the hub was up. A required file the cache lacks is still one line,
//! exit 2.

use super::*;

/// Python's `snapshot_download` of `model` (every file of the repo, or
/// those `allow` names) into the cache `env` names.
fn python_snapshot(model: &str, allow: Option<&[&str]>, env: &[(&str, &str)]) {
    let allow = allow.map_or_else(|| "None".to_owned(), |files| format!("{files:?}"));
    let script = format!(
        "from huggingface_hub import snapshot_download\n\
         print(snapshot_download({model:?}, allow_patterns={allow}))\n"
    );
    let home = tempfile::tempdir().expect("tempdir");
    let out = Command::new("python3")
        .args(["-c", &script])
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("TRANSFORMERS_OFFLINE")
        .env_remove("HF_TOKEN")
        .env("HF_HOME", home.path())
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        .env("NO_PROXY", "127.0.0.1")
        .envs(env.iter().copied())
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{model}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `pipeline ARGS` with `env`, its notices shown (no `--quiet`).
fn pipeline(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    common::pipeline(cwd)
        .args(args)
        .env("NO_PROXY", "127.0.0.1")
        .env("HF_HOME", cwd.join("hf-home-unset"))
        .envs(env.iter().copied())
        .output()
        .expect("the pipeline binary runs")
}

/// `args` as the `&str`s a command takes.
fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The lines of `run`'s standard error that say the hub was out of reach.
fn warnings(run: &Output) -> Vec<String> {
    stderr(run)
        .lines()
        .filter(|l| l.contains("cannot be reached"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_snapshot_downloaded_model_runs_with_the_hub_out_of_reach() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, data) = layout(dir.path());
    let hub = Hub::start(&root, &dir.path().join("log"), &[]);
    let endpoint = hub.endpoint();
    let python_cache = dir.path().join("python-cache").display().to_string();
    let online_cache = dir.path().join("online-cache").display().to_string();
    let models = ["tiny-org/open-clip", "tiny-org/timm-convnext"];
    for model in models {
        python_snapshot(
            model,
            None,
            &[("HF_ENDPOINT", &endpoint), ("HF_HUB_CACHE", &python_cache)],
        );
    }
    // Open_clip's config alone: its weights are missing.
    let partial_cache = dir.path().join("partial-cache").display().to_string();
    python_snapshot(
        "tiny-org/open-clip",
        Some(&["open_clip_config.json"][..]),
        &[("HF_ENDPOINT", &endpoint), ("HF_HUB_CACHE", &partial_cache)],
    );
    std::fs::write(dir.path().join("texts.txt"), "a photo of a cat\na dog\n").expect("texts");
    let embed_text = |out: &str| {
        vec![
            "embed-text",
            "--model",
            "tiny-org/open-clip",
            "--gpus",
            "cpu",
            "--text",
            "texts.txt",
            "--out",
            out,
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>()
    };
    let infer_args = |model: &str, out: &str| {
        let mut args = vec!["infer".to_owned(), "--data".to_owned()];
        args.push(data.display().to_string());
        args.extend(
            [
                "--out",
                out,
                "--model",
                model,
                "--gpus",
                "cpu",
                "--batch-size",
                "2",
            ]
            .map(str::to_owned),
        );
        args
    };

    // The reference: runs while the hub is up.
    let up = [
        ("HF_ENDPOINT", endpoint.as_str()),
        ("HF_HUB_CACHE", online_cache.as_str()),
    ];
    for model in models {
        let out = format!("{}-up.jsonl", model.replace('/', "_"));
        let run = pipeline(dir.path(), &strs(&infer_args(model, &out)), &up);
        assert_eq!(run.status.code(), Some(0), "{model}: {}", stderr(&run));
        assert!(warnings(&run).is_empty(), "{}", stderr(&run));
    }
    let run = pipeline(dir.path(), &strs(&embed_text("text-up.jsonl")), &up);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));

    // The hub stopped: its port refuses connections. A host that does not
    // resolve, and a hub that accepts and never answers, likewise.
    drop(hub);
    let silent = Hub::start(&root, &dir.path().join("silent.log"), &["--stall", "api"]);
    let silent_endpoint = silent.endpoint();
    for (how, endpoint) in [
        ("refused", endpoint.as_str()),
        ("no such host", "http://no-such-host.invalid"),
        ("silent", silent_endpoint.as_str()),
    ] {
        let down = [
            ("HF_ENDPOINT", endpoint),
            ("HF_HUB_CACHE", python_cache.as_str()),
            ("HF_HUB_DOWNLOAD_TIMEOUT", "2"),
        ];
        for model in models {
            let out = format!(
                "{}-{}.jsonl",
                model.replace('/', "_"),
                how.replace(' ', "-")
            );
            let run = pipeline(dir.path(), &strs(&infer_args(model, &out)), &down);
            assert_eq!(
                run.status.code(),
                Some(0),
                "{how} {model}: {}",
                stderr(&run)
            );
            let said = warnings(&run);
            assert_eq!(
                said.len(),
                1,
                "{how} {model}: one warning: {}",
                stderr(&run)
            );
            assert!(
                said[0].starts_with("pipeline: warning: the hub at ")
                    && said[0]
                        .contains(&format!("--model {model} runs from the Hugging Face cache"))
                    && said[0].contains("HF_HUB_OFFLINE=1"),
                "{how}: {}",
                said[0]
            );
            let up_out = format!("{}-up.jsonl", model.replace('/', "_"));
            assert_eq!(
                records(dir.path(), &out, how),
                records(dir.path(), &up_out, "up"),
                "{how} {model}: the records of a run with the hub up"
            );
        }
        let out = format!("text-{}.jsonl", how.replace(' ', "-"));
        let run = pipeline(dir.path(), &strs(&embed_text(&out)), &down);
        assert_eq!(run.status.code(), Some(0), "{how}: {}", stderr(&run));
        assert_eq!(warnings(&run).len(), 1, "{how}: {}", stderr(&run));
        let rows = common::records(&dir.path().join(&out));
        assert_eq!(rows.len(), 2, "{how}: a row per text");
        assert_eq!(
            rows,
            common::records(&dir.path().join("text-up.jsonl")),
            "{how}: embed-text's records of a run with the hub up"
        );
    }
    // The silent hub was asked, once a run, and answered nothing.
    assert!(
        silent
            .requests()
            .iter()
            .all(|r| r.starts_with("GET /api/models/")),
        "{:?}",
        silent.requests()
    );

    // What the cache lacks and the model needs is one line, exit 2.
    let down = [
        ("HF_ENDPOINT", endpoint.as_str()),
        ("HF_HUB_CACHE", partial_cache.as_str()),
    ];
    let run = pipeline(
        dir.path(),
        &strs(&infer_args("tiny-org/open-clip", "partial.jsonl")),
        &down,
    );
    let text = stderr(&run);
    assert_eq!(run.status.code(), Some(2), "{text}");
    let lines: Vec<&str> = text.lines().filter(|l| !l.contains("warning")).collect();
    assert_eq!(lines.len(), 1, "one line: {text}");
    assert!(
        lines[0].contains("open_clip_model.safetensors or open_clip_pytorch_model.bin is not in the Hugging Face cache")
            && lines[0].contains("cannot be reached"),
        "{text}"
    );

    // HF_HUB_OFFLINE=1 still asks nothing, and says nothing of the hub.
    let before = silent.requests().len();
    let offline = [
        ("HF_HUB_OFFLINE", "1"),
        ("HF_ENDPOINT", silent_endpoint.as_str()),
        ("HF_HUB_CACHE", python_cache.as_str()),
    ];
    let run = pipeline(
        dir.path(),
        &strs(&infer_args("tiny-org/timm-convnext", "offline.jsonl")),
        &offline,
    );
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert!(warnings(&run).is_empty(), "{}", stderr(&run));
    assert_eq!(silent.requests().len(), before, "offline asks nothing");
    assert_eq!(
        records(dir.path(), "offline.jsonl", "offline"),
        records(dir.path(), "tiny-org_timm-convnext-up.jsonl", "up"),
    );
}

/// `path` read-only for the test's life: a read-only bind mount of
/// itself, since the tests run as root and root writes through mode bits;
/// as another user, the mode bits.
struct ReadOnly(PathBuf, bool);

impl ReadOnly {
    fn new(path: &Path) -> Self {
        let run = |args: &[&str]| {
            Command::new(args[0])
                .args(&args[1..])
                .status()
                .is_ok_and(|s| s.success())
        };
        let p = path.display().to_string();
        assert!(run(&["chmod", "-R", "a-w", &p]), "chmod {p}");
        let probe = path.join("probe");
        let mounted = std::fs::write(&probe, b"").is_ok()
            && run(&["mount", "--bind", &p, &p])
            && run(&["mount", "-o", "remount,ro,bind", &p]);
        let _ = std::fs::remove_file(&probe);
        assert!(
            std::fs::write(&probe, b"").is_err(),
            "{p} could not be made read-only"
        );
        Self(path.to_owned(), mounted)
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        if self.1 {
            let _ = Command::new("umount").arg(&self.0).status();
        }
        let _ = Command::new("chmod")
            .args(["-R", "u+w"])
            .arg(&self.0)
            .status();
    }
}

/// A cluster's cache is shared read-only: a model Python put there runs
/// from it, without a write, with the hub down (the records of a run made
/// while it was up) and with the hub up.
#[test]
fn a_read_only_cache_runs_with_the_hub_up_or_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, data) = layout(dir.path());
    let hub = Hub::start(&root, &dir.path().join("log"), &[]);
    let endpoint = hub.endpoint();
    let shared = dir.path().join("shared-cache");
    let shared_s = shared.display().to_string();
    let online_cache = dir.path().join("online-cache").display().to_string();
    let models = ["tiny-org/timm-convnext", "tiny-org/open-clip"];
    for model in models {
        python_snapshot(
            model,
            None,
            &[("HF_ENDPOINT", &endpoint), ("HF_HUB_CACHE", &shared_s)],
        );
    }
    let infer_args = |model: &str, out: &str| {
        let mut args = vec!["infer".to_owned(), "--data".to_owned()];
        args.push(data.display().to_string());
        args.extend(["--out", out, "--model", model, "--gpus", "cpu"].map(str::to_owned));
        args
    };
    let name = |model: &str, how: &str| format!("{}-{how}.jsonl", model.replace('/', "_"));
    let up = [
        ("HF_ENDPOINT", endpoint.as_str()),
        ("HF_HUB_CACHE", online_cache.as_str()),
    ];
    for model in models {
        let run = pipeline(
            dir.path(),
            &strs(&infer_args(model, &name(model, "online"))),
            &up,
        );
        assert_eq!(run.status.code(), Some(0), "{model}: {}", stderr(&run));
    }
    let _read_only = ReadOnly::new(&shared);
    let up = [
        ("HF_ENDPOINT", endpoint.as_str()),
        ("HF_HUB_CACHE", shared_s.as_str()),
    ];
    for model in models {
        let out = name(model, "read-only-up");
        let run = pipeline(dir.path(), &strs(&infer_args(model, &out)), &up);
        assert_eq!(
            run.status.code(),
            Some(0),
            "hub up, {model}: {}",
            stderr(&run)
        );
        assert_eq!(
            records(dir.path(), &out, "up"),
            records(dir.path(), &name(model, "online"), "online"),
            "hub up, {model}"
        );
    }
    drop(hub);
    for model in models {
        let out = name(model, "read-only-down");
        let run = pipeline(dir.path(), &strs(&infer_args(model, &out)), &up);
        assert_eq!(
            run.status.code(),
            Some(0),
            "hub down, {model}: {}",
            stderr(&run)
        );
        assert_eq!(warnings(&run).len(), 1, "{}", stderr(&run));
        assert_eq!(
            records(dir.path(), &out, "down"),
            records(dir.path(), &name(model, "online"), "online"),
            "hub down, {model}"
        );
    }
}
