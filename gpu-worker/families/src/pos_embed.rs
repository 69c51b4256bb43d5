//! Position embeddings on another grid than the checkpoint's: PyTorch's
//! bicubic resampling, as Hugging Face and DINOv2's hub code call it.

/// How position embeddings are resampled to another grid (bicubic, as
/// PyTorch's `interpolate(mode="bicubic", align_corners=False)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PosInterpolation {
    /// `size=(g, g)`: Hugging Face.
    Size,
    /// `scale_factor=(g + 0.1) / G`: DINOv2's torch-hub code.
    HubOffset,
    /// `size=(g, g), antialias=True`: transformers' DINOv2 with registers
    /// (PyTorch's antialiased bicubic: Keys' `a = -0.5`, the kernel
    /// widened by the scale when shrinking, cut at the border and
    /// renormalised, as Pillow's resampling).
    SizeAntialias,
}

/// Resamples a `[G, G, D]` grid (row-major, channels last) to `[g, g, D]`
/// with PyTorch's bicubic (`A = -0.75`, `align_corners=False`, border
/// indices clamped), computed in `f64`. A same-size grid is copied as is.
pub fn resample_grid(
    src: &[f32],
    from: usize,
    to: usize,
    dim: usize,
    mode: PosInterpolation,
) -> Vec<f32> {
    // Both upstreams skip the interpolation when the grids match.
    if from == to {
        return src[..from * from * dim].to_vec();
    }
    let scale = match mode {
        PosInterpolation::Size => from as f64 / to as f64,
        // PyTorch uses 1 / scale_factor when a scale factor is given.
        PosInterpolation::HubOffset => from as f64 / (to as f64 + 0.1),
        PosInterpolation::SizeAntialias => return resample_antialiased(src, from, to, dim),
    };
    let taps = |o: usize| -> ([usize; 4], [f64; 4]) {
        let real = scale * (o as f64 + 0.5) - 0.5;
        let base = real.floor();
        let t = real - base;
        let a = -0.75;
        let cubic1 = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
        let cubic2 = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
        let w = [cubic2(t + 1.0), cubic1(t), cubic1(1.0 - t), cubic2(2.0 - t)];
        let idx = |k: i64| (base as i64 + k).clamp(0, from as i64 - 1) as usize;
        ([idx(-1), idx(0), idx(1), idx(2)], w)
    };
    let mut out = vec![0.0f32; to * to * dim];
    for oy in 0..to {
        let (ys, wy) = taps(oy);
        for ox in 0..to {
            let (xs, wx) = taps(ox);
            for c in 0..dim {
                let mut acc = 0.0f64;
                for (j, &y) in ys.iter().enumerate() {
                    let mut row = 0.0f64;
                    for (i, &x) in xs.iter().enumerate() {
                        row += wx[i] * f64::from(src[(y * from + x) * dim + c]);
                    }
                    acc += wy[j] * row;
                }
                out[(oy * to + ox) * dim + c] = acc as f32;
            }
        }
    }
    out
}

/// PyTorch's `interpolate(size=(to, to), mode="bicubic",
/// align_corners=False, antialias=True)` of a `[from, from, dim]` grid,
/// separably, in `f64` (`_compute_indices_min_size_weights_aa`).
fn resample_antialiased(src: &[f32], from: usize, to: usize, dim: usize) -> Vec<f32> {
    let scale = from as f64 / to as f64;
    let (support, invscale) = if scale >= 1.0 {
        (2.0 * scale, 1.0 / scale)
    } else {
        (2.0, 1.0)
    };
    // Each output position's first input and weights, normalised.
    let taps: Vec<(usize, Vec<f64>)> = (0..to)
        .map(|o| {
            let center = scale * (o as f64 + 0.5);
            // C's truncating casts, then the bounds.
            let min = ((center - support + 0.5) as i64).max(0) as usize;
            let max = ((center + support + 0.5) as i64).min(from as i64) as usize;
            let mut w: Vec<f64> = (min..max)
                .map(|j| pipeline_core::keys_cubic((j as f64 - center + 0.5) * invscale))
                .collect();
            let total: f64 = w.iter().sum();
            if total != 0.0 {
                w.iter_mut().for_each(|v| *v /= total);
            }
            (min, w)
        })
        .collect();
    let mut out = vec![0.0f32; to * to * dim];
    for (oy, (y0, wy)) in taps.iter().enumerate() {
        for (ox, (x0, wx)) in taps.iter().enumerate() {
            for c in 0..dim {
                let mut acc = 0.0f64;
                for (j, w_y) in wy.iter().enumerate() {
                    let row: f64 = wx
                        .iter()
                        .enumerate()
                        .map(|(i, w_x)| w_x * f64::from(src[((y0 + j) * from + x0 + i) * dim + c]))
                        .sum();
                    acc += w_y * row;
                }
                out[(oy * to + ox) * dim + c] = acc as f32;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resampling_to_the_same_grid_with_size_is_the_identity() {
        let src: Vec<f32> = (0..2 * 2 * 3).map(|v| v as f32).collect();
        assert_eq!(resample_grid(&src, 2, 2, 3, PosInterpolation::Size), src);
    }

    #[test]
    fn bicubic_keeps_constants_and_ramps_inside() {
        // A constant grid stays constant (the weights sum to one).
        let src = vec![2.5f32; 8 * 8];
        let out = resample_grid(&src, 8, 5, 1, PosInterpolation::Size);
        assert!(out.iter().all(|v| (v - 2.5).abs() < 1e-6), "{out:?}");
        // A ramp, against torch.nn.functional.interpolate(mode="bicubic",
        // align_corners=False) by size and by scale factor (the hub's +0.1).
        let src: Vec<f32> = (0..16).map(|i| (i % 4) as f32).collect();
        let by_size = resample_grid(&src, 4, 8, 1, PosInterpolation::Size);
        let torch_size = [
            -0.105_468_75,
            0.191_406_25,
            0.667_968_75,
            1.296_875,
            1.703_125,
            2.332_031_3,
            2.808_593_8,
            3.105_468_8,
        ];
        for (got, want) in by_size[..8].iter().zip(torch_size) {
            assert!((got - want).abs() < 1e-6, "{by_size:?}");
        }
        let by_scale = resample_grid(&src, 4, 5, 1, PosInterpolation::HubOffset);
        let torch_scale = [
            -0.064_377_77,
            0.584_743_4,
            1.470_527_6,
            2.326_273_2,
            3.020_781,
        ];
        for (got, want) in by_scale[..5].iter().zip(torch_scale) {
            assert!((got - want).abs() < 1e-5, "{by_scale:?}");
        }
    }

    /// Antialiased bicubic against torch's `interpolate(..., antialias=True)`
    /// of a 6×6 grid, shrunk to 4×4 and grown to 9×9.
    #[test]
    fn antialiased_bicubic_is_torchs() {
        let src: Vec<f32> = (0..36)
            .map(|k| (((k / 6) * 7 + (k % 6) * 3) % 5) as f32 * 0.5 - 1.0)
            .collect();
        let down = resample_grid(&src, 6, 4, 1, PosInterpolation::SizeAntialias);
        let torch_down = [
            (
                0,
                [-0.482_226_83, -0.035_058_505, 0.450_950_802, -0.309_691_195],
            ),
            (
                2,
                [0.173_790_868, 0.299_688_796, -0.417_425_523, -0.035_058_505],
            ),
        ];
        for (row, want) in torch_down {
            for (got, want) in down[row * 4..row * 4 + 4].iter().zip(want) {
                assert!((f64::from(*got) - want).abs() < 1e-6, "{down:?}");
            }
        }
        let up = resample_grid(&src, 6, 9, 1, PosInterpolation::SizeAntialias);
        let torch_up = [
            (
                0,
                [
                    -1.175_294_321,
                    -0.214_009_288,
                    0.535_575_049,
                    -0.502_680_312,
                    0.266_447_368,
                    1.066_413_865,
                    0.151_513_767,
                    -0.663_699_69,
                    -1.131_578_947,
                ],
            ),
            (
                4,
                [
                    0.223_273_026,
                    0.518_382_353,
                    0.517_071_759,
                    -0.517_071_759,
                    -0.550_781_25,
                    -0.199_291_088,
                    -0.039_858_218,
                    0.147_058_824,
                    0.266_447_368,
                ],
            ),
        ];
        for (row, want) in torch_up {
            for (got, want) in up[row * 9..row * 9 + 9].iter().zip(want) {
                assert!((f64::from(*got) - want).abs() < 1e-6, "{up:?}");
            }
        }
    }
}
