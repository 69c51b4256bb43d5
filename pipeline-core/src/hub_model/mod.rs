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
//! - `clip`: `CLIPModel`'s image tower and projection (embeds, unit length);
//! - `siglip`: `SiglipModel`'s image tower and its attention-pooling head
//!   (embeds, unit length);
//! - `convnext`: `ConvNextForImageClassification` at any stage widths and
//!   depths, with any number of labels (torchvision's ConvNeXt network;
//!   it takes any crop size).
//!
//! And timm's repos (a `config.json` with `architecture` and
//! `pretrained_cfg`, no `model_type`): its ConvNeXts (`convnext_tiny`,
//! `_small`, `_base`, `_large`, `_xlarge`, with `model_args`' `depths` and
//! `dims` over the architecture's), with their `num_classes` head.
//!
//! Everything the built-in network cannot do as upstream does is refused
//! in one line, never approximated: DINOv2's SwiGLU MLPs (giant), ViT
//! without q/k/v biases, an activation it lacks, a non-square or
//! non-RGB input.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{Family, Scores};

/// The MLP activation of a transformer, as transformers' `hidden_act`
/// names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HubActivation {
    /// Exact GELU (`gelu`).
    Gelu,
    /// GELU's tanh approximation (`gelu_pytorch_tanh`, `gelu_new`).
    GeluTanh,
    /// OpenAI's `x·σ(1.702x)` (`quick_gelu`).
    QuickGelu,
}

/// A transformer image tower's family and sizes, from its config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HubShape {
    /// `Vit`, `Dinov2`, `Clip` or `Siglip`.
    pub family: Family,
    /// Patch side in pixels.
    pub patch: usize,
    /// Token width (`hidden_size`).
    pub width: usize,
    /// Blocks (`num_hidden_layers`).
    pub depth: usize,
    /// Attention heads.
    pub heads: usize,
    /// The MLPs' hidden width.
    pub mlp: usize,
    /// Side of the checkpoint's position-embedding grid
    /// (`image_size / patch_size`).
    pub pos_grid: usize,
    /// Side of the images the model is fed (the preprocessing's crop).
    pub image: usize,
    /// Every LayerNorm's eps.
    pub eps: f64,
    /// The MLPs' activation.
    pub activation: HubActivation,
    /// Output width of CLIP's projection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<usize>,
    /// Classes of a classifier head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<usize>,
    /// A ConvNeXt's channels per stage (`hidden_sizes`); empty for the
    /// transformers, whose sizes are the fields above. A ConvNeXt's `eps`
    /// is its final LayerNorm's (`layer_norm_eps`: the others' is 1e-6 as
    /// upstream's), its `width` the last stage's, its `depth` all blocks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dims: Vec<usize>,
    /// A ConvNeXt's blocks per stage (`depths`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depths: Vec<usize>,
}

// eps is never NaN: it is read from a config and checked positive.
impl Eq for HubShape {}

impl HubShape {
    /// Length of the embedding (`--task embed`).
    pub fn feature_dim(&self) -> usize {
        match (self.projection, self.family) {
            (Some(e), _) => e,
            (None, Family::Dinov2) if self.classes.is_some() => 2 * self.width,
            (None, _) => self.width,
        }
    }
}

/// A Hugging Face model, resolved once by the coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HubModel {
    /// The repo id as given (`org/name`).
    pub repo: String,
    /// The commit the files are from (40 hex digits), so that resume
    /// refuses a model that changed.
    pub revision: String,
    /// The weight file, in the cache's snapshot of that commit.
    pub weights: std::path::PathBuf,
    /// The family and its sizes.
    pub shape: HubShape,
    /// A classifier's class names in class order (`id2label`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// How a classifier's logits become scores: softmax, or a sigmoid per
    /// label for `problem_type: multi_label_classification`.
    #[serde(default)]
    pub scores: Scores,
}

/// What a repo's `config.json` says of its model: the shape (with `image`
/// set to the config's own image size), its labels and their scoring.
#[derive(Debug, Clone, PartialEq)]
pub struct HubConfig {
    /// Family and sizes.
    pub shape: HubShape,
    /// Class names, in class order, where the checkpoint is a classifier.
    pub labels: Vec<String>,
    /// Softmax, or sigmoid for a multi-label classifier.
    pub scores: Scores,
    /// The config's `image_size`.
    pub image_size: usize,
}

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
    // CLIP's and SigLIP's image tower: `vision_config`, with the older
    // `vision_config_dict` laid over it as transformers does; each key
    // missing is transformers' default.
    let vision = || {
        let mut tower = json
            .get("vision_config")
            .filter(|v| v.is_object())
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default()));
        if let (Some(over), Some(map)) = (
            json.get("vision_config_dict").and_then(Value::as_object),
            tower.as_object_mut(),
        ) {
            map.extend(over.clone());
        }
        tower
    };
    if model_type == "convnext" {
        return convnext_config(text, &json, classifier);
    }
    let (family, tower) = match model_type {
        "vit" => (Family::Vit, json.clone()),
        "dinov2" => (Family::Dinov2, json.clone()),
        "clip" => (Family::Clip, vision()),
        "siglip" => (Family::Siglip, vision()),
        other => {
            return Err(format!(
                "model_type {other} is not built in (the built-in families read from a hub \
                 config are vit, dinov2, clip, siglip and convnext); export it to ONNX and \
                 run --model FILE.onnx"
            ));
        }
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
    if !image_size.is_multiple_of(patch) {
        return Err(format!(
            "config.json: image_size {image_size} is not a multiple of patch_size {patch}"
        ));
    }
    if count("num_channels", Some(3))? != 3 {
        return Err("config.json: num_channels is not 3 (RGB)".to_owned());
    }
    let mlp = if family == Family::Dinov2 {
        if tower.get("use_swiglu_ffn").and_then(Value::as_bool) == Some(true) {
            return Err(
                "a DINOv2 with SwiGLU MLPs (use_swiglu_ffn: giant) is not built in; export it \
                 to ONNX and run --model FILE.onnx"
                    .to_owned(),
            );
        }
        width * count("mlp_ratio", Some(4))?
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
        "gelu" => HubActivation::Gelu,
        "gelu_pytorch_tanh" | "gelu_new" => HubActivation::GeluTanh,
        "quick_gelu" => HubActivation::QuickGelu,
        other => return Err(format!("config.json: hidden_act {other} is not built in")),
    };
    let projection = match family {
        Family::Clip => Some(
            json.get("projection_dim")
                .map_or(Some(512), Value::as_u64)
                .filter(|&n| n > 0)
                .ok_or("config.json: projection_dim is not a positive count")? as usize,
        ),
        _ => None,
    };
    if family == Family::Siglip
        && tower.get("vision_use_head").and_then(Value::as_bool) == Some(false)
    {
        return Err(
            "a SigLIP without its attention-pooling head (vision_use_head false) is \
                    not built in"
                .to_owned(),
        );
    }
    let (labels, classes) = if classifier && matches!(family, Family::Vit | Family::Dinov2) {
        let labels = head_labels(text, &json)?;
        let n = labels.len();
        (labels, Some(n))
    } else if classifier {
        return Err(format!(
            "a {model_type} classifier head is not built in; its image embeddings are \
             (a {model_type} checkpoint without the head)"
        ));
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
        },
        labels,
        scores,
        image_size,
    })
}

/// A classifier's labels: `id2label`, else transformers' default names
/// (`LABEL_0`, …, for `num_labels`, 2 unless said), which
/// `save_pretrained` leaves out.
fn head_labels(text: &str, json: &Value) -> Result<Vec<String>, String> {
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
fn scores(json: &Value, classes: Option<usize>) -> Result<Scores, String> {
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

/// A ConvNeXt's four stages' counts (`hidden_sizes`, `depths`, `dims`):
/// `value` where given, else `default`.
fn stage_counts(value: Option<&Value>, key: &str, default: &[usize]) -> Result<Vec<usize>, String> {
    let Some(v) = value else {
        return Ok(default.to_vec());
    };
    v.as_array()
        .and_then(|a| {
            a.iter()
                .map(|n| n.as_u64().filter(|&n| n > 0).map(|n| n as usize))
                .collect::<Option<Vec<_>>>()
        })
        .filter(|l| l.len() == 4)
        .ok_or_else(|| format!("config.json: {key} is {v}, not 4 positive counts"))
}

/// A ConvNeXt classifier's shape: its stages, the crop it is fed, its
/// head LayerNorm's eps and its classes (the transformer fields at what
/// they mean for it: the last stage's width, every block).
fn convnext_shape(
    dims: Vec<usize>,
    depths: Vec<usize>,
    image: usize,
    eps: f64,
    classes: usize,
) -> HubShape {
    let width = *dims.last().expect("four stages");
    HubShape {
        family: Family::Convnext,
        patch: 4,
        width,
        depth: depths.iter().sum(),
        heads: 1,
        mlp: 4 * width,
        pos_grid: 0,
        image,
        eps,
        activation: HubActivation::Gelu,
        projection: None,
        classes: Some(classes),
        dims,
        depths,
    }
}

/// A timm repo's `config.json` (timm's `save_for_hf`): the architecture by
/// name, `model_args` over its sizes, `num_classes` (ImageNet's names for
/// 1000 classes, timm's in1k heads; `label_names` where given; else the
/// class numbers), `pretrained_cfg`'s `input_size`.
fn timm_config(architecture: &str, json: &Value) -> Result<HubConfig, String> {
    // timm's `convnext.py`: depths and dims of each named size.
    let (depths, dims): (&[usize], &[usize]) = match architecture {
        "convnext_tiny" => (&[3, 3, 9, 3], &[96, 192, 384, 768]),
        "convnext_small" => (&[3, 3, 27, 3], &[96, 192, 384, 768]),
        "convnext_base" => (&[3, 3, 27, 3], &[128, 256, 512, 1024]),
        "convnext_large" => (&[3, 3, 27, 3], &[192, 384, 768, 1536]),
        "convnext_xlarge" => (&[3, 3, 27, 3], &[256, 512, 1024, 2048]),
        other => {
            return Err(format!(
                "timm's {other} is not built in (of timm's architectures, convnext_tiny, \
                 _small, _base, _large and _xlarge are); export it to ONNX and run --model \
                 FILE.onnx"
            ));
        }
    };
    let args = json.get("model_args").cloned().unwrap_or(Value::Null);
    let list = |key: &str, default: &[usize]| {
        stage_counts(args.get(key), &format!("model_args.{key}"), default)
    };
    let (depths, dims) = (list("depths", depths)?, list("dims", dims)?);
    // What torchvision's ConvNeXt (the network here) does not have.
    for (key, plain) in [
        ("conv_mlp", Value::Bool(false)),
        ("head_hidden_size", Value::Null),
        ("ls_init_value", Value::Null),
        ("in_chans", Value::from(3)),
        ("patch_size", Value::from(4)),
        ("kernel_sizes", Value::from(7)),
    ] {
        if let Some(v) = args.get(key)
            && *v != plain
            && !(key == "ls_init_value" && v.as_f64().is_some_and(|x| x > 0.0))
        {
            return Err(format!(
                "config.json: model_args.{key} {v} is not built in (torchvision's ConvNeXt)"
            ));
        }
    }
    let classes = json
        .get("num_classes")
        .or_else(|| args.get("num_classes"))
        .map_or(Some(1000), Value::as_u64)
        .ok_or("config.json: num_classes is not a count")? as usize;
    if classes == 0 {
        return Err(
            "a timm ConvNeXt without its classifier head (num_classes 0) is not built in"
                .to_owned(),
        );
    }
    let labels: Vec<String> = match json.get("label_names").and_then(Value::as_array) {
        Some(names) if names.len() == classes => names
            .iter()
            .map(|n| n.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or("config.json: label_names are not all names")?,
        Some(names) => {
            return Err(format!(
                "config.json: {} label_names for {classes} classes",
                names.len()
            ));
        }
        None if classes == crate::labels::IMAGENET_CLASSES => crate::labels::imagenet_labels()
            .iter()
            .map(|l| (*l).to_owned())
            .collect(),
        None => (0..classes).map(|i| i.to_string()).collect(),
    };
    let image_size =
        json.get("pretrained_cfg")
            .and_then(|c| c.get("input_size"))
            .and_then(Value::as_array)
            .and_then(|s| s.get(2))
            .map_or(Some(224), Value::as_u64)
            .filter(|&n| n > 0)
            .ok_or("config.json: pretrained_cfg.input_size is not [3, H, W]")? as usize;
    Ok(HubConfig {
        // timm's head LayerNorm's eps is its others'.
        shape: convnext_shape(dims, depths, image_size, 1e-6, classes),
        labels,
        scores: Scores::Softmax,
        image_size,
    })
}

/// transformers' `ConvNextConfig` (each key it leaves out at its
/// default): a `ConvNextForImageClassification`, torchvision's network at
/// these stage widths and depths.
fn convnext_config(text: &str, json: &Value, classifier: bool) -> Result<HubConfig, String> {
    let list = |key: &str, default: &[usize]| stage_counts(json.get(key), key, default);
    let dims = list("hidden_sizes", &[96, 192, 384, 768])?;
    let depths = list("depths", &[3, 3, 9, 3])?;
    let number = |key: &str, default: f64| -> Result<f64, String> {
        match json.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .ok_or_else(|| format!("config.json: {key} is {v}, not a number")),
        }
    };
    for (key, want) in [("patch_size", 4), ("num_stages", 4), ("num_channels", 3)] {
        if let Some(v) = json.get(key)
            && v.as_u64() != Some(want)
        {
            return Err(format!(
                "config.json: {key} {v} is not built in (torchvision's ConvNeXt has {want})"
            ));
        }
    }
    if number("layer_scale_init_value", 1e-6)? <= 0.0 {
        return Err(
            "config.json: a ConvNeXt without layer scales (layer_scale_init_value 0) is not \
             built in"
                .to_owned(),
        );
    }
    if let Some(act) = json.get("hidden_act")
        && act.as_str() != Some("gelu")
    {
        return Err(format!("config.json: hidden_act {act} is not built in"));
    }
    let eps = number("layer_norm_eps", 1e-12)?;
    if eps <= 0.0 {
        return Err(format!("config.json: layer_norm_eps {eps} is not positive"));
    }
    if !classifier {
        return Err(
            "a convnext checkpoint without its classifier head (ConvNextModel) is not built \
             in; its ConvNextForImageClassification is"
                .to_owned(),
        );
    }
    let labels = head_labels(text, json)?;
    let classes = Some(labels.len());
    let image_size = json
        .get("image_size")
        .map_or(Some(224), Value::as_u64)
        .filter(|&n| n > 0)
        .ok_or("config.json: image_size is not a positive count")? as usize;
    Ok(HubConfig {
        shape: convnext_shape(dims, depths, image_size, eps, labels.len()),
        labels,
        scores: scores(json, classes)?,
        image_size,
    })
}

#[cfg(test)]
mod tests;
