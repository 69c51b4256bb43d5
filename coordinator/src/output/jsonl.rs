//! One record per line: the format of part files, which is also the
//! bytes of the JSONL output (assembly copies parts verbatim), and the
//! JSONL writer. Encoded here
//! by the committers (`encode_part`) and the JSONL sink, decoded here when
//! assembly re-encodes parts as CSV or Parquet or counts their failures;
//! `parts.rs` frames the lines into files.

use std::borrow::Cow;
use std::io::{self, Write};

use pipeline_core::{
    ClassLabels, ClassScore, ItemError, ItemIndex, ItemOutcome, Manifest, OutputArray, Prediction,
};
use serde::{Deserialize, Serialize};

use super::record::{Record, RecordSink};

#[derive(Serialize)]
struct JsonRecord<'a> {
    index: ItemIndex,
    path: &'a str,
    #[serde(flatten)]
    result: JsonResult<'a>,
}

/// A record's result fields alone, written after its kept columns.
#[derive(Serialize)]
struct JsonResult<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<JsonTopK<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    embedding: Option<&'a [f32]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outputs: Option<&'a [OutputArray]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ItemError>,
}

impl<'a> JsonResult<'a> {
    /// The one field `result` fills.
    fn of(result: &'a Result<Prediction, ItemError>, labels: &'a ClassLabels) -> Self {
        let mut fields = Self {
            top_k: None,
            embedding: None,
            outputs: None,
            error: None,
        };
        match result {
            Ok(Prediction::TopK(scores)) => fields.top_k = Some(JsonTopK(scores, labels)),
            Ok(Prediction::Embedding(values)) => fields.embedding = Some(values),
            Ok(Prediction::Outputs(arrays)) => fields.outputs = Some(arrays),
            Err(error) => fields.error = Some(error),
        }
        fields
    }
}

#[derive(Serialize)]
struct JsonClass<'a> {
    class: u32,
    label: &'a str,
    prob: f32,
}

/// The top-k list with its labels, written straight from the scores (no
/// list of [`JsonClass`] built first: this runs once per record).
struct JsonTopK<'a>(&'a [ClassScore], &'a ClassLabels);

impl Serialize for JsonTopK<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|s| JsonClass {
            class: s.class,
            label: self.1.get(s.class),
            prob: s.prob,
        }))
    }
}

/// Writes `record` as one JSONL line, classes named by `labels`: the bytes
/// of the JSONL output and of part files alike.
pub(crate) fn encode_jsonl<W: Write>(
    record: &Record,
    labels: &ClassLabels,
    out: &mut W,
) -> io::Result<()> {
    let kept: Vec<(&str, Option<&str>)> = record
        .kept
        .iter()
        .map(|(c, v)| (c.as_str(), v.as_deref()))
        .collect();
    encode_jsonl_parts(
        record.index,
        &record.path,
        &kept,
        &record.result,
        labels,
        out,
    )
}

/// [`encode_jsonl`] from borrowed parts, so a caller need not build a
/// [`Record`] (and own its path) for every line. `kept` holds the kept
/// columns' values as JSON text (`None`: null), written after `path`.
pub(crate) fn encode_jsonl_parts<W: Write>(
    index: ItemIndex,
    path: &str,
    kept: &[(&str, Option<&str>)],
    result: &Result<Prediction, ItemError>,
    labels: &ClassLabels,
    out: &mut W,
) -> io::Result<()> {
    if !kept.is_empty() {
        write!(out, "{{\"index\":{index},\"path\":")?;
        serde_json::to_writer(&mut *out, path)?;
        for (column, value) in kept {
            out.write_all(b",")?;
            serde_json::to_writer(&mut *out, column)?;
            out.write_all(b":")?;
            out.write_all(value.unwrap_or("null").as_bytes())?;
        }
        let rest = serde_json::to_vec(&JsonResult::of(result, labels))?;
        out.write_all(b",")?;
        out.write_all(&rest[1..])?;
        return out.write_all(b"\n");
    }
    let json = JsonRecord {
        index,
        path,
        result: JsonResult::of(result, labels),
    };
    serde_json::to_writer(&mut *out, &json)?;
    out.write_all(b"\n")
}

/// A JSONL line read back (labels are implied by the class).
#[derive(Deserialize)]
struct OwnedJsonRecord {
    index: ItemIndex,
    path: String,
    #[serde(default)]
    top_k: Option<Vec<ClassScore>>,
    #[serde(default)]
    embedding: Option<Vec<f32>>,
    #[serde(default)]
    outputs: Option<Vec<OutputArray>>,
    #[serde(default)]
    error: Option<ItemError>,
}

/// Parses one line written by [`encode_jsonl`], with the values of the
/// `kept` columns (as JSON text).
pub(crate) fn decode_jsonl(line: &[u8], kept: &[String]) -> io::Result<Record> {
    let json: OwnedJsonRecord = serde_json::from_slice(line)?;
    let kept = if kept.is_empty() {
        Vec::new()
    } else {
        let all: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(line)?;
        kept.iter()
            .map(|c| {
                let value = all.get(c).filter(|v| !v.is_null()).map(|v| v.to_string());
                (c.clone(), value)
            })
            .collect()
    };
    let result = match (json.top_k, json.embedding, json.outputs, json.error) {
        (_, _, _, Some(error)) => Err(error),
        (Some(scores), None, None, None) => Ok(Prediction::TopK(scores)),
        (None, Some(values), None, None) => Ok(Prediction::Embedding(values)),
        (None, None, Some(arrays), None) => Ok(Prediction::Outputs(arrays)),
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("record {} has neither a result nor an error", json.index),
            ));
        }
    };
    Ok(Record {
        index: json.index,
        path: json.path,
        kept,
        result,
    })
}

/// The error of a JSONL line, without building the rest of its record.
pub(crate) fn jsonl_error(line: &[u8]) -> io::Result<Option<ItemError>> {
    #[derive(Deserialize)]
    struct ErrorOnly {
        #[serde(default)]
        error: Option<ItemError>,
    }
    Ok(serde_json::from_slice::<ErrorOnly>(line)?.error)
}

/// A finished chunk's part file bytes: each outcome with its item's path,
/// as JSONL. With [`crate::check_outcomes`] and the frame decode, this is the
/// coordinator's work per result between a worker's pipe and the disk
/// (`benches`: `coordinator_path`).
pub fn encode_part(
    manifest: &Manifest,
    labels: &ClassLabels,
    outcomes: Vec<ItemOutcome>,
) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(outcomes.len() * 192);
    let columns = &manifest.kept.columns;
    // A chunk's outcomes are its items in order: one cursor decodes their
    // names in sequence instead of each from its block's start.
    let first = outcomes.first().map_or(0, |o| o.index as usize);
    let contiguous = outcomes
        .iter()
        .enumerate()
        .all(|(k, o)| o.index as usize == first + k);
    let mut names = contiguous.then(|| manifest.entries.range(first..first + outcomes.len()));
    for o in &outcomes {
        let path = match names.as_mut().and_then(|c| c.next_name()) {
            Some(bytes) => String::from_utf8_lossy(bytes),
            None => {
                let name = manifest.entries.name(o.index as usize);
                Cow::Owned(name.to_string_lossy().into_owned())
            }
        };
        let values = manifest.kept.get(o.index as usize);
        let kept: Vec<(&str, Option<&str>)> =
            columns.iter().map(String::as_str).zip(values).collect();
        encode_jsonl_parts(o.index, &path, &kept, &o.result, labels, &mut bytes)
            .expect("writing JSON into a Vec cannot fail");
    }
    bytes
}

/// The `index` of a JSONL record, which [`encode_jsonl`] writes first.
pub(crate) fn line_index(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(b"{\"index\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// The JSONL output: each record's line as the part files hold it.
pub(super) struct JsonlSink<W: Write> {
    out: W,
    labels: ClassLabels,
}

impl<W: Write> JsonlSink<W> {
    pub(super) fn new(out: W, labels: ClassLabels) -> Self {
        Self { out, labels }
    }
}

impl<W: Write> RecordSink for JsonlSink<W> {
    fn write(&mut self, record: &Record) -> io::Result<()> {
        encode_jsonl(record, &self.labels, &mut self.out)
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_f32_probability_survives_the_json_round_trip() {
        // CSV and Parquet are re-encoded from the JSONL parts, so a float
        // that came back different would change their bytes.
        let mut x: u32 = 0x1234_5678;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let value = f32::from_bits(x & 0x3FFF_FFFF); // [0, 2)
            let rec = Record {
                index: 0,
                path: String::new(),
                kept: Vec::new(),
                result: Ok(Prediction::Embedding(vec![value])),
            };
            let mut line = Vec::new();
            encode_jsonl(&rec, &ClassLabels::Imagenet, &mut line).expect("encoded");
            let back = decode_jsonl(&line, &[]).expect("decoded");
            assert_eq!(back, rec, "{value:e}");
        }
    }

    /// `--task raw`: each output as name, shape, dtype and values, in the
    /// model's order, read back to the same arrays (floats to their bits).
    #[test]
    fn raw_outputs_are_named_arrays_that_read_back() {
        use pipeline_core::ArrayValues;
        let rec = Record {
            index: 3,
            path: "a.jpg".into(),
            kept: Vec::new(),
            result: Ok(Prediction::Outputs(vec![
                OutputArray {
                    name: "boxes".into(),
                    shape: vec![1, 4],
                    values: ArrayValues::F32(vec![0.5, -0.0, 1e-45, 3.0]),
                },
                OutputArray {
                    name: "classes".into(),
                    shape: vec![1],
                    values: ArrayValues::I64(vec![-9_007_199_254_740_993]),
                },
                OutputArray {
                    name: "anchors".into(),
                    shape: vec![0, 2],
                    values: ArrayValues::F32(Vec::new()),
                },
            ])),
        };
        let mut line = Vec::new();
        encode_jsonl(&rec, &ClassLabels::Imagenet, &mut line).expect("encoded");
        let text = String::from_utf8(line.clone()).expect("utf-8");
        assert_eq!(
            text,
            concat!(
                r#"{"index":3,"path":"a.jpg","outputs":["#,
                r#"{"name":"boxes","shape":[1,4],"dtype":"f32","values":[0.5,-0.0,1e-45,3.0]},"#,
                r#"{"name":"classes","shape":[1],"dtype":"i64","values":[-9007199254740993]},"#,
                r#"{"name":"anchors","shape":[0,2],"dtype":"f32","values":[]}]}"#,
                "\n"
            )
        );
        let back = decode_jsonl(&line, &[]).expect("decoded");
        assert_eq!(back, rec);
        // NaN and the infinities as text, which JSON's numbers cannot hold.
        let odd = Record {
            result: Ok(Prediction::Outputs(vec![OutputArray {
                name: "logits".into(),
                shape: vec![3],
                values: ArrayValues::F32(vec![f32::NEG_INFINITY, f32::NAN, f32::INFINITY]),
            }])),
            ..rec.clone()
        };
        let mut line = Vec::new();
        encode_jsonl(&odd, &ClassLabels::Imagenet, &mut line).expect("encoded");
        let text = String::from_utf8(line.clone()).expect("utf-8");
        assert!(
            text.contains(r#""values":["-Infinity","NaN","Infinity"]"#),
            "{text}"
        );
        let Ok(Prediction::Outputs(read)) = decode_jsonl(&line, &[]).expect("decoded").result
        else {
            unreachable!("outputs read back as outputs");
        };
        let ArrayValues::F32(v) = &read[0].values else {
            unreachable!("floats read back as floats");
        };
        assert!(v[0] == f32::NEG_INFINITY && v[1].is_nan() && v[2] == f32::INFINITY);
        let Ok(Prediction::Outputs(arrays)) = &back.result else {
            unreachable!("outputs read back as outputs");
        };
        let ArrayValues::F32(v) = &arrays[0].values else {
            unreachable!("floats read back as floats");
        };
        assert_eq!(v[1].to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn a_part_names_each_item_whether_its_chunk_is_whole_or_not() {
        let manifest = Manifest {
            source: "d".into(),
            entries: (0..40)
                .map(|i| pipeline_core::ManifestEntry {
                    index: i,
                    name: format!("d/{i}.jpg").into(),
                    location: pipeline_core::Location::File {
                        path: format!("/r/d/{i}.jpg").into_bytes(),
                        range: None,
                    },
                })
                .collect(),
            kept: Default::default(),
            problems: Vec::new(),
            revision: None,
        };
        let outcome = |index| ItemOutcome {
            index,
            result: Ok(Prediction::TopK(vec![ClassScore {
                class: 1,
                prob: 0.5,
            }])),
        };
        let line = |i: u64| {
            format!(
                r#"{{"index":{i},"path":"d/{i}.jpg","top_k":[{{"class":1,"label":"goldfish","prob":0.5}}]}}"#
            ) + "\n"
        };
        for indices in [vec![14, 15, 16, 17], vec![3, 20, 39]] {
            let outcomes = indices.iter().map(|&i| outcome(i)).collect();
            let bytes = encode_part(&manifest, &ClassLabels::Imagenet, outcomes);
            let want: String = indices.iter().map(|&i| line(i)).collect();
            assert_eq!(String::from_utf8(bytes).expect("utf-8"), want);
        }
    }

    #[test]
    fn kept_columns_sit_between_path_and_the_result_and_read_back() {
        let rec = Record {
            index: 7,
            path: "a.jpg".into(),
            kept: vec![
                ("id".into(), Some("42".into())),
                ("caption".into(), Some("\"a \\\"cat\\\"\"".into())),
                ("meta".into(), None),
            ],
            result: Err(ItemError::new(pipeline_core::ItemErrorKind::Decode, "bad")),
        };
        let mut line = Vec::new();
        encode_jsonl(&rec, &ClassLabels::Imagenet, &mut line).expect("encoded");
        let text = String::from_utf8(line.clone()).expect("utf-8");
        assert!(
            text.starts_with(
                r#"{"index":7,"path":"a.jpg","id":42,"caption":"a \"cat\"","meta":null,"error":"#
            ),
            "{text}"
        );
        assert_eq!(line_index(&line), Some(7));
        let columns = ["id".to_owned(), "caption".to_owned(), "meta".to_owned()];
        assert_eq!(decode_jsonl(&line, &columns).expect("decoded"), rec);
    }
}
