//! Deterministic photo-like images: `pipeline bench --synthetic`, the
//! criterion benches and the test fixtures all draw from here, so a
//! synthetic benchmark is reproducible byte for byte.

use image::codecs::jpeg::JpegEncoder;
use image::{DynamicImage, ImageResult, Rgb, RgbImage};

/// A JPEG of synthetic photo-like content (for benches: any size).
pub fn jpeg_photo(width: u32, height: u32, seed: u64, quality: u8) -> ImageResult<Vec<u8>> {
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, quality)
        .encode_image(&DynamicImage::ImageRgb8(synthetic_rgb(width, height, seed)))?;
    Ok(out)
}

/// Photo-like content: smooth gradients, a few discs and bars of colour, and
/// mild noise, so resampling and JPEG behave as on real images.
pub fn synthetic_rgb(width: u32, height: u32, seed: u64) -> RgbImage {
    let mut rng = SplitMix64(seed ^ 0x9E37_79B9_7F4A_7C15);
    let base: [f32; 3] = [rng.unit() * 255.0, rng.unit() * 255.0, rng.unit() * 255.0];
    let discs: Vec<(f32, f32, f32, [f32; 3])> = (0..6)
        .map(|_| {
            (
                rng.unit() * width as f32,
                rng.unit() * height as f32,
                (0.05 + rng.unit() * 0.3) * width.min(height) as f32,
                [rng.unit() * 255.0, rng.unit() * 255.0, rng.unit() * 255.0],
            )
        })
        .collect();
    let stripe = 4.0 + rng.unit() * 24.0;
    let mut noise = SplitMix64(seed.rotate_left(17));
    RgbImage::from_fn(width, height, |x, y| {
        let (fx, fy) = (x as f32 / width as f32, y as f32 / height as f32);
        let mut px = [
            base[0] * (1.0 - fx) + 255.0 * fx * fy,
            base[1] * (1.0 - fy) + 128.0 * fx,
            base[2] * (0.5 + 0.5 * (fx * 6.0).sin()),
        ];
        for &(cx, cy, r, colour) in &discs {
            let d = ((x as f32 - cx).powi(2) + (y as f32 - cy).powi(2)).sqrt();
            if d < r {
                let t = 1.0 - d / r;
                for c in 0..3 {
                    px[c] = px[c] * (1.0 - t) + colour[c] * t;
                }
            }
        }
        if ((x as f32 / stripe) as u32 + (y as f32 / stripe) as u32).is_multiple_of(7) {
            px = [px[0] * 0.6, px[1] * 0.6, px[2] * 0.6];
        }
        let n = (noise.unit() - 0.5) * 12.0;
        Rgb(px.map(|v| (v + n).clamp(0.0, 255.0) as u8))
    })
}

/// Small, fast, well-distributed PRNG (Vigna's SplitMix64).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}
