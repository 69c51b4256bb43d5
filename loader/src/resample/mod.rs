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
//! negative coefficients and its window bounds. On x86-64 the horizontal
//! pass runs four taps an instruction (`horizontal_x86.rs`, exact by
//! construction and tested against the scalar pass here); the vertical
//! pass is plain loops the compiler vectorises.

use std::ops::Range;

use multiversion::multiversion;

#[cfg(target_arch = "x86_64")]
mod horizontal_x86;

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

/// The part of a resized image to compute: `width × height` output
/// pixels from `(x, y)`, the centre crop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) x: usize,
    pub(crate) y: usize,
    pub(crate) width: usize,
    pub(crate) height: usize,
}

/// Resizes interleaved RGB `src` (`width × height`) to `out_w × out_h`
/// exactly as Pillow's `Image.resize(…, filter)` does, and writes only the
/// pixels of `window` into `dst` (interleaved RGB, `window.width` a row).
/// Each output pixel is the same sums in the same order as Pillow's: the
/// horizontal pass runs over the rows the window's vertical taps read and
/// the columns the window keeps, the vertical pass over the window. For a
/// 500×375 photo cropped to 224 that is about half of a whole resize's
/// work. `scratch` holds the horizontal pass between calls.
pub(crate) fn resize_rgb(
    src: &[u8],
    (width, height): (usize, usize),
    (out_w, out_h): (usize, usize),
    window: Window,
    filter: Filter,
    scratch: &mut Vec<u8>,
    dst: &mut Vec<u8>,
) {
    assert_eq!(src.len(), width * height * 3, "source is RGB");
    assert!(
        window.width > 0
            && window.height > 0
            && window.x + window.width <= out_w
            && window.y + window.height <= out_h,
        "the window lies inside the resized image"
    );
    let horizontal = out_w != width;
    let vertical = out_h != height;
    let rows = coefficients(height, out_h, filter);
    let rows_kept = window.y..window.y + window.height;
    // Only the rows the window's vertical taps read go through the
    // horizontal pass; without a vertical pass, the window's own rows.
    let (first_row, last_row) = if vertical {
        let first = rows.bounds[rows_kept.start].0;
        let (start, count) = rows.bounds[rows_kept.end - 1];
        (first, start + count)
    } else {
        (rows_kept.start, rows_kept.end)
    };
    let mid_h = last_row - first_row;
    let mid_w = window.width;
    let bias = 1i32 << (PRECISION_BITS - 1);
    scratch.clear();
    scratch.resize(mid_w * mid_h * 3, 0);
    if horizontal {
        let cols = coefficients(width, out_w, filter);
        let columns = window.x..window.x + mid_w;
        #[cfg(target_arch = "x86_64")]
        let paired = horizontal_x86::available()
            .then(|| horizontal_x86::PairedTaps::new(&cols, columns.clone()));
        for y in 0..mid_h {
            let row_start = (first_row + y) * width * 3;
            let out = &mut scratch[y * mid_w * 3..(y + 1) * mid_w * 3];
            // The leading columns through `pmaddwd` where the CPU has it.
            #[cfg(target_arch = "x86_64")]
            let done = paired
                .as_ref()
                .map_or(0, |paired| horizontal_x86::row(src, row_start, paired, out));
            #[cfg(not(target_arch = "x86_64"))]
            let done = 0;
            horizontal_scalar(
                &src[row_start..row_start + width * 3],
                &cols,
                columns.start + done..columns.end,
                &mut out[done * 3..],
            );
        }
    } else {
        // No horizontal pass: the window's columns of the source rows.
        for y in 0..mid_h {
            let start = ((first_row + y) * width + window.x) * 3;
            scratch[y * mid_w * 3..(y + 1) * mid_w * 3]
                .copy_from_slice(&src[start..start + mid_w * 3]);
        }
    }
    let stride = mid_w * 3;
    dst.clear();
    if !vertical {
        dst.extend_from_slice(&scratch[..stride * mid_h]);
        return;
    }
    dst.resize(stride * window.height, 0);
    // Row by row (the same sums in the same order as Pillow's per-pixel
    // loop, integer and exact), so the compiler vectorises across the row.
    let mut acc = vec![0i32; stride];
    for (i, yy) in rows_kept.enumerate() {
        let (ymin, count) = rows.bounds[yy];
        let ymin = ymin - first_row;
        let k = &rows.weights[yy * rows.ksize..yy * rows.ksize + count];
        acc.fill(bias);
        for (y, &w) in k.iter().enumerate() {
            add_weighted(
                &mut acc,
                &scratch[(ymin + y) * stride..(ymin + y + 1) * stride],
                w,
            );
        }
        clip_into(&mut dst[i * stride..(i + 1) * stride], &acc);
    }
}

/// Pillow's horizontal pass over one row, output `columns` into `out`
/// (RGB), one pixel at a time: the reference, and the path for CPUs or
/// columns the `pmaddwd` kernel does not take.
fn horizontal_scalar(row: &[u8], cols: &Coefficients, columns: Range<usize>, out: &mut [u8]) {
    let bias = 1i32 << (PRECISION_BITS - 1);
    for (px, xx) in out.chunks_exact_mut(3).zip(columns) {
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

/// `acc += row · w`, lane by lane: vectorised, and compiled again for AVX2
/// (eight 32-bit products an instruction, where baseline x86-64's SSE2 has
/// no 32-bit multiply) and picked at run time. Integer arithmetic: exact
/// either way.
#[multiversion(targets("x86_64+avx2"))]
fn add_weighted(acc: &mut [i32], row: &[u8], w: i32) {
    for (a, &p) in acc.iter_mut().zip(row) {
        *a += i32::from(p) * w;
    }
}

/// Each accumulator's 8-bit result, as Pillow clips it.
#[multiversion(targets("x86_64+avx2"))]
fn clip_into(out: &mut [u8], acc: &[i32]) {
    for (v, &a) in out.iter_mut().zip(acc) {
        *v = clip8(a);
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
            whole(17, 11),
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
            whole(40, 30),
            Filter::Bilinear,
            &mut scratch,
            &mut dst,
        );
        assert_eq!(dst, ramp);
    }

    fn whole(width: usize, height: usize) -> Window {
        Window {
            x: 0,
            y: 0,
            width,
            height,
        }
    }

    /// A window of the resize is that window of the whole resize, byte for
    /// byte, for every filter, shrinking and growing, with one axis or both
    /// resized, at every offset of a sliding window.
    #[test]
    fn a_window_is_the_same_pixels_as_the_whole_resize() {
        let src: Vec<u8> = (0..53 * 37 * 3)
            .map(|i: usize| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
            .collect();
        let (mut scratch, mut whole_dst, mut part) = (Vec::new(), Vec::new(), Vec::new());
        let mut windows = 0;
        for filter in [Filter::Bilinear, Filter::Bicubic, Filter::Lanczos] {
            for (out_w, out_h) in [(31, 22), (90, 61), (53, 20), (20, 37)] {
                resize_rgb(
                    &src,
                    (53, 37),
                    (out_w, out_h),
                    whole(out_w, out_h),
                    filter,
                    &mut scratch,
                    &mut whole_dst,
                );
                assert_eq!(whole_dst.len(), out_w * out_h * 3);
                let (cw, ch) = (out_w.min(17), out_h.min(13));
                for y in (0..=out_h - ch).step_by(3) {
                    for x in (0..=out_w - cw).step_by(5) {
                        let window = Window {
                            x,
                            y,
                            width: cw,
                            height: ch,
                        };
                        resize_rgb(
                            &src,
                            (53, 37),
                            (out_w, out_h),
                            window,
                            filter,
                            &mut scratch,
                            &mut part,
                        );
                        for row in 0..ch {
                            let want = &whole_dst
                                [((y + row) * out_w + x) * 3..((y + row) * out_w + x + cw) * 3];
                            let got = &part[row * cw * 3..(row + 1) * cw * 3];
                            assert_eq!(got, want, "{filter:?} {out_w}x{out_h} at ({x}, {y})");
                        }
                        windows += 1;
                    }
                }
            }
        }
        assert!(windows > 100, "{windows} windows checked");
    }
}
