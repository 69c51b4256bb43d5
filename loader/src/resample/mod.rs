//! Pillow's `Image.resize` for 8-bit RGB, to the bit: what torchvision's
//! `Resize` and open_clip's and Hugging Face's processors run on PIL images.
//!
//! Pillow (`libImaging/Resample.c`) resamples separably with fixed-point
//! weights (`coefficients.rs`): one pass along each axis that changes size,
//! each rounding to 8 bits (the `1 << 21` bias, clipped). Pillow 13 runs
//! the vertical pass first when the height shrinks by more than twice as
//! many pixels as the width (362×725 → 256×512), and the horizontal pass
//! first otherwise, as every Pillow before it did always; the order
//! changes the rounding between the passes, so it is followed here
//! exactly ([`vertical_first`]). Whichever pass runs first covers only the
//! rows or columns the second pass's taps read for the centre crop, and
//! the second only the crop. `Image.NEAREST` is Pillow's affine scaling,
//! in `nearest.rs`.
//!
//! On x86-64 the horizontal pass runs four taps an instruction and the
//! vertical pass eight lanes (`x86.rs`); each path is exact by
//! construction, can be forced ([`ResamplePath`]), and is tested against
//! the scalar one here and against Pillow itself in
//! `loader/tests/it/pillow_exact.rs`.

use std::ops::Range;

mod coefficients;
mod nearest;
mod path;
#[cfg(target_arch = "x86_64")]
mod x86;

use coefficients::{Coefficients, PRECISION_BITS};

pub(crate) use coefficients::Filter;
pub use coefficients::keys_cubic;
pub(crate) use nearest::resize_nearest_rgb;
pub use path::{ResamplePath, force_resample_path, resample_path};

/// The part of a resized image to compute: `width × height` output
/// pixels from `(x, y)`, the centre crop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) x: usize,
    pub(crate) y: usize,
    pub(crate) width: usize,
    pub(crate) height: usize,
}

impl Window {
    fn columns(&self) -> Range<usize> {
        self.x..self.x + self.width
    }

    fn rows(&self) -> Range<usize> {
        self.y..self.y + self.height
    }

    fn check(&self, (out_w, out_h): (usize, usize)) {
        assert!(
            self.width > 0
                && self.height > 0
                && self.x + self.width <= out_w
                && self.y + self.height <= out_h,
            "the window lies inside the resized image"
        );
    }
}

/// Pillow 13's pass order (`ImagingResampleInner`): the vertical pass
/// first when the height shrinks by more than twice as many pixels as the
/// width does. It matters only when both axes change size.
pub(crate) fn vertical_first(
    (width, height): (usize, usize),
    (out_w, out_h): (usize, usize),
) -> bool {
    let shrink_h = height as i64 - out_h as i64;
    let shrink_w = width as i64 - out_w as i64;
    shrink_h > 0 && shrink_h > shrink_w * 2
}

/// Resizes interleaved RGB `src` (`width × height`) to `out_w × out_h`
/// exactly as Pillow's `Image.resize(…, filter)` does, and writes only the
/// pixels of `window` into `dst` (interleaved RGB, `window.width` a row).
/// Each output pixel is the same sums in the same order as Pillow's; for a
/// 500×375 photo cropped to 224 that is about half of a whole resize's
/// work. `scratch` holds the first pass between calls.
pub(crate) fn resize_rgb(
    src: &[u8],
    (width, height): (usize, usize),
    (out_w, out_h): (usize, usize),
    window: Window,
    filter: Filter,
    scratch: &mut Vec<u8>,
    dst: &mut Vec<u8>,
) {
    resize_rgb_on(
        resample_path(),
        src,
        (width, height),
        (out_w, out_h),
        window,
        filter,
        scratch,
        dst,
    );
}

/// [`resize_rgb`] on a given path.
#[allow(clippy::too_many_arguments)]
fn resize_rgb_on(
    path: ResamplePath,
    src: &[u8],
    (width, height): (usize, usize),
    (out_w, out_h): (usize, usize),
    window: Window,
    filter: Filter,
    scratch: &mut Vec<u8>,
    dst: &mut Vec<u8>,
) {
    assert_eq!(src.len(), width * height * 3, "source is RGB");
    window.check((out_w, out_h));
    let cols = (out_w != width).then(|| Coefficients::new(width, out_w, filter));
    let rows = (out_h != height).then(|| Coefficients::new(height, out_h, filter));
    let source = Plane {
        bytes: src,
        width,
        first_column: 0,
        first_row: 0,
    };
    dst.clear();
    dst.resize(window.width * window.height * 3, 0);
    match (&cols, &rows) {
        (None, None) => source.copy(window.rows(), window.columns(), dst),
        (Some(cols), None) => horizontal(path, &source, window.rows(), cols, window.columns(), dst),
        (None, Some(rows)) => vertical(path, &source, window.columns(), rows, window.rows(), dst),
        (Some(cols), Some(rows)) if vertical_first((width, height), (out_w, out_h)) => {
            // The window's rows, over the columns its horizontal taps read.
            let read = cols.reads(window.columns());
            scratch.clear();
            scratch.resize(read.len() * window.height * 3, 0);
            vertical(path, &source, read.clone(), rows, window.rows(), scratch);
            let middle = Plane {
                bytes: scratch,
                width: read.len(),
                first_column: read.start,
                first_row: window.y,
            };
            horizontal(path, &middle, window.rows(), cols, window.columns(), dst);
        }
        (Some(cols), Some(rows)) => {
            // The window's columns, over the rows its vertical taps read.
            let read = rows.reads(window.rows());
            scratch.clear();
            scratch.resize(window.width * read.len() * 3, 0);
            horizontal(path, &source, read.clone(), cols, window.columns(), scratch);
            let middle = Plane {
                bytes: scratch,
                width: window.width,
                first_column: window.x,
                first_row: read.start,
            };
            vertical(path, &middle, window.columns(), rows, window.rows(), dst);
        }
    }
}

/// Interleaved RGB rows of `width` pixels: the source, or the first
/// pass's result, whose pixel `(0, 0)` stands for `(first_column,
/// first_row)` of the image it was made from.
struct Plane<'a> {
    bytes: &'a [u8],
    width: usize,
    first_column: usize,
    first_row: usize,
}

impl Plane<'_> {
    /// The bytes of pixels `columns` of row `y` (both in the image's
    /// coordinates).
    fn row(&self, y: usize, columns: Range<usize>) -> &[u8] {
        let start = ((y - self.first_row) * self.width + columns.start - self.first_column) * 3;
        &self.bytes[start..start + columns.len() * 3]
    }

    fn copy(&self, rows: Range<usize>, columns: Range<usize>, out: &mut [u8]) {
        let stride = columns.len() * 3;
        for (y, out) in rows.zip(out.chunks_exact_mut(stride)) {
            out.copy_from_slice(self.row(y, columns.clone()));
        }
    }
}

/// Pillow's horizontal pass: output `columns` of each of `rows` into
/// `out` (RGB, `columns.len()` pixels a row).
fn horizontal(
    path: ResamplePath,
    src: &Plane<'_>,
    rows: Range<usize>,
    cols: &Coefficients,
    columns: Range<usize>,
    out: &mut [u8],
) {
    let stride = columns.len() * 3;
    let full = src.first_column..src.first_column + src.width;
    #[cfg(target_arch = "x86_64")]
    let paired = (path > ResamplePath::Scalar)
        .then(|| x86::PairedTaps::new(cols, columns.clone(), src.first_column));
    #[cfg(not(target_arch = "x86_64"))]
    let _ = path;
    for (y, out) in rows.zip(out.chunks_exact_mut(stride)) {
        // The leading columns through `pmaddwd` on the SIMD paths.
        #[cfg(target_arch = "x86_64")]
        let done = paired.as_ref().map_or(0, |paired| {
            let row_start = (y - src.first_row) * src.width * 3;
            x86::row(path, src.bytes, row_start, paired, out)
        });
        #[cfg(not(target_arch = "x86_64"))]
        let done = 0;
        horizontal_scalar(
            src.row(y, full.clone()),
            cols,
            src.first_column,
            columns.start + done..columns.end,
            &mut out[done * 3..],
        );
    }
}

/// Pillow's horizontal pass over one row whose first pixel is input pixel
/// `offset`, output `columns` into `out` (RGB), one pixel at a time: the
/// reference, and the path for CPUs or columns the `pmaddwd` kernel does
/// not take.
fn horizontal_scalar(
    row: &[u8],
    cols: &Coefficients,
    offset: usize,
    columns: Range<usize>,
    out: &mut [u8],
) {
    let bias = 1i32 << (PRECISION_BITS - 1);
    for (px, xx) in out.chunks_exact_mut(3).zip(columns) {
        let (xmin, k) = cols.taps(xx);
        let (mut r, mut g, mut b) = (bias, bias, bias);
        for (x, &w) in k.iter().enumerate() {
            let i = (xmin - offset + x) * 3;
            let p = &row[i..i + 3];
            r += i32::from(p[0]) * w;
            g += i32::from(p[1]) * w;
            b += i32::from(p[2]) * w;
        }
        px[0] = clip8(r);
        px[1] = clip8(g);
        px[2] = clip8(b);
    }
}

/// Pillow's vertical pass: output `rows` over `columns` into `out` (RGB,
/// `columns.len()` pixels a row), row by row: the same sums in the same
/// order as Pillow's per-pixel loop, integer and exact, so the compiler
/// vectorises across the row.
fn vertical(
    path: ResamplePath,
    src: &Plane<'_>,
    columns: Range<usize>,
    rows: &Coefficients,
    kept: Range<usize>,
    out: &mut [u8],
) {
    let stride = columns.len() * 3;
    let mut acc = vec![0i32; stride];
    for (yy, out) in kept.zip(out.chunks_exact_mut(stride)) {
        let (ymin, k) = rows.taps(yy);
        acc.fill(1 << (PRECISION_BITS - 1));
        for (y, &w) in k.iter().enumerate() {
            let row = src.row(ymin + y, columns.clone());
            match path {
                #[cfg(target_arch = "x86_64")]
                ResamplePath::Avx2 => x86::add_weighted_avx2(&mut acc, row, w),
                _ => add_weighted(&mut acc, row, w),
            }
        }
        match path {
            #[cfg(target_arch = "x86_64")]
            ResamplePath::Avx2 => x86::clip_into_avx2(out, &acc),
            _ => clip_into(out, &acc),
        }
    }
}

#[inline]
fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// `acc += row · w`, lane by lane; inlined into the AVX2 copy too.
#[inline(always)]
fn add_weighted(acc: &mut [i32], row: &[u8], w: i32) {
    for (a, &p) in acc.iter_mut().zip(row) {
        *a += i32::from(p) * w;
    }
}

/// Each accumulator's 8-bit result, as Pillow clips it.
#[inline(always)]
fn clip_into(out: &mut [u8], acc: &[i32]) {
    for (v, &a) in out.iter_mut().zip(acc) {
        *v = clip8(a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(width: usize, height: usize) -> Window {
        Window {
            x: 0,
            y: 0,
            width,
            height,
        }
    }

    fn noise(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i: usize| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
            .collect()
    }

    #[test]
    fn a_flat_image_stays_flat_and_same_size_is_a_copy() {
        let src = vec![77u8; 40 * 30 * 3];
        let (mut scratch, mut dst) = (Vec::new(), Vec::new());
        for filter in Filter::ALL {
            for out in [(17, 11), (11, 29), (90, 7)] {
                resize_rgb(
                    &src,
                    (40, 30),
                    out,
                    whole(out.0, out.1),
                    filter,
                    &mut scratch,
                    &mut dst,
                );
                assert!(dst.iter().all(|&v| v == 77), "{filter:?} {out:?}");
            }
        }
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

    /// Pillow 13's rule at its edges: strictly more than twice, and only
    /// when the height shrinks.
    #[test]
    fn the_vertical_pass_goes_first_when_the_height_shrinks_over_twice_as_much() {
        assert!(vertical_first((362, 725), (256, 512))); // 213 > 2 * 106
        assert!(!vertical_first((362, 724), (256, 512))); // 212 = 2 * 106
        assert!(!vertical_first((500, 375), (341, 256)));
        assert!(!vertical_first((159, 413), (256, 664))); // growing
        assert!(vertical_first((300, 900), (400, 100))); // width grows
        assert!(!vertical_first((300, 100), (400, 100)));
    }

    /// A window of the resize is that window of the whole resize, byte for
    /// byte, on every path, for every filter, shrinking and growing, with
    /// one axis or both resized, in both pass orders, at every offset of a
    /// sliding window; and every path gives the scalar path's bytes.
    #[test]
    fn a_window_is_the_same_pixels_as_the_whole_resize_on_every_path() {
        let paths: Vec<_> = ResamplePath::ALL
            .into_iter()
            .filter(|&p| p <= ResamplePath::best())
            .collect();
        let (mut scratch, mut reference, mut whole_dst, mut part) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut windows, mut vertical_firsts) = (0, 0);
        for (width, height) in [(53, 37), (37, 53), (9, 61)] {
            let src = noise(width * height * 3);
            for filter in Filter::ALL {
                for (out_w, out_h) in [(31, 22), (90, 61), (53, 20), (20, 37), (8, 12), (5, 50)] {
                    let size = ((width, height), (out_w, out_h));
                    vertical_firsts += usize::from(
                        width != out_w && height != out_h && vertical_first(size.0, size.1),
                    );
                    let all = whole(out_w, out_h);
                    resize_rgb_on(
                        ResamplePath::Scalar,
                        &src,
                        size.0,
                        size.1,
                        all,
                        filter,
                        &mut scratch,
                        &mut reference,
                    );
                    assert_eq!(reference.len(), out_w * out_h * 3);
                    for &path in &paths {
                        resize_rgb_on(
                            path,
                            &src,
                            size.0,
                            size.1,
                            all,
                            filter,
                            &mut scratch,
                            &mut whole_dst,
                        );
                        assert_eq!(whole_dst, reference, "{path:?} {filter:?} {size:?}");
                        let (cw, ch) = (out_w.min(17), out_h.min(13));
                        for y in (0..=out_h - ch).step_by(3) {
                            for x in (0..=out_w - cw).step_by(5) {
                                let window = Window {
                                    x,
                                    y,
                                    width: cw,
                                    height: ch,
                                };
                                resize_rgb_on(
                                    path,
                                    &src,
                                    size.0,
                                    size.1,
                                    window,
                                    filter,
                                    &mut scratch,
                                    &mut part,
                                );
                                for row in 0..ch {
                                    let want = &whole_dst[((y + row) * out_w + x) * 3
                                        ..((y + row) * out_w + x + cw) * 3];
                                    let got = &part[row * cw * 3..(row + 1) * cw * 3];
                                    assert_eq!(
                                        got, want,
                                        "{path:?} {filter:?} {size:?} at ({x}, {y})"
                                    );
                                }
                                windows += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(windows > 1000, "{windows} windows checked");
        assert!(
            vertical_firsts >= 8,
            "{vertical_firsts} vertical-first shapes"
        );
    }
}
