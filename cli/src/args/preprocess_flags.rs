//! The flags that describe preprocessing without a config file
//! (`--resize`, `--crop`, `--interpolation`, `--mean`, `--std`,
//! `--channels`), shared by `infer`, `bench` and `preprocess`.

use clap::{Args, ValueEnum};

/// `R,G,B`: three numbers, as `--mean` and `--std` take them.
fn three_numbers(text: &str) -> Result<[f32; 3], String> {
    let values: Vec<f32> = text
        .split(',')
        .map(|v| {
            v.trim()
                .parse::<f32>()
                .map_err(|_| format!("{v:?} is not a number"))
        })
        .collect::<Result<_, _>>()?;
    <[f32; 3]>::try_from(values.as_slice())
        .map_err(|_| format!("expected three numbers, R,G,B; got {}", values.len()))
}

/// A resize filter, as `--interpolation` names it (Pillow's filters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum InterpolationArg {
    /// Pillow's `NEAREST`.
    Nearest,
    /// Pillow's `BILINEAR` (torchvision's default).
    Bilinear,
    /// Pillow's `BICUBIC`.
    Bicubic,
    /// Pillow's `LANCZOS`.
    Lanczos,
    /// Pillow's `BOX`.
    Box,
}

/// RGB or BGR input channels (`--channels`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ChannelsArg {
    /// Red, green, blue (every built-in model).
    Rgb,
    /// Blue, green, red (ONNX models: their planes reversed; --mean and
    /// --std stay R,G,B).
    Bgr,
}

/// A preprocessing given as flags (#41), laid over the model's or the
/// config file's: each one left out keeps theirs.
#[derive(Debug, Args, Default)]
pub(crate) struct PreprocessFlagArgs {
    /// The model's input side: the centre crop, and the shorter side of
    /// the resize unless --resize gives another.
    #[arg(long, value_name = "PIXELS")]
    pub(crate) size: Option<u32>,
    /// The shorter side after the resize (aspect kept).
    #[arg(long, value_name = "PIXELS")]
    pub(crate) resize: Option<u32>,
    /// The square centre crop's side.
    #[arg(long, value_name = "PIXELS")]
    pub(crate) crop: Option<u32>,
    /// The resize's filter, as Pillow computes it.
    #[arg(long, value_enum, value_name = "FILTER")]
    pub(crate) interpolation: Option<InterpolationArg>,
    /// Per-channel mean subtracted, R,G,B, in the units of --scale (with
    /// --std).
    #[arg(long, value_name = "R,G,B", value_parser = three_numbers)]
    pub(crate) mean: Option<[f32; 3]>,
    /// Per-channel divisor, R,G,B, in the units of --scale (with --mean).
    #[arg(long, value_name = "R,G,B", value_parser = three_numbers)]
    pub(crate) std: Option<[f32; 3]>,
    /// 1: pixels divided by 255 before --mean and --std (the default);
    /// 255: as they are (without --mean/--std, fed as 0..255).
    #[arg(long, value_name = "1|255")]
    pub(crate) scale: Option<u32>,
    /// The model's channel order.
    #[arg(long, value_enum, value_name = "rgb|bgr")]
    pub(crate) channels: Option<ChannelsArg>,
}

impl PreprocessFlagArgs {
    /// The flags as `pipeline_core::spec_from_flags` takes them.
    pub(crate) fn flags(&self) -> pipeline_core::PreprocessFlags {
        use pipeline_core::ResizeFilter as F;
        pipeline_core::PreprocessFlags {
            size: self.size,
            resize: self.resize,
            crop: self.crop,
            interpolation: self.interpolation.map(|i| match i {
                InterpolationArg::Nearest => F::Nearest,
                InterpolationArg::Bilinear => F::Bilinear,
                InterpolationArg::Bicubic => F::Bicubic,
                InterpolationArg::Lanczos => F::Lanczos3,
                InterpolationArg::Box => F::Box,
            }),
            mean: self.mean,
            std: self.std,
            scale: self.scale,
            bgr: self.channels == Some(ChannelsArg::Bgr),
        }
    }
}
