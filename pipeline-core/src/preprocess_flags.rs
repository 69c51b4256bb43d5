//! A user's preprocessing given as flags (#41 item 4): `--size`,
//! `--resize`, `--crop`, `--interpolation`, `--mean`, `--std`, `--scale`
//! and `--channels`, each laid over a base (a model's own transform, or a
//! config file's), into the [`PreprocessSpec`] the exact loader runs, so
//! what the model sees stays byte-identical to Pillow's resize and crop.
//! BGR channels (which only an ONNX model's engine feeds, its planes
//! reversed), or flags that contradict each other, are one line.
//!
//! Decisions where the issue is silent:
//! - `--size N` is the model's input side: the crop, and the resize's
//!   shorter side unless `--resize` gives another (a Hugging Face
//!   processor with `shortest_edge` equal to its crop does the same); a
//!   `--crop` larger than the base's resize grows the resize to it;
//! - `--mean` and `--std` go together (one without the other would
//!   silently pair with another model's statistics); in `0..1` units under
//!   `--scale 1` (the default: pixels divided by 255 first), in pixel
//!   units under `--scale 255`;
//! - `--scale 255` without `--mean`/`--std` feeds the pixels as they are
//!   (`0..255`); `--scale 1` without them keeps the base's statistics;
//! - crops round an odd margin as torchvision does (the base's rounding
//!   is kept).

use crate::preprocess::{Normalize, PreprocessSpec, ResizeFilter, side_in_range};

/// The flags given; `None` where a flag was left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PreprocessFlags {
    /// `--size N`: the model's input side.
    pub size: Option<u32>,
    /// `--resize N`: the shorter side after the resize.
    pub resize: Option<u32>,
    /// `--crop N`: the square centre crop's side.
    pub crop: Option<u32>,
    /// `--interpolation`: the resize's filter.
    pub interpolation: Option<ResizeFilter>,
    /// `--mean R,G,B`.
    pub mean: Option<[f32; 3]>,
    /// `--std R,G,B`.
    pub std: Option<[f32; 3]>,
    /// `--scale 1|255`: what one pixel step is before `--mean`/`--std`.
    pub scale: Option<u32>,
    /// `--channels bgr`.
    pub bgr: bool,
}

impl PreprocessFlags {
    /// Whether any flag was given.
    pub fn any(&self) -> bool {
        *self != Self::default()
    }
}

/// `flags` laid over `base`; or why not, in one line.
pub fn spec_from_flags(
    flags: &PreprocessFlags,
    base: PreprocessSpec,
) -> Result<PreprocessSpec, String> {
    if flags.bgr {
        return Err(
            "--channels bgr: the built-in models take RGB (an ONNX model that takes BGR \
             gets its planes reversed: --model FILE.onnx --channels bgr)"
                .to_owned(),
        );
    }
    for (flag, value) in [
        ("--size", flags.size),
        ("--resize", flags.resize),
        ("--crop", flags.crop),
    ] {
        if let Some(v) = value {
            side_in_range(flag, u64::from(v))?;
        }
    }
    let crop = flags.crop.or(flags.size).unwrap_or(base.crop);
    let resize = flags
        .resize
        .or(flags.size.filter(|_| flags.crop.is_none()))
        .or(flags.crop.filter(|&c| c > base.resize_shorter))
        .unwrap_or(base.resize_shorter);
    if resize < crop {
        return Err(format!(
            "--resize {resize} is smaller than the {crop}-pixel crop: the crop would not fit \
             (give --resize at least {crop})"
        ));
    }
    let scale = match flags.scale {
        None | Some(1) => 1.0,
        Some(255) => 255.0,
        Some(s) => return Err(format!("--scale {s}: expected 1 or 255")),
    };
    let normalize = match (flags.mean, flags.std) {
        (Some(mean), Some(std)) => {
            if let Some(bad) = std.iter().find(|&&s| !(s.is_finite() && s > 0.0)) {
                return Err(format!("--std: {bad} is not a positive number"));
            }
            if let Some(bad) = mean.iter().find(|m| !m.is_finite()) {
                return Err(format!("--mean: {bad} is not a number"));
            }
            // In pixel units, as the engines take them.
            let pixel = 255.0 / scale;
            Normalize {
                mean: mean.map(|m| m * pixel),
                std: std.map(|s| s * pixel),
            }
        }
        (None, None) if scale == 255.0 => Normalize {
            mean: [0.0; 3],
            std: [1.0; 3],
        },
        (None, None) => base.normalize,
        (Some(_), None) => return Err("--mean needs --std too".to_owned()),
        (None, Some(_)) => return Err("--std needs --mean too".to_owned()),
    };
    Ok(PreprocessSpec {
        resize_shorter: resize,
        square: base.square && flags.resize.is_none() && flags.size.is_none(),
        crop,
        filter: flags.interpolation.unwrap_or(base.filter),
        normalize,
        ..base
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: PreprocessSpec = PreprocessSpec::IMAGENET;

    fn flags() -> PreprocessFlags {
        PreprocessFlags::default()
    }

    #[test]
    fn no_flags_keep_the_base() {
        assert!(!flags().any());
        assert_eq!(spec_from_flags(&flags(), BASE), Ok(BASE));
    }

    /// Every combination of `--size`, `--resize` and `--crop` (each absent
    /// or given) gives the crop and resize the decisions above say, or
    /// the one refusal when the crop would not fit.
    #[test]
    fn size_resize_and_crop_over_every_combination() {
        let values = [None, Some(160), Some(224), Some(300)];
        for size in values {
            for resize in values {
                for crop in values {
                    let f = PreprocessFlags {
                        size,
                        resize,
                        crop,
                        ..flags()
                    };
                    let want_crop = crop.or(size).unwrap_or(BASE.crop);
                    let want_resize = resize
                        .or(if crop.is_none() { size } else { None })
                        .or(crop.filter(|&c| c > BASE.resize_shorter))
                        .unwrap_or(BASE.resize_shorter);
                    let got = spec_from_flags(&f, BASE);
                    if want_resize < want_crop {
                        let e = got.expect_err("a crop larger than the resize");
                        assert!(e.contains("smaller than the"), "{f:?}: {e}");
                        assert!(!e.contains('\n'));
                    } else {
                        let spec = got.unwrap_or_else(|e| panic!("{f:?}: {e}"));
                        assert_eq!(
                            (spec.resize_shorter, spec.crop),
                            (want_resize, want_crop),
                            "{f:?}"
                        );
                        assert_eq!(spec.filter, BASE.filter);
                        assert_eq!(spec.normalize, BASE.normalize);
                    }
                }
            }
        }
    }

    #[test]
    fn statistics_go_in_the_scales_units() {
        let clip = [0.481_454_66, 0.457_827_5, 0.408_210_73];
        let clip_std = [0.268_629_54, 0.261_302_6, 0.275_777_1];
        let f = PreprocessFlags {
            mean: Some(clip),
            std: Some(clip_std),
            ..flags()
        };
        let spec = spec_from_flags(&f, BASE).expect("clip's statistics");
        assert_eq!(spec.normalize.mean, clip.map(|m| m * 255.0));
        assert_eq!(spec.normalize.std, clip_std.map(|s| s * 255.0));
        // The same statistics as the built-in CLIP transform's.
        let builtin = Normalize::clip();
        for c in 0..3 {
            assert!((spec.normalize.mean[c] - builtin.mean[c]).abs() < 1e-3);
            assert!((spec.normalize.std[c] - builtin.std[c]).abs() < 1e-3);
        }
        let pixels = PreprocessFlags {
            mean: Some([127.5; 3]),
            std: Some([127.5; 3]),
            scale: Some(255),
            ..flags()
        };
        let spec = spec_from_flags(&pixels, BASE).expect("pixel units");
        assert_eq!(spec.normalize.mean, [127.5; 3]);
        let raw = PreprocessFlags {
            scale: Some(255),
            ..flags()
        };
        let spec = spec_from_flags(&raw, BASE).expect("raw pixels");
        assert_eq!(
            (spec.normalize.mean, spec.normalize.std),
            ([0.0; 3], [1.0; 3])
        );
        let scaled = PreprocessFlags {
            scale: Some(1),
            ..flags()
        };
        assert_eq!(spec_from_flags(&scaled, BASE), Ok(BASE));
    }

    #[test]
    fn what_cannot_be_done_is_one_line() {
        let refused = [
            (
                PreprocessFlags {
                    bgr: true,
                    ..flags()
                },
                "--channels bgr",
            ),
            (
                PreprocessFlags {
                    mean: Some([0.5; 3]),
                    ..flags()
                },
                "--mean needs --std too",
            ),
            (
                PreprocessFlags {
                    std: Some([0.5; 3]),
                    ..flags()
                },
                "--std needs --mean too",
            ),
            (
                PreprocessFlags {
                    mean: Some([0.5; 3]),
                    std: Some([0.5, 0.0, 0.5]),
                    ..flags()
                },
                "--std: 0 is not a positive number",
            ),
            (
                PreprocessFlags {
                    scale: Some(100),
                    ..flags()
                },
                "--scale 100: expected 1 or 255",
            ),
            (
                PreprocessFlags {
                    size: Some(0),
                    ..flags()
                },
                "--size 0: expected 1..=8192 pixels",
            ),
            (
                PreprocessFlags {
                    crop: Some(crate::preprocess::MAX_SIDE + 1),
                    ..flags()
                },
                "--crop 8193: expected 1..=8192 pixels",
            ),
        ];
        for (f, says) in refused {
            let e = spec_from_flags(&f, BASE).expect_err("refused");
            assert!(e.starts_with(says), "{f:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn interpolation_and_a_squashing_base() {
        let squash = PreprocessSpec {
            square: true,
            resize_shorter: 224,
            ..BASE
        };
        let f = PreprocessFlags {
            interpolation: Some(ResizeFilter::Bicubic),
            ..flags()
        };
        let spec = spec_from_flags(&f, squash.clone()).expect("a filter");
        assert_eq!((spec.filter, spec.square), (ResizeFilter::Bicubic, true));
        // A resize given is the shorter side's: no longer squashed.
        let f = PreprocessFlags {
            resize: Some(256),
            ..flags()
        };
        assert!(!spec_from_flags(&f, squash).expect("resized").square);
    }
}
