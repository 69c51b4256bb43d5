//! The text tower of a hub CLIP or SigLIP repo (#42 item 5), from its
//! `config.json`'s `text_config` (with the older `text_config_dict` laid
//! over it, as transformers does), each key left out at transformers'
//! default: `CLIPTextConfig`'s or `SiglipTextConfig`'s.

use serde_json::Value;

use super::shape::{HubActivation, HubText};
use crate::model::Family;

/// The text tower `text` (a repo's `config.json`) describes, or why this
/// tool cannot run it, in one line.
pub fn hub_text(text: &str) -> Result<HubText, String> {
    let json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let family = match json.get("model_type").and_then(Value::as_str) {
        Some("clip") => Family::Clip,
        Some("siglip") => Family::Siglip,
        Some(other) => {
            return Err(format!(
                "{other} has no text tower here (CLIPModel and SiglipModel repos have one)"
            ));
        }
        None => {
            return Err(
                "its config names no model_type; text needs a CLIP or SigLIP repo".to_owned(),
            );
        }
    };
    let tower = tower_config(&json, "text_config");
    let count = |key: &str, default: u64| -> Result<usize, String> {
        match tower.get(key) {
            None | Some(Value::Null) => Ok(default as usize),
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or_else(|| {
                    format!("config.json: text_config.{key} is {v}, not a positive count")
                }),
        }
    };
    let clip = family == Family::Clip;
    let (vocab_default, context_default, width_default, heads_default, mlp_default) = if clip {
        (49408, 77, 512, 8, 2048)
    } else {
        (32000, 64, 768, 12, 3072)
    };
    let vocab = count("vocab_size", vocab_default)?;
    let context = count("max_position_embeddings", context_default)?;
    let width = count("hidden_size", width_default)?;
    let depth = count("num_hidden_layers", 12)?;
    let heads = count("num_attention_heads", heads_default)?;
    let mlp = count("intermediate_size", mlp_default)?;
    if !width.is_multiple_of(heads) {
        return Err(format!(
            "config.json: text_config.hidden_size {width} is not a multiple of \
             num_attention_heads {heads}"
        ));
    }
    let eps = match tower.get("layer_norm_eps") {
        None | Some(Value::Null) => {
            if clip {
                1e-5
            } else {
                1e-6
            }
        }
        Some(v) => v
            .as_f64()
            .filter(|e| *e > 0.0 && e.is_finite())
            .ok_or_else(|| {
                format!("config.json: text_config.layer_norm_eps is {v}, not a positive number")
            })?,
    };
    let act = match tower.get("hidden_act") {
        None | Some(Value::Null) => {
            if clip {
                "quick_gelu"
            } else {
                "gelu_pytorch_tanh"
            }
        }
        Some(v) => v
            .as_str()
            .ok_or("config.json: text_config.hidden_act is not a name")?,
    };
    let activation = match act {
        "gelu" => HubActivation::Gelu,
        "gelu_pytorch_tanh" | "gelu_new" => HubActivation::GeluTanh,
        "quick_gelu" => HubActivation::QuickGelu,
        other => {
            return Err(format!(
                "config.json: text_config.hidden_act {other} is not built in"
            ));
        }
    };
    let projection = if clip {
        // CLIPModel projects with the top level's projection_dim (the
        // text_config's is CLIPTextModelWithProjection's).
        match json.get("projection_dim") {
            None | Some(Value::Null) => 512,
            Some(v) => v.as_u64().filter(|&n| n > 0).ok_or_else(|| {
                format!("config.json: projection_dim is {v}, not a positive count")
            })? as usize,
        }
    } else {
        // SiglipTextConfig: projection_size, else hidden_size.
        count("projection_size", width as u64)?
    };
    if clip {
        // transformers pools the first eos_token_id, or (eos_token_id 2,
        // configs before its PR #24773) the highest id, as open_clip
        // does; the two agree where the end token is the vocabulary's
        // last id, as in every CLIP tokenizer.
        match tower.get("eos_token_id") {
            None | Some(Value::Null) => {}
            Some(v) => {
                let id = v.as_u64().ok_or_else(|| {
                    format!("config.json: text_config.eos_token_id is {v}, not one token id")
                })?;
                if id != 2 && id + 1 != vocab as u64 {
                    return Err(format!(
                        "config.json: text_config.eos_token_id {id} is not the vocabulary's \
                         last id ({}); the text tower pools the highest id, as open_clip does",
                        vocab - 1
                    ));
                }
            }
        }
    }
    Ok(HubText {
        family,
        vocab,
        context,
        width,
        depth,
        heads,
        mlp,
        eps,
        activation,
        projection,
    })
}

/// A CLIP's or SigLIP's tower config: `json[key]`, with the older
/// `{key}_dict` laid over it as transformers does; each key missing is
/// transformers' default (an empty object where there is none).
pub(super) fn tower_config(json: &Value, key: &str) -> Value {
    let mut tower = json
        .get(key)
        .filter(|v| v.is_object())
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()));
    if let (Some(over), Some(map)) = (
        json.get(format!("{key}_dict")).and_then(Value::as_object),
        tower.as_object_mut(),
    ) {
        map.extend(over.clone());
    }
    tower
}
