//! `--update` and `--retry-failed` with the real binary on `tiny` and the
//! CPU: a folder that grew, changed and shrank is brought up to date by
//! computing only what changed, in every output format, and the result is
//! byte-identical to a fresh run over the new folder; a crashed worker or
//! an interrupted update costs nothing; failed items are computed again on
//! request.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use fixtures::DatasetSpec;
use serde_json::Value;

use crate::common;

fn run(cwd: &Path, data: &Path, out: &str, extra: &[&str], env: &[(&str, String)]) -> Output {
    common::pipeline(cwd)
        .args(["infer", "--data"])
        .arg(data)
        .args(["--out", out, "--model", "tiny", "--gpus", "cpu", "--quiet"])
        .args(["--chunk-size", "16", "--batch-size", "8"])
        .args(extra)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("the pipeline binary runs")
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every file under `path` (or the file itself), by relative name.
fn contents(path: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    if path.is_file() {
        return vec![(PathBuf::new(), fs::read(path).expect("output"))];
    }
    let mut files: Vec<(PathBuf, Vec<u8>)> = walk(path)
        .into_iter()
        .map(|p| {
            let bytes = fs::read(&p).expect("file");
            (p.strip_prefix(path).expect("under").to_owned(), bytes)
        })
        .collect();
    files.sort();
    files
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).expect("folder") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

fn summary(report: &Path) -> Value {
    let report: Value = serde_json::from_slice(&fs::read(report).expect("report")).expect("json");
    report["summary"].clone()
}

/// The outputs the update must keep byte-identical to a fresh run.
const FORMATS: [(&str, &[&str]); 5] = [
    ("o.jsonl", &[]),
    ("o.csv", &["--top-k", "3"]),
    (
        "o.parquet",
        &["--task", "embed", "--embedding-dtype", "f16"],
    ),
    (
        "npy",
        &["--task", "embed", "--format", "npy", "--shard-rows", "64"],
    ),
    ("parts", &["--format", "parquet", "--shard-rows", "100"]),
];

#[test]
fn an_update_computes_only_what_changed_and_equals_a_fresh_run_in_every_format() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let data = fixtures::generate(
        &d.join("data"),
        &DatasetSpec {
            images: 300,
            seed: 21,
            broken: true,
        },
    )
    .expect("fixtures");
    for (out, extra) in FORMATS {
        let first = run(d, &data.root, out, extra, &[]);
        assert_eq!(code(&first), Some(1), "{out}: {}", stderr(&first));
    }
    let before = fs::read_to_string(d.join("o.jsonl"))
        .expect("jsonl")
        .lines()
        .count() as u64;

    // 30 new (some sort between the old ones), 5 changed, 3 deleted.
    for (i, good) in data.good.iter().take(30).enumerate() {
        let ext = good.extension().expect("ext").to_string_lossy();
        let to = match i % 3 {
            0 => data.root.join(format!("new-{i:02}.{ext}")),
            _ => good.with_file_name(format!("{}-copy.{ext}", i)),
        };
        fs::copy(good, to).expect("added");
    }
    for (i, good) in data.good.iter().skip(40).take(5).enumerate() {
        let bytes = fs::read(good).expect("image");
        let source = data
            .good
            .iter()
            .skip(100 + i)
            .chain(&data.good)
            .find(|o| o.extension() == good.extension() && fs::read(o).ok() != Some(bytes.clone()))
            .expect("another image of the same kind");
        fs::write(good, fs::read(source).expect("other image")).expect("changed");
        // A change of content is a new mtime even where the size is equal.
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60 + i as u64);
        fs::File::options()
            .write(true)
            .open(good)
            .and_then(|f| f.set_modified(later))
            .expect("mtime set");
    }
    for good in data.good.iter().skip(200).take(3) {
        fs::remove_file(good).expect("deleted");
    }

    for (out, extra) in FORMATS {
        let report = d.join(format!("{out}.report.json"));
        let mut args = extra.to_vec();
        args.extend(["--update", "--report", report.to_str().expect("utf-8")]);
        let updated = run(d, &data.root, out, &args, &[]);
        assert_eq!(code(&updated), Some(1), "{out}: {}", stderr(&updated));
        let s = summary(&report);
        let counts = (
            &s["update"]["reused"],
            &s["update"]["computed"],
            &s["update"]["dropped"],
        );
        let want = (before - 8, 35, 8);
        assert_eq!(
            counts,
            (&want.0.into(), &want.1.into(), &want.2.into()),
            "{out}: {s}"
        );
        let fresh_name = format!("fresh-{out}");
        let fresh = run(d, &data.root, &fresh_name, extra, &[]);
        assert_eq!(code(&fresh), Some(1), "{}", stderr(&fresh));
        assert!(
            contents(&d.join(out)) == contents(&d.join(&fresh_name)),
            "{out}: the updated output differs from a fresh run's"
        );
        let keys = |name: &str| fs::read(coordinator::keys_path(&d.join(name))).expect("keys");
        assert_eq!(keys(out), keys(&fresh_name));
    }

    // Nothing changed since: nothing is computed.
    let report = d.join("again.json");
    let again = run(
        d,
        &data.root,
        "o.jsonl",
        &["--update", "--report", report.to_str().expect("utf-8")],
        &[],
    );
    assert_eq!(code(&again), Some(1), "{}", stderr(&again));
    assert_eq!(summary(&report)["update"]["computed"], 0);
}

#[test]
fn a_crashed_worker_or_an_interrupted_update_costs_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let data = fixtures::generate(
        &d.join("data"),
        &DatasetSpec {
            images: 60,
            seed: 4,
            broken: true,
        },
    )
    .expect("fixtures");
    for out in ["a.jsonl", "b.jsonl"] {
        assert_eq!(code(&run(d, &data.root, out, &[], &[])), Some(1));
    }
    for (i, good) in data.good.iter().take(20).enumerate() {
        let ext = good.extension().expect("ext").to_string_lossy();
        fs::copy(good, data.root.join(format!("added-{i:02}.{ext}"))).expect("added");
    }
    fs::remove_file(&data.good[30]).expect("deleted");
    let fresh = run(d, &data.root, "fresh.jsonl", &[], &[]);
    assert_eq!(code(&fresh), Some(1), "{}", stderr(&fresh));
    let want = fs::read(d.join("fresh.jsonl")).expect("fresh");

    // A worker aborts during the update: its chunk runs again.
    let marker = d.join("crashed");
    let crash = [(
        "FAILPOINTS",
        format!("worker-crash=return({})", marker.display()),
    )];
    let out = run(d, &data.root, "a.jsonl", &["--update"], &crash);
    assert!(marker.exists(), "the failpoint fired: {}", stderr(&out));
    assert_eq!(code(&out), Some(1), "{}", stderr(&out));
    assert_eq!(fs::read(d.join("a.jsonl")).expect("updated"), want);

    // The disk fills after one part: the update stops with its parts kept
    // and the old output untouched; run again, it finishes the same.
    let old = fs::read(d.join("b.jsonl")).expect("old");
    let full = [("FAILPOINTS", "part-write=1*off->return".to_owned())];
    let out = run(d, &data.root, "b.jsonl", &["--update"], &full);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(coordinator::parts_dir(&d.join("b.jsonl")).exists());
    assert_eq!(fs::read(d.join("b.jsonl")).expect("still there"), old);
    let out = run(d, &data.root, "b.jsonl", &["--update"], &[]);
    assert_eq!(code(&out), Some(1), "{}", stderr(&out));
    assert_eq!(fs::read(d.join("b.jsonl")).expect("updated"), want);
}

#[test]
fn retry_failed_computes_exactly_the_failed_items_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let data = fixtures::generate(
        &d.join("data"),
        &DatasetSpec {
            images: 24,
            seed: 8,
            broken: true,
        },
    )
    .expect("fixtures");
    let victim = data.good[5]
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    // One good image kills its worker every time: a `worker_crash` record.
    let crash = [("FAILPOINTS", format!("worker-crash-on=return({victim})"))];
    let out = run(d, &data.root, "r.jsonl", &[], &crash);
    assert_eq!(code(&out), Some(1), "{}", stderr(&out));
    let failures =
        fs::read_to_string(coordinator::failures_path(&d.join("r.jsonl"))).expect("failures file");
    assert!(failures.contains("worker_crash"), "{failures}");
    let failed = failures.lines().count() as u64;

    let report = d.join("retry.json");
    let args = [
        "--retry-failed",
        "--report",
        report.to_str().expect("utf-8"),
    ];
    let out = run(d, &data.root, "r.jsonl", &args, &[]);
    assert_eq!(code(&out), Some(1), "{}", stderr(&out));
    let s = summary(&report);
    assert_eq!(s["update"]["computed"], failed, "{s}");
    assert_eq!(s["update"]["dropped"], failed, "{s}");
    let clean = run(d, &data.root, "clean.jsonl", &[], &[]);
    assert_eq!(code(&clean), Some(1), "{}", stderr(&clean));
    assert_eq!(
        fs::read(d.join("r.jsonl")).expect("retried"),
        fs::read(d.join("clean.jsonl")).expect("clean")
    );

    // Results of other settings are not mixed in: one line, exit 2, and
    // the output is left as it was.
    let before = fs::read(d.join("r.jsonl")).expect("output");
    let out = run(d, &data.root, "r.jsonl", &["--update", "--top-k", "3"], &[]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--top-k"), "{}", stderr(&out));
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
    assert_eq!(fs::read(d.join("r.jsonl")).expect("output"), before);

    // An output without keys cannot be updated: one line, exit 2.
    fs::remove_file(coordinator::keys_path(&d.join("clean.jsonl"))).expect("keys removed");
    let out = run(d, &data.root, "clean.jsonl", &["--update"], &[]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--overwrite"), "{}", stderr(&out));
}
