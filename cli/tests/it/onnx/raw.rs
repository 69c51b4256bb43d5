//! `--task raw` (#41) end to end, on `detector_like.onnx` (outputs known in
//! closed form from what it was fed: two "boxes" of the channel means, the
//! brightest channel as an i64 scalar, which means are positive as
//! booleans; the input's shape and a `num_dets` column, which have no
//! batch axis): every image
//! once in input order, a broken file an error record, each good image's
//! slices named, typed and shaped as the model gives them, the same bytes
//! whatever the chunks and workers; the outputs picked by `--output A,B`;
//! one line, exit 2, for what raw cannot do.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int64Type, UInt32Type};
use arrow_array::{Array, RecordBatch};
use pipeline_core::PreprocessSpec;
use serde_json::Value;

use super::{channel_means, crop, dataset, infer, model, runtime_or_skip, stderr};

#[test]
fn raw_outputs_are_each_images_named_slices() {
    if !runtime_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let data = dataset(cwd, 9, 42, true);
    let onnx = model("detector_like");
    let onnx = onnx.to_str().expect("utf-8 path");
    let args = ["--model", onnx, "--task", "raw", "--size", "8"];
    let out = cwd.join("raw.jsonl");
    let run = infer(cwd, &data.root, &out, &args);
    assert_eq!(run.status.code(), Some(1), "broken files: {}", stderr(&run));
    let spec = PreprocessSpec {
        resize_shorter: 8,
        crop: 8,
        ..PreprocessSpec::IMAGENET
    };
    let records = crate::common::records(&out);
    let mut good = 0;
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record["index"], i, "input order");
        let path = data.root.join(record["path"].as_str().expect("path"));
        if record.get("error").is_some() {
            assert!(data.broken.iter().any(|b| b.path == path), "{record}");
            continue;
        }
        good += 1;
        let means = channel_means(&crop(&spec, &path), &spec.normalize);
        let outputs = record["outputs"].as_array().expect("outputs");
        let field = |k: usize, f: &str| outputs[k][f].clone();
        let names: Vec<Value> = (0..outputs.len()).map(|k| field(k, "name")).collect();
        assert_eq!(names, ["boxes", "classes", "positive"], "{record}");
        assert_eq!(field(0, "shape"), serde_json::json!([2, 3]));
        assert_eq!(field(0, "dtype"), "f32");
        let boxes = field(0, "values");
        let boxes = boxes.as_array().expect("values");
        assert_eq!(boxes.len(), 6);
        for (k, v) in boxes.iter().enumerate() {
            let v = v.as_f64().expect("a float");
            assert!((v - means[k % 3]).abs() < 1e-5, "{record}: {means:?}");
        }
        let brightest = (0..3).fold(0, |b, c| if means[c] > means[b] { c } else { b });
        assert_eq!(field(1, "shape"), serde_json::json!([]));
        assert_eq!(field(1, "dtype"), "i64");
        assert_eq!(field(1, "values"), serde_json::json!([brightest]));
        let positive: Vec<i64> = means.iter().map(|&m| i64::from(m > 0.0)).collect();
        assert_eq!(field(2, "dtype"), "i64");
        assert_eq!(field(2, "values"), serde_json::json!(positive));
    }
    assert!(
        good >= data.good.len(),
        "{good} good of {}",
        data.good.len()
    );
    // Other chunks and two workers: the same bytes.
    let other = cwd.join("raw2.jsonl");
    let more = [&args[..], &["--chunk-size", "2", "--workers-per-gpu", "2"]].concat();
    let run = infer(cwd, &data.root, &other, &more);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert_eq!(std::fs::read(&out).ok(), std::fs::read(&other).ok());
    // Parquet: the same arrays in the `outputs` column, failed rows null.
    let table = cwd.join("raw.parquet");
    let run = infer(cwd, &data.root, &table, &args);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    let rows = parquet_outputs(&table);
    assert_eq!(rows.len(), records.len());
    for (record, row) in records.iter().zip(&rows) {
        match record.get("outputs") {
            Some(outputs) => assert_eq!(Some(as_f32(outputs)), row.clone(), "{record}"),
            None => assert_eq!(row, &None, "{record}"),
        }
    }
    // Picked by name, in the order given.
    let picked = cwd.join("picked.jsonl");
    let run = infer(
        cwd,
        &data.root,
        &picked,
        &[&args[..], &["--output", "positive,classes"]].concat(),
    );
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    let first = crate::common::records(&picked)
        .into_iter()
        .find(|r| r.get("outputs").is_some())
        .expect("a good image");
    let names: Vec<&str> = first["outputs"]
        .as_array()
        .expect("outputs")
        .iter()
        .map(|o| o["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["positive", "classes"]);

    // What raw cannot do: one line, exit 2, no output.
    let cases: [(&[&str], &str); 5] = [
        (
            &["--output", "input_shape"],
            "output input_shape [4] Int64 cannot be read per image: no batch axis",
        ),
        (
            &["--format", "csv"],
            "--task raw writes JSONL or Parquet (each output's name, shape, dtype and values)",
        ),
        (
            &["--labels", "labels.txt"],
            "--labels goes with --task classify",
        ),
        (
            &["--scores", "sigmoid"],
            "--scores goes with --task classify",
        ),
        (&["--normalize"], "--normalize goes with --task embed"),
    ];
    std::fs::write(cwd.join("labels.txt"), "a\nb\n").expect("labels");
    for (extra, says) in cases {
        let refused = cwd.join("refused.jsonl");
        let run = infer(cwd, &data.root, &refused, &[&args[..], extra].concat());
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{extra:?}: {err}");
        assert!(!refused.exists(), "{extra:?} wrote output");
    }
    // Outputs of 64 MiB an image: more than a chunk of 256 fits in one
    // worker's message; refused before any worker starts.
    let huge = model("huge_raw");
    let huge = huge.to_str().expect("utf-8 path");
    let refused = infer(
        cwd,
        &data.root,
        &cwd.join("huge.jsonl"),
        &["--model", huge, "--task", "raw", "--size", "8"],
    );
    let err = stderr(&refused);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--chunk-size 256: --task raw's outputs take 64.0 MiB an image"),
        "{err}"
    );
    assert!(err.contains("use --chunk-size 7 or less"), "{err}");
    let builtin = infer(
        cwd,
        &data.root,
        &cwd.join("builtin.jsonl"),
        &["--model", "resnet18", "--task", "raw"],
    );
    assert_eq!(builtin.status.code(), Some(2));
    assert!(stderr(&builtin).contains("--task raw reads an ONNX model's outputs"));
}

/// Each row's `outputs` of a raw Parquet output, as the JSONL writes them
/// (`None` where the row failed).
fn parquet_outputs(path: &std::path::Path) -> Vec<Option<Value>> {
    let file = std::fs::File::open(path).expect("the parquet output");
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet")
        .build()
        .expect("a reader");
    let mut rows = Vec::new();
    for batch in reader {
        let batch: RecordBatch = batch.expect("a batch");
        let list = batch
            .column_by_name("outputs")
            .expect("an outputs column")
            .as_list::<i32>();
        for r in 0..list.len() {
            if list.is_null(r) {
                rows.push(None);
                continue;
            }
            let entries = list.value(r);
            let s = entries.as_struct();
            let arrays: Vec<Value> = (0..s.len())
                .map(|k| {
                    let dtype = s.column(2).as_string::<i32>().value(k);
                    let values: Value = if dtype == "f32" {
                        let v = s.column(3).as_list::<i32>().value(k);
                        serde_json::json!(v.as_primitive::<Float32Type>().values().to_vec())
                    } else {
                        let v = s.column(4).as_list::<i32>().value(k);
                        serde_json::json!(v.as_primitive::<Int64Type>().values().to_vec())
                    };
                    let shape = s.column(1).as_list::<i32>().value(k);
                    serde_json::json!({
                        "name": s.column(0).as_string::<i32>().value(k),
                        "shape": shape.as_primitive::<UInt32Type>().values().to_vec(),
                        "dtype": dtype,
                        "values": values,
                    })
                })
                .collect();
            rows.push(Some(Value::Array(arrays)));
        }
    }
    rows
}

/// `outputs` as read from JSONL with each f32 value at its f32 (JSON's
/// text is the f32's shortest form; read as f64 it is another number).
fn as_f32(outputs: &Value) -> Value {
    let mut outputs = outputs.clone();
    for array in outputs.as_array_mut().expect("a list") {
        if array["dtype"] == "f32" {
            let values: Vec<f32> = array["values"]
                .as_array()
                .expect("values")
                .iter()
                .map(|v| v.as_f64().expect("a number") as f32)
                .collect();
            array["values"] = serde_json::json!(values);
        }
    }
    outputs
}
