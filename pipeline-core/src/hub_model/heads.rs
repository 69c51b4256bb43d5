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

/// As transformers' image-classification pipeline scores a head: a
/// sigmoid per label for multi-label models and single-logit ones, else
/// softmax.
pub(super) fn scores(json: &Value, classes: Option<usize>) -> Result<Scores, String> {
    Ok(match json.get("problem_type").and_then(Value::as_str) {
        Some("regression") => {
            return Err(
                "problem_type regression: the tool scores classes; export the model \
                        to ONNX and run --model FILE.onnx --scores raw"
                    .to_owned(),
            );
        }
        Some("multi_label_classification") => Scores::Sigmoid,
        _ if classes == Some(1) => Scores::Sigmoid,
        _ => Scores::Softmax,
    })
}
