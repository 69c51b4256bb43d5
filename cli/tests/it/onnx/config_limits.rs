//! A model's config file held to the limits the flags are, end to end: a
//! `preprocessor_config.json` whose `crop_size` (or `size`) is 30000, a
//! batch of whose crops would be 170 GB, beside an ONNX model that takes
//! any size, is one line naming the file and the field, exit 2, before any
//! worker starts (no output, no part folder); `pipeline preprocess
//! --config` the same, before its loader.

use std::path::Path;

use serde_json::json;

use super::{dataset, infer, model, runtime_or_skip, stderr};

/// The configs past the limit, each with what its error says.
fn configs() -> Vec<(&'static str, serde_json::Value, &'static str)> {
    let statistics = |mut config: serde_json::Value| {
        config["resample"] = json!(2);
        config["image_mean"] = json!([0.5, 0.5, 0.5]);
        config["image_std"] = json!([0.5, 0.5, 0.5]);
        config
    };
    vec![
        (
            "crop",
            statistics(json!({
                "image_processor_type": "CLIPImageProcessor",
                "size": {"shortest_edge": 224},
                "do_center_crop": true,
                "crop_size": {"height": 30000, "width": 30000},
            })),
            "crop_size.height 30000: expected 1..=8192 pixels",
        ),
        // Without the limit this one starts workers, whose first batch
        // asks for batch × 3 × 30000² bytes.
        (
            "size",
            statistics(json!({
                "image_processor_type": "ViTImageProcessor",
                "size": {"height": 30000, "width": 30000},
            })),
            "size.height 30000: expected 1..=8192 pixels",
        ),
    ]
}

fn assert_one_line(run: &std::process::Output, file: &Path, says: &str) {
    let err = stderr(run);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&file.display().to_string()),
        "names the file: {err}"
    );
    assert!(err.contains(says), "names the field: {err}");
}

#[test]
fn a_config_past_the_flags_limits_is_one_line_before_any_worker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let data = dataset(cwd, 2, 3, false);
    for (name, config, says) in configs() {
        let folder = cwd.join(name);
        std::fs::create_dir_all(&folder).expect("a folder");
        let file = folder.join("preprocessor_config.json");
        std::fs::write(&file, config.to_string()).expect("the config");
        let crops = folder.join("crops");
        let run = crate::common::pipeline(cwd)
            .args(["preprocess", "--data"])
            .arg(&data.root)
            .arg("--config")
            .arg(&file)
            .arg("--out")
            .arg(&crops)
            .output()
            .expect("pipeline runs");
        assert_one_line(&run, &file, says);
        assert!(!crops.exists(), "{name}: preprocess wrote crops");
    }
    if !runtime_or_skip() {
        return;
    }
    for (name, _, says) in configs() {
        let folder = cwd.join(name);
        let onnx = folder.join("model.onnx");
        std::fs::copy(model("dynamic_size"), &onnx).expect("the model beside its config");
        let out = folder.join("out.jsonl");
        let run = infer(
            cwd,
            &data.root,
            &out,
            &["--model", onnx.to_str().expect("utf-8 path")],
        );
        assert_one_line(&run, &folder.join("preprocessor_config.json"), says);
        assert!(!out.exists(), "{name}: wrote output");
        assert!(
            !coordinator::parts_dir(&out).exists(),
            "{name}: a run started (its part folder is there)"
        );
    }
}
