//! open_clip's repos (`open_clip_config.json`: `model_cfg` with
//! `embed_dim`, `vision_cfg` and `text_cfg`; `preprocess_cfg`; weights in
//! `open_clip_model.safetensors` or `open_clip_pytorch_model.bin`, the
//! `visual.` names the built-in CLIPs read: what its `push_to_hf_hub`
//! writes), for its own ViT and text transformer (OpenAI's CLIP
//! network) at the sizes the config gives. A repo that also has transformers'
//! `config.json` runs from that instead. Its timm
//! towers (`timm_model_name`: the SigLIP ports), ResNets and the vision
//! options OpenAI's network does not have are refused in one line.

use serde_json::{Value, json};

use super::shape::{HubActivation, HubConfig, HubShape, HubText};
use crate::PreprocessSpec;
use crate::model::{Family, Scores};

/// The image tower of the open_clip model `text` (an
/// `open_clip_config.json`) describes, and its preprocessing; or why this
/// tool cannot run it, in one line.
pub fn open_clip_config(text: &str) -> Result<(HubConfig, PreprocessSpec), String> {
    let json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let model = json
        .get("model_cfg")
        .filter(|m| m.is_object())
        .ok_or("open_clip_config.json has no model_cfg")?;
    let vision = model
        .get("vision_cfg")
        .filter(|v| v.is_object())
        .ok_or("open_clip_config.json: model_cfg has no vision_cfg")?;
    if let Some(name) = vision.get("timm_model_name").filter(|v| !v.is_null()) {
        return Err(format!(
            "open_clip's timm image towers (vision_cfg.timm_model_name {name}) are not built \
             in; export it to ONNX and run --model FILE.onnx"
        ));
    }
    if vision.get("layers").is_some_and(Value::is_array) {
        return Err(
            "open_clip's ResNet image towers (vision_cfg.layers per stage) are not built in"
                .to_owned(),
        );
    }
    let tower = Tower {
        cfg: vision,
        name: "vision_cfg",
    };
    let (field, count) = (
        |key| tower.field(key),
        |key, default| tower.count(key, default),
    );
    let width = count("width", 768)?;
    let depth = count("layers", 12)?;
    let head_width = count("head_width", 64)?;
    let patch = count("patch_size", 16)?;
    let image = match vision.get("image_size") {
        Some(Value::Array(sides)) => match sides.as_slice() {
            [h, w] if h == w && h.as_u64().is_some_and(|n| n > 0) => {
                h.as_u64().unwrap_or(0) as usize
            }
            _ => {
                return Err(format!(
                    "{} {} is not a square (a non-square input is not built in)",
                    field("image_size"),
                    Value::Array(sides.clone())
                ));
            }
        },
        _ => count("image_size", 224)?,
    };
    // The preprocessing's crop: held to the limit `--size` is, named here
    // rather than as the transform's input_size below.
    if image > crate::preprocess::MAX_SIDE as usize {
        return Err(format!(
            "{} {image}: expected 1..={} pixels",
            field("image_size"),
            crate::preprocess::MAX_SIDE
        ));
    }
    let mlp_ratio = tower.mlp_ratio()?;
    // What OpenAI's CLIP network (the one here) does not have.
    tower.plain(&[
        ("ls_init_value", Value::Null),
        ("attentional_pool", Value::Bool(false)),
        // open_clip 2's names for average pooling and a normed patch input.
        ("global_average_pool", Value::Bool(false)),
        ("input_patchnorm", Value::Bool(false)),
        ("no_ln_pre", Value::Bool(false)),
        ("pos_embed_type", Value::from("learnable")),
        ("final_ln_after_pool", Value::Bool(false)),
        ("pool_type", Value::from("tok")),
    ])?;
    if !width.is_multiple_of(head_width) {
        return Err(format!(
            "{} {width} is not a multiple of its head_width {head_width}",
            field("width")
        ));
    }
    if image < patch {
        return Err(format!(
            "{} {image} is smaller than its patch_size {patch}",
            field("image_size")
        ));
    }
    let embed_dim = embed_dim(model)?;
    let activation = quick_gelu(model)?;
    let config = HubConfig {
        shape: HubShape {
            family: Family::Clip,
            patch,
            width,
            depth,
            heads: width / head_width,
            // open_clip's `int(width * mlp_ratio)`.
            mlp: (width as f64 * mlp_ratio) as usize,
            pos_grid: image / patch,
            image,
            // open_clip's LayerNorm default.
            eps: 1e-5,
            activation,
            projection: Some(embed_dim),
            classes: None,
            dims: Vec::new(),
            depths: Vec::new(),
            resnet: None,
            registers: None,
        },
        labels: Vec::new(),
        scores: Scores::Softmax,
        image_size: image,
    };
    Ok((config, preprocess(&json, image)?))
}

/// One tower's config (`vision_cfg`, `text_cfg`), each key left out at
/// open_clip's default.
struct Tower<'a> {
    cfg: &'a Value,
    name: &'static str,
}

impl Tower<'_> {
    /// `key` as an error names it.
    fn field(&self, key: &str) -> String {
        format!("open_clip_config.json: {}.{key}", self.name)
    }

    /// The positive count `key`, else `default`.
    fn count(&self, key: &str, default: u64) -> Result<usize, String> {
        match self.cfg.get(key) {
            None => Ok(default as usize),
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or_else(|| format!("{} is {v}, not a positive count", self.field(key))),
        }
    }

    /// `mlp_ratio`, 4 by default.
    fn mlp_ratio(&self) -> Result<f64, String> {
        match self.cfg.get("mlp_ratio") {
            None => Ok(4.0),
            Some(v) => v
                .as_f64()
                .filter(|r| *r > 0.0)
                .ok_or_else(|| format!("{} is {v}, not positive", self.field("mlp_ratio"))),
        }
    }

    /// Refuses each of `keys`, and of the options both towers share, that
    /// is set to anything but what OpenAI's network has.
    fn plain(&self, keys: &[(&str, Value)]) -> Result<(), String> {
        let shared = [
            ("act_kwargs", Value::Null),
            ("norm_kwargs", Value::Null),
            ("block_type", Value::Null),
            ("qk_norm", Value::Bool(false)),
            ("scaled_cosine_attn", Value::Bool(false)),
            ("scale_heads", Value::Bool(false)),
            ("scale_attn_inner", Value::Bool(false)),
            ("scale_attn", Value::Bool(false)),
            ("scale_fc", Value::Bool(false)),
        ];
        for (key, plain) in keys.iter().chain(&shared) {
            if let Some(v) = self.cfg.get(*key)
                && v != plain
                && !(*key == "block_type" && v.as_str() == Some("default"))
            {
                return Err(format!(
                    "{} {v} is not built in (OpenAI's CLIP network has {plain})",
                    self.field(key)
                ));
            }
        }
        Ok(())
    }
}

/// The embedding width both towers project to.
fn embed_dim(model: &Value) -> Result<usize, String> {
    model
        .get("embed_dim")
        .and_then(Value::as_u64)
        .filter(|&n| n > 0)
        .map(|n| n as usize)
        .ok_or_else(|| "open_clip_config.json: model_cfg.embed_dim is not a positive count".into())
}

/// Both towers' activation: open_clip's models are GELU unless named
/// `-quickgelu` (OpenAI's weights and those trained as they were), which
/// `model_cfg.quick_gelu` says.
fn quick_gelu(model: &Value) -> Result<HubActivation, String> {
    match model.get("quick_gelu") {
        None | Some(Value::Bool(false)) => Ok(HubActivation::Gelu),
        Some(Value::Bool(true)) => Ok(HubActivation::QuickGelu),
        Some(v) => Err(format!(
            "open_clip_config.json: model_cfg.quick_gelu is {v}, not true or false"
        )),
    }
}

/// open_clip's `image_transform` for inference: `resize_mode` `shortest`
/// (its default) resizes the shorter side to the image size and crops the
/// centre, as timm's transform at `crop_pct` 1 does (torchvision's
/// `Resize` and `CenterCrop`), with `interpolation` (default bicubic) and
/// the config's mean and std.
fn preprocess(json: &Value, image: usize) -> Result<PreprocessSpec, String> {
    let cfg = json.get("preprocess_cfg").cloned().unwrap_or(json!({}));
    let field = |key: &str| format!("open_clip_config.json: preprocess_cfg.{key}");
    match cfg.get("resize_mode").and_then(Value::as_str) {
        None | Some("shortest") => {}
        Some(other) => {
            return Err(format!(
                "{} {other} is not built in (shortest is)",
                field("resize_mode")
            ));
        }
    }
    if let Some(size) = cfg.get("size")
        && size.as_u64() != Some(image as u64)
        && *size != json!([image, image])
    {
        return Err(format!(
            "{} {size} is not the tower's image_size {image}",
            field("size")
        ));
    }
    // Passed on as given: timm's rules below are open_clip's too (a
    // number or `[x]` for all three channels, a falsy value its default,
    // which is refused there), and name the key.
    let stats = |key: &str, default: [f64; 3]| -> Value {
        cfg.get(key)
            .filter(|v| !v.is_null())
            .cloned()
            .unwrap_or_else(|| json!(default))
    };
    // open_clip's defaults: OpenAI's dataset statistics.
    let timm = json!({"pretrained_cfg": {
        "input_size": [3, image, image],
        "interpolation": cfg.get("interpolation").cloned().unwrap_or(json!("bicubic")),
        "crop_pct": 1.0,
        "crop_mode": "center",
        "mean": stats("mean", [0.481_454_66, 0.457_827_5, 0.408_210_73]),
        "std": stats("std", [0.268_629_54, 0.261_302_58, 0.275_777_11]),
    }});
    crate::spec_from_config(&timm.to_string())
        .map(|(spec, _)| spec)
        .map_err(|e| format!("open_clip_config.json: preprocess_cfg: {e}"))
}

/// The text tower of the open_clip model `text` (an
/// `open_clip_config.json`) describes: OpenAI's causal transformer
/// pooling the highest token id (its end token), projected to
/// `embed_dim`; or why this tool cannot run it, in one line.
pub fn open_clip_text(text: &str) -> Result<HubText, String> {
    let json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let model = json
        .get("model_cfg")
        .filter(|m| m.is_object())
        .ok_or("open_clip_config.json has no model_cfg")?;
    let cfg = model.get("text_cfg").cloned().unwrap_or(json!({}));
    let tower = Tower {
        cfg: &cfg,
        name: "text_cfg",
    };
    if model
        .get("custom_text")
        .is_some_and(|v| *v != Value::Bool(false))
    {
        return Err(
            "open_clip's custom text towers (model_cfg.custom_text: its weights under text.) \
             are not built in"
                .to_owned(),
        );
    }
    for key in ["hf_model_name", "hf_tokenizer_name"] {
        if let Some(name) = cfg.get(key).filter(|v| !v.is_null()) {
            return Err(format!(
                "open_clip's Hugging Face text towers and tokenizers ({} {name}) are not \
                 built in",
                tower.field(key)
            ));
        }
    }
    let count = |key, default| tower.count(key, default);
    let width = count("width", 512)?;
    let heads = count("heads", 8)?;
    let mlp_ratio = tower.mlp_ratio()?;
    // What OpenAI's text transformer (the one here) does not have.
    tower.plain(&[
        ("ls_init_value", Value::Null),
        ("embed_cls", Value::Bool(false)),
        ("no_causal_mask", Value::Bool(false)),
        ("final_ln_after_pool", Value::Bool(false)),
        ("pool_type", Value::from("argmax")),
        ("proj_bias", Value::Bool(false)),
        ("proj_type", Value::from("linear")),
    ])?;
    if !width.is_multiple_of(heads) {
        return Err(format!(
            "{} {width} is not a multiple of its heads {heads}",
            tower.field("width")
        ));
    }
    let projection = embed_dim(model)?;
    let activation = quick_gelu(model)?;
    Ok(HubText {
        family: Family::Clip,
        vocab: count("vocab_size", 49408)?,
        context: count("context_length", 77)?,
        width,
        depth: count("layers", 12)?,
        heads,
        mlp: (width as f64 * mlp_ratio) as usize,
        eps: 1e-5,
        activation,
        projection,
    })
}
