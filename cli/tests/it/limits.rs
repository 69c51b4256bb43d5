//! `--max-pixels` and `--max-file-bytes`: the decompression-bomb and file
//! size guards are flags, and an item over one is a record that names the
//! flag to raise, never a crash.

use std::path::Path;

use fixtures::DatasetSpec;
use serde_json::Value;

use crate::common;

fn run(cwd: &Path, data: &Path, out: &str, extra: &[&str]) -> Vec<Value> {
    let output = common::pipeline(cwd)
        .args(["infer", "--data"])
        .arg(data)
        .args(["--out", out, "--model", "tiny", "--gpus", "cpu", "--quiet"])
        .args(extra)
        .output()
        .expect("the pipeline binary runs");
    assert!(
        cwd.join(out).exists(),
        "no output: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    common::records(&cwd.join(out))
}

#[test]
fn items_over_a_limit_are_records_that_name_the_flag() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = fixtures::generate(
        &dir.path().join("data"),
        &DatasetSpec {
            images: 4,
            seed: 3,
            broken: false,
        },
    )
    .expect("fixtures");
    let d = dir.path();
    let plain = run(d, &data.root, "plain.jsonl", &[]);
    assert!(plain.iter().all(|r| r.get("error").is_none()), "{plain:?}");
    for (flag, kind) in [
        ("--max-pixels", "too_large"),
        ("--max-file-bytes", "too_large"),
    ] {
        let out = format!("{}.jsonl", &flag[2..]);
        let limited = run(d, &data.root, &out, &[flag, "16"]);
        assert_eq!(limited.len(), plain.len());
        for r in &limited {
            assert_eq!(r["error"]["kind"], kind, "{flag}: {r}");
            let message = r["error"]["message"].as_str().expect("message");
            assert!(message.contains(flag), "{flag}: {message}");
        }
    }
}
