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
}

/// Resamples a `[G, G, D]` grid (row-major, channels last) to `[g, g, D]`
/// with PyTorch's bicubic (`A = -0.75`, `align_corners=False`, border
/// indices clamped), computed in `f64`. A same-size grid is copied as is.
pub(crate) fn resample_grid(
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
}
