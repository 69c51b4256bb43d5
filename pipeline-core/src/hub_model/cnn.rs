//! The convolutional families' configs: transformers' `ConvNextConfig`
//! and `ResNetConfig`, each as torchvision's network at the sizes they
//! give.

use serde_json::Value;

use super::heads::{head_labels, scores};
use super::shape::{HubActivation, HubConfig, HubResNet, HubShape};
use crate::model::Family;

/// A ConvNeXt's four stages' counts (`hidden_sizes`, `depths`, `dims`):
/// `value` where given, else `default`.
pub(super) fn stage_counts(
    value: Option<&Value>,
    key: &str,
    default: &[usize],
) -> Result<Vec<usize>, String> {
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

/// A ConvNeXt's shape: its stages, the crop it is fed, its head
/// LayerNorm's eps and its classes, if it has a classifier (the
/// transformer fields at what they mean for it: the last stage's width,
/// every block).
pub(super) fn convnext_shape(
    dims: Vec<usize>,
    depths: Vec<usize>,
    image: usize,
    eps: f64,
    classes: Option<usize>,
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
        classes,
        dims,
        depths,
        resnet: None,
        registers: None,
    }
}

/// A ResNet's shape: its stage widths and depths, the crop it is fed, its
/// blocks and its classes, if it has a classifier (the transformer fields
/// at what they mean for it: the last stage's width, every block).
pub(super) fn resnet_shape(
    (dims, depths): (Vec<usize>, Vec<usize>),
    image: usize,
    classes: Option<usize>,
    resnet: HubResNet,
) -> HubShape {
    let width = *dims.last().expect("four stages");
    HubShape {
        family: Family::Resnet,
        patch: 1,
        width,
        depth: depths.iter().sum(),
        heads: 1,
        mlp: width,
        pos_grid: 0,
        image,
        eps: 1e-5,
        activation: HubActivation::Gelu,
        projection: None,
        classes,
        dims,
        depths,
        resnet: Some(resnet),
        registers: None,
    }
}

/// transformers' `ConvNextConfig` (each key it leaves out at its
/// default): a `ConvNextForImageClassification`, torchvision's network at
/// these stage widths and depths, or a `ConvNextModel` (no head), which
/// embeds its pooled, normalised features (its `pooler_output`).
pub(super) fn convnext_config(
    text: &str,
    json: &Value,
    classifier: bool,
) -> Result<HubConfig, String> {
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
    let labels = if classifier {
        head_labels(text, json)?
    } else {
        Vec::new()
    };
    let classes = classifier.then_some(labels.len());
    let image_size = json
        .get("image_size")
        .map_or(Some(224), Value::as_u64)
        .filter(|&n| n > 0)
        .ok_or("config.json: image_size is not a positive count")? as usize;
    Ok(HubConfig {
        shape: convnext_shape(dims, depths, image_size, eps, classes),
        labels,
        scores: scores(json, classes)?,
        image_size,
    })
}

/// transformers' `ResNetConfig` (each key it leaves out at its default):
/// a `ResNetForImageClassification`, torchvision's ResNet at these stem
/// and stage widths, depths and strides, with any number of labels; or a
/// `ResNetModel` (no head), which embeds its pooled features (its
/// `pooler_output`).
pub(super) fn resnet_config(
    text: &str,
    json: &Value,
    classifier: bool,
) -> Result<HubConfig, String> {
    let list = |key: &str, default: &[usize]| stage_counts(json.get(key), key, default);
    let dims = list("hidden_sizes", &[256, 512, 1024, 2048])?;
    let depths = list("depths", &[3, 4, 6, 3])?;
    let stem =
        match json.get("embedding_size") {
            None => 64,
            Some(v) => v.as_u64().filter(|&n| n > 0).ok_or_else(|| {
                format!("config.json: embedding_size is {v}, not a positive count")
            })? as usize,
        };
    let flag = |key: &str| -> Result<bool, String> {
        match json.get(key) {
            None => Ok(false),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| format!("config.json: {key} is {v}, not true or false")),
        }
    };
    let bottleneck = match json.get("layer_type").map(|v| (v, v.as_str())) {
        None | Some((_, Some("bottleneck"))) => true,
        Some((_, Some("basic"))) => false,
        Some((v, _)) => {
            return Err(format!(
                "config.json: layer_type {v} is not built in (basic and bottleneck are)"
            ));
        }
    };
    if bottleneck && let Some(w) = dims.iter().find(|w| !w.is_multiple_of(4)) {
        return Err(format!(
            "config.json: hidden_sizes {w} is not a multiple of 4 (a bottleneck's inner \
             width is a quarter)"
        ));
    }
    if let Some(act) = json.get("hidden_act")
        && act.as_str() != Some("relu")
    {
        return Err(format!(
            "config.json: hidden_act {act} is not built in (a ResNet's is relu)"
        ));
    }
    if let Some(v) = json.get("num_channels")
        && v.as_u64() != Some(3)
    {
        return Err(format!("config.json: num_channels {v} is not 3 (RGB)"));
    }
    let resnet = HubResNet {
        stem,
        bottleneck,
        downsample_in_first_stage: flag("downsample_in_first_stage")?,
        downsample_in_bottleneck: flag("downsample_in_bottleneck")?,
        timm: false,
    };
    let labels = if classifier {
        head_labels(text, json)?
    } else {
        Vec::new()
    };
    let classes = classifier.then_some(labels.len());
    Ok(HubConfig {
        // The crop its processor gives; 224 until the coordinator reads it.
        shape: resnet_shape((dims, depths), 224, classes, resnet),
        labels,
        scores: scores(json, classes)?,
        image_size: 224,
    })
}
