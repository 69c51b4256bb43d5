//! How an image becomes a model input, and the limits that guard decoding.
//!
//! The default spec is torchvision's ImageNet eval transform on PIL images:
//! `Resize(256)` (shorter side to 256, longer side floored, Pillow's
//! antialiased bilinear) then `CenterCrop(224)`. Normalisation is not done by
//! the loader: it travels with each batch as data and the device applies it,
//! so only `u8` crosses the bus.

use serde::{Deserialize, Serialize};

/// Keys' cubic convolution kernel with `a = -0.5`: Pillow's `BICUBIC`
/// filter, and PyTorch's antialiased bicubic's (the model's position
/// embeddings resampled as transformers' DINOv2 with registers does).
pub fn keys_cubic(x: f64) -> f64 {
    let a = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * a
    } else {
        0.0
    }
}

/// The largest resize or crop side, in pixels, whoever gives it (`--size`,
/// `--resize`, `--crop`, or a model's config file): a batch holds
/// batch × 3 × crop² bytes, so a side far past any model's (a config's
/// `crop_size` of 30000 is 170 GB at a batch of 64) would abort the loader
/// on its first allocation instead of saying what is wrong.
pub const MAX_SIDE: u32 = 8192;

/// `value` as a resize or crop side, or why not in one line naming `what`
/// (a flag, or a config file's field) as `--size` and its kin say it.
pub(crate) fn side_in_range(what: &str, value: u64) -> Result<u32, String> {
    u32::try_from(value)
        .ok()
        .filter(|v| (1..=MAX_SIDE).contains(v))
        .ok_or_else(|| format!("{what} {value}: expected 1..={MAX_SIDE} pixels"))
}

/// The resampling filter of the resize, in Pillow's (convolution) sense:
/// the kernel is widened by the scale factor when downscaling (antialiased).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResizeFilter {
    /// Nearest neighbour (no filtering).
    Nearest,
    /// Triangle filter, Pillow's `BILINEAR` (torchvision's default).
    Bilinear,
    /// Keys cubic with a = -0.5, Pillow's `BICUBIC`.
    Bicubic,
    /// Lanczos with 3 lobes, Pillow's `LANCZOS`.
    Lanczos3,
    /// The mean of the pixels each output pixel covers, Pillow's `BOX`.
    Box,
}

/// Per-channel `(x - mean) / std`, on `u8`-scaled values (0..=255).
///
/// ImageNet's mean/std in torchvision are on 0..=1; here they are multiplied
/// by 255 so that one formula also covers EfficientNet-Lite's `(x-127)/128`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Normalize {
    /// Subtracted from each channel (R, G, B).
    pub mean: [f32; 3],
    /// Each channel is divided by this after subtracting the mean.
    pub std: [f32; 3],
}

impl Normalize {
    /// torchvision's ImageNet statistics.
    pub const fn imagenet() -> Self {
        Self {
            mean: [0.485 * 255.0, 0.456 * 255.0, 0.406 * 255.0],
            std: [0.229 * 255.0, 0.224 * 255.0, 0.225 * 255.0],
        }
    }

    /// OpenAI CLIP's statistics (open_clip's `OPENAI_DATASET_MEAN/STD`).
    pub const fn clip() -> Self {
        Self {
            mean: [
                0.481_454_66 * 255.0,
                0.457_827_5 * 255.0,
                0.408_210_73 * 255.0,
            ],
            std: [
                0.268_629_54 * 255.0,
                0.261_302_6 * 255.0,
                0.275_777_1 * 255.0,
            ],
        }
    }

    /// `(x/255 - 0.5) / 0.5`, SigLIP's image processor.
    pub const fn half() -> Self {
        Self {
            mean: [127.5; 3],
            std: [127.5; 3],
        }
    }

    /// EfficientNet-Lite's `(x - 127) / 128`.
    pub const fn efficientnet_lite() -> Self {
        Self {
            mean: [127.0; 3],
            std: [128.0; 3],
        }
    }
}

/// Everything between the decoded image and the `u8` crop the device gets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreprocessSpec {
    /// Target length of the shorter side after the resize (torchvision `Resize(n)`).
    pub resize_shorter: u32,
    /// Resize both sides to `resize_shorter`, ignoring the aspect ratio
    /// (SigLIP's processor), instead of the shorter side only.
    #[serde(default, skip_serializing_if = "is_false")]
    pub square: bool,
    /// Side of the square centre crop (torchvision `CenterCrop(n)`).
    pub crop: u32,
    /// How the crop's offset rounds an odd margin: as the checkpoint's
    /// upstream preprocesses (torchvision, or a Hugging Face processor).
    #[serde(default, skip_serializing_if = "CropRounding::is_torchvision")]
    pub crop_rounding: CropRounding,
    /// Resampling filter of the resize.
    pub filter: ResizeFilter,
    /// Applied on the device, carried with each batch.
    pub normalize: Normalize,
    /// Opt-in fast mode: decode big JPEGs at a reduced DCT scale (1/2, 1/4,
    /// 1/8) that still covers the resize target, as Pillow's `draft` does.
    /// Off by default because it changes pixels slightly versus torchvision.
    pub jpeg_draft: bool,
    /// Opt-in fast mode: JPEGs through zune-jpeg and resizes through
    /// `fast_image_resize`'s SIMD kernels, within a few levels of the exact
    /// default (which reproduces Pillow's decode and resize to the byte).
    #[serde(default, skip_serializing_if = "is_false")]
    pub fast: bool,
}

impl PreprocessSpec {
    /// torchvision's ImageNet evaluation transform: resize the shorter side
    /// to 256 (bilinear), centre crop 224, ImageNet statistics.
    pub const IMAGENET: Self = Self {
        resize_shorter: 256,
        square: false,
        crop: 224,
        crop_rounding: CropRounding::HalfEven,
        filter: ResizeFilter::Bilinear,
        normalize: Normalize::imagenet(),
        jpeg_draft: false,
        fast: false,
    };
}

impl Default for PreprocessSpec {
    fn default() -> Self {
        Self::IMAGENET
    }
}

/// A preprocessing spec or limit that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    /// Crop larger than the resized shorter side would need padding.
    #[error("crop {crop} is larger than the resize target {resize}; use --crop <= --resize")]
    CropLargerThanResize {
        /// The crop side.
        crop: u32,
        /// The resize target.
        resize: u32,
    },
    /// Zero-sized output.
    #[error("resize and crop must be at least 1 pixel")]
    Empty,
    /// A std of zero (or not finite) would divide by zero on the device.
    #[error("normalisation std must be finite and non-zero, got {0:?}")]
    BadStd([f32; 3]),
    /// A side past [`MAX_SIDE`]: its batches would not fit in memory.
    #[error("resize {resize} and crop {crop}: each must be at most {MAX_SIDE} pixels")]
    TooLarge {
        /// The crop side.
        crop: u32,
        /// The resize target.
        resize: u32,
    },
}

impl PreprocessSpec {
    /// Checks that the spec can be applied to any image.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.resize_shorter == 0 || self.crop == 0 {
            return Err(SpecError::Empty);
        }
        // The planner refuses these in one line; this keeps a spec built
        // any other way from aborting a worker on its first batch.
        if self.resize_shorter > MAX_SIDE || self.crop > MAX_SIDE {
            return Err(SpecError::TooLarge {
                crop: self.crop,
                resize: self.resize_shorter,
            });
        }
        if self.crop > self.resize_shorter {
            return Err(SpecError::CropLargerThanResize {
                crop: self.crop,
                resize: self.resize_shorter,
            });
        }
        if self
            .normalize
            .std
            .iter()
            .any(|s| !s.is_finite() || *s == 0.0)
        {
            return Err(SpecError::BadStd(self.normalize.std));
        }
        Ok(())
    }

    /// Size `(width, height)` of the resized image for a `width × height`
    /// source, as torchvision computes it: the shorter side becomes
    /// `resize_shorter`, the longer side `floor(resize_shorter * long / short)`.
    pub fn resized_size(&self, width: u32, height: u32) -> (u32, u32) {
        let target = u64::from(self.resize_shorter);
        if self.square {
            return (clamp_u32(target), clamp_u32(target));
        }
        let (w, h) = (u64::from(width.max(1)), u64::from(height.max(1)));
        // torchvision: int(size * long / short) in floating point; with
        // integers floor(size * long / short) is the same for these ranges.
        let (nw, nh) = if w <= h {
            (target, target * h / w)
        } else {
            (target * w / h, target)
        };
        (clamp_u32(nw), clamp_u32(nh))
    }

    /// Top-left corner `(x, y)` of the centre crop in a `width × height`
    /// resized image: half the margin, rounded as [`CropRounding`] says.
    pub fn crop_origin(&self, width: u32, height: u32) -> (u32, u32) {
        let half = |margin: u32| match self.crop_rounding {
            CropRounding::HalfEven => round_half_even_half(margin),
            CropRounding::Floor => margin / 2,
        };
        (
            half(width.saturating_sub(self.crop)),
            half(height.saturating_sub(self.crop)),
        )
    }
}

/// How a centre crop's offset rounds half an odd margin. The two upstreams
/// agree on everything else a crop depends on: the resized size (the
/// shorter side to `n`, the longer `int(n * long / short)`), Pillow's
/// resampling, and (never reached here, as the resize is at least the
/// crop) padding an image smaller than the crop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CropRounding {
    /// torchvision's `CenterCrop`: `round(margin / 2)`, half to even. For
    /// torchvision, open_clip and torch-hub checkpoints.
    #[default]
    HalfEven,
    /// Hugging Face image processors' `center_crop`: `margin // 2`. For
    /// checkpoints in Hugging Face layouts (`CLIPModel`, `SiglipModel`,
    /// `Dinov2Model`): a 455-wide resize with a 224 crop starts at 115,
    /// where torchvision starts at 116.
    Floor,
}

impl CropRounding {
    fn is_torchvision(&self) -> bool {
        *self == CropRounding::HalfEven
    }
}

fn is_false(b: &bool) -> bool {
    !b
}

fn clamp_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX).max(1)
}

/// `round(n / 2)` with ties to even, as Python's `round` does.
fn round_half_even_half(n: u32) -> u32 {
    let half = n / 2;
    if n % 2 == 1 && half % 2 == 1 {
        half + 1
    } else {
        half
    }
}

/// Decompression-bomb guards, checked from the header before any pixel is
/// decoded. The defaults follow Pillow's `MAX_IMAGE_PIXELS` (~89.5 MP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecodeLimits {
    /// Largest `width * height` accepted.
    pub max_pixels: u64,
    /// Largest single allocation the decoder may make, in bytes.
    pub max_alloc_bytes: u64,
    /// Largest file read into memory, in bytes.
    pub max_file_bytes: u64,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        Self {
            max_pixels: 89_478_485,
            max_alloc_bytes: 1 << 30,
            max_file_bytes: 512 << 20,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resized_size_floors_the_longer_side() {
        let spec = PreprocessSpec::default();
        assert_eq!(spec.resized_size(500, 375), (341, 256)); // 256*500/375 = 341.33
        assert_eq!(spec.resized_size(375, 500), (256, 341));
        assert_eq!(spec.resized_size(256, 256), (256, 256));
        assert_eq!(spec.resized_size(1, 1000), (256, 256_000));
        let square = PreprocessSpec {
            square: true,
            ..spec
        };
        assert_eq!(square.resized_size(500, 375), (256, 256));
    }

    #[test]
    fn crop_origin_rounds_half_to_even() {
        let spec = PreprocessSpec::default();
        // (341-224)/2 = 58.5 -> 58 ; (227-224)/2 = 1.5 -> 2 ; (225-224)/2 = 0.5 -> 0
        assert_eq!(spec.crop_origin(341, 256), (58, 16));
        assert_eq!(spec.crop_origin(227, 225), (2, 0));
        assert_eq!(spec.crop_origin(224, 224), (0, 0));
        // 231/2 = 115.5 -> 116
        assert_eq!(spec.crop_origin(455, 256), (116, 16));
    }

    #[test]
    fn hugging_face_crops_floor_the_margin() {
        let spec = PreprocessSpec {
            crop_rounding: CropRounding::Floor,
            ..PreprocessSpec::default()
        };
        assert_eq!(spec.crop_origin(455, 256), (115, 16));
        assert_eq!(spec.crop_origin(227, 225), (1, 0));
        // Where half-even rounds down too, the two agree.
        assert_eq!(spec.crop_origin(341, 256), (58, 16));
    }

    #[test]
    fn a_torchvision_spec_serialises_as_before_the_rounding_existed() {
        // Run identities written before `crop_rounding` still match.
        let json = serde_json::to_string(&PreprocessSpec::default()).expect("JSON");
        assert!(!json.contains("crop_rounding"), "{json}");
        let hf = PreprocessSpec {
            crop_rounding: CropRounding::Floor,
            ..PreprocessSpec::default()
        };
        let json = serde_json::to_string(&hf).expect("JSON");
        assert!(json.contains(r#""crop_rounding":"floor""#), "{json}");
        let back: PreprocessSpec = serde_json::from_str(&json).expect("read back");
        assert_eq!(back, hf);
    }

    #[test]
    fn validate_rejects_impossible_specs() {
        let mut spec = PreprocessSpec {
            crop: 300,
            ..PreprocessSpec::default()
        };
        assert!(matches!(
            spec.validate(),
            Err(SpecError::CropLargerThanResize { .. })
        ));
        spec.resize_shorter = MAX_SIDE + 1;
        assert!(matches!(spec.validate(), Err(SpecError::TooLarge { .. })));
        spec.resize_shorter = 256;
        spec.crop = 224;
        spec.normalize.std[1] = 0.0;
        assert!(matches!(spec.validate(), Err(SpecError::BadStd(_))));
        assert!(PreprocessSpec::default().validate().is_ok());
    }
}
