//! Pillow 13's resize after the decode, written once in C
//! ([`EXACT_RESAMPLE_H`]) as the JPEG arithmetic is: the integer passes the
//! `--decode gpu` kernels run per output pixel (each tap's channel times its
//! fixed-point weight, rounded and clipped to 8 bits, in Pillow 13's pass
//! order). The weights (doubles, and `sin` for LANCZOS) stay on the host,
//! computed once per size: `host_resample.c` ports Pillow's
//! `precompute_coeffs` for the host build. The tests hold that build to the
//! loader's own resize (itself Pillow's to the byte), windows of it
//! included, as the loader computes only the centre crop.

/// The C source of the resize passes, for NVRTC after
/// [`EXACT_JPEG_H`](super::EXACT_JPEG_H)
/// (whose types and qualifier it uses).
pub const EXACT_RESAMPLE_H: &str = include_str!("exact_resample.h");

/// Pillow's filters that resize by convolution, numbered as
/// `host_resample.c` numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeFilter {
    /// `Image.BOX`.
    Box = 0,
    /// `Image.BILINEAR`.
    Bilinear = 1,
    /// `Image.BICUBIC`.
    Bicubic = 2,
    /// `Image.LANCZOS`.
    Lanczos = 3,
}

/// The part of the resized image computed: `width × height` pixels from
/// `(x, y)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResizeWindow {
    /// First column.
    pub x: u32,
    /// First row.
    pub y: u32,
    /// Columns.
    pub width: u32,
    /// Rows.
    pub height: u32,
}

/// Pillow's `Image.resize((out_width, out_height), filter)` of interleaved
/// RGB `src` (`width × height`), only `window` of it (RGB, `window.width`
/// pixels a row), through the host build of [`EXACT_RESAMPLE_H`]: the
/// kernels' work, on the host. `None` where the sizes do not fit together
/// or memory runs out.
pub fn resize_rgb_window(
    src: &[u8],
    (width, height): (u32, u32),
    (out_width, out_height): (u32, u32),
    window: ResizeWindow,
    filter: ResizeFilter,
) -> Option<Vec<u8>> {
    let fits = width > 0
        && height > 0
        && src.len() as u64 == u64::from(width) * u64::from(height) * 3
        && window.width > 0
        && window.height > 0
        && u64::from(window.x) + u64::from(window.width) <= u64::from(out_width)
        && u64::from(window.y) + u64::from(window.height) <= u64::from(out_height);
    if !fits {
        return None;
    }
    ffi::resize(
        src,
        (width, height),
        (out_width, out_height),
        window,
        filter,
    )
}

#[allow(unsafe_code)]
mod ffi {
    use super::{ResizeFilter, ResizeWindow};
    use std::ffi::c_int;

    unsafe extern "C" {
        fn ej_host_resize_rgb(
            src: *const u8,
            width: u32,
            height: u32,
            out_width: u32,
            out_height: u32,
            filter: c_int,
            wx: u32,
            wy: u32,
            ww: u32,
            wh: u32,
            dst: *mut u8,
        ) -> c_int;
    }

    pub(super) fn resize(
        src: &[u8],
        (width, height): (u32, u32),
        (out_width, out_height): (u32, u32),
        window: ResizeWindow,
        filter: ResizeFilter,
    ) -> Option<Vec<u8>> {
        let mut dst = vec![0u8; window.width as usize * window.height as usize * 3];
        // SAFETY: `src` holds width × height RGB pixels and the window lies
        // inside the out_width × out_height image (checked by the caller);
        // the shim reads `src` only at the taps of that window's pixels,
        // which Pillow's weights keep inside the image, and writes
        // window.width × window.height RGB pixels, the length of `dst`.
        let status = unsafe {
            ej_host_resize_rgb(
                src.as_ptr(),
                width,
                height,
                out_width,
                out_height,
                filter as c_int,
                window.x,
                window.y,
                window.width,
                window.height,
                dst.as_mut_ptr(),
            )
        };
        (status == 0).then_some(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resample::{Filter, Window, resize_rgb};

    fn env_number(name: &str, default: u64) -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    fn side(rng: &mut fastrand::Rng) -> u32 {
        const EDGES: [u32; 12] = [1, 2, 3, 7, 8, 9, 15, 16, 17, 224, 225, 256];
        match rng.u8(0..10) {
            0..=2 => EDGES[rng.usize(..EDGES.len())],
            3..=6 => rng.u32(1..120),
            _ => rng.u32(1..700),
        }
    }

    /// Every window of every resize: the loader's bytes, on every pass
    /// order (vertical first included), filter and axis that changes.
    #[test]
    fn the_kernels_resize_is_the_loaders_over_the_seeded_space() {
        let seed = env_number("PIPELINE_EXACT_JPEG_SEED", 14);
        let count = env_number("PIPELINE_EXACT_JPEG_IMAGES", 1500);
        let mut rng = fastrand::Rng::with_seed(seed);
        let filters = [
            (ResizeFilter::Box, Filter::Box),
            (ResizeFilter::Bilinear, Filter::Bilinear),
            (ResizeFilter::Bicubic, Filter::Bicubic),
            (ResizeFilter::Lanczos, Filter::Lanczos),
        ];
        let (mut failures, mut vertical_first) = (Vec::new(), 0);
        let (mut scratch, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..count {
            let (width, height) = (side(&mut rng), side(&mut rng));
            let (out_width, out_height) = match rng.u8(0..10) {
                0 => (width, side(&mut rng)),
                1 => (side(&mut rng), height),
                _ => (side(&mut rng), side(&mut rng)),
            };
            let (ours_filter, their_filter) = filters[rng.usize(..4)];
            let src: Vec<u8> = if rng.bool() {
                (0..width * height * 3).map(|_| rng.u8(..)).collect()
            } else {
                crate::synthetic::synthetic_rgb(width, height, rng.u64(..)).into_raw()
            };
            let window = if rng.u8(0..3) == 0 {
                ResizeWindow {
                    x: 0,
                    y: 0,
                    width: out_width,
                    height: out_height,
                }
            } else {
                let (w, h) = (rng.u32(1..=out_width), rng.u32(1..=out_height));
                ResizeWindow {
                    x: rng.u32(0..=out_width - w),
                    y: rng.u32(0..=out_height - h),
                    width: w,
                    height: h,
                }
            };
            vertical_first += usize::from(
                out_width != width
                    && crate::resample::vertical_first(
                        (width as usize, height as usize),
                        (out_width as usize, out_height as usize),
                    ),
            );
            let ours = resize_rgb_window(
                &src,
                (width, height),
                (out_width, out_height),
                window,
                ours_filter,
            );
            resize_rgb(
                &src,
                (width as usize, height as usize),
                (out_width as usize, out_height as usize),
                Window {
                    x: window.x as usize,
                    y: window.y as usize,
                    width: window.width as usize,
                    height: window.height as usize,
                },
                their_filter,
                &mut scratch,
                &mut theirs,
            );
            if ours.as_deref() != Some(&theirs[..]) {
                failures.push(format!(
                    "{width}x{height} -> {out_width}x{out_height} {ours_filter:?} {window:?}"
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "{} resizes differ from the loader's (seed {seed}):\n{}",
            failures.len(),
            failures[..failures.len().min(20)].join("\n")
        );
        assert!(vertical_first > count as usize / 10, "{vertical_first}");
    }

    #[test]
    fn a_window_outside_the_image_is_refused() {
        let src = vec![9u8; 4 * 4 * 3];
        let window = ResizeWindow {
            x: 3,
            y: 0,
            width: 2,
            height: 1,
        };
        assert_eq!(
            resize_rgb_window(&src, (4, 4), (4, 2), window, ResizeFilter::Bicubic),
            None
        );
        assert!(!EXACT_RESAMPLE_H.contains("#include"));
    }
}
