//! A model named by its Hugging Face repo id (#42), as the coordinator
//! resolved it before any worker started: the repo and the commit its
//! files are from, the weight file in the cache, the family and its sizes
//! read from the repo's `config.json`, and a classifier's labels and
//! scoring. Workers build the model from this value and read no config.
//!
//! The transformers families with a built-in network (`model_type`):
//! - `vit`: `ViTModel` (embeds: the class token after the final norm) or
//!   `ViTForImageClassification` (any number of labels);
//! - `dinov2`: `Dinov2Model`, or `Dinov2ForImageClassification` (its head
//!   reads the class token and the patch mean, concatenated);
//!   `dinov2_with_registers`: the same with register tokens;
//! - `clip`: `CLIPModel`'s image tower and projection (embeds, unit length);
//!   `clip_vision_model`: the same tower saved alone
//!   (`CLIPVisionModelWithProjection`, or `CLIPVisionModel`, whose pooled
//!   class token embeds, not unit length); `CLIPForImageClassification`
//!   (its head over the mean of the patch tokens before `post_layernorm`);
//! - `siglip`: `SiglipModel`'s image tower and its attention-pooling head
//!   (embeds, unit length); `siglip_vision_model`: `SiglipVisionModel`;
//!   `SiglipForImageClassification` (its head over the mean of the normed
//!   tokens, the attention-pooling head unused);
//! - `convnext`: `ConvNextForImageClassification` at any stage widths and
//!   depths, with any number of labels (torchvision's ConvNeXt network;
//!   it takes any crop size);
//! - `resnet`: `ResNetForImageClassification` at any stem and stage widths,
//!   depths, block type and strides, with any number of labels
//!   (torchvision's ResNet network; any crop size).
//!
//! And timm's repos (a `config.json` with `architecture` and
//! `pretrained_cfg`, no `model_type`): its ConvNeXts (`convnext_tiny`,
//! `_small`, `_base`, `_large`, `_xlarge`, with `model_args`' `depths` and
//! `dims` over the architecture's), with their `num_classes` head, and its
//! plain ViTs (`timm.rs`).
//!
//! Everything the built-in network cannot do as upstream does is refused
//! in one line, never approximated: ViT without q/k/v biases, an activation it lacks, a non-square or
//! non-RGB input.

mod cnn;
mod heads;
mod open_clip;
mod shape;
mod text;
mod timm;

use serde_json::Value;

use self::cnn::{convnext_config, resnet_config};
pub use self::heads::scores_from_config;
use self::heads::{head_labels, scores};
pub use self::open_clip::{open_clip_config, open_clip_text};
pub use self::shape::{HubActivation, HubConfig, HubModel, HubResNet, HubShape, HubText};
pub use self::text::hub_text;
use self::timm::timm_config;
use crate::model::Family;

/// The model `text` (a repo's `config.json`) describes, or why this tool
/// cannot run it, in one line.
pub fn hub_config(text: &str) -> Result<HubConfig, String> {
    let json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    if json.get("model_type").is_none()
        && let Some(architecture) = json.get("architecture").and_then(Value::as_str)
    {
        return timm_config(architecture, &json);
    }
    let model_type = json
        .get("model_type")
        .and_then(Value::as_str)
        .ok_or("config.json names no model_type")?;
    let classifier = json
        .get("architectures")
        .and_then(Value::as_array)
        .is_some_and(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .any(|n| n.ends_with("ForImageClassification"))
        });
    // CLIP's and SigLIP's image tower.
    let vision = || text::tower_config(&json, "vision_config");
    if model_type == "convnext" {
        return convnext_config(text, &json, classifier);
    }
    if model_type == "resnet" {
        return resnet_config(text, &json, classifier);
    }
    let (family, tower) = match model_type {
        "vit" => (Family::Vit, json.clone()),
        "dinov2" | "dinov2_with_registers" => (Family::Dinov2, json.clone()),
        "clip" => (Family::Clip, vision()),
        "siglip" => (Family::Siglip, vision()),
        // A vision tower saved alone: its config is the vision config.
        "clip_vision_model" => (Family::Clip, json.clone()),
        "siglip_vision_model" => (Family::Siglip, json.clone()),
        other => {
            return Err(format!(
                "model_type {other} is not built in (the built-in families read from a hub \
                 config are vit, dinov2, dinov2_with_registers, clip, clip_vision_model, siglip, \
                 siglip_vision_model, convnext and resnet); export it to ONNX and run \
                 --model FILE.onnx"
            ));
        }
    };
    let architectures = || {
        json.get("architectures")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
    };
    let count = |key: &str, default: Option<u64>| -> Result<usize, String> {
        match tower.get(key) {
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or_else(|| format!("config.json: {key} is {v}, not a positive count")),
            None => default
                .map(|n| n as usize)
                .ok_or_else(|| format!("config.json has no {key}")),
        }
    };
    // transformers' defaults where a config leaves a key out.
    let (image_default, patch_default, eps_default, act_default) = match family {
        Family::Vit => (224, 16, 1e-12, "gelu"),
        Family::Dinov2 if model_type == "dinov2_with_registers" => (224, 16, 1e-6, "gelu"),
        Family::Dinov2 => (224, 14, 1e-6, "gelu"),
        Family::Clip => (224, 32, 1e-5, "quick_gelu"),
        _ => (224, 16, 1e-6, "gelu_pytorch_tanh"),
    };
    let width = count("hidden_size", Some(768))?;
    let depth = count("num_hidden_layers", Some(12))?;
    let heads = count("num_attention_heads", Some(12))?;
    let patch = count("patch_size", Some(patch_default))?;
    let image_size = count("image_size", Some(image_default))?;
    if !width.is_multiple_of(heads) {
        return Err(format!(
            "config.json: hidden_size {width} is not a multiple of num_attention_heads {heads}"
        ));
    }
    // A size that is not a whole number of patches (SigLIP So400m: 384 px
    // in 14 px patches) runs as upstream's strided convolution does: the
    // grid is the whole patches, the pixels past them unused.
    if image_size < patch {
        return Err(format!(
            "config.json: image_size {image_size} is smaller than patch_size {patch}"
        ));
    }
    if count("num_channels", Some(3))? != 3 {
        return Err("config.json: num_channels is not 3 (RGB)".to_owned());
    }
    let swiglu = family == Family::Dinov2
        && tower.get("use_swiglu_ffn").and_then(Value::as_bool) == Some(true);
    let mlp = if family == Family::Dinov2 {
        let hidden = width * count("mlp_ratio", Some(4))?;
        if swiglu {
            // transformers' Dinov2SwiGLUFFN: two thirds of the MLP's
            // width, rounded up to a multiple of 8.
            (hidden * 2 / 3).div_ceil(8) * 8
        } else {
            hidden
        }
    } else {
        // ViTConfig's, CLIPVisionConfig's and SiglipVisionConfig's default,
        // whatever the width.
        count("intermediate_size", Some(3072))?
    };
    if tower.get("qkv_bias").and_then(Value::as_bool) == Some(false) {
        return Err(
            "config.json: qkv_bias false (attention without biases) is not built in".into(),
        );
    }
    let eps = match tower.get("layer_norm_eps") {
        None => eps_default,
        Some(v) => v
            .as_f64()
            .filter(|e| *e > 0.0 && e.is_finite())
            .ok_or_else(|| format!("config.json: layer_norm_eps is {v}, not a positive number"))?,
    };
    let act = tower
        .get("hidden_act")
        .map_or(Some(act_default), Value::as_str)
        .ok_or("config.json: hidden_act is not a name")?;
    let activation = match act {
        // The gated MLP applies SiLU whatever hidden_act says.
        _ if swiglu => HubActivation::SwiGlu,
        "gelu" => HubActivation::Gelu,
        "gelu_pytorch_tanh" | "gelu_new" => HubActivation::GeluTanh,
        "quick_gelu" => HubActivation::QuickGelu,
        other => return Err(format!("config.json: hidden_act {other} is not built in")),
    };
    let projection = match family {
        // CLIPForImageClassification's head reads the tower, unprojected;
        // a CLIPVisionModel has no projection (its pooler_output embeds).
        Family::Clip if classifier => None,
        Family::Clip
            if model_type == "clip_vision_model"
                && !architectures().any(|a| a == "CLIPVisionModelWithProjection") =>
        {
            None
        }
        Family::Clip => Some(
            json.get("projection_dim")
                .map_or(Some(512), Value::as_u64)
                .filter(|&n| n > 0)
                .ok_or("config.json: projection_dim is not a positive count")? as usize,
        ),
        _ => None,
    };
    if family == Family::Siglip
        && !classifier
        && tower.get("vision_use_head").and_then(Value::as_bool) == Some(false)
    {
        return Err(
            "a SigLIP without its attention-pooling head (vision_use_head false) is \
                    not built in"
                .to_owned(),
        );
    }
    let registers = if model_type == "dinov2_with_registers" {
        Some(match tower.get("num_register_tokens") {
            None => 4,
            Some(v) => v
                .as_u64()
                .ok_or_else(|| format!("config.json: num_register_tokens is {v}, not a count"))?
                as usize,
        })
    } else {
        None
    };
    let (labels, classes) = if classifier {
        let labels = head_labels(text, &json)?;
        let n = labels.len();
        (labels, Some(n))
    } else {
        (Vec::new(), None)
    };
    let scores = scores(&json, classes)?;
    Ok(HubConfig {
        shape: HubShape {
            family,
            patch,
            width,
            depth,
            heads,
            mlp,
            pos_grid: image_size / patch,
            image: image_size,
            eps,
            activation,
            projection,
            classes,
            dims: Vec::new(),
            depths: Vec::new(),
            resnet: None,
            registers,
        },
        labels,
        scores,
        image_size,
    })
}

#[cfg(test)]
mod tests;
