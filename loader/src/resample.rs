//! Pillow's `Image.resize` for 8-bit RGB, to the bit: what torchvision's
//! `Resize` and open_clip's and Hugging Face's processors run on PIL images.
//!
//! Pillow (`libImaging/Resample.c`) resamples separably: coefficients per
//! output pixel from the filter widened by the scale (antialiasing),
//! computed in `f64`, normalised to sum 1, then rounded to 22-bit fixed
//! point (`PRECISION_BITS = 32 - 8 - 2`); a horizontal pass over only the
//! rows the vertical pass reads, into an 8-bit image (rounded by the
//! `1 << 21` bias, clipped), then the vertical pass. Same-size axes are
//! skipped. Everything below follows that code, including its rounding of
//! negative coefficients and its window bounds.

/// Pillow's resampling filters that resize by convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Filter {
    /// `Image.BILINEAR`: the triangle, support 1.
    Bilinear,
    /// `Image.BICUBIC`: Keys' cubic with `a = -0.5`, support 2.
    Bicubic,
    /// `Image.LANCZOS`: 3-lobed Lanczos, support 3.
    Lanczos,
}

const PRECISION_BITS: u32 = 32 - 8 - 2;

impl Filter {
    fn support(self) -> f64 {
        match self {
            Self::Bilinear => 1.0,
            Self::Bicubic => 2.0,
            Self::Lanczos => 3.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        match self {
            Self::Bilinear => {
                let x = x.abs();
                if x < 1.0 { 1.0 - x } else { 0.0 }
            }
            Self::Bicubic => {
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
            Self::Lanczos => {
                let sinc = |x: f64| {
                    if x == 0.0 {
                        1.0
                    } else {
                        let x = x * std::f64::consts::PI;
                        x.sin() / x
                    }
                };
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

/// Per output pixel: the first input pixel and the fixed-point weights.
struct Coefficients {
    /// `(first input index, count)` per output index.
    bounds: Vec<(usize, usize)>,
    /// `ksize` weights per output index.
    weights: Vec<i32>,
    ksize: usize,
}

/// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc` for a full-size
/// box (`in0 = 0`, `in1 = in_size`).
fn coefficients(in_size: usize, out_size: usize, filter: Filter) -> Coefficients {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filter.support() * filterscale;
    let ksize = support.ceil() as usize * 2 + 1;
    let mut bounds = Vec::with_capacity(out_size);
    let mut weights = vec![0i32; out_size * ksize];
    let mut k = vec![0.0f64; ksize];
    for xx in 0..out_size {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        // C's (int) truncates toward zero, as `as i64` does.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
        let count = xmax.saturating_sub(xmin);
        let mut total = 0.0;
        for (x, w) in k.iter_mut().enumerate().take(count) {
            *w = filter.weight((x as f64 + xmin as f64 - center + 0.5) * ss);
            total += *w;
        }
        for (x, w) in k.iter().enumerate().take(count) {
            let w = if total != 0.0 { w / total } else { *w };
            let fixed = w * f64::from(1u32 << PRECISION_BITS);
            weights[xx * ksize + x] = if w < 0.0 {
                (-0.5 + fixed) as i32
            } else {
                (0.5 + fixed) as i32
            };
        }
        bounds.push((xmin, count));
    }
    Coefficients {
        bounds,
        weights,
        ksize,
    }
}

#[inline]
fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Resizes interleaved RGB `src` (`width × height`) to `out_w × out_h` into
/// `dst`, exactly as Pillow's `Image.resize(…, filter)` does. `scratch` holds
/// the horizontal pass between calls.
pub(crate) fn resize_rgb(
    src: &[u8],
    (width, height): (usize, usize),
    (out_w, out_h): (usize, usize),
    filter: Filter,
    scratch: &mut Vec<u8>,
    dst: &mut Vec<u8>,
) {
    assert_eq!(src.len(), width * height * 3, "source is RGB");
    let horizontal = out_w != width;
    let vertical = out_h != height;
    let rows = coefficients(height, out_h, filter);
    // Only the rows the vertical pass reads go through the horizontal one.
    let (first_row, last_row) = if vertical {
        let first = rows.bounds[0].0;
        let (start, count) = rows.bounds[out_h - 1];
        (first, start + count)
    } else {
        (0, height)
    };
    let (mid, mid_h): (&[u8], usize) = if horizontal {
        let cols = coefficients(width, out_w, filter);
        let mid_h = last_row - first_row;
        scratch.clear();
        scratch.resize(out_w * mid_h * 3, 0);
        let bias = 1i32 << (PRECISION_BITS - 1);
        for y in 0..mid_h {
            let row = &src[(first_row + y) * width * 3..(first_row + y + 1) * width * 3];
            let out = &mut scratch[y * out_w * 3..(y + 1) * out_w * 3];
            for (xx, px) in out.chunks_exact_mut(3).enumerate() {
                let (xmin, count) = cols.bounds[xx];
                let k = &cols.weights[xx * cols.ksize..xx * cols.ksize + count];
                let (mut r, mut g, mut b) = (bias, bias, bias);
                for (x, &w) in k.iter().enumerate() {
                    let p = &row[(xmin + x) * 3..(xmin + x) * 3 + 3];
                    r += i32::from(p[0]) * w;
                    g += i32::from(p[1]) * w;
                    b += i32::from(p[2]) * w;
                }
                px[0] = clip8(r);
                px[1] = clip8(g);
                px[2] = clip8(b);
            }
        }
        (scratch.as_slice(), mid_h)
    } else {
        (
            &src[first_row * width * 3..last_row * width * 3],
            last_row - first_row,
        )
    };
    dst.clear();
    if !vertical {
        dst.extend_from_slice(&mid[..out_w * mid_h * 3]);
        return;
    }
    dst.resize(out_w * out_h * 3, 0);
    let bias = 1i32 << (PRECISION_BITS - 1);
    let stride = out_w * 3;
    // Row by row (the same sums in the same order as Pillow's per-pixel
    // loop, integer and exact), so the compiler vectorises across the row.
    let mut acc = vec![0i32; stride];
    for yy in 0..out_h {
        let (ymin, count) = rows.bounds[yy];
        let ymin = ymin - first_row;
        let k = &rows.weights[yy * rows.ksize..yy * rows.ksize + count];
        acc.fill(bias);
        for (y, &w) in k.iter().enumerate() {
            let row = &mid[(ymin + y) * stride..(ymin + y + 1) * stride];
            for (a, &p) in acc.iter_mut().zip(row) {
                *a += i32::from(p) * w;
            }
        }
        let out = &mut dst[yy * stride..(yy + 1) * stride];
        for (v, &a) in out.iter_mut().zip(&acc) {
            *v = clip8(a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one_in_fixed_point() {
        for filter in [Filter::Bilinear, Filter::Bicubic, Filter::Lanczos] {
            for (from, to) in [(500, 256), (256, 500), (97, 13), (13, 97)] {
                let c = coefficients(from, to, filter);
                for xx in 0..to {
                    let (_, count) = c.bounds[xx];
                    let sum: i64 = c.weights[xx * c.ksize..xx * c.ksize + count]
                        .iter()
                        .map(|&w| i64::from(w))
                        .sum();
                    assert!(
                        (sum - (1 << PRECISION_BITS)).abs() <= count as i64,
                        "{filter:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_flat_image_stays_flat_and_same_size_is_a_copy() {
        let src = vec![77u8; 40 * 30 * 3];
        let (mut scratch, mut dst) = (Vec::new(), Vec::new());
        resize_rgb(
            &src,
            (40, 30),
            (17, 11),
            Filter::Bicubic,
            &mut scratch,
            &mut dst,
        );
        assert!(dst.iter().all(|&v| v == 77));
        let ramp: Vec<u8> = (0..40 * 30 * 3).map(|i| (i % 251) as u8).collect();
        resize_rgb(
            &ramp,
            (40, 30),
            (40, 30),
            Filter::Bilinear,
            &mut scratch,
            &mut dst,
        );
        assert_eq!(dst, ramp);
    }
}
