//! Pillow's `convert("RGB")` of what the decoders give, where the `image`
//! crate's own conversion is not Pillow's: 8-bit CMYK TIFFs (Pillow's
//! `cmyk2rgb`), 16-bit samples (the high byte of RGB, RGBA and gray+alpha,
//! as Pillow's `;16B` raw modes open them) and 16-bit gray (`I;16`,
//! clipped to 255 by `I16_RGB`, with or without a `tRNS` chunk).

use std::io::Cursor;

use image::DynamicImage;
use pipeline_core::DecodeLimits;

use super::RgbImage;

/// A chunky 8-bit CMYK TIFF as Pillow converts it, `cmyk2rgb`:
/// `255 - k - c·(255 - k)/255` with Pillow's rounded division, where the
/// `image` crate's float formula truncates differently. `None` for any
/// other TIFF, or one the `tiff` crate cannot read this way: the `image`
/// crate then decodes it or says what is wrong.
pub(super) fn decode_tiff_cmyk(bytes: &[u8], limits: &DecodeLimits) -> Option<RgbImage> {
    use tiff::decoder::{Decoder, DecodingResult, Limits};
    let mut decoder = Decoder::new(Cursor::new(bytes)).ok()?;
    if decoder.colortype().ok()? != tiff::ColorType::CMYK(8)
        || decoder
            .get_tag_u32(tiff::tags::Tag::PlanarConfiguration)
            .is_ok_and(|planar| planar != 1)
    {
        return None;
    }
    let mut tiff_limits = Limits::default();
    tiff_limits.decoding_buffer_size =
        usize::try_from(limits.max_alloc_bytes).unwrap_or(usize::MAX);
    let mut decoder = decoder.with_limits(tiff_limits);
    let (width, height) = decoder.dimensions().ok()?;
    let DecodingResult::U8(cmyk) = decoder.read_image().ok()? else {
        return None;
    };
    if cmyk.len() != width as usize * height as usize * 4 {
        return None;
    }
    let muldiv255 = |a: u8, b: u8| {
        let t = u32::from(a) * u32::from(b) + 128;
        ((t >> 8) + t) >> 8
    };
    let pixels = cmyk
        .chunks_exact(4)
        .flat_map(|p| {
            let nk = 255 - p[3];
            [p[0], p[1], p[2]].map(|c| (u32::from(nk) - muldiv255(c, nk)) as u8)
        })
        .collect();
    Some(RgbImage {
        width,
        height,
        pixels,
    })
}

/// Whether a PNG's header says 16-bit grayscale (colour type 0), which
/// Pillow opens as `I;16` with or without a `tRNS` chunk, where the `image`
/// crate expands one with `tRNS` to gray+alpha.
pub(super) fn png_is_gray16(bytes: &[u8]) -> bool {
    bytes.get(12..16) == Some(b"IHDR") && bytes.get(24..26) == Some(&[16, 0])
}

/// Any other decoded image as Pillow's `convert("RGB")` makes it (see the
/// module doc for the 16-bit modes); `gray16`: the file is 16-bit gray,
/// so a gray+alpha image is its `tRNS` expanded, and clips as `I;16`.
pub(super) fn into_rgb(image: DynamicImage, gray16: bool) -> RgbImage {
    let (width, height) = (image.width(), image.height());
    let high = |v: u16| (v >> 8) as u8;
    let clip = |v: u16| v.min(255) as u8;
    let pixels = match image {
        DynamicImage::ImageLuma16(gray) => gray
            .into_raw()
            .into_iter()
            .flat_map(|v| [clip(v); 3])
            .collect(),
        DynamicImage::ImageLumaA16(gray) if gray16 => gray
            .into_raw()
            .chunks_exact(2)
            .flat_map(|p| [clip(p[0]); 3])
            .collect(),
        DynamicImage::ImageLumaA16(gray) => gray
            .into_raw()
            .chunks_exact(2)
            .flat_map(|p| [high(p[0]); 3])
            .collect(),
        DynamicImage::ImageRgb16(rgb) => rgb.into_raw().into_iter().map(high).collect(),
        DynamicImage::ImageRgba16(rgba) => rgba
            .into_raw()
            .chunks_exact(4)
            .flat_map(|p| [high(p[0]), high(p[1]), high(p[2])])
            .collect(),
        other => other.into_rgb8().into_raw(),
    };
    RgbImage {
        width,
        height,
        pixels,
    }
}
