//! A hub that goes quiet (#42): the client has no timeouts of its own, so
//! the tool watches each request; after `HF_HUB_DOWNLOAD_TIMEOUT` seconds
//! without a byte the run ends in one line, exit 2, instead of waiting
//! forever, and the bytes a stalled download got are kept for the next
//! run to resume.

use std::fs::File;
use std::time::{Duration, Instant};

use super::*;

/// `command`'s exit code and standard error; a run past `limit` is killed
/// and fails the test (the hang this guards against).
fn bounded(mut command: Command, dir: &Path, limit: Duration) -> (Option<i32>, String) {
    let log = dir.join("stderr.log");
    let mut child = command
        .stdout(Stdio::null())
        .stderr(File::create(&log).expect("a log"))
        .spawn()
        .expect("pipeline starts");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait works") {
            return (
                status.code(),
                std::fs::read_to_string(&log).unwrap_or_default(),
            );
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "still running after {limit:?}: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_hub_gone_quiet_is_one_line_exit_2_not_a_hang() {
    let model = "tiny-org/vit-2labels";
    // The API call answers nothing; a weight file's body stops halfway.
    for (stall, what) in [
        ("api", "the repo"),
        ("model.safetensors", "model.safetensors"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (root, data) = layout(dir.path());
        let hub = Hub::start(&root, &dir.path().join("log"), &["--stall", stall]);
        let cache = dir.path().join("cache");
        let mut command = common::pipeline(dir.path());
        command
            .args(["infer", "--data"])
            .arg(&data)
            .args([
                "--out", "o.jsonl", "--model", model, "--gpus", "cpu", "--quiet",
            ])
            .env("NO_PROXY", "127.0.0.1")
            .env("HF_HOME", dir.path().join("hf-home-unset"))
            .env("HF_ENDPOINT", hub.endpoint())
            .env("HF_HUB_CACHE", &cache)
            .env("HF_HUB_DOWNLOAD_TIMEOUT", "1");
        let (code, err) = bounded(command, dir.path(), Duration::from_secs(60));
        assert_eq!(code, Some(2), "{stall}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{stall}: one line: {err}");
        assert!(
            err.contains(&format!("--model {model}"))
                && err.contains("sent nothing for 1 s")
                && err.contains(what)
                && err.contains("HF_HUB_DOWNLOAD_TIMEOUT"),
            "{stall}: {err}"
        );
        if stall != "api" {
            // What arrived before the stall waits in a `.part` file.
            let blobs = cache.join("models--tiny-org--vit-2labels/blobs");
            let kept: u64 = std::fs::read_dir(&blobs)
                .expect("blobs")
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "part"))
                .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
                .sum();
            assert!(kept > 0, "a .part file with the first half");
        }
        assert!(
            !dir.path().join("o.jsonl").exists(),
            "{stall}: no output from a model that did not load"
        );
    }
}

#[test]
fn a_download_timeout_that_is_no_number_is_one_line_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, data) = layout(dir.path());
    let hub = Hub::start(&root, &dir.path().join("log"), &[]);
    let mut command = common::pipeline(dir.path());
    command
        .args(["infer", "--data"])
        .arg(&data)
        .args(["--out", "o.jsonl", "--model", "tiny-org/vit-2labels"])
        .args(["--gpus", "cpu", "--quiet"])
        .env("NO_PROXY", "127.0.0.1")
        .env("HF_HOME", dir.path().join("hf-home-unset"))
        .env("HF_ENDPOINT", hub.endpoint())
        .env("HF_HUB_CACHE", dir.path().join("cache"))
        .env("HF_HUB_DOWNLOAD_TIMEOUT", "ten");
    let (code, err) = bounded(command, dir.path(), Duration::from_secs(60));
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("HF_HUB_DOWNLOAD_TIMEOUT=ten: not a number of seconds above 0"),
        "{err}"
    );
    assert!(
        hub.requests().is_empty(),
        "nothing asked of the hub: {:?}",
        hub.requests()
    );
}
