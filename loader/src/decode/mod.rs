//! Reading a file and decoding it to 8-bit RGB, with every failure mapped to
//! an item error kind and decompression bombs refused from the header.
//!
//! The format is sniffed from the bytes, not the extension (as Pillow does),
//! and any colour type becomes RGB the way PIL's `Image.open` +
//! `convert("RGB")` makes it, byte for byte: alpha is dropped, gray is
//! replicated, palettes are expanded, 8-bit chunky CMYK TIFFs go through
//! Pillow's `cmyk2rgb`. 16-bit samples are Pillow's too: RGB, RGBA and
//! gray+alpha open as 8-bit from each sample's high byte (Pillow's `;16B`
//! raw modes), and 16-bit gray, with or without a `tRNS` chunk, opens as
//! `I;16`, which `convert("RGB")` clips to 255 (`I16_RGB`). That loses
//! most of such an image, but it is what the model's upstream saw (#39);
//! `pipeline preprocess` shows it. Not yet Pillow's to the byte: CMYK
//! JPEGs and 16-bit, planar or extra-sample CMYK TIFFs, whose conversion
//! is the `image` crate's (within ±1 on the vectors).

use std::fs;
use std::io::{self, Cursor, Read};
use std::path::Path;

mod convert;

use convert::{decode_tiff_cmyk, into_rgb, png_is_gray16};

use image::{ImageError, ImageFormat, ImageReader, Limits};
use pipeline_core::{DecodeLimits, ItemError, ItemErrorKind, PreprocessSpec};

/// A decoded image: `width × height` interleaved RGB bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `width * height * 3` bytes, row-major RGB.
    pub pixels: Vec<u8>,
}

/// Reads and decodes `path` to RGB.
///
/// With `spec.jpeg_draft`, a JPEG much larger than the resize target is
/// decoded at a reduced DCT scale that still covers the target.
pub fn decode_rgb(
    path: &Path,
    spec: &PreprocessSpec,
    limits: &DecodeLimits,
) -> Result<RgbImage, ItemError> {
    let bytes = read_file(path, limits)?;
    decode_bytes(&bytes, spec, limits)
}

/// Decodes an in-memory file to RGB; see [`decode_rgb`].
pub(crate) fn decode_bytes(
    bytes: &[u8],
    spec: &PreprocessSpec,
    limits: &DecodeLimits,
) -> Result<RgbImage, ItemError> {
    decode_bytes_into(bytes, spec, limits, Vec::new())
}

/// [`decode_bytes`], decoding JPEGs into `spare`'s memory: a decoder
/// thread that hands back each image's pixels decodes the next one into
/// pages already mapped (a fresh 36 MB buffer per 12 MP photo cost 11% of
/// the time in the kernel zeroing pages).
pub(crate) fn decode_bytes_into(
    bytes: &[u8],
    spec: &PreprocessSpec,
    limits: &DecodeLimits,
    spare: Vec<u8>,
) -> Result<RgbImage, ItemError> {
    if bytes.is_empty() {
        return Err(ItemError::new(
            ItemErrorKind::Decode,
            "file is empty (0 bytes)",
        ));
    }
    let format = image::guess_format(bytes).map_err(|_| {
        ItemError::new(
            ItemErrorKind::Unsupported,
            "not a recognised image format (expected JPEG, PNG, WebP, BMP, GIF or TIFF)",
        )
    })?;
    if !matches!(
        format,
        ImageFormat::Jpeg
            | ImageFormat::Png
            | ImageFormat::WebP
            | ImageFormat::Bmp
            | ImageFormat::Gif
            | ImageFormat::Tiff
    ) {
        return Err(ItemError::new(
            ItemErrorKind::Unsupported,
            format!("{format:?} images are not supported"),
        ));
    }

    let reader = |bytes| {
        let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
        let mut image_limits = Limits::default();
        image_limits.max_alloc = Some(limits.max_alloc_bytes);
        reader.limits(image_limits);
        reader
    };
    let (width, height) = reader(bytes).into_dimensions().map_err(map_image_error)?;
    check_pixels(width, height, limits)?;
    if format == ImageFormat::Jpeg && format_is_truncated_jpeg(bytes) {
        return Err(ItemError::new(
            ItemErrorKind::Decode,
            "JPEG is truncated (no end-of-image marker)",
        ));
    }

    if format == ImageFormat::Jpeg {
        let (tw, th) = spec.resized_size(width, height);
        let scale = if spec.jpeg_draft && width >= 2 * tw && height >= 2 * th {
            Some(JpegScale::Draft(tw, th))
        } else if spec.fast {
            None // zune-jpeg, below
        } else {
            Some(JpegScale::Full)
        };
        if let Some(scale) = scale
            && let Some(image) = decode_jpeg_turbo(bytes, scale, limits, spare)?
        {
            return Ok(image);
        }
    }

    if format == ImageFormat::WebP
        && let Some(image) = decode_webp(bytes)
    {
        return Ok(image);
    }

    if format == ImageFormat::Tiff
        && let Some(image) = decode_tiff_cmyk(bytes, limits)
    {
        return Ok(image);
    }

    let image = reader(bytes).decode().map_err(map_image_error)?;
    let gray16 = format == ImageFormat::Png && png_is_gray16(bytes);
    Ok(into_rgb(image, gray16))
}

/// A still WebP through libwebp, the decoder Pillow links, as RGB: alpha
/// dropped, as Pillow's `convert("RGB")` drops it. `None` for an animated
/// file or one libwebp refuses: the `image` crate's decoder then decodes
/// it (an animation's first frame, as Pillow) or says what is wrong.
fn decode_webp(bytes: &[u8]) -> Option<RgbImage> {
    let image = webp::Decoder::new(bytes).decode()?;
    let pixels = if image.is_alpha() {
        image
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect()
    } else {
        image.to_vec()
    };
    Some(RgbImage {
        width: image.width(),
        height: image.height(),
        pixels,
    })
}

fn check_pixels(width: u32, height: u32, limits: &DecodeLimits) -> Result<(), ItemError> {
    let pixels = u64::from(width) * u64::from(height);
    if pixels > limits.max_pixels {
        return Err(ItemError::new(
            ItemErrorKind::TooLarge,
            format!(
                "{width}x{height} = {pixels} pixels exceeds the limit of {} (--max-pixels)",
                limits.max_pixels
            ),
        ));
    }
    if width == 0 || height == 0 {
        return Err(ItemError::new(
            ItemErrorKind::Decode,
            format!("image has a zero dimension ({width}x{height})"),
        ));
    }
    Ok(())
}

/// A JPEG whose bytes stop before its end-of-image marker. zune-jpeg fills
/// the missing rows with gray and reports success; Pillow refuses such a file
/// ("image file is truncated"), and so do we: a half-gray image would be
/// classified silently.
///
/// The marker segments are walked from the start (lengths skip segment
/// bodies, entropy-coded scans are skipped up to the next real marker), so
/// data after the end-of-image marker — the video of a phone's "motion
/// photo", a vendor trailer — is allowed, and an EXIF thumbnail's own
/// end-of-image marker inside APP1 is not mistaken for the image's.
fn format_is_truncated_jpeg(bytes: &[u8]) -> bool {
    let mut i = 2; // after SOI
    loop {
        // Bytes that are not a marker are extraneous data, which libjpeg
        // (so Pillow) skips with a warning: skip to the next 0xFF, then its
        // fill bytes, to the marker code.
        // memchr's SIMD search: a 12 MP photo's scan is megabytes.
        i = bytes
            .get(i..)
            .and_then(|rest| memchr::memchr(0xFF, rest))
            .map_or(bytes.len(), |at| i + at);
        while bytes.get(i) == Some(&0xFF) {
            i += 1;
        }
        let Some(&marker) = bytes.get(i) else {
            return true;
        };
        i += 1;
        if marker != 0x01 && marker < 0xC0 {
            continue; // 0xFF then a non-marker byte: extraneous data too
        }
        match marker {
            0xD9 => return false,           // end of image
            0x01 | 0xD0..=0xD7 => continue, // TEM, RSTn: no length
            _ => {
                let Some(len) = bytes
                    .get(i..i + 2)
                    .map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])))
                else {
                    return true;
                };
                i += len;
                if i > bytes.len() {
                    return true;
                }
                if marker == 0xDA {
                    // Entropy-coded data: 0xFF is followed by 0x00 (stuffing),
                    // RSTn, or fill bytes; anything else is the next marker.
                    loop {
                        while bytes.get(i).is_some_and(|&b| b != 0xFF) {
                            i += 1;
                        }
                        match bytes.get(i + 1) {
                            None => return true,
                            Some(0x00 | 0xD0..=0xD7) => i += 2,
                            Some(0xFF) => i += 1,
                            Some(_) => break,
                        }
                    }
                }
            }
        }
    }
}

/// How [`decode_jpeg_turbo`] decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JpegScale {
    /// Full size with libjpeg's defaults, as Pillow's `Image.open` +
    /// `convert("RGB")` decodes: the accurate integer IDCT (`islow`) and
    /// fancy (smoothing) chroma upsampling, so the pixels are Pillow's.
    Full,
    /// Pillow's `draft` for a resize target of `(width, height)`: the
    /// largest reduction of 1/2, 1/4 or 1/8 whose output still covers it,
    /// plain chroma upsampling and the fast integer IDCT.
    Draft(u32, u32),
}

/// Decodes a JPEG with libjpeg-turbo (through `mozjpeg`), the library
/// Pillow's wheels bundle. Returns `None` for CMYK and YCCK (Pillow
/// converts those with its own formula; the caller's decoder does too).
/// libjpeg's errors arrive as unwinding panics (its warnings are silenced)
/// and become `decode` errors here.
fn decode_jpeg_turbo(
    bytes: &[u8],
    scale: JpegScale,
    limits: &DecodeLimits,
    mut pixels: Vec<u8>,
) -> Result<Option<RgbImage>, ItemError> {
    let decode = || -> std::io::Result<Option<(usize, usize)>> {
        let mut decoder = mozjpeg::Decompress::builder().from_mem(bytes)?;
        if matches!(
            decoder.color_space(),
            mozjpeg::ColorSpace::JCS_CMYK | mozjpeg::ColorSpace::JCS_YCCK
        ) {
            return Ok(None);
        }
        match scale {
            JpegScale::Full => {
                decoder.do_fancy_upsampling(true);
                decoder.dct_method(mozjpeg::DctMethod::IntegerSlow);
            }
            JpegScale::Draft(target_w, target_h) => {
                let numerator = draft_numerator(
                    (decoder.width(), decoder.height()),
                    (target_w as usize, target_h as usize),
                );
                decoder.scale(numerator);
                // What Pillow's draft mode sets too: no fancy (smoothing)
                // chroma upsampling, and the fastest integer IDCT.
                decoder.do_fancy_upsampling(false);
                decoder.dct_method(mozjpeg::DctMethod::IntegerFast);
            }
        }
        let mut started = decoder.rgb()?;
        let (width, height) = (started.width(), started.height());
        let len = width * height * 3;
        // Only what the last image did not reach is zeroed; the decoder
        // writes every byte of `..len`.
        if pixels.len() < len {
            pixels
                .try_reserve_exact(len - pixels.len())
                .map_err(|_| std::io::ErrorKind::OutOfMemory)?;
            pixels.resize(len, 0);
        }
        pixels.truncate(len);
        let written = started.read_scanlines_into::<u8>(&mut pixels)?.len();
        started.finish()?;
        if written != len {
            return Err(std::io::Error::other(format!(
                "the decoder wrote {written} of {len} bytes"
            )));
        }
        Ok(Some((width, height)))
    };
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode))
        .map_err(|payload| {
            ItemError::new(
                ItemErrorKind::Decode,
                pipeline_core::panic_message(payload.as_ref()),
            )
        })?
        .map_err(|e| ItemError::new(ItemErrorKind::Decode, e.to_string()))?;
    let Some((width, height)) = decoded else {
        return Ok(None);
    };
    let (width, height) = (
        u32::try_from(width).unwrap_or(u32::MAX),
        u32::try_from(height).unwrap_or(u32::MAX),
    );
    check_pixels(width, height, limits)?;
    if pixels.len() != width as usize * height as usize * 3 {
        return Err(ItemError::new(
            ItemErrorKind::Decode,
            "JPEG decoder returned a wrong number of pixels",
        ));
    }
    Ok(Some(RgbImage {
        width,
        height,
        pixels,
    }))
}

/// The libjpeg scale numerator (over 8) of draft decoding: 8, 4, 2 or 1, the
/// smallest whose output (`ceil(size × n / 8)`) still covers `target`.
fn draft_numerator((width, height): (usize, usize), (tw, th): (usize, usize)) -> u8 {
    let covers = |n: usize| (width * n).div_ceil(8) >= tw && (height * n).div_ceil(8) >= th;
    [1u8, 2, 4]
        .into_iter()
        .find(|&n| covers(n as usize))
        .unwrap_or(8)
}

/// Reads a whole regular file, refusing special files (a FIFO would hang)
/// and files over the size limit.
pub(crate) fn read_file(path: &Path, limits: &DecodeLimits) -> Result<Vec<u8>, ItemError> {
    let meta = fs::metadata(path).map_err(map_io_error)?;
    if !meta.is_file() {
        return Err(ItemError::new(
            ItemErrorKind::Unsupported,
            "not a regular file",
        ));
    }
    check_size(meta.len(), limits)?;
    let mut file = fs::File::open(path).map_err(map_io_error)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // Read at most one byte past the limit: the file may grow after `stat`.
    file.by_ref()
        .take(limits.max_file_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(map_io_error)?;
    if bytes.len() as u64 > limits.max_file_bytes {
        return Err(ItemError::new(
            ItemErrorKind::TooLarge,
            "file grew over the size limit while being read",
        ));
    }
    Ok(bytes)
}

/// Reads `range` of a file (a tar member's body).
pub(crate) fn read_range(
    path: &Path,
    range: pipeline_core::ByteRange,
    limits: &DecodeLimits,
) -> Result<Vec<u8>, ItemError> {
    use std::os::unix::fs::FileExt;
    check_size(range.len, limits)?;
    let file = fs::File::open(path).map_err(map_io_error)?;
    let mut bytes = vec![0; usize::try_from(range.len).unwrap_or(0)];
    file.read_exact_at(&mut bytes, range.offset).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            ItemError::new(
                ItemErrorKind::Io,
                "the file ends before this member does (truncated)",
            )
        } else {
            map_io_error(e)
        }
    })?;
    Ok(bytes)
}

/// Refuses items over `--max-file-bytes`.
pub(crate) fn check_size(len: u64, limits: &DecodeLimits) -> Result<(), ItemError> {
    if len > limits.max_file_bytes {
        return Err(ItemError::new(
            ItemErrorKind::TooLarge,
            format!(
                "item is {len} bytes, over the limit of {} (--max-file-bytes)",
                limits.max_file_bytes
            ),
        ));
    }
    Ok(())
}

fn map_io_error(e: io::Error) -> ItemError {
    let kind = match e.kind() {
        io::ErrorKind::NotFound => ItemErrorKind::NotFound,
        io::ErrorKind::PermissionDenied => ItemErrorKind::Permission,
        _ => ItemErrorKind::Io,
    };
    ItemError::new(kind, e.to_string())
}

fn map_image_error(e: ImageError) -> ItemError {
    let kind = match &e {
        ImageError::Limits(_) => ItemErrorKind::TooLarge,
        ImageError::Unsupported(_) => ItemErrorKind::Unsupported,
        ImageError::IoError(io) if io.kind() != io::ErrorKind::UnexpectedEof => ItemErrorKind::Io,
        _ => ItemErrorKind::Decode,
    };
    ItemError::new(kind, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::{decode_webp, draft_numerator, format_is_truncated_jpeg, into_rgb};
    use pipeline_core::{DecodeLimits, PreprocessSpec};

    /// Still WebP files decode through libwebp (`decode_webp` gives an
    /// image), lossless and lossy, to the same pixels as the `image`
    /// crate's decoder (the loader vectors hold both to Pillow's crops).
    #[test]
    fn still_webp_decodes_through_libwebp() {
        let vectors = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/inputs");
        for name in ["cat.webp", "cat_lossy.webp"] {
            let bytes = std::fs::read(vectors.join(name)).expect("a committed vector");
            let ours = decode_webp(&bytes).expect("libwebp decodes a still WebP");
            let theirs = into_rgb(
                image::load_from_memory(&bytes).expect("image decodes it"),
                false,
            );
            assert_eq!(
                (ours.width, ours.height),
                (theirs.width, theirs.height),
                "{name}"
            );
            assert!(ours.pixels == theirs.pixels, "{name}: the same pixels");
        }
        let cut = std::fs::read(vectors.join("cat_lossy.webp")).expect("a committed vector");
        assert!(
            decode_webp(&cut[..cut.len() / 2]).is_none(),
            "a cut file is refused"
        );
    }

    #[test]
    fn draft_takes_the_largest_reduction_that_still_covers_the_target() {
        // 4032×3024 to a shorter side of 256: 1/8 gives 504×378.
        assert_eq!(draft_numerator((4032, 3024), (341, 256)), 1);
        // 1600×1200 → 1/4 gives 400×300; 1/8 would give 150 < 256.
        assert_eq!(draft_numerator((1600, 1200), (341, 256)), 2);
        // 600×450: 1/2 gives 300×225, which misses 256; full size.
        assert_eq!(draft_numerator((600, 450), (341, 256)), 8);
        // Rounding up, as libjpeg does: 2049 / 8 → 257 covers 257.
        assert_eq!(draft_numerator((2049, 4000), (257, 500)), 1);
    }

    fn jpeg() -> Vec<u8> {
        crate::synthetic::jpeg_photo(96, 64, 5, 85).expect("encode")
    }

    /// A decoder thread's spare buffer, larger and full of old bytes, gives
    /// the same image as a fresh one, and is what the image is stored in.
    #[test]
    fn a_spare_buffer_decodes_the_same_image() {
        let (spec, limits) = (PreprocessSpec::default(), DecodeLimits::default());
        let fresh = super::decode_bytes(&jpeg(), &spec, &limits).expect("decodes");
        let spare = vec![0xAB; fresh.pixels.len() * 3];
        let spare_at = spare.as_ptr();
        let reused = super::decode_bytes_into(&jpeg(), &spec, &limits, spare).expect("decodes");
        assert_eq!(reused, fresh);
        assert_eq!(reused.pixels.as_ptr(), spare_at, "decoded into the spare");
        let small = super::decode_bytes_into(&jpeg(), &spec, &limits, vec![7; 5]).expect("grows");
        assert_eq!(small, fresh);
    }

    #[test]
    fn a_whole_jpeg_is_not_truncated() {
        assert!(!format_is_truncated_jpeg(&jpeg()));
    }

    #[test]
    fn a_cut_jpeg_is_truncated_wherever_it_is_cut() {
        let full = jpeg();
        for cut in [3, 20, full.len() / 3, full.len() / 2, full.len() - 2] {
            assert!(
                format_is_truncated_jpeg(&full[..cut]),
                "cut at {cut} of {}",
                full.len()
            );
        }
    }

    #[test]
    fn junk_between_segments_is_skipped_as_libjpeg_skips_it() {
        // After SOI: stray bytes, then 0xFF with a non-marker code, then
        // the real segments (Pillow's junk_jpeg_header.jpg in small).
        let full = jpeg();
        let mut junk = full[..2].to_vec();
        junk.extend_from_slice(&[0x12, 0x34, 0xFF, 0x68, 0x00, 0x07]);
        junk.extend_from_slice(&full[2..]);
        assert!(!format_is_truncated_jpeg(&junk));
        assert!(format_is_truncated_jpeg(&junk[..junk.len() / 2]));
    }

    #[test]
    fn data_after_the_end_marker_is_allowed() {
        // A phone's motion photo: a JPEG, then a video of several MiB.
        let mut motion = jpeg();
        motion.extend(std::iter::repeat_n(0x42u8, 3 << 20));
        assert!(!format_is_truncated_jpeg(&motion));
    }

    #[test]
    fn a_thumbnail_end_marker_does_not_hide_a_cut_image() {
        // APP1 segment holding a complete small JPEG (with its own FFD9),
        // followed by a main image that is cut in its scan.
        let thumb = jpeg();
        let main = jpeg();
        let mut file = vec![0xFF, 0xD8, 0xFF, 0xE1];
        file.extend_from_slice(&((thumb.len() + 2) as u16).to_be_bytes());
        file.extend_from_slice(&thumb);
        file.extend_from_slice(&main[2..main.len() / 2]);
        assert!(format_is_truncated_jpeg(&file));
        let mut whole = file[..file.len() - (main.len() / 2 - 2)].to_vec();
        whole.extend_from_slice(&main[2..]);
        assert!(!format_is_truncated_jpeg(&whole));
    }
}
