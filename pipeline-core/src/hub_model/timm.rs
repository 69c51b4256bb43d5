//! timm's repos (`save_for_hf`: a `config.json` with `architecture`,
//! `model_args` over the architecture's sizes, `num_classes`,
//! `label_names` and `pretrained_cfg`, no `model_type`): its ConvNeXts
//! (torchvision's network) and its plain ViTs (`vit_base_patch16_224`:
//! torchvision's ViT, timm's names), at the sizes they give. What those
//! networks do not have is refused in one line.

use serde_json::Value;

use super::cnn::{convnext_shape, resnet_shape, stage_counts};
use super::shape::{HubActivation, HubConfig, HubResNet, HubShape};
use crate::model::{Family, Scores};

/// The model of a timm repo whose `config.json` names `architecture`.
pub(super) fn timm_config(architecture: &str, json: &Value) -> Result<HubConfig, String> {
    let args = json.get("model_args").cloned().unwrap_or(Value::Null);
    if architecture.starts_with("vit_") {
        return vit(architecture, json, &args);
    }
    if architecture.starts_with("resnet") {
        return resnet(architecture, json, &args);
    }
    // timm's `convnext.py`: depths and dims of each named size.
    let (depths, dims): (&[usize], &[usize]) = match architecture {
        "convnext_tiny" => (&[3, 3, 9, 3], &[96, 192, 384, 768]),
        "convnext_small" => (&[3, 3, 27, 3], &[96, 192, 384, 768]),
        "convnext_base" => (&[3, 3, 27, 3], &[128, 256, 512, 1024]),
        "convnext_large" => (&[3, 3, 27, 3], &[192, 384, 768, 1536]),
        "convnext_xlarge" => (&[3, 3, 27, 3], &[256, 512, 1024, 2048]),
        other => return Err(not_built_in(other)),
    };
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
    let classes = num_classes(json, &args)?;
    let image_size = input_size(json)?;
    Ok(HubConfig {
        // timm's head LayerNorm's eps is its others'. With num_classes 0
        // its head is that LayerNorm alone: the model embeds.
        shape: convnext_shape(
            dims,
            depths,
            image_size,
            1e-6,
            (classes > 0).then_some(classes),
        ),
        labels: labels(json, classes)?,
        scores: Scores::Softmax,
        image_size,
    })
}

fn not_built_in(architecture: &str) -> String {
    format!(
        "timm's {architecture} is not built in (of timm's architectures, convnext_tiny, \
         _small, _base, _large and _xlarge are, the plain ResNets resnet18, 34, 50, 101 \
         and 152, and the plain ViTs vit_{{tiny,small,base,large,huge}}_patchP_SIZE); \
         export it to ONNX and run --model FILE.onnx"
    )
}

/// timm's plain ResNets (`resnet50.a1_in1k`, `resnet18.tv_in1k`):
/// torchvision's network and names, at `model_args`' `channels` (each
/// stage's base width; a bottleneck's output is four times it), with its `num_classes` head or (0) embedding its pooled
/// features. The variants timm builds from other arguments (`resnet50d`'s
/// deep stem and average-pool shortcuts, ResNeXt's groups, other
/// activations or norms) are refused in one line.
fn resnet(architecture: &str, json: &Value, args: &Value) -> Result<HubConfig, String> {
    let (bottleneck, depths): (bool, &[usize]) = match architecture {
        "resnet18" => (false, &[2, 2, 2, 2]),
        "resnet34" => (false, &[3, 4, 6, 3]),
        "resnet50" => (true, &[3, 4, 6, 3]),
        "resnet101" => (true, &[3, 4, 23, 3]),
        "resnet152" => (true, &[3, 8, 36, 3]),
        other => return Err(not_built_in(other)),
    };
    if let Some(map) = args.as_object() {
        for (key, v) in map {
            let plain = match key.as_str() {
                "channels" | "stem_width" | "num_classes" | "drop_rate" | "drop_path_rate"
                | "zero_init_last" => true,
                "in_chans" => v.as_u64() == Some(3),
                "global_pool" => v.as_str() == Some("avg"),
                "output_stride" => v.as_u64() == Some(32),
                "cardinality" => v.as_u64() == Some(1),
                "base_width" => v.as_u64() == Some(64),
                "stem_type" => v.as_str() == Some(""),
                "avg_down" | "replace_stem_pool" => v.as_bool() == Some(false),
                _ => false,
            };
            if !plain {
                return Err(format!(
                    "config.json: model_args.{key} {v} is not built in (torchvision's ResNet)"
                ));
            }
        }
    }
    let channels = stage_counts(
        args.get("channels"),
        "model_args.channels",
        &[64, 128, 256, 512],
    )?;
    // timm's plain stem is 64 wide whatever `stem_width` says (it sizes
    // the deep stems only).
    let stem = 64;
    let expansion = if bottleneck { 4 } else { 1 };
    let dims: Vec<usize> = channels.iter().map(|c| c * expansion).collect();
    let classes = num_classes(json, args)?;
    let image_size = input_size(json)?;
    Ok(HubConfig {
        shape: resnet_shape(
            (dims, depths.to_vec()),
            image_size,
            (classes > 0).then_some(classes),
            HubResNet {
                stem,
                bottleneck,
                downsample_in_first_stage: false,
                downsample_in_bottleneck: false,
                timm: true,
            },
        ),
        labels: labels(json, classes)?,
        scores: Scores::Softmax,
        image_size,
    })
}

/// `num_classes`, at the root or in `model_args` (1000 unless given).
fn num_classes(json: &Value, args: &Value) -> Result<usize, String> {
    Ok(json
        .get("num_classes")
        .or_else(|| args.get("num_classes"))
        .map_or(Some(1000), Value::as_u64)
        .ok_or("config.json: num_classes is not a count")? as usize)
}

/// The class names: `label_names`, else ImageNet's for 1000 classes
/// (timm's in1k heads), else the class numbers.
fn labels(json: &Value, classes: usize) -> Result<Vec<String>, String> {
    if classes == 0 {
        // No head: nothing to name.
        return Ok(Vec::new());
    }
    Ok(match json.get("label_names").and_then(Value::as_array) {
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
    })
}

/// `pretrained_cfg.input_size`'s side (224 unless given), held to the
/// limit `--size` is.
fn input_size(json: &Value) -> Result<usize, String> {
    let side = json
        .get("pretrained_cfg")
        .and_then(|c| c.get("input_size"))
        .and_then(Value::as_array)
        .and_then(|s| s.get(2))
        .map_or(Some(224), Value::as_u64)
        .ok_or("config.json: pretrained_cfg.input_size is not [3, H, W]")?;
    crate::preprocess::side_in_range("config.json: pretrained_cfg.input_size", side)
        .map(|s| s as usize)
}

/// timm's `VisionTransformer` as `vit_{size}_patch{P}_{SIZE}` names it
/// (`vision_transformer.py`: the size's width, depth and heads), with
/// `model_args` over them: a class token read after the final norm into a
/// linear head (or, with `num_classes` 0, the embedding), learned
/// position embeddings that include the class token's, q/k/v biases, no
/// layer scale, exact GELU, eps 1e-6: torchvision's ViT.
fn vit(architecture: &str, json: &Value, args: &Value) -> Result<HubConfig, String> {
    let refuse = || not_built_in(architecture);
    let name: Vec<&str> = architecture.split('_').collect();
    let [_, size, patch, image] = name[..] else {
        return Err(refuse());
    };
    let (width, depth, heads) = match size {
        "tiny" => (192, 12, 3),
        "small" => (384, 12, 6),
        "base" => (768, 12, 12),
        "large" => (1024, 24, 16),
        "huge" => (1280, 32, 16),
        _ => return Err(refuse()),
    };
    let patch: usize = patch
        .strip_prefix("patch")
        .and_then(|p| p.parse().ok())
        .ok_or_else(refuse)?;
    let image: usize = image.parse().map_err(|_| refuse())?;
    let count = |key: &str, default: usize| -> Result<usize, String> {
        match args.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or_else(|| {
                    format!("config.json: model_args.{key} is {v}, not a positive count")
                }),
        }
    };
    let width = count("embed_dim", width)?;
    let depth = count("depth", depth)?;
    let heads = count("num_heads", heads)?;
    let patch = count("patch_size", patch)?;
    // `img_size` as timm writes it, a side or [height, width].
    let pos_image = match args.get("img_size").and_then(Value::as_array) {
        Some(hw) => match hw.iter().map(Value::as_u64).collect::<Vec<_>>()[..] {
            [Some(h), Some(w)] if h == w && h > 0 => h as usize,
            _ => {
                return Err(format!(
                    "config.json: model_args.img_size {} is not a square size (a \
                     non-square input is not built in)",
                    args["img_size"]
                ));
            }
        },
        None => count("img_size", image)?,
    };
    let mlp_ratio = match args.get("mlp_ratio") {
        None => 4.0,
        Some(v) => v
            .as_f64()
            .filter(|r| *r > 0.0)
            .ok_or_else(|| format!("config.json: model_args.mlp_ratio is {v}, not positive"))?,
    };
    // What torchvision's ViT (the network here) does not have.
    for (key, plain) in [
        ("class_token", Value::Bool(true)),
        ("global_pool", Value::from("token")),
        ("no_embed_class", Value::Bool(false)),
        ("reg_tokens", Value::from(0)),
        ("pre_norm", Value::Bool(false)),
        ("final_norm", Value::Bool(true)),
        ("fc_norm", Value::Null),
        ("qkv_bias", Value::Bool(true)),
        ("qk_norm", Value::Bool(false)),
        ("proj_bias", Value::Bool(true)),
        ("init_values", Value::Null),
        ("in_chans", Value::from(3)),
        ("pos_embed", Value::from("learn")),
        ("dynamic_img_size", Value::Bool(false)),
    ] {
        if let Some(v) = args.get(key)
            && *v != plain
            && !(key == "fc_norm" && *v == Value::Bool(false))
        {
            return Err(format!(
                "config.json: model_args.{key} {v} is not built in (a plain ViT's is {plain})"
            ));
        }
    }
    if !width.is_multiple_of(heads) {
        return Err(format!(
            "config.json: embed_dim {width} is not a multiple of num_heads {heads}"
        ));
    }
    if !pos_image.is_multiple_of(patch) {
        return Err(format!(
            "config.json: img_size {pos_image} is not a multiple of patch_size {patch}"
        ));
    }
    let classes = num_classes(json, args)?;
    Ok(HubConfig {
        shape: HubShape {
            family: Family::Vit,
            patch,
            width,
            depth,
            heads,
            // timm's `int(mlp_ratio * dim)`.
            mlp: (mlp_ratio * width as f64) as usize,
            pos_grid: pos_image / patch,
            image: pos_image,
            eps: 1e-6,
            activation: HubActivation::Gelu,
            projection: None,
            classes: (classes > 0).then_some(classes),
            dims: Vec::new(),
            depths: Vec::new(),
            resnet: None,
            registers: None,
        },
        labels: labels(json, classes)?,
        scores: Scores::Softmax,
        // The size its position embeddings are for: a `pretrained_cfg`
        // crop of another size is refused by the coordinator.
        image_size: pos_image,
    })
}
