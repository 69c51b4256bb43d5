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
//!
//! Every value is held to the limits the flags are: a side (`size`,
//! `crop_size`, `input_size`, and the resize `crop_pct` makes of a crop)
//! within 1..=[`MAX_SIDE`] pixels, a `crop_pct` a number in (0, 1], a
//! mean finite and a std finite and positive, each channel's. A statistic
//! is three numbers, or one number that every upstream here broadcasts to
//! the three channels; a one-element list only where the upstream
//! broadcasts it too (timm's and open_clip's torchvision `Normalize`; a
//! transformers processor raises on it). timm and open_clip read a falsy
//! `mean`, `std` or `crop_pct` (`0`, `[]`) as not given and take their
//! default: such a value is refused rather than guessed at, and so is a
//! zero std, which would divide by zero.

use serde_json::Value;

use crate::preprocess::{
    CropRounding, MAX_SIDE, Normalize, PreprocessSpec, ResizeFilter, side_in_range,
};

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
    let n = v
        .as_u64()
        .ok_or_else(|| format!("{what}: {v} is not a size in pixels"))?;
    side_in_range(what, n)
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

/// Which statistic a value is: a std must be positive as well as finite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Statistic {
    Mean,
    Std,
}

/// A per-channel mean or std (`what`): three numbers, or one number
/// broadcast to the three channels (`torch.tensor(x)` in timm's
/// `Normalize`, `(x,) * 3` in open_clip's, a scalar in transformers'
/// `normalize`); `[x]` too where `one_element_list` (torchvision's
/// `Normalize` broadcasts it, transformers raises). Each value finite, a
/// std's positive, on the f32 the engines use.
fn statistic(
    v: &Value,
    what: &str,
    kind: Statistic,
    one_element_list: bool,
) -> Result<[f32; 3], String> {
    let three = |r: &Value, g: &Value, b: &Value| Some([r.as_f64()?, g.as_f64()?, b.as_f64()?]);
    let numbers = match v {
        Value::Number(n) => n.as_f64().map(|x| [x; 3]),
        Value::Array(a) => match a.as_slice() {
            [x] if one_element_list => x.as_f64().map(|x| [x; 3]),
            [r, g, b] => three(r, g, b),
            _ => None,
        },
        _ => None,
    };
    let values = numbers
        .ok_or_else(|| {
            format!(
                "{what} {v}: expected three numbers, R,G,B{}",
                if one_element_list {
                    ", or one for all three"
                } else {
                    " (or one number for all three)"
                }
            )
        })?
        .map(|x| x as f32);
    for x in values {
        let fine = match kind {
            Statistic::Mean => x.is_finite(),
            Statistic::Std => x.is_finite() && x > 0.0,
        };
        if !fine {
            let expected = match kind {
                Statistic::Mean => "a finite number",
                Statistic::Std => "a positive number (a std divides)",
            };
            return Err(format!("{what} {v}: {x} is not {expected}"));
        }
    }
    Ok(values)
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
    // ConvNeXt's processor reads crop_pct; the others pass it over.
    let convnext_crop =
        class.starts_with("ConvNext") || class.is_empty() && !flag("do_center_crop", false);
    let pct = if convnext_crop { crop_pct(c)? } else { None };
    let (resize_shorter, square, crop) = match (pct, resize) {
        // ConvNeXt's processor: its own crop inside the resize,
        // `int(shortest_edge / crop_pct)` below 384.
        (Some(pct), Resize::Shorter(s)) => {
            check_crop_pct(pct)?;
            if s < 384 {
                (resize_of_crop(s, pct)?, false, s)
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
        let stat = |key: &str, kind| {
            let v = c.get(key).ok_or_else(|| format!("no {key}"))?;
            statistic(v, key, kind, false)
        };
        (
            stat("image_mean", Statistic::Mean)?,
            stat("image_std", Statistic::Std)?,
        )
    } else {
        ([0.0; 3], [1.0; 3])
    };
    // `(x·f - m) / s` is `(x - m/f) / (s/f)` on the loader's 0..255.
    let on_255 = |v: [f32; 3]| v.map(|x| (f64::from(x) / rescale) as f32);
    let normalize = Normalize {
        mean: on_255(mean),
        std: on_255(std),
    };
    Ok(PreprocessSpec {
        resize_shorter,
        square,
        crop,
        crop_rounding: CropRounding::Floor,
        filter,
        normalize: in_f32_range(
            normalize,
            &format!("rescale_factor {}", Value::from(rescale)),
        )?,
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
    if h != w {
        return Err(format!(
            "input_size {input} is not square: the loader makes square inputs only"
        ));
    }
    let size = side_in_range("input_size", h).map_err(|e| format!("{e} (of {input})"))?;
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
    let pct = crop_pct(cfg)?.unwrap_or(0.875);
    check_crop_pct(pct)?;
    // timm: `math.floor(img_size / crop_pct)`.
    let scale = resize_of_crop(size, pct)?;
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
    // timm's `pretrained_cfg.get(key)` (and open_clip's `mean or
    // default`): left out or null is the default.
    let stats = |key: &str, kind, default: [f32; 3]| -> Result<[f32; 3], String> {
        let values = match cfg.get(key) {
            None | Some(Value::Null) => default,
            Some(v) if falsy(v) => {
                return Err(format!(
                    "{key} {v}: the upstream reads it as not given (its default statistics); \
                     leave it out, or give three numbers"
                ));
            }
            Some(v) => statistic(v, key, kind, true)?,
        };
        Ok(values.map(|x| x * 255.0))
    };
    let normalize = Normalize {
        mean: stats("mean", Statistic::Mean, [0.485, 0.456, 0.406])?,
        std: stats("std", Statistic::Std, [0.229, 0.224, 0.225])?,
    };
    Ok(PreprocessSpec {
        resize_shorter: scale,
        square,
        crop: size,
        crop_rounding: CropRounding::HalfEven,
        filter,
        normalize: in_f32_range(normalize, "mean and std")?,
        ..PreprocessSpec::IMAGENET
    })
}

/// `crop_pct`, `None` where left out or null (the upstream's default).
fn crop_pct(cfg: &Value) -> Result<Option<f64>, String> {
    match cfg.get("crop_pct") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("crop_pct {v} is not a number")),
    }
}

fn check_crop_pct(pct: f64) -> Result<(), String> {
    if pct > 0.0 && pct <= 1.0 {
        Ok(())
    } else {
        Err(format!("crop_pct {} is not in (0, 1]", Value::from(pct)))
    }
}

/// The shorter side a `crop` resizes to at `pct` (`floor(crop / pct)`,
/// which Python's `int` and `math.floor` both are on a positive number),
/// held to the limit `--resize` is.
fn resize_of_crop(crop: u32, pct: f64) -> Result<u32, String> {
    let resize = (f64::from(crop) / pct).floor();
    if resize > f64::from(MAX_SIDE) {
        let shown = if resize < 1e12 {
            format!("{resize}")
        } else {
            format!("{resize:e}")
        };
        return Err(format!(
            "crop_pct {}: a {crop} crop resizes the shorter side to {shown}, past \
             {MAX_SIDE} pixels",
            Value::from(pct)
        ));
    }
    // Within 1..=MAX_SIDE: crop >= 1 and pct <= 1.
    Ok(resize as u32)
}

/// Python's truthiness of a JSON value: what `x or default` passes over.
fn falsy(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// `normalize` on the loader's 0..255 pixels, or why a file's statistics
/// over its scale (`what`) leave f32's range there.
fn in_f32_range(normalize: Normalize, what: &str) -> Result<Normalize, String> {
    let finite = normalize
        .mean
        .iter()
        .chain(&normalize.std)
        .all(|x| x.is_finite());
    if finite && normalize.std.iter().all(|&s| s > 0.0) {
        Ok(normalize)
    } else {
        Err(format!(
            "{what}: the mean {:?} and std {:?} on 0..255 pixels are out of f32's range",
            normalize.mean, normalize.std
        ))
    }
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

    /// A valid config of each kind, each field's bad values laid over it:
    /// every one is refused in one line naming the field, as the flags'
    /// limits refuse theirs (a side past `MAX_SIDE`, a statistic that is
    /// not three numbers, a zero std, a `crop_pct` whose resize is past
    /// the limit).
    #[test]
    fn each_fields_values_past_the_flags_limits_are_refused() {
        let clip = r#"{"image_processor_type": "CLIPImageProcessor",
            "size": {"shortest_edge": 224}, "do_center_crop": true,
            "crop_size": {"height": 224, "width": 224}, "resample": 3,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}"#;
        let vit = r#"{"image_processor_type": "ViTImageProcessor",
            "size": {"height": 224, "width": 224}, "resample": 2,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}"#;
        let convnext = r#"{"image_processor_type": "ConvNextImageProcessor",
            "size": {"shortest_edge": 224}, "crop_pct": 0.875, "resample": 3,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}"#;
        let timm = r#"{"pretrained_cfg": {"input_size": [3, 224, 224], "crop_pct": 0.9,
            "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}}"#;
        let past = format!("expected 1..={MAX_SIDE} pixels");
        let cases: &[(&str, &str, &str, &str)] = &[
            (
                clip,
                "/size/shortest_edge",
                "30000",
                "size.shortest_edge 30000",
            ),
            (
                clip,
                "/crop_size",
                r#"{"height": 30000, "width": 30000}"#,
                "crop_size.height 30000",
            ),
            (clip, "/crop_size", "30000", "crop_size 30000"),
            (
                vit,
                "/size",
                r#"{"height": 8193, "width": 8193}"#,
                "size.height 8193",
            ),
            (
                clip,
                "/image_mean",
                r#"[0.5, "x", 0.5, 0.5]"#,
                "image_mean [0.5,\"x\",0.5,0.5]: expected three numbers",
            ),
            (
                clip,
                "/image_mean",
                r#"[0.5, "x", 0.5]"#,
                "image_mean [0.5,\"x\",0.5]: expected three numbers",
            ),
            (
                clip,
                "/image_mean",
                "[0.5, 0.5]",
                "image_mean [0.5,0.5]: expected three numbers",
            ),
            // transformers' normalize raises on a one-element list.
            (
                clip,
                "/image_std",
                "[0.5]",
                "image_std [0.5]: expected three numbers",
            ),
            (
                clip,
                "/image_std",
                "[0.5, 0, 0.5]",
                "image_std [0.5,0,0.5]: 0 is not a positive number",
            ),
            (
                clip,
                "/image_std",
                "0",
                "image_std 0: 0 is not a positive number",
            ),
            (
                clip,
                "/image_std",
                "[0.5, -0.5, 0.5]",
                "-0.5 is not a positive number",
            ),
            // Past f32's range, or under it: infinite, or a zero std.
            (
                clip,
                "/image_mean",
                "[1e39, 0.5, 0.5]",
                "inf is not a finite number",
            ),
            (
                clip,
                "/image_std",
                "[1e-50, 0.5, 0.5]",
                "0 is not a positive number",
            ),
            (
                clip,
                "/rescale_factor",
                "1e-300",
                "rescale_factor 1e-300: the mean",
            ),
            (
                convnext,
                "/crop_pct",
                "0.0078125",
                "crop_pct 0.0078125: a 224 crop resizes the shorter side to 28672, past 8192",
            ),
            (
                convnext,
                "/crop_pct",
                r#""0.875""#,
                "crop_pct \"0.875\" is not a number",
            ),
            (
                timm,
                "/pretrained_cfg/input_size",
                "[3, 30000, 30000]",
                "input_size 30000",
            ),
            (
                timm,
                "/pretrained_cfg/crop_pct",
                "0.001",
                "crop_pct 0.001: a 224 crop resizes",
            ),
            (
                timm,
                "/pretrained_cfg/crop_pct",
                "1e-300",
                "crop_pct 1e-300: a 224 crop resizes",
            ),
            (
                timm,
                "/pretrained_cfg/crop_pct",
                r#""0.9""#,
                "crop_pct \"0.9\" is not a number",
            ),
            (
                timm,
                "/pretrained_cfg/mean",
                r#"[0.5, "x", 0.5, 0.5]"#,
                "mean [0.5,\"x\",0.5,0.5]: expected three numbers",
            ),
            (
                timm,
                "/pretrained_cfg/mean",
                "[0.5, 0.5]",
                "mean [0.5,0.5]: expected three numbers",
            ),
            (
                timm,
                "/pretrained_cfg/std",
                "[0.5, 0, 0.5]",
                "std [0.5,0,0.5]: 0 is not a positive number",
            ),
            (
                timm,
                "/pretrained_cfg/std",
                "[1e39]",
                "std [1e+39]: inf is not a positive number",
            ),
            (
                timm,
                "/pretrained_cfg/mean",
                "[1e38, 0, 0]",
                "mean and std: the mean",
            ),
            // timm reads a falsy statistic as not given: refused, not guessed.
            (
                timm,
                "/pretrained_cfg/std",
                "0",
                "std 0: the upstream reads it as not given",
            ),
            (
                timm,
                "/pretrained_cfg/mean",
                "[]",
                "mean []: the upstream reads it as not given",
            ),
        ];
        for &(base, field, value, says) in cases {
            let mut json: Value = serde_json::from_str(base).expect("a valid base");
            let bad: Value = serde_json::from_str(value).expect("a JSON value");
            let (parent, key) = field.rsplit_once('/').expect("a JSON pointer");
            json.pointer_mut(parent)
                .and_then(Value::as_object_mut)
                .expect("the field's object is in the base")
                .insert(key.to_owned(), bad);
            let text = json.to_string();
            spec_from_config(base).expect("the base is valid");
            let e = error(&text);
            assert!(e.contains(says), "{field} {value}: {e}");
            if says.contains(" 30000") || says.contains(" 8193") {
                assert!(e.contains(&past), "{field} {value}: {e}");
            }
            assert!(!e.contains('\n'), "{field} {value}: {e}");
        }
    }

    /// What every upstream broadcasts is taken as it does: one number for
    /// all three channels, `[x]` where torchvision's `Normalize` gets it
    /// (timm); a null statistic is timm's default; the largest side the
    /// flags allow is allowed.
    #[test]
    fn statistics_broadcast_as_their_upstream_does() {
        let hf = spec(
            r#"{"size": {"height": 224, "width": 224}, "resample": 2,
                "image_mean": 0.5, "image_std": 0.25}"#,
        );
        assert_eq!(hf.normalize.mean, [127.5; 3]);
        assert_eq!(hf.normalize.std, [63.75; 3]);
        let timm = spec(
            r#"{"pretrained_cfg": {"input_size": [3, 224, 224], "mean": [0.5],
                "std": 0.25}}"#,
        );
        assert_eq!(timm.normalize.mean, [0.5 * 255.0; 3]);
        assert_eq!(timm.normalize.std, [0.25 * 255.0; 3]);
        let defaults = spec(
            r#"{"pretrained_cfg": {"input_size": [3, 224, 224], "mean": null,
                "std": null, "crop_pct": null}}"#,
        );
        assert_eq!(defaults, spec(r#"{"input_size": [3, 224, 224]}"#));
        let largest = spec(&format!(
            r#"{{"pretrained_cfg": {{"input_size": [3, {MAX_SIDE}, {MAX_SIDE}],
                "crop_pct": 1.0}}}}"#
        ));
        assert_eq!((largest.resize_shorter, largest.crop), (MAX_SIDE, MAX_SIDE));
    }
}
