//! A repo holding both transformers' `config.json` and open_clip's files
//! runs transformers' model, the one a download runs, whatever the cache
//! already holds: after Python's open_clip cached only its own two files
//! there, the tool asks the hub, fetches transformers' files, and a
//! second run reads them from the cache.

use super::*;

#[test]
fn a_repo_with_both_configs_runs_transformers_model_whatever_python_cached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, data) = layout(dir.path());
    // clip-small's repo with open-clip's files beside its own.
    let both = root.join("tiny-org--clip-both");
    std::fs::create_dir_all(&both).expect("mkdir");
    for (from, names) in [
        (
            "tiny-org--clip-small",
            &[
                "config.json",
                "preprocessor_config.json",
                "model.safetensors",
                "tokenizer.json",
            ][..],
        ),
        (
            "tiny-org--open-clip",
            &["open_clip_config.json", "open_clip_model.safetensors"][..],
        ),
    ] {
        for name in names {
            std::fs::copy(root.join(from).join(name), both.join(name)).expect("copy");
        }
    }
    let hub = Hub::start(&root, &dir.path().join("log"), &[]);
    let cache = dir.path().join("cache").display().to_string();
    let endpoint = hub.endpoint();
    let env = [
        ("HF_ENDPOINT", endpoint.as_str()),
        ("HF_HUB_CACHE", cache.as_str()),
    ];
    let model = "tiny-org/clip-both";
    let python = python_download_files(
        model,
        &["open_clip_config.json", "open_clip_model.safetensors"],
        &env,
    );
    assert!(
        python.status.success(),
        "{}",
        String::from_utf8_lossy(&python.stderr)
    );
    // The text tower first: its description has no optional file that
    // would send it to the hub anyway.
    let want = &reference()["tiny-org--clip-small"]["text"];
    let texts: Vec<String> = serde_json::from_value(want["texts"].clone()).expect("texts");
    std::fs::write(dir.path().join("texts.txt"), texts.join("\n") + "\n").expect("write");
    let text = common::pipeline(dir.path())
        .args(["embed-text", "--model", model, "--gpus", "cpu", "--quiet"])
        .args(["--text", "texts.txt", "--out", "t.jsonl"])
        .env("NO_PROXY", "127.0.0.1")
        .env("HF_HOME", dir.path().join("hf-home-unset"))
        .envs(env)
        .output()
        .expect("the pipeline binary runs");
    assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
    let rows = common::records(&dir.path().join("t.jsonl"));
    let want = want["embed"].as_array().expect("text rows");
    assert_eq!(rows.len(), want.len(), "one row per text");
    for (row, want) in rows.iter().zip(want) {
        let got: Vec<f64> = serde_json::from_value(row["embedding"].clone()).expect("row");
        let want: Vec<f64> = serde_json::from_value(want.clone()).expect("row");
        matches_embedding(&got, &want, "clip-both's text tower is clip-small's");
    }
    let run = infer(dir.path(), &data, model, "both.jsonl", &env);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    matches_transformers(
        &records(dir.path(), "both.jsonl", model),
        "tiny-org--clip-small",
    );
    // Everything from the cache now: offline gives the same records.
    let offline = [
        ("HF_ENDPOINT", endpoint.as_str()),
        ("HF_HUB_CACHE", cache.as_str()),
        ("HF_HUB_OFFLINE", "1"),
    ];
    let again = infer(dir.path(), &data, model, "again.jsonl", &offline);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_eq!(
        records(dir.path(), "again.jsonl", model),
        records(dir.path(), "both.jsonl", model),
        "the same model from the cache"
    );
}
