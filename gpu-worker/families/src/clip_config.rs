//! The MLP activation a CLIP checkpoint's own config names.
//!
//! OpenAI's CLIP uses QuickGELU, and so do the towers here by default; but
//! LAION's OpenCLIP checkpoints and many Hugging Face ones use exact GELU,
//! and the tensors alone cannot tell them apart. Upstream publishes the
//! answer beside the weights:
//! - Hugging Face: `config.json`, `text_config.hidden_act` and
//!   `vision_config.hidden_act` (a vision-only config has `hidden_act` at
//!   its top); where a key is absent transformers' default, `quick_gelu`,
//!   holds;
//! - OpenCLIP (the hub's `open_clip_pytorch_model.bin`):
//!   `open_clip_config.json`, whose `model_cfg.quick_gelu` is `true` for
//!   QuickGELU and absent or `false` for GELU, as `open_clip.create_model`
//!   reads it.
//!
//! With no such file beside the weights, a tower keeps its default: a
//! LAION checkpoint copied without its config would then run QuickGELU,
//! which nothing in the file can reveal (docs/models.md says to keep the
//! config beside the weights).

use std::path::Path;

use serde_json::Value;

use crate::layout::Layout;
use crate::transformer::Activation;
use crate::weights_error::WeightsError;

/// Which tower of a CLIP checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tower {
    /// The image tower.
    Image,
    /// The text tower.
    Text,
}

/// The activation the config beside `weights` names for `tower`, if
/// `layout` is CLIP's and such a config is there; a config that does not
/// read, or names an activation not run here, is a one-line error.
pub fn activation(
    weights: &Path,
    layout: Layout,
    tower: Tower,
    model: &str,
) -> Result<Option<Activation>, WeightsError> {
    let folder = weights.parent().unwrap_or(Path::new("."));
    let file = match layout {
        Layout::OpenClip => folder.join("open_clip_config.json"),
        Layout::HfClip | Layout::HfClipBare => folder.join("config.json"),
        _ => return Ok(None),
    };
    if !file.is_file() {
        return Ok(None);
    }
    let error = |problem: String| WeightsError::Mismatch {
        path: weights.to_path_buf(),
        model: model.to_owned(),
        problem,
    };
    let shown = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text =
        std::fs::read_to_string(&file).map_err(|e| error(format!("{shown} beside it: {e}")))?;
    let config: Value = serde_json::from_str(&text)
        .map_err(|e| error(format!("{shown} beside it is not JSON ({e})")))?;
    if layout == Layout::OpenClip {
        let quick = &config["model_cfg"]["quick_gelu"];
        return match quick {
            Value::Null | Value::Bool(false) => Ok(Some(Activation::Gelu)),
            Value::Bool(true) => Ok(Some(Activation::QuickGelu)),
            other => Err(error(format!(
                "{} beside it has model_cfg.quick_gelu {other}, not true or false",
                shown
            ))),
        };
    }
    let section = match tower {
        Tower::Image => "vision_config",
        Tower::Text => "text_config",
    };
    let act = match (&config[section], &config["hidden_act"]) {
        (Value::Object(sub), _) => sub.get("hidden_act").unwrap_or(&Value::Null),
        (_, top) => top,
    };
    let act = match act {
        Value::Null => "quick_gelu",
        Value::String(s) => s.as_str(),
        other => {
            return Err(error(format!(
                "{} beside it has hidden_act {other}, not a name",
                shown
            )));
        }
    };
    match act {
        "quick_gelu" => Ok(Some(Activation::QuickGelu)),
        "gelu" => Ok(Some(Activation::Gelu)),
        "gelu_new" | "gelu_pytorch_tanh" => Ok(Some(Activation::GeluTanh)),
        other => Err(error(format!(
            "{} beside it names hidden_act \"{other}\"; CLIP runs quick_gelu, gelu or \
             gelu_pytorch_tanh here",
            shown
        ))),
    }
}
