//! `pipeline bench` end to end with the real binary: a small synthetic
//! dataset through the whole pipeline on the CPU, swept over two batch
//! sizes, and the model alone; the JSON, the table and the SVG are checked
//! against each other and against what was asked for. Figures themselves
//! are not asserted (they are benchmarks, see BENCHMARKS.md), only their
//! consistency.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common;

fn bench(cwd: &Path, args: &[&str]) -> Output {
    let out = common::pipeline(cwd)
        .arg("bench")
        .args(args)
        .output()
        .expect("the pipeline binary runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("json written")).expect("valid JSON")
}

/// The `stage` names of a report's `stages` list.
fn stage_names(stages: &Value) -> Vec<&str> {
    stages
        .as_array()
        .expect("stages")
        .iter()
        .map(|s| s["stage"].as_str().expect("name"))
        .collect()
}

fn number(v: &Value, what: &str) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

#[test]
fn a_sweep_reports_every_combination_with_stages_latency_and_a_plot() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = bench(
        dir.path(),
        &[
            "--synthetic",
            "96",
            "--size",
            "160x120",
            "--gpus",
            "cpu",
            "--model",
            "tiny",
            "--chunk-size",
            "8",
            "--repeat",
            "2",
            "--sweep",
            "batch=4,8",
            "--json",
            "b.json",
            "--plot",
            "b.svg",
            "-q",
        ],
    );
    let report = json(&dir.path().join("b.json"));
    assert_eq!(report["mode"], "end_to_end");
    let sweep = report["sweep"].as_array().expect("sweep");
    assert_eq!(sweep.len(), 2);
    let mut medians = Vec::new();
    for (point, batch) in sweep.iter().zip([4, 8]) {
        assert_eq!(point["batch"], batch, "{point}");
        assert_eq!(point["images_per_repeat"], 96, "{point}");
        assert_eq!(point["steady"], true, "{point}");
        let repeats: Vec<f64> = point["repeats"]
            .as_array()
            .expect("repeats")
            .iter()
            .map(|r| number(r, "repeat"))
            .collect();
        assert_eq!(repeats.len(), 2);
        let median = number(&point["images_per_s"], "median");
        assert!(median > 0.0 && (median - (repeats[0] + repeats[1]) / 2.0).abs() < 1e-9);
        // Beside it, each repeat's rate over its whole time.
        let whole: Vec<f64> = point["whole_run_repeats"]
            .as_array()
            .expect("whole_run_repeats")
            .iter()
            .map(|r| number(r, "whole run repeat"))
            .collect();
        assert_eq!(whole.len(), 2);
        assert!(whole.iter().all(|&r| r > 0.0), "{point}");
        let whole_median = number(&point["whole_run_images_per_s"], "whole run median");
        assert!((whole_median - (whole[0] + whole[1]) / 2.0).abs() < 1e-9);
        assert_eq!(
            number(&point["spread"]["min"], "min"),
            repeats[0].min(repeats[1])
        );
        let busy = number(&point["device_busy_fraction"], "busy");
        assert!(busy > 0.0 && busy <= 1.0, "{busy}");
        let latency = &point["batch_latency_ms"];
        assert!(number(&latency["p50"], "p50") <= number(&latency["p99"], "p99"));
        // 96 images in batches of `batch`, twice.
        assert_eq!(latency["batches"], 2 * 96 / batch, "{point}");
        let stages = stage_names(&point["stages"]);
        assert_eq!(
            stages,
            [
                "read",
                "decode+preprocess",
                "upload",
                "compute",
                "read-back",
                "write"
            ]
        );
        for stage in point["stages"].as_array().expect("stages") {
            assert!(number(&stage["busy_s"], "busy_s") > 0.0, "{stage}");
        }
        assert!(
            stages.contains(&point["limiting_stage"].as_str().expect("limiting")),
            "{point}"
        );
        medians.push(median);
    }
    // The top level is the fastest combination.
    let top = number(&report["images_per_s"], "top level");
    assert_eq!(top, medians.iter().copied().fold(f64::MIN, f64::max));
    assert_eq!(report["stages"], report["best"]["stages"]);

    // The table: a header, a rule, a row per combination, then the stages.
    let table = String::from_utf8(out.stdout).expect("utf-8 table");
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| ")).collect();
    assert!(
        rows[0].contains("images/s") && rows[0].contains("whole run"),
        "{table}"
    );
    assert!(
        rows[1].starts_with("| 4 | 1 |") && rows[2].starts_with("| 8 | 1 |"),
        "{table}"
    );
    assert!(table.contains("| compute |"), "{table}");

    // The plot: one line of two points, labelled by batch size.
    let svg = std::fs::read_to_string(dir.path().join("b.svg")).expect("svg written");
    assert!(svg.starts_with("<svg"), "not an SVG");
    assert_eq!(svg.matches("<circle").count(), 2, "points");
    assert!(
        svg.contains("batch size") && svg.contains("1 worker, "),
        "labels"
    );
}

#[test]
fn model_only_times_the_model_alone_on_full_batches() {
    let dir = tempfile::tempdir().expect("temp dir");
    bench(
        dir.path(),
        &[
            "--model-only",
            "--gpus",
            "cpu",
            "--model",
            "tiny",
            "--batch-size",
            "4",
            "--batches",
            "3",
            "--repeat",
            "1",
            "--json",
            "m.json",
            "-q",
        ],
    );
    let report = json(&dir.path().join("m.json"));
    assert_eq!(report["mode"], "model_only");
    let best = &report["best"];
    assert_eq!(best["images_per_repeat"], 12);
    // Three timed passes; the warm-up pass is not among them.
    assert_eq!(best["batch_latency_ms"]["batches"], 3);
    assert!(number(&report["images_per_s"], "rate") > 0.0);
    assert!(report["device_busy_fraction"].is_null());
    let stages = stage_names(&best["stages"]);
    assert_eq!(stages, ["upload", "compute", "read-back"]);
}

/// A model-only sweep opens the device once per point in one process. In
/// f16 the second opening used to fail: the device's type was already set.
#[test]
fn a_half_precision_model_only_sweep_runs_every_point() {
    let dir = tempfile::tempdir().expect("temp dir");
    bench(
        dir.path(),
        &[
            "--model-only",
            "--gpus",
            "cpu",
            "--model",
            "tiny",
            "--precision",
            "f16",
            "--sweep",
            "batch=2,4",
            "--batches",
            "2",
            "--repeat",
            "1",
            "--json",
            "h.json",
            "-q",
        ],
    );
    let report = json(&dir.path().join("h.json"));
    assert_eq!(report["config"]["precision"], "f16");
    let sweep = report["sweep"].as_array().expect("sweep");
    let batches: Vec<u64> = sweep
        .iter()
        .map(|p| p["batch"].as_u64().expect("batch"))
        .collect();
    assert_eq!(batches, [2, 4]);
    // Each point ran its passes in f16, not just named them.
    for point in sweep {
        assert_eq!(point["batch_latency_ms"]["batches"], 2, "{point}");
        assert!(number(&point["images_per_s"], "rate") > 0.0, "{point}");
    }
}

#[test]
fn loader_only_reads_and_decodes_every_image_without_a_model() {
    let dir = tempfile::tempdir().expect("temp dir");
    bench(
        dir.path(),
        &[
            "--loader-only",
            "--synthetic",
            "20",
            // Big enough for draft decoding to engage, and for the process's
            // CPU time (counted in 10 ms ticks) to be more than zero.
            "--size",
            "1600x1200",
            "--loader-threads",
            "1",
            "--jpeg-draft",
            "--repeat",
            "1",
            "--json",
            "l.json",
            "-q",
        ],
    );
    let report = json(&dir.path().join("l.json"));
    assert_eq!(report["mode"], "loader_only");
    assert_eq!(report["best"]["images_per_repeat"], 20);
    assert_eq!(report["best"]["loader_threads"], 1);
    assert_eq!(report["config"]["preprocess"]["jpeg_draft"], true);
    let stages = stage_names(&report["stages"]);
    assert_eq!(stages, ["read", "decode+preprocess"]);
    assert_eq!(report["limiting_stage"], "decode+preprocess");
    assert!(number(&report["best"]["images_per_cpu_s"], "per CPU-second") > 0.0);
}
