//! A model's preprocessing as its upstream describes it in a file (#41,
//! #42): a Hugging Face image processor's `preprocessor_config.json`, or
//! timm's `config.json` (its `pretrained_cfg`), turned into the
//! [`PreprocessSpec`] the loader runs, so that the crop is byte-identical
//! to the upstream's own PIL path (transformers' PIL image processors;
//! timm's eval transform, torchvision's `Resize` and `CenterCrop` on PIL).
//! What the loader cannot do as the upstream does (a non-square input, a
//! filter it does not have, timm's `border` crop) is a one-line error,
//! never an approximation.
//!
//! Hugging Face, as transformers' processors read their configs:
//! - the processor classes whose preprocessing is the plain one below
//!   (ViT, DeiT, BEiT, CLIP, BiT (DINOv2's), ConvNeXt, SigLIP, MobileNet
//!   v1 and v2), or a config that names none; another class, a
//!   `longest_edge` cap, padding, BGR or a rescale offset is refused;
//! - `do_resize` (default true) with `size`: `{"shortest_edge": S}` the
//!   shorter side to S, `{"height": S, "width": S}` both sides to S; a bare
//!   number is either, by the class (ViT's, DeiT's and BEiT's square, the
//!   others' shortest edge);
//! - `resample` as PIL's numbers (0 nearest, 1 Lanczos, 2 bilinear,
//!   3 bicubic, 4 box);
//! - `do_center_crop` with `crop_size` (`{"height", "width"}` or a
//!   number), the margin halved rounding down as transformers'
//!   `center_crop` does; ConvNeXt's `crop_pct` (below 384 px the shorter
//!   side to `int(S / crop_pct)`, then an S crop; from 384 on S × S);
//! - `do_rescale` with `rescale_factor` (default 1/255), `do_normalize`
//!   with `image_mean` and `image_std`.
//!
//! timm (`pretrained_cfg`, or the same keys at the top level):
//! `input_size` `[3, S, S]`, `interpolation`, `crop_pct` (default 0.875),
//! `crop_mode` `center` (the shorter side to `floor(S / crop_pct)`) or
//! `squash` (both sides to it), then torchvision's `CenterCrop(S)` (the
//! margin halved, half to even), `mean` and `std` (default ImageNet's).

use serde_json::Value;

use crate::preprocess::{CropRounding, Normalize, PreprocessSpec, ResizeFilter};

/// Whose file described the preprocessing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// A Hugging Face image processor's `preprocessor_config.json`.
    HuggingFace,
    /// timm's `config.json` (`pretrained_cfg`).
    Timm,
}

/// The preprocessing `text` (a config file's JSON) describes, and whose
/// file it is; or why it cannot be run as described, in one line.
pub fn spec_from_config(text: &str) -> Result<(PreprocessSpec, ConfigSource), String> {
    let json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    if let Some(cfg) = json.get("pretrained_cfg") {
        return timm(cfg).map(|s| (s, ConfigSource::Timm));
    }
    if json.get("input_size").is_some() {
        return timm(&json).map(|s| (s, ConfigSource::Timm));
    }
    let hf_keys = [
        "image_processor_type",
        "feature_extractor_type",
        "size",
        "resample",
    ];
    if hf_keys.iter().any(|k| json.get(k).is_some()) {
        return hugging_face(&json).map(|s| (s, ConfigSource::HuggingFace));
    }
    Err(
        "neither a Hugging Face preprocessor_config.json (size, resample, …) nor a timm \
         config.json (pretrained_cfg with input_size)"
            .to_owned(),
    )
}

/// How the resize goes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Resize {
    /// The shorter side to this, the aspect kept.
    Shorter(u32),
    /// Both sides to this.
    Square(u32),
}

fn side(v: &Value, what: &str) -> Result<u32, String> {
    v.as_u64()
        .filter(|&n| n > 0)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| format!("{what}: {v} is not a size in pixels"))
}

/// A `{"height": S, "width": S}` side, refusing a non-square one.
fn square_side(v: &Value, what: &str) -> Result<u32, String> {
    let (h, w) = (
        side(&v["height"], &format!("{what}.height"))?,
        side(&v["width"], &format!("{what}.width"))?,
    );
    if h != w {
        return Err(format!(
            "{what} {h}×{w} is not square: the loader makes square inputs only"
        ));
    }
    Ok(h)
}

fn floats3(v: &Value, what: &str) -> Result<[f32; 3], String> {
    let values: Vec<f32> = v
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_f64)
                .map(|x| x as f32)
                .collect()
        })
        .unwrap_or_default();
    <[f32; 3]>::try_from(values).map_err(|_| format!("{what}: {v} is not three numbers"))
}

/// The image processor classes whose resize is the plain one (or
/// ConvNeXt's `crop_pct`, modelled here), by their name before
/// `ImageProcessor` (or the old `FeatureExtractor`), each with what a
/// bare-number `size` means (transformers' `default_to_square`: both
/// sides, else the shorter side) and whether it centre-crops when the
/// config does not say. Another class (LeViT's and PoolFormer's own resize
/// rules, EfficientNet's second division, MobileViT's BGR, SigLIP 2's
/// patches, …) is refused, not approximated.
const CLASSES: [(&str, bool, bool); 9] = [
    ("ViT", true, false),
    ("DeiT", true, true),
    ("Beit", true, true),
    ("CLIP", false, true),
    ("Bit", false, true),
    ("ConvNext", false, false),
    ("Siglip", false, false),
    ("MobileNetV1", false, true),
    ("MobileNetV2", false, true),
];

/// Keys whose value changes pixels in ways the loader does not: refused
/// when set to anything but false.
const REFUSED_KEYS: [&str; 4] = [
    "do_pad",
    "do_flip_channel_order",
    "rescale_offset",
    "include_top",
];

/// `class`'s row of [`CLASSES`]: (bare size is square, centre-crops by
/// default); `(None, false)` for a config that names no class (the
/// generic rules, and it must say what it does).
fn class_rules(class: &str) -> Result<(Option<bool>, bool), String> {
    if class.is_empty() {
        return Ok((None, false));
    }
    CLASSES
        .iter()
        .find(|(name, _, _)| {
            class.strip_prefix(name).is_some_and(|rest| {
                rest.starts_with("ImageProcessor") || rest.starts_with("FeatureExtractor")
            })
        })
        .map(|&(_, square, crops)| (Some(square), crops))
        .ok_or_else(|| {
            format!(
                "{class}: its own preprocessing is not built (the loader runs ViT's, DeiT's, \
                 BEiT's, CLIP's, BiT's, ConvNeXt's, SigLIP's and MobileNet's)"
            )
        })
}

fn hugging_face(c: &Value) -> Result<PreprocessSpec, String> {
    let flag = |key: &str, default: bool| c.get(key).and_then(Value::as_bool).unwrap_or(default);
    if !flag("do_resize", true) {
        return Err(
            "do_resize is false: images of every size would reach the model; the loader \
             needs a resize to a fixed input"
                .to_owned(),
        );
    }
    let filter = match c.get("resample").map(|v| (v.as_u64(), v)) {
        Some((Some(0), _)) => ResizeFilter::Nearest,
        Some((Some(1), _)) => ResizeFilter::Lanczos3,
        Some((Some(2), _)) => ResizeFilter::Bilinear,
        Some((Some(3), _)) => ResizeFilter::Bicubic,
        Some((Some(4), _)) => ResizeFilter::Box,
        Some((_, v)) => {
            return Err(format!(
                "resample {v}: the loader has PIL's nearest (0), Lanczos (1), bilinear (2), \
                 bicubic (3) and box (4) filters"
            ));
        }
        None => return Err("no resample (PIL's filter number)".to_owned()),
    };
    let class = c
        .get("image_processor_type")
        .or_else(|| c.get("feature_extractor_type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let (square_size, crops_by_default) = class_rules(class)?;
    for key in REFUSED_KEYS {
        if c.get(key)
            .is_some_and(|v| !v.is_null() && *v != Value::Bool(false))
        {
            return Err(format!("{key} {}: the loader does not do it", c[key]));
        }
    }
    let size = c.get("size").ok_or("no size")?;
    if size.get("longest_edge").is_some() {
        return Err(format!(
            "size {size}: a longest_edge cap is not built (the loader resizes the shorter \
             side, or both)"
        ));
    }
    let resize = match size {
        Value::Object(o) if o.contains_key("shortest_edge") => {
            Resize::Shorter(side(&size["shortest_edge"], "size.shortest_edge")?)
        }
        Value::Object(o) if o.contains_key("height") => Resize::Square(square_side(size, "size")?),
        Value::Number(_) if square_size == Some(true) => Resize::Square(side(size, "size")?),
        Value::Number(_) if square_size == Some(false) => Resize::Shorter(side(size, "size")?),
        _ => {
            return Err(format!(
                "size {size}{}: give {{\"shortest_edge\": S}} or {{\"height\": S, \"width\": S}}",
                if class.is_empty() {
                    String::new()
                } else {
                    format!(" of a {class}")
                }
            ));
        }
    };
    let (resize_shorter, square, crop) = match (c.get("crop_pct").and_then(Value::as_f64), resize) {
        // ConvNeXt's processor: its own crop inside the resize.
        (Some(pct), Resize::Shorter(s))
            if class.starts_with("ConvNext")
                || class.is_empty() && !flag("do_center_crop", false) =>
        {
            if !(pct > 0.0 && pct <= 1.0) {
                return Err(format!("crop_pct {pct} is not in (0, 1]"));
            }
            if s < 384 {
                ((f64::from(s) / pct) as u32, false, s)
            } else {
                (s, true, s)
            }
        }
        (_, resize) => {
            let (r, square) = match resize {
                Resize::Shorter(s) => (s, false),
                Resize::Square(s) => (s, true),
            };
            let crop = if flag("do_center_crop", crops_by_default) {
                match c
                    .get("crop_size")
                    .ok_or("do_center_crop without crop_size")?
                {
                    v @ Value::Number(_) => side(v, "crop_size")?,
                    v => square_side(v, "crop_size")?,
                }
            } else if square {
                r
            } else {
                return Err(format!(
                    "the shorter side to {r} without a centre crop leaves inputs of every \
                     shape; the loader needs a square input"
                ));
            };
            (r, square, crop)
        }
    };
    if crop > resize_shorter {
        return Err(format!(
            "a {crop} crop of a {resize_shorter} resize would need padding"
        ));
    }
    let rescale = if flag("do_rescale", true) {
        c.get("rescale_factor")
            .map_or(Some(1.0 / 255.0), Value::as_f64)
            .filter(|f| *f > 0.0)
            .ok_or("rescale_factor is not a positive number")?
    } else {
        1.0
    };
    let (mean, std) = if flag("do_normalize", true) {
        (
            floats3(c.get("image_mean").ok_or("no image_mean")?, "image_mean")?,
            floats3(c.get("image_std").ok_or("no image_std")?, "image_std")?,
        )
    } else {
        ([0.0; 3], [1.0; 3])
    };
    // `(x·f - m) / s` is `(x - m/f) / (s/f)` on the loader's 0..255.
    let on_255 = |v: [f32; 3]| v.map(|x| (f64::from(x) / rescale) as f32);
    Ok(PreprocessSpec {
        resize_shorter,
        square,
        crop,
        crop_rounding: CropRounding::Floor,
        filter,
        normalize: Normalize {
            mean: on_255(mean),
            std: on_255(std),
        },
        ..PreprocessSpec::IMAGENET
    })
}

fn timm(cfg: &Value) -> Result<PreprocessSpec, String> {
    let input = cfg.get("input_size").ok_or("no input_size")?;
    let dims: Vec<u64> = input
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let [channels, h, w] = <[u64; 3]>::try_from(dims)
        .map_err(|_| format!("input_size {input} is not [channels, height, width]"))?;
    if channels != 3 {
        return Err(format!("input_size {input}: the loader makes RGB inputs"));
    }
    if h != w || h == 0 {
        return Err(format!(
            "input_size {input} is not square: the loader makes square inputs only"
        ));
    }
    let size = u32::try_from(h).map_err(|_| format!("input_size {input} is too large"))?;
    let filter = match cfg
        .get("interpolation")
        .and_then(Value::as_str)
        .unwrap_or("bilinear")
    {
        "nearest" => ResizeFilter::Nearest,
        "bilinear" => ResizeFilter::Bilinear,
        "bicubic" => ResizeFilter::Bicubic,
        "lanczos" => ResizeFilter::Lanczos3,
        "box" => ResizeFilter::Box,
        other => {
            return Err(format!(
                "interpolation {other:?}: the loader has nearest, bilinear, bicubic, lanczos \
                 and box"
            ));
        }
    };
    let pct = cfg.get("crop_pct").and_then(Value::as_f64).unwrap_or(0.875);
    if !(pct > 0.0 && pct <= 1.0) {
        return Err(format!("crop_pct {pct} is not in (0, 1]"));
    }
    // timm: `math.floor(img_size / crop_pct)`.
    let scale = (f64::from(size) / pct).floor() as u32;
    let square = match cfg
        .get("crop_mode")
        .and_then(Value::as_str)
        .unwrap_or("center")
    {
        "center" => false,
        "squash" => true,
        other => {
            return Err(format!(
                "crop_mode {other:?}: the loader has timm's center and squash"
            ));
        }
    };
    let stats = |key: &str, default: [f32; 3]| -> Result<[f32; 3], String> {
        cfg.get(key)
            .map_or(Ok(default), |v| floats3(v, key))
            .map(|v| v.map(|x| x * 255.0))
    };
    Ok(PreprocessSpec {
        resize_shorter: scale,
        square,
        crop: size,
        crop_rounding: CropRounding::HalfEven,
        filter,
        normalize: Normalize {
            mean: stats("mean", [0.485, 0.456, 0.406])?,
            std: stats("std", [0.229, 0.224, 0.225])?,
        },
        ..PreprocessSpec::IMAGENET
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> PreprocessSpec {
        spec_from_config(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .0
    }

    fn error(text: &str) -> String {
        match spec_from_config(text) {
            Ok((s, _)) => panic!("{text}: gave {s:?}"),
            Err(e) => e,
        }
    }

    /// Each processor's saved config as transformers writes it maps onto
    /// the resize, crop, filter, rounding and statistics it runs.
    #[test]
    fn hugging_face_processors_map_onto_the_loaders_spec() {
        let vit = spec(
            r#"{"image_processor_type": "ViTImageProcessor", "do_resize": true,
                "size": {"height": 224, "width": 224}, "resample": 2, "do_rescale": true,
                "rescale_factor": 0.00392156862745098, "do_normalize": true,
                "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}"#,
        );
        assert_eq!((vit.resize_shorter, vit.square, vit.crop), (224, true, 224));
        assert_eq!(vit.filter, ResizeFilter::Bilinear);
        assert_eq!(vit.crop_rounding, CropRounding::Floor);
        assert!((vit.normalize.mean[0] - 127.5).abs() < 1e-4);
        assert!((vit.normalize.std[2] - 127.5).abs() < 1e-4);
        let clip = spec(
            r#"{"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 224},
                "do_center_crop": true, "crop_size": {"height": 224, "width": 224},
                "resample": 3, "image_mean": [0.4815, 0.4578, 0.4082],
                "image_std": [0.2686, 0.2613, 0.2758]}"#,
        );
        assert_eq!(
            (clip.resize_shorter, clip.square, clip.crop),
            (224, false, 224)
        );
        assert_eq!(clip.filter, ResizeFilter::Bicubic);
        let convnext = spec(
            r#"{"image_processor_type": "ConvNextImageProcessor", "size": {"shortest_edge": 224},
                "crop_pct": 0.875, "resample": 3, "image_mean": [0.485, 0.456, 0.406],
                "image_std": [0.229, 0.224, 0.225]}"#,
        );
        assert_eq!(
            (convnext.resize_shorter, convnext.square, convnext.crop),
            (256, false, 224)
        );
        let large = spec(
            r#"{"image_processor_type": "ConvNextImageProcessor", "size": {"shortest_edge": 384},
                "crop_pct": 0.875, "resample": 3, "image_mean": [0.485, 0.456, 0.406],
                "image_std": [0.229, 0.224, 0.225]}"#,
        );
        assert_eq!(
            (large.resize_shorter, large.square, large.crop),
            (384, true, 384)
        );
        // Old feature extractors: a bare size, by the class.
        let old_vit = spec(
            r#"{"feature_extractor_type": "ViTFeatureExtractor", "size": 224, "resample": 2,
                "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}"#,
        );
        assert_eq!((old_vit.resize_shorter, old_vit.square), (224, true));
        let old_clip = spec(
            r#"{"feature_extractor_type": "CLIPFeatureExtractor", "size": 224, "crop_size": 224,
                "do_center_crop": true, "resample": 3, "image_mean": [0.5, 0.5, 0.5],
                "image_std": [0.5, 0.5, 0.5]}"#,
        );
        assert_eq!(
            (old_clip.resize_shorter, old_clip.square, old_clip.crop),
            (224, false, 224)
        );
        // DeiT centre-crops when its config does not say (transformers'
        // default), ViT does not.
        let deit = spec(
            r#"{"image_processor_type": "DeiTImageProcessor", "size": {"height": 256, "width": 256},
                "crop_size": {"height": 224, "width": 224}, "resample": 3,
                "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}"#,
        );
        assert_eq!(
            (deit.resize_shorter, deit.square, deit.crop),
            (256, true, 224)
        );
        let raw = spec(
            r#"{"size": {"height": 32, "width": 32}, "resample": 0, "do_rescale": false,
                "do_normalize": false}"#,
        );
        assert_eq!(
            raw.normalize,
            Normalize {
                mean: [0.0; 3],
                std: [1.0; 3]
            }
        );
        assert_eq!(raw.filter, ResizeFilter::Nearest);
    }

    /// timm's eval transform: `floor(S / crop_pct)`, centre or squash,
    /// torchvision's crop rounding, statistics on 0..1.
    #[test]
    fn timm_configs_map_onto_the_loaders_spec() {
        let convnext = spec(
            r#"{"architecture": "convnext_tiny", "num_classes": 7, "pretrained_cfg": {
                "input_size": [3, 224, 224], "interpolation": "bicubic", "crop_pct": 0.95,
                "crop_mode": "center", "mean": [0.485, 0.456, 0.406],
                "std": [0.229, 0.224, 0.225]}}"#,
        );
        assert_eq!(
            (convnext.resize_shorter, convnext.square, convnext.crop),
            (235, false, 224)
        );
        assert_eq!(convnext.crop_rounding, CropRounding::HalfEven);
        assert_eq!(convnext.filter, ResizeFilter::Bicubic);
        assert!((convnext.normalize.mean[0] - 0.485 * 255.0).abs() < 1e-3);
        let squash = spec(
            r#"{"pretrained_cfg": {"input_size": [3, 384, 384], "crop_pct": 1.0,
                "crop_mode": "squash", "interpolation": "bilinear"}}"#,
        );
        assert_eq!(
            (squash.resize_shorter, squash.square, squash.crop),
            (384, true, 384)
        );
        let default = spec(r#"{"input_size": [3, 224, 224]}"#);
        assert_eq!((default.resize_shorter, default.crop), (256, 224));
        assert_eq!(default.filter, ResizeFilter::Bilinear);
    }

    /// What the loader cannot run as described is a one-line error naming
    /// the key.
    #[test]
    fn what_cannot_be_run_as_described_is_a_one_line_error() {
        for (text, names) in [
            ("{", "not JSON"),
            ("{}", "neither"),
            (
                r#"{"size": {"height": 224, "width": 256}, "resample": 2}"#,
                "not square",
            ),
            (
                r#"{"size": {"shortest_edge": 224}, "resample": 5}"#,
                "resample 5",
            ),
            (
                r#"{"size": {"shortest_edge": 224}, "resample": 3}"#,
                "without a centre crop",
            ),
            (r#"{"size": 224, "resample": 3}"#, "size 224"),
            (
                r#"{"size": {"height": 224, "width": 224}, "resample": 2, "do_resize": false}"#,
                "do_resize",
            ),
            (
                r#"{"size": {"shortest_edge": 200}, "resample": 2, "do_center_crop": true, "crop_size": 224, "image_mean": [0,0,0], "image_std": [1,1,1]}"#,
                "padding",
            ),
            (
                r#"{"size": {"height": 224, "width": 224}, "resample": 2}"#,
                "image_mean",
            ),
            (
                r#"{"pretrained_cfg": {"input_size": [3, 224, 320]}}"#,
                "not square",
            ),
            (
                r#"{"pretrained_cfg": {"input_size": [1, 224, 224]}}"#,
                "RGB",
            ),
            (
                r#"{"pretrained_cfg": {"input_size": [3, 224, 224], "crop_mode": "border"}}"#,
                "border",
            ),
            (
                r#"{"pretrained_cfg": {"input_size": [3, 224, 224], "interpolation": "hamming"}}"#,
                "hamming",
            ),
            (
                r#"{"pretrained_cfg": {"input_size": [3, 224, 224], "crop_pct": 0}}"#,
                "crop_pct",
            ),
            (
                r#"{"image_processor_type": "LevitImageProcessor", "size": {"shortest_edge": 224}, "resample": 3}"#,
                "LevitImageProcessor",
            ),
            (
                r#"{"image_processor_type": "Siglip2ImageProcessor", "size": {"height": 224, "width": 224}, "resample": 2}"#,
                "Siglip2ImageProcessor",
            ),
            (
                r#"{"size": {"height": 224, "width": 224}, "resample": 2, "do_flip_channel_order": true}"#,
                "do_flip_channel_order",
            ),
            (
                r#"{"size": {"height": 224, "width": 224}, "resample": 2, "do_pad": true}"#,
                "do_pad",
            ),
            (
                r#"{"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 224, "longest_edge": 1333}, "crop_size": 224, "resample": 3}"#,
                "longest_edge",
            ),
        ] {
            let e = error(text);
            assert!(e.contains(names), "{text}: {e}");
            assert!(!e.contains('\n'), "{text}: {e}");
        }
    }
}
