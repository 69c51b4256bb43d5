//! Embedding outputs as users load them: `--format npy` (clip-retrieval's
//! folder of `.npy` shards with Parquet metadata) and Parquet with
//! fixed-size-list embeddings, zstd-compressed, in f32 or f16, one file or
//! `--shard-rows` shards; read back here with npyz and the parquet crate,
//! and by numpy, pyarrow and DuckDB (`scripts/readers/`), against the same
//! run's JSONL. Failed items are present and shard boundaries fall inside
//! chunks.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use fixtures::DatasetSpec;
use serde_json::Value;
use tempfile::TempDir;

use crate::common;

/// `infer` with `tiny` on the CPU, `--task embed` unless `extra` says
/// another.
fn run(cwd: &Path, data: &Path, out: &str, extra: &[&str]) -> Output {
    let task = if extra.contains(&"--task") {
        &[][..]
    } else {
        &["--task", "embed"][..]
    };
    common::pipeline(cwd)
        .args(["infer", "--data"])
        .arg(data)
        .args(["--out", out, "--model", "tiny", "--gpus", "cpu"])
        .args(task)
        .args(["--chunk-size", "4", "--batch-size", "3", "--quiet"])
        .args(extra)
        .output()
        .expect("the pipeline binary runs")
}

/// Exit 1: the fixtures include broken files, so some items failed.
fn ran(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Fixtures with broken files, and the JSONL reference run.
fn reference() -> (TempDir, PathBuf, Vec<Value>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = fixtures::generate(
        &dir.path().join("data"),
        &DatasetSpec {
            images: 14,
            seed: 9,
            broken: true,
        },
    )
    .expect("fixtures");
    ran(&run(dir.path(), &data.root, "ref.jsonl", &[]));
    let records = common::records(&dir.path().join("ref.jsonl"));
    assert!(records.iter().any(|r| r.get("error").is_some()));
    assert!(records.len() > 14, "more than two shards of 7");
    (dir, data.root, records)
}

fn embedding(record: &Value) -> Option<Vec<f32>> {
    record.get("embedding").map(|e| {
        e.as_array()
            .expect("array")
            .iter()
            .map(|v| v.as_f64().expect("number") as f32)
            .collect()
    })
}

/// Every row of the Parquet file at `path`, as (index, path, error_kind).
fn metadata(path: &Path) -> Vec<(u64, String, Option<String>)> {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        fs::File::open(path).expect("metadata file"),
    )
    .expect("parquet")
    .build()
    .expect("reader");
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.expect("batch");
        assert!(batch.column_by_name("embedding").is_none(), "metadata only");
        let index = batch["index"].as_primitive::<UInt64Type>();
        let paths = batch["path"].as_string::<i32>();
        let kinds = batch["error_kind"].as_string::<i32>();
        for r in 0..batch.num_rows() {
            let kind = kinds.is_valid(r).then(|| kinds.value(r).to_owned());
            rows.push((index.value(r), paths.value(r).to_owned(), kind));
        }
    }
    rows
}

/// The Python readers' check (numpy, pyarrow, DuckDB) of one output.
fn python_check(kind: &str, jsonl: &Path, out: &Path, dtype: &str) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_owned();
    let venv = std::process::Command::new("bash")
        .arg(repo.join("scripts/readers/venv.sh"))
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&venv.stdout);
    assert!(
        venv.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&venv.stderr)
    );
    let python = stdout
        .lines()
        .find_map(|l| l.strip_prefix("PYTHON="))
        .expect("venv.sh prints PYTHON=");
    let check = std::process::Command::new(python)
        .arg(repo.join("scripts/readers/check.py"))
        .args([kind])
        .args([jsonl, out])
        .arg(dtype)
        .output()
        .expect("python runs");
    assert!(
        check.status.success(),
        "{kind} {dtype}: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn npy_shards_hold_the_jsonl_embeddings_exactly_in_f32_and_rounded_in_f16() {
    let (dir, data, want) = reference();
    let d = dir.path();
    for dtype in ["f32", "f16"] {
        let out = format!("npy-{dtype}");
        let extra = [
            "--format",
            "npy",
            "--shard-rows",
            "7",
            "--embedding-dtype",
            dtype,
        ];
        ran(&run(d, &data, &out, &extra));
        let folder = d.join(&out);
        let shards = want.len().div_ceil(7);
        let mut row = 0;
        for n in 0..shards {
            let meta = metadata(&folder.join(format!("metadata/metadata_{n}.parquet")));
            let bytes = fs::read(folder.join(format!("img_emb/img_emb_{n}.npy"))).expect("npy");
            let npy = npyz::NpyFile::new(&bytes[..]).expect("an npy file");
            let rows = 7.min(want.len() - n * 7) as u64;
            assert_eq!(npy.shape(), [rows, 128], "shard {n}");
            assert_eq!(meta.len() as u64, rows);
            let values: Vec<f32> = if dtype == "f32" {
                npy.into_vec::<f32>().expect("f32")
            } else {
                let halves = npy.into_vec::<half::f16>().expect("f16");
                halves.into_iter().map(f32::from).collect()
            };
            for (i, (index, path, kind)) in meta.iter().enumerate() {
                let w = &want[row];
                assert_eq!(*index, w["index"].as_u64().expect("index"));
                assert_eq!(path, w["path"].as_str().expect("path"));
                let got = &values[i * 128..(i + 1) * 128];
                match embedding(w) {
                    Some(e) if dtype == "f32" => assert_eq!(got, e.as_slice(), "row {row}"),
                    Some(e) => {
                        let rounded: Vec<f32> = e
                            .iter()
                            .map(|&v| f32::from(half::f16::from_f32(v)))
                            .collect();
                        assert_eq!(got, rounded.as_slice(), "row {row}");
                    }
                    None => {
                        assert!(got.iter().all(|&v| v == 0.0), "a failed row is zeros");
                        assert_eq!(kind.as_deref(), w["error"]["kind"].as_str());
                    }
                }
                row += 1;
            }
        }
        assert_eq!(row, want.len());
        assert!(
            !folder
                .join(format!("img_emb/img_emb_{shards}.npy"))
                .exists()
        );
        python_check("npy", &d.join("ref.jsonl"), &folder, dtype);
    }
    // --overwrite replaces the folder whole.
    let again = ["--format", "npy", "--shard-rows", "100", "--overwrite"];
    ran(&run(d, &data, "npy-f32", &again));
    assert!(d.join("npy-f32/img_emb/img_emb_0.npy").exists());
    assert!(!d.join("npy-f32/img_emb/img_emb_1.npy").exists());
}

#[test]
fn parquet_embeddings_are_zstd_fixed_size_lists_that_pyarrow_and_duckdb_read() {
    let (dir, data, _) = reference();
    let d = dir.path();
    ran(&run(d, &data, "e.parquet", &[]));
    ran(&run(d, &data, "e16.parquet", &["--embedding-dtype", "f16"]));
    let sharded = ["--format", "parquet", "--shard-rows", "5"];
    ran(&run(d, &data, "shards", &sharded));
    let jsonl = d.join("ref.jsonl");
    python_check("parquet", &jsonl, &d.join("e.parquet"), "f32");
    python_check("parquet", &jsonl, &d.join("e16.parquet"), "f16");
    python_check("parquet", &jsonl, &d.join("shards"), "f32");
    assert!(d.join("shards/part-00000.parquet").exists());
    // Half the embedding bytes in f16.
    let size = |p: &str| fs::metadata(d.join(p)).expect("written").len();
    assert!(size("e16.parquet") < size("e.parquet"), "f16 is smaller");
}

#[test]
fn layout_flags_that_do_not_fit_are_one_line_and_exit_2() {
    let (dir, data, _) = reference();
    let d = dir.path();
    for (out, extra, says) in [
        (
            "a",
            vec!["--format", "npy", "--task", "classify"],
            "--task embed",
        ),
        (
            "b.jsonl",
            vec!["--embedding-dtype", "f16"],
            "--embedding-dtype",
        ),
        ("c.csv", vec!["--shard-rows", "10"], "--shard-rows"),
        ("d.parquet", vec!["--compression", "lz9"], "--compression"),
        (
            "e.parquet",
            vec!["--embedding-dtype", "f8"],
            "--embedding-dtype",
        ),
    ] {
        let out = run(d, &data, out, &extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}
