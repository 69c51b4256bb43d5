//! Pillow's `Image.resize(…, NEAREST)`: not a convolution but an affine
//! scaling (`_imaging.c` `_resize` → `ImagingScaleAffine` in
//! `libImaging/Geometry.c`). Each axis's source position starts at half a
//! step and is *accumulated* in `f64`, step by step, then truncated, so the
//! indices follow that sum's rounding rather than `(x + ½) · step`'s.

use super::Window;

/// The source index Pillow reads for each of the first `upto` output
/// indices of one axis; `None` where it falls outside (Pillow leaves those
/// pixels 0).
fn source_indices(in_size: usize, out_size: usize, upto: usize) -> Vec<Option<usize>> {
    // `a[0] = (double)(box[2] - box[0]) / xsize`, the box in `float`.
    let step = f64::from(in_size as f32) / out_size as f64;
    let mut position = 0.0 + step * 0.5;
    (0..upto)
        .map(|_| {
            // `COORD(v)`: -1 below zero, else C's truncating `(int)`.
            let index = (position >= 0.0)
                .then_some(position as usize)
                .filter(|&i| i < in_size);
            position += step;
            index
        })
        .collect()
}

/// Resizes interleaved RGB `src` (`width × height`) to `out_w × out_h` as
/// Pillow's nearest neighbour does and writes the pixels of `window` into
/// `dst` (interleaved RGB, `window.width` a row).
pub(crate) fn resize_nearest_rgb(
    src: &[u8],
    (width, height): (usize, usize),
    (out_w, out_h): (usize, usize),
    window: Window,
    dst: &mut Vec<u8>,
) {
    assert_eq!(src.len(), width * height * 3, "source is RGB");
    window.check((out_w, out_h));
    let xs = source_indices(width, out_w, window.x + window.width);
    let ys = source_indices(height, out_h, window.y + window.height);
    dst.clear();
    dst.resize(window.width * window.height * 3, 0);
    let stride = window.width * 3;
    for (out_row, yi) in dst.chunks_exact_mut(stride).zip(&ys[window.y..]) {
        let Some(yi) = *yi else { continue };
        let row = &src[yi * width * 3..(yi + 1) * width * 3];
        for (px, xi) in out_row.chunks_exact_mut(3).zip(&xs[window.x..]) {
            if let Some(xi) = *xi {
                px.copy_from_slice(&row[xi * 3..xi * 3 + 3]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_pillows_for_halving_doubling_and_thirds() {
        let got = |i, o| -> Vec<usize> {
            source_indices(i, o, o)
                .into_iter()
                .map(|i| i.expect("inside"))
                .collect()
        };
        assert_eq!(got(8, 4), [1, 3, 5, 7]);
        assert_eq!(got(4, 8), [0, 0, 1, 1, 2, 2, 3, 3]);
        // step 1/3: 1/6, 1/2, 5/6, 7/6 … truncated.
        assert_eq!(got(2, 6), [0, 0, 0, 1, 1, 1]);
        assert_eq!(got(5, 5), [0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_window_is_the_same_pixels_as_the_whole_resize() {
        let src: Vec<u8> = (0..23 * 17 * 3).map(|i| (i * 7 % 256) as u8).collect();
        let (mut all, mut part) = (Vec::new(), Vec::new());
        for (ow, oh) in [(10, 7), (50, 40), (23, 5)] {
            let whole = Window {
                x: 0,
                y: 0,
                width: ow,
                height: oh,
            };
            resize_nearest_rgb(&src, (23, 17), (ow, oh), whole, &mut all);
            let window = Window {
                x: 2,
                y: 1,
                width: ow - 3,
                height: oh - 2,
            };
            resize_nearest_rgb(&src, (23, 17), (ow, oh), window, &mut part);
            for row in 0..window.height {
                let start = ((row + 1) * ow + 2) * 3;
                assert_eq!(
                    part[row * window.width * 3..(row + 1) * window.width * 3],
                    all[start..start + window.width * 3]
                );
            }
        }
    }
}
