//! `--keep-columns`: a manifest's columns (or a WebDataset sample's other
//! members) carried into every output format next to `index` and `path`,
//! with the real binary on `tiny` and the CPU. Types survive where the
//! source has them (JSONL values, Parquet numbers, `.json` members); a
//! column no item has, a reserved name, or a layout without columns is one
//! line and exit 2.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use fixtures::DatasetSpec;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::common;

fn run(cwd: &Path, data: &Path, out: &str, extra: &[&str]) -> Output {
    common::pipeline(cwd)
        .args(["infer", "--data"])
        .arg(data)
        .args(["--out", out, "--model", "tiny", "--gpus", "cpu"])
        .args(["--chunk-size", "3", "--batch-size", "2", "--quiet"])
        .args(extra)
        .output()
        .expect("the pipeline binary runs")
}

fn ok(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Six good images and their names relative to the returned root.
fn images() -> (TempDir, PathBuf, Vec<String>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = fixtures::generate(
        &dir.path().join("data"),
        &DatasetSpec {
            images: 8,
            seed: 11,
            broken: false,
        },
    )
    .expect("fixtures");
    let names: Vec<String> = data
        .good
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "jpg" || e == "png"))
        .take(6)
        .map(|p| {
            p.strip_prefix(&data.root)
                .expect("under root")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert!(names.len() >= 4, "enough jpg/png fixtures: {names:?}");
    (dir, data.root, names)
}

fn caption(i: usize) -> String {
    format!("a \"photo\", number {i}")
}

/// Each record with the `keys` removed: the rest must not change.
fn without(records: &[Value], keys: &[&str]) -> Vec<Value> {
    records
        .iter()
        .map(|r| {
            let mut r = r.clone();
            for k in keys {
                r.as_object_mut().expect("object").remove(*k);
            }
            r
        })
        .collect()
}

#[test]
fn kept_columns_reach_every_output_format_next_to_path() {
    let (dir, root, names) = images();
    let d = dir.path();
    let mut csv = String::from("path,id,caption\n");
    for (i, name) in names.iter().enumerate() {
        let quoted = caption(i).replace('"', "\"\"");
        csv.push_str(&format!(
            "{},{},\"{quoted}\"\n",
            root.join(name).display(),
            100 + i
        ));
    }
    let manifest = d.join("m.csv");
    fs::write(&manifest, csv).expect("manifest");

    ok(&run(d, &manifest, "plain.jsonl", &[]));
    let keep = ["--keep-columns", "id,caption"];
    ok(&run(d, &manifest, "kept.jsonl", &keep));
    let plain = common::records(&d.join("plain.jsonl"));
    let kept = common::records(&d.join("kept.jsonl"));
    assert_eq!(without(&kept, &["id", "caption"]), plain);
    for (i, r) in kept.iter().enumerate() {
        assert_eq!(r["id"], json!((100 + i).to_string()), "CSV cells are text");
        assert_eq!(r["caption"], json!(caption(i)));
    }
    // Next to `path`, before the result.
    let first = fs::read_to_string(d.join("kept.jsonl")).expect("read");
    let keys: Vec<&str> = [
        "\"index\"",
        "\"path\"",
        "\"id\"",
        "\"caption\"",
        "\"top_k\"",
    ]
    .into_iter()
    .collect();
    let at: Vec<usize> = keys
        .iter()
        .map(|k| first.find(k).expect("key present"))
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{first}");

    ok(&run(d, &manifest, "kept.csv", &keep));
    let mut reader = csv::Reader::from_path(d.join("kept.csv")).expect("csv");
    let header: Vec<String> = reader
        .headers()
        .expect("header")
        .iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(header[..5], ["index", "path", "id", "caption", "class_1"]);
    for (i, row) in reader.records().enumerate() {
        let row = row.expect("row");
        assert_eq!(&row[2], (100 + i).to_string());
        assert_eq!(&row[3], caption(i));
    }

    ok(&run(d, &manifest, "kept.parquet", &keep));
    let file = fs::File::open(d.join("kept.parquet")).expect("parquet");
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("reader")
        .build()
        .expect("batches");
    let mut captions = Vec::new();
    for batch in reader {
        let batch = batch.expect("batch");
        let schema = batch.schema();
        let columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(columns[..4], ["index", "path", "id", "caption"]);
        let c = batch
            .column_by_name("caption")
            .expect("caption column")
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("text")
            .clone();
        captions.extend(c.iter().map(|v| v.expect("not null").to_owned()));
    }
    let want: Vec<String> = (0..names.len()).map(caption).collect();
    assert_eq!(captions, want);
}

#[test]
fn star_keeps_typed_values_from_jsonl_parquet_and_shards() {
    let (dir, root, names) = images();
    let d = dir.path();

    // JSONL: values keep their JSON types; a row without a key gets null.
    let mut lines = String::new();
    for (i, name) in names.iter().enumerate() {
        let mut row = json!({"path": root.join(name), "id": i, "meta": {"w": i * 2}});
        if i == 1 {
            row.as_object_mut().expect("object").remove("meta");
        }
        lines.push_str(&format!("{row}\n"));
    }
    fs::write(d.join("m.jsonl"), lines).expect("jsonl");
    ok(&run(
        d,
        &d.join("m.jsonl"),
        "j.jsonl",
        &["--keep-columns", "*"],
    ));
    let records = common::records(&d.join("j.jsonl"));
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r["id"], json!(i));
        let meta = if i == 1 {
            Value::Null
        } else {
            json!({"w": i * 2})
        };
        assert_eq!(r["meta"], meta, "{r}");
    }

    // Parquet: an integer column stays a number, text stays text.
    let paths: Vec<String> = names
        .iter()
        .map(|n| root.join(n).to_string_lossy().into_owned())
        .collect();
    let batch = RecordBatch::try_from_iter([
        ("path", Arc::new(StringArray::from(paths)) as ArrayRef),
        (
            "id",
            Arc::new(Int64Array::from_iter_values(0..names.len() as i64)) as ArrayRef,
        ),
        (
            "caption",
            Arc::new(StringArray::from_iter_values((0..names.len()).map(caption))) as ArrayRef,
        ),
    ])
    .expect("batch");
    let file = fs::File::create(d.join("m.parquet")).expect("file");
    let mut writer = ArrowWriter::try_new(file, batch.schema(), None).expect("writer");
    writer.write(&batch).expect("written");
    writer.close().expect("closed");
    ok(&run(
        d,
        &d.join("m.parquet"),
        "p.jsonl",
        &["--keep-columns", "*"],
    ));
    for (i, r) in common::records(&d.join("p.jsonl")).iter().enumerate() {
        assert_eq!((&r["id"], &r["caption"]), (&json!(i), &json!(caption(i))));
    }

    // WebDataset: members by extension; `.json` is JSON, `.txt` text.
    let shard = d.join("s.tar");
    let mut tar = tar::Builder::new(fs::File::create(&shard).expect("shard"));
    for (i, name) in names.iter().enumerate() {
        let ext = Path::new(name).extension().expect("ext").to_string_lossy();
        let key = format!("k{i:03}");
        let members = [
            (format!("{key}.txt"), caption(i).into_bytes()),
            (
                format!("{key}.json"),
                format!("{{\"n\": {i}}}").into_bytes(),
            ),
            (
                format!("{key}.{ext}"),
                fs::read(root.join(name)).expect("image"),
            ),
        ];
        for (member, bytes) in members {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            tar.append_data(&mut header, member, bytes.as_slice())
                .expect("member");
        }
    }
    tar.finish().expect("shard written");
    ok(&run(d, &shard, "w.jsonl", &["--keep-columns", "txt,json"]));
    let records = common::records(&d.join("w.jsonl"));
    assert_eq!(records.len(), names.len());
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r["txt"], json!(caption(i)));
        assert_eq!(r["json"], json!({"n": i}));
        assert!(r["top_k"].is_array(), "{r}");
    }
    ok(&run(d, &shard, "w2.jsonl", &["--keep-columns", "*"]));
    assert_eq!(common::records(&d.join("w2.jsonl")), records);
}

#[test]
fn bad_keep_columns_are_one_line_and_exit_2() {
    let (dir, root, names) = images();
    let d = dir.path();
    let write = |captions: &dyn Fn(usize) -> String| {
        let mut csv = String::from("path,caption\n");
        for (i, name) in names.iter().enumerate() {
            csv.push_str(&format!("{},{}\n", root.join(name).display(), captions(i)));
        }
        fs::write(d.join("m.csv"), csv).expect("manifest");
    };
    write(&|i| format!("c{i}"));
    let manifest = d.join("m.csv");
    for (data, keep, says) in [
        (
            &manifest,
            "nope",
            "no column `nope` (it has: path, caption)",
        ),
        (&manifest, "path", "output column"),
        (&root, "caption", "no columns"),
    ] {
        let out = run(d, data, "bad.jsonl", &["--keep-columns", keep]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{keep}: {err}");
        assert!(err.contains(says), "{keep}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }

    // A changed caption is a changed input: `--overwrite` writes it anew.
    ok(&run(
        d,
        &manifest,
        "r.jsonl",
        &["--keep-columns", "caption"],
    ));
    write(&|i| {
        if i == 2 {
            "changed".into()
        } else {
            format!("c{i}")
        }
    });
    let out = run(
        d,
        &manifest,
        "r.jsonl",
        &["--keep-columns", "caption", "--overwrite"],
    );
    ok(&out);
    assert_eq!(
        common::records(&d.join("r.jsonl"))[2]["caption"],
        json!("changed")
    );
}

/// `--update` with columns to keep adds them to an existing output without
/// computing anything: rows take their path and kept values from the new
/// scan, and only results are reused.
#[test]
fn an_update_adds_kept_columns_without_recomputing() {
    let (dir, root, names) = images();
    let d = dir.path();
    let mut csv = String::from("path,caption\n");
    for (i, name) in names.iter().enumerate() {
        csv.push_str(&format!("{},c{i}\n", root.join(name).display()));
    }
    let manifest = d.join("m.csv");
    fs::write(&manifest, csv).expect("manifest");
    ok(&run(d, &manifest, "o.jsonl", &[]));
    let report = d.join("r.json");
    let args = [
        "--keep-columns",
        "caption",
        "--update",
        "--report",
        report.to_str().expect("utf-8"),
    ];
    ok(&run(d, &manifest, "o.jsonl", &args));
    let summary: Value = serde_json::from_slice(&fs::read(&report).expect("report")).expect("json");
    assert_eq!(summary["summary"]["update"]["computed"], 0, "{summary}");
    ok(&run(
        d,
        &manifest,
        "fresh.jsonl",
        &["--keep-columns", "caption"],
    ));
    assert_eq!(
        fs::read(d.join("o.jsonl")).expect("updated"),
        fs::read(d.join("fresh.jsonl")).expect("fresh")
    );
}
