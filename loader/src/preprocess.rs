//! Resize and centre crop, equal to the byte to torchvision's `Resize(n)` +
//! `CenterCrop(m)` on a PIL image (and to open_clip's and Hugging Face's
//! processors, which resize with Pillow too), then repacking HWC to CHW.
//!
//! Every filter runs Pillow's own algorithm (`resample/`): the fixed-point
//! convolutions for box, bilinear, bicubic and Lanczos, the affine scaling
//! for nearest. The crop is the window of the whole resize (only its
//! pixels computed), as torchvision resizes and then crops; resizing the
//! crop's part of the image alone would shift the filter windows.
//! `--fast-preprocess` resizes with `fast_image_resize` instead (close to
//! Pillow, not equal).

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use pipeline_core::{DecodeLimits, ItemError, ItemErrorKind, PreprocessSpec, ResizeFilter};

use crate::decode::RgbImage;
use crate::resample::{Filter, Window, resize_nearest_rgb, resize_rgb};

/// Reusable resize state: one per thread, so the hot path does not allocate
/// once its buffers have grown to the largest image seen.
#[derive(Default)]
pub struct Preprocessor {
    resizer: Resizer,
    resized: Vec<u8>,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Preprocessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preprocessor")
            .field("resized_capacity", &self.resized.capacity())
            .finish()
    }
}

impl Preprocessor {
    /// A preprocessor with empty buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Resizes `image` per `spec`, centre-crops it, and writes the crop into
    /// `out` as CHW (`3 × crop × crop` bytes).
    pub fn run(
        &mut self,
        image: &RgbImage,
        spec: &PreprocessSpec,
        out: &mut [u8],
    ) -> Result<(), ItemError> {
        let side = spec.crop as usize;
        assert_eq!(
            out.len(),
            3 * side * side,
            "output slot must hold one CHW crop"
        );
        let (rw, rh) = spec.resized_size(image.width, image.height);
        let (x0, y0) = spec.crop_origin(rw, rh);
        let (x0, y0) = (x0 as usize, y0 as usize);
        // Only the crop is computed (the same pixels as the whole
        // resize's): a `side`-wide window.
        let window = Window {
            x: x0,
            y: y0,
            width: side,
            height: side,
        };
        let sizes = (
            (image.width as usize, image.height as usize),
            (rw as usize, rh as usize),
        );
        if (rw, rh) == (image.width, image.height) {
            crop_hwc_to_chw(&image.pixels, rw as usize, (x0, y0), side, out);
        } else if !spec.fast {
            let convolution = match spec.filter {
                ResizeFilter::Nearest => None,
                ResizeFilter::Box => Some(Filter::Box),
                ResizeFilter::Bilinear => Some(Filter::Bilinear),
                ResizeFilter::Bicubic => Some(Filter::Bicubic),
                ResizeFilter::Lanczos3 => Some(Filter::Lanczos),
            };
            let (src, resized) = (&image.pixels, &mut self.resized);
            match convolution {
                Some(filter) => resize_rgb(
                    src,
                    sizes.0,
                    sizes.1,
                    window,
                    filter,
                    &mut self.scratch,
                    resized,
                ),
                None => resize_nearest_rgb(src, sizes.0, sizes.1, window, resized),
            }
            crop_hwc_to_chw(&self.resized, side, (0, 0), side, out);
        } else {
            let len = rw as usize * rh as usize * 3;
            self.resized.resize(len, 0);
            let src = ImageRef::new(image.width, image.height, &image.pixels, PixelType::U8x3)
                .map_err(|e| internal(format!("source image view: {e}")))?;
            let mut dst = Image::from_slice_u8(rw, rh, &mut self.resized[..len], PixelType::U8x3)
                .map_err(|e| internal(format!("resize buffer: {e}")))?;
            let options = ResizeOptions::new().resize_alg(resize_alg(spec.filter));
            self.resizer
                .resize(&src, &mut dst, &options)
                .map_err(|e| internal(format!("resize: {e}")))?;
            crop_hwc_to_chw(&self.resized[..len], rw as usize, (x0, y0), side, out);
        }
        Ok(())
    }
}

/// A resize whose result alone would be over `--max-pixels` is
/// `too_large`, as the image itself would be: a 1×11620 strip, a 703-byte
/// PNG, resized to a 256-pixel shorter side is 256×2974720, 2.3 GB of RGB
/// (found by the `decode_preprocess` fuzz target).
pub(crate) fn check_resize(
    image: &RgbImage,
    spec: &PreprocessSpec,
    limits: &DecodeLimits,
) -> Result<(), ItemError> {
    let (rw, rh) = spec.resized_size(image.width, image.height);
    let pixels = u64::from(rw) * u64::from(rh);
    if pixels > limits.max_pixels {
        return Err(ItemError::new(
            ItemErrorKind::TooLarge,
            format!(
                "{}x{} resizes to {rw}x{rh} = {pixels} pixels, over the limit of {} \
                 (--max-pixels)",
                image.width, image.height, limits.max_pixels
            ),
        ));
    }
    Ok(())
}

fn resize_alg(filter: ResizeFilter) -> ResizeAlg {
    match filter {
        ResizeFilter::Nearest => ResizeAlg::Nearest,
        ResizeFilter::Bilinear => ResizeAlg::Convolution(FilterType::Bilinear),
        ResizeFilter::Bicubic => ResizeAlg::Convolution(FilterType::CatmullRom),
        ResizeFilter::Lanczos3 => ResizeAlg::Convolution(FilterType::Lanczos3),
        ResizeFilter::Box => ResizeAlg::Convolution(FilterType::Box),
    }
}

fn internal(message: String) -> ItemError {
    ItemError::new(ItemErrorKind::Decode, message)
}

/// Copies the `side × side` window at `origin` of an interleaved RGB image
/// of row length `width` into three planes.
fn crop_hwc_to_chw(src: &[u8], width: usize, origin: (usize, usize), side: usize, out: &mut [u8]) {
    let plane = side * side;
    let (r_plane, rest) = out.split_at_mut(plane);
    let (g_plane, b_plane) = rest.split_at_mut(plane);
    for y in 0..side {
        let row_start = ((origin.1 + y) * width + origin.0) * 3;
        let row = &src[row_start..row_start + side * 3];
        let dst = y * side..(y + 1) * side;
        for (((px, r), g), b) in row
            .chunks_exact(3)
            .zip(&mut r_plane[dst.clone()])
            .zip(&mut g_plane[dst.clone()])
            .zip(&mut b_plane[dst])
        {
            *r = px[0];
            *g = px[1];
            *b = px[2];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crop_takes_the_window_and_splits_planes() {
        // 4x2 image; pixel (x, y) = [10x+y, 100+10x+y, 200+x+y]
        let (w, h) = (4usize, 2usize);
        let mut src = Vec::new();
        for y in 0..h {
            for x in 0..w {
                src.extend([
                    (10 * x + y) as u8,
                    (100 + 10 * x + y) as u8,
                    (200 + x + y) as u8,
                ]);
            }
        }
        let mut out = vec![0u8; 3 * 2 * 2];
        crop_hwc_to_chw(&src, w, (1, 0), 2, &mut out);
        assert_eq!(
            out,
            vec![10, 20, 11, 21, 110, 120, 111, 121, 201, 202, 202, 203]
        );
    }

    #[test]
    fn same_size_image_is_only_cropped() {
        let spec = PreprocessSpec {
            resize_shorter: 4,
            crop: 2,
            ..PreprocessSpec::default()
        };
        let image = RgbImage {
            width: 4,
            height: 4,
            pixels: (0..48).collect(),
        };
        let mut out = vec![0u8; 12];
        Preprocessor::new()
            .run(&image, &spec, &mut out)
            .expect("resize works");
        // crop origin (1, 1): pixels (1,1),(2,1),(1,2),(2,2) -> indices 5,6,9,10
        assert_eq!(out, vec![15, 18, 27, 30, 16, 19, 28, 31, 17, 20, 29, 32]);
    }
}
