//! The resampler's x86 paths: Pillow's horizontal pass with `pmaddwd`,
//! exact, four taps of one output pixel a 128-bit step where the scalar
//! pass does twelve multiply-adds; and the vertical pass's loops compiled
//! for AVX2. This is the one place in the loader with intrinsics, hence
//! `unsafe`: the CPU-feature contract of `#[target_feature]` (the caller's
//! [`ResamplePath`] is at most [`ResamplePath::best`], which detected the
//! features) and 16-byte loads whose bounds are checked by slicing first.
//!
//! Exactness: Pillow sums `pixel × weight` in `i32` with 22-bit weights,
//! too wide for `pmaddwd`'s 16-bit lanes. Each weight is split as
//! `w = hi · 2¹¹ + lo` with `lo ∈ [0, 2¹¹)` and `|hi| < 2¹²`, both 16-bit;
//! the two partial sums are combined as `(Σ p·hi) · 2¹¹ + Σ p·lo`, the same
//! integer as Pillow's `Σ p·w` (no partial overflows: `p < 2⁸`), so the
//! rounding and clipping that follow see the same number.

#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m128i, _mm_add_epi32, _mm_cvtsi128_si32, _mm_loadu_si128, _mm_madd_epi16, _mm_packs_epi32,
    _mm_packus_epi16, _mm_set1_epi32, _mm_setr_epi8, _mm_setzero_si128, _mm_shuffle_epi8,
    _mm_slli_epi32, _mm_srai_epi32,
};
use std::ops::Range;

use super::ResamplePath;
use super::coefficients::{Coefficients, PRECISION_BITS};

const SPLIT: u32 = 11;

/// Taps a step: four pixels of 3 bytes lie in one 16-byte load.
const GROUP: usize = 4;

/// The taps of the window's output columns, split and paired for
/// `pmaddwd`: per column and group of four taps, the words
/// `hi₀ | hi₁ << 16`, `hi₂ | hi₃ << 16`, `lo₀ | lo₁ << 16`,
/// `lo₂ | lo₃ << 16` (taps past a column's count weigh 0).
pub(super) struct PairedTaps {
    groups: usize,
    words: Vec<[i32; 4]>,
    first_byte: Vec<usize>,
}

impl PairedTaps {
    /// The taps of output `columns`, reading a row whose first pixel is
    /// input pixel `offset`.
    pub(super) fn new(cols: &Coefficients, columns: Range<usize>, offset: usize) -> Self {
        let widest = columns
            .clone()
            .map(|xx| cols.bounds[xx].1)
            .max()
            .unwrap_or(0);
        let groups = widest.div_ceil(GROUP).max(1);
        let mut words = Vec::with_capacity(columns.len() * groups);
        let mut first_byte = Vec::with_capacity(columns.len());
        for xx in columns {
            let (xmin, k) = cols.taps(xx);
            let tap = |i: usize| k.get(i).copied().unwrap_or(0);
            let pair = |a: i32, b: i32| (a & 0xffff) | (b << 16);
            for g in 0..groups {
                let w: [i32; GROUP] = std::array::from_fn(|i| tap(g * GROUP + i));
                let hi = w.map(|w| w >> SPLIT);
                let lo = w.map(|w| w & ((1 << SPLIT) - 1));
                words.push([
                    pair(hi[0], hi[1]),
                    pair(hi[2], hi[3]),
                    pair(lo[0], lo[1]),
                    pair(lo[2], lo[3]),
                ]);
            }
            first_byte.push((xmin - offset) * 3);
        }
        Self {
            groups,
            words,
            first_byte,
        }
    }

    /// How far past a column's first byte its last load reads.
    fn reach(&self) -> usize {
        (self.groups - 1) * GROUP * 3 + 16
    }
}

/// Fills `out` (RGB, one pixel per column of `taps`) from the row of `src`
/// that starts at `row_start`, as the scalar pass would, for the leading
/// columns whose loads lie inside `src`; returns how many it filled (a
/// column's padded taps may read past the row, never past `src`: the last
/// row's last columns are left to the scalar pass).
pub(super) fn row(
    path: ResamplePath,
    src: &[u8],
    row_start: usize,
    taps: &PairedTaps,
    out: &mut [u8],
) -> usize {
    assert!(
        path > ResamplePath::Scalar && path <= ResamplePath::best(),
        "the caller runs the kernel on a path this CPU has"
    );
    if path == ResamplePath::Avx2 {
        // SAFETY: AVX2 is present: the path is at most the CPU's best.
        unsafe { row_avx2(src, row_start, taps, out) }
    } else {
        // SAFETY: SSSE3 is present, likewise.
        unsafe { row_ssse3(src, row_start, taps, out) }
    }
}

/// The vertical pass's `acc += row · w` on AVX2 (eight 32-bit products an
/// instruction, where baseline x86-64's SSE2 has no 32-bit multiply).
pub(super) fn add_weighted_avx2(acc: &mut [i32], row: &[u8], w: i32) {
    assert!(
        ResamplePath::best() == ResamplePath::Avx2,
        "the caller runs AVX2 code on an AVX2 CPU"
    );
    // SAFETY: AVX2 is present, asserted above.
    unsafe { add_weighted_avx2_body(acc, row, w) }
}

#[target_feature(enable = "avx2")]
fn add_weighted_avx2_body(acc: &mut [i32], row: &[u8], w: i32) {
    super::add_weighted(acc, row, w);
}

/// Each accumulator's 8-bit result, on AVX2.
pub(super) fn clip_into_avx2(out: &mut [u8], acc: &[i32]) {
    assert!(
        ResamplePath::best() == ResamplePath::Avx2,
        "the caller runs AVX2 code on an AVX2 CPU"
    );
    // SAFETY: AVX2 is present, asserted above.
    unsafe { clip_into_avx2_body(out, acc) }
}

#[target_feature(enable = "avx2")]
fn clip_into_avx2_body(out: &mut [u8], acc: &[i32]) {
    super::clip_into(out, acc);
}

/// The same code with VEX encoding (three-operand forms, fewer moves).
#[target_feature(enable = "avx2")]
fn row_avx2(src: &[u8], row_start: usize, taps: &PairedTaps, out: &mut [u8]) -> usize {
    row_body(src, row_start, taps, out)
}

#[target_feature(enable = "ssse3")]
fn row_ssse3(src: &[u8], row_start: usize, taps: &PairedTaps, out: &mut [u8]) -> usize {
    row_body(src, row_start, taps, out)
}

/// The kernel; inlined into each caller, compiled for its features.
#[inline]
#[target_feature(enable = "ssse3")]
fn row_body(src: &[u8], row_start: usize, taps: &PairedTaps, out: &mut [u8]) -> usize {
    // 16-bit lanes r₀ r₁ g₀ g₁ b₀ b₁ 0 0 from pixels 0 and 1 of a load,
    // then from pixels 2 and 3, for `pmaddwd` against `w₀ w₁` pairs.
    let low_pair = _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    let high_pair = _mm_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
    let bias = _mm_set1_epi32(1 << (PRECISION_BITS - 1));
    let reach = taps.reach();
    let mut done = 0;
    for ((px, &first), words) in out
        .chunks_exact_mut(3)
        .zip(&taps.first_byte)
        .zip(taps.words.chunks_exact(taps.groups))
    {
        let start = row_start + first;
        if start + reach > src.len() {
            break;
        }
        let mut hi = _mm_setzero_si128();
        let mut lo = _mm_setzero_si128();
        for (g, w) in words.iter().enumerate() {
            let bytes: &[u8; 16] = src[start + g * GROUP * 3..][..16]
                .try_into()
                .expect("a 16-byte slice is 16 bytes");
            // SAFETY: `bytes` is 16 readable bytes; the load is unaligned.
            let p = unsafe { _mm_loadu_si128(bytes.as_ptr().cast::<__m128i>()) };
            let a = _mm_shuffle_epi8(p, low_pair);
            let b = _mm_shuffle_epi8(p, high_pair);
            hi = _mm_add_epi32(hi, _mm_madd_epi16(a, _mm_set1_epi32(w[0])));
            hi = _mm_add_epi32(hi, _mm_madd_epi16(b, _mm_set1_epi32(w[1])));
            lo = _mm_add_epi32(lo, _mm_madd_epi16(a, _mm_set1_epi32(w[2])));
            lo = _mm_add_epi32(lo, _mm_madd_epi16(b, _mm_set1_epi32(w[3])));
        }
        let sum = _mm_add_epi32(
            _mm_add_epi32(_mm_slli_epi32::<{ SPLIT as i32 }>(hi), lo),
            bias,
        );
        let shifted = _mm_srai_epi32::<{ PRECISION_BITS as i32 }>(sum);
        // Saturating packs: i32 → i16 → u8 is Pillow's clip to 0..=255.
        let packed = _mm_packus_epi16(_mm_packs_epi32(shifted, shifted), shifted);
        let rgb = _mm_cvtsi128_si32(packed).to_le_bytes();
        px.copy_from_slice(&rgb[..3]);
        done += 1;
    }
    done
}

#[cfg(test)]
mod tests {
    use super::super::{Filter, horizontal_scalar};
    use super::*;

    /// Rows that stress the kernel: noise, a 0/255 comb (the largest
    /// overshoot of bicubic's and Lanczos's negative lobes, so clipping
    /// both ways) and a ramp.
    fn image(width: usize, height: usize, seed: usize) -> Vec<u8> {
        (0..width * height * 3)
            .map(|i| match (i / (width * 3) + seed) % 3 {
                0 => ((i + seed).wrapping_mul(2_654_435_761) >> 9) as u8,
                1 => {
                    if (i / 3) % 2 == 0 {
                        0
                    } else {
                        255
                    }
                }
                _ => (i % 256) as u8,
            })
            .collect()
    }

    /// Every column the kernel fills equals the scalar pass's, on both x86
    /// paths, for every filter, shrinking (up to 55 taps) and growing,
    /// full rows and windows, rows read from their first pixel or from an
    /// offset; and it fills whole rows but for the last row's tail.
    #[test]
    fn the_kernel_equals_the_scalar_pass_to_the_byte() {
        assert!(
            ResamplePath::best() >= ResamplePath::Ssse3,
            "the CI machine runs SSSE3"
        );
        let mut columns_checked = 0;
        let paths = [ResamplePath::Ssse3, ResamplePath::Avx2];
        for path in paths.into_iter().filter(|&p| p <= ResamplePath::best()) {
            for filter in Filter::ALL {
                for (width, out_w) in [
                    (500, 298),
                    (4000, 298),
                    (97, 13),
                    (13, 97),
                    (7, 5),
                    (1, 3),
                    (3, 1),
                    (640, 224),
                    (301, 300),
                ] {
                    let height = 4;
                    let src = image(width, height, width + out_w);
                    let cols = Coefficients::new(width, out_w, filter);
                    for columns in [0..out_w, out_w / 3..out_w - out_w / 3] {
                        let offset = cols.reads(columns.clone()).start;
                        let taps = PairedTaps::new(&cols, columns.clone(), offset);
                        for y in 0..height {
                            let row_start = y * width * 3 + offset * 3;
                            let mut fast = vec![0u8; columns.len() * 3];
                            let mut slow = fast.clone();
                            let done = row(path, &src, row_start, &taps, &mut fast);
                            horizontal_scalar(
                                &src[y * width * 3 + offset * 3..(y + 1) * width * 3],
                                &cols,
                                offset,
                                columns.clone(),
                                &mut slow,
                            );
                            assert_eq!(
                                fast[..done * 3],
                                slow[..done * 3],
                                "{path:?} {filter:?} {width}->{out_w} columns {columns:?} row {y}"
                            );
                            if y + 1 < height && width * 3 >= 16 {
                                assert_eq!(done, columns.len(), "{filter:?} {width}->{out_w}");
                            }
                            columns_checked += done;
                        }
                    }
                }
            }
        }
        assert!(
            columns_checked > 20_000,
            "{columns_checked} columns checked"
        );
    }
}
