//! A classifier head's class names and scoring, as transformers reads
//! them from a config.

use serde_json::Value;

use crate::model::Scores;

/// A classifier's labels: `id2label`, else transformers' default names
/// (`LABEL_0`, …, for `num_labels`, 2 unless said), which
/// `save_pretrained` leaves out.
pub(super) fn head_labels(text: &str, json: &Value) -> Result<Vec<String>, String> {
    let named = crate::labels_from_config(text).map_err(|e| format!("config.json: {e}"))?;
    Ok(match named {
        Some(labels) if !labels.is_empty() => labels,
        _ => {
            let n = match json.get("num_labels") {
                None => 2,
                Some(v) => v.as_u64().filter(|&n| n > 0).ok_or_else(|| {
                    format!("config.json: num_labels is {v}, not a positive count")
                })?,
            };
            (0..n).map(|i| format!("LABEL_{i}")).collect()
        }
    })
}

/// How a classifier whose `config.json` is `text`, with `classes` outputs
/// where known, is scored, as transformers' image-classification pipeline
/// does when not told (`postprocess`): a sigmoid per label for
/// `problem_type` `multi_label_classification` and for a single-logit
/// head, the values as they are (`Raw`) for `regression`, else softmax.
/// For a model run from another file beside that config (an ONNX export).
pub fn scores_from_config(text: &str, classes: Option<usize>) -> Result<Scores, String> {
    let json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    Ok(pipeline_scores(&json, classes))
}

fn pipeline_scores(json: &Value, classes: Option<usize>) -> Scores {
    match json.get("problem_type").and_then(Value::as_str) {
        Some("regression") => Scores::Raw,
        Some("multi_label_classification") => Scores::Sigmoid,
        _ if classes == Some(1) => Scores::Sigmoid,
        _ => Scores::Softmax,
    }
}

/// As transformers' image-classification pipeline scores a head: a
/// sigmoid per label for multi-label models and single-logit ones, else
/// softmax; a regression head, whose values are no class scores, is
/// refused (an ONNX export of it runs with `--scores raw`).
pub(super) fn scores(json: &Value, classes: Option<usize>) -> Result<Scores, String> {
    match pipeline_scores(json, classes) {
        Scores::Raw => Err(
            "problem_type regression: the tool scores classes; export the model \
             to ONNX and run --model FILE.onnx --scores raw"
                .to_owned(),
        ),
        scores => Ok(scores),
    }
}
