//! Pillow's convolution filters and its per-output-pixel weights
//! (`libImaging/Resample.c`: `precompute_coeffs` + `normalize_coeffs_8bpc`),
//! computed in `f64` as Pillow computes them, then rounded to 22-bit fixed
//! point.

/// Pillow's resampling filters that resize by convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Filter {
    /// `Image.BOX`: each output pixel the mean of the input pixels it
    /// covers, support ½.
    Box,
    /// `Image.BILINEAR`: the triangle, support 1.
    Bilinear,
    /// `Image.BICUBIC`: Keys' cubic with `a = -0.5`, support 2.
    Bicubic,
    /// `Image.LANCZOS`: 3-lobed Lanczos, support 3.
    Lanczos,
}

/// Pillow's `BICUBIC` kernel, shared with the model families (position
/// embeddings), which use no loader.
pub use pipeline_core::keys_cubic;

/// Fixed-point bits of a weight: `32 - 8 - 2`, room for 8-bit pixels and
/// two bits of overshoot (negative lobes).
pub(super) const PRECISION_BITS: u32 = 32 - 8 - 2;

impl Filter {
    #[cfg(test)]
    pub(crate) const ALL: [Filter; 4] = [
        Filter::Box,
        Filter::Bilinear,
        Filter::Bicubic,
        Filter::Lanczos,
    ];

    fn support(self) -> f64 {
        match self {
            Self::Box => 0.5,
            Self::Bilinear => 1.0,
            Self::Bicubic => 2.0,
            Self::Lanczos => 3.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        match self {
            Self::Box => {
                if x > -0.5 && x <= 0.5 {
                    1.0
                } else {
                    0.0
                }
            }
            Self::Bilinear => {
                let x = x.abs();
                if x < 1.0 { 1.0 - x } else { 0.0 }
            }
            Self::Bicubic => keys_cubic(x),
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

/// Per output pixel of one axis: the first input pixel and the
/// fixed-point weights.
pub(super) struct Coefficients {
    /// `(first input index, count)` per output index.
    pub(super) bounds: Vec<(usize, usize)>,
    /// `ksize` weights per output index.
    pub(super) weights: Vec<i32>,
    pub(super) ksize: usize,
}

impl Coefficients {
    /// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc` for a
    /// full-size box (`in0 = 0`, `in1 = in_size`).
    pub(super) fn new(in_size: usize, out_size: usize, filter: Filter) -> Self {
        let scale = in_size as f64 / out_size as f64;
        let filterscale = scale.max(1.0);
        let support = filter.support() * filterscale;
        let ksize = support.ceil() as usize * 2 + 1;
        let mut bounds = Vec::with_capacity(out_size);
        let mut weights = vec![0i32; out_size * ksize];
        let mut k = vec![0.0f64; ksize];
        let ss = 1.0 / filterscale;
        for xx in 0..out_size {
            let center = (xx as f64 + 0.5) * scale;
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
        Self {
            bounds,
            weights,
            ksize,
        }
    }

    /// Output pixel `xx`'s first input pixel and weights.
    pub(super) fn taps(&self, xx: usize) -> (usize, &[i32]) {
        let (first, count) = self.bounds[xx];
        (
            first,
            &self.weights[xx * self.ksize..xx * self.ksize + count],
        )
    }

    /// The input pixels that output pixels `outputs` read: from the first
    /// one's first tap to the last one's last.
    pub(super) fn reads(&self, outputs: std::ops::Range<usize>) -> std::ops::Range<usize> {
        let first = self.bounds[outputs.start].0;
        let (start, count) = self.bounds[outputs.end - 1];
        first..start + count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one_in_fixed_point() {
        for filter in Filter::ALL {
            for (from, to) in [(500, 256), (256, 500), (97, 13), (13, 97), (3, 1)] {
                let c = Coefficients::new(from, to, filter);
                for xx in 0..to {
                    let (_, k) = c.taps(xx);
                    let sum: i64 = k.iter().map(|&w| i64::from(w)).sum();
                    assert!(
                        (sum - (1 << PRECISION_BITS)).abs() <= k.len() as i64,
                        "{filter:?} {from}->{to} pixel {xx}"
                    );
                }
            }
        }
    }

    /// Box at an integer ratio is the plain mean of each block.
    #[test]
    fn box_at_an_integer_ratio_averages_each_block() {
        let c = Coefficients::new(12, 4, Filter::Box);
        for xx in 0..4 {
            let (first, k) = c.taps(xx);
            let nonzero: Vec<_> = k.iter().filter(|&&w| w != 0).collect();
            assert_eq!(first, 3 * xx);
            assert_eq!(nonzero.len(), 3, "{k:?}");
            assert!(nonzero.iter().all(|&&w| w == (1 << PRECISION_BITS) / 3 || w == (1 << PRECISION_BITS) / 3 + 1));
        }
    }
}
