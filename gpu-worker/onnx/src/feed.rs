//! How the ONNX engine feeds a model (#41): the loader's NCHW bytes as the
//! graph's image input takes them (f32 or f16 normalised, or the bytes; NCHW
//! or NHWC; RGB or BGR), each byte through its channel's table of the 256
//! values it becomes, the rows past the batch's real ones zero images.
//!
//! The values are written on rayon's threads into a buffer the engine keeps
//! between passes, which ONNX Runtime reads in place: on the CPU the model's
//! threads wait for the feed, and a fresh 19 MB buffer per pass of 32 images
//! (zeroed, then filled by one thread) was an eighth of a light model's
//! time (BENCHMARKS.md, "ONNX models: the feed, and what bounds end to
//! end").

use half::f16;
use ort::session::SessionInputValue;
use ort::value::TensorRef;
use pipeline_core::Channels;
use rayon::prelude::*;

use super::graph::{ImageInput, Layout, PixelType};
use engine_seam::PixelBatch;

/// The input's values, kept between passes (each pass writes every value
/// it feeds).
#[derive(Default)]
pub(super) struct Buffer {
    f32s: Vec<f32>,
    f16s: Vec<f16>,
    bytes: Vec<u8>,
}

/// `batch`'s images as the input takes them, `run` images from `first`
/// (zero images past the batch's real rows), written into `buffer`: each
/// byte through its channel's table of the 256 values it becomes.
pub(super) fn tensor<'b>(
    buffer: &'b mut Buffer,
    input: &ImageInput,
    channels: Channels,
    batch: &PixelBatch<'_>,
    first: usize,
    run: usize,
) -> ort::Result<SessionInputValue<'b>> {
    let side = batch.side;
    let shape = match input.layout {
        Layout::Nchw => [run, 3, side, side],
        Layout::Nhwc => [run, side, side, 3],
    };
    let n = batch.normalize;
    let normalised = |s: usize, b: u8| (f32::from(b) - n.mean[s]) / n.std[s];
    let to = Fill {
        layout: input.layout,
        channels,
        batch,
        first,
        run,
    };
    match input.pixels {
        PixelType::F32 => {
            // Looked up: half the time of computing each value here.
            let table: [[f32; 256]; 3] =
                std::array::from_fn(|s| std::array::from_fn(|b| normalised(s, b as u8)));
            to.fill(&mut buffer.f32s, |s, b| table[s][usize::from(b)]);
            TensorRef::from_array_view((shape, &buffer.f32s[..])).map(Into::into)
        }
        PixelType::F16 => {
            let halves: [[f16; 256]; 3] = std::array::from_fn(|s| {
                std::array::from_fn(|b| f16::from_f32(normalised(s, b as u8)))
            });
            to.fill(&mut buffer.f16s, |s, b| halves[s][usize::from(b)]);
            TensorRef::from_array_view((shape, &buffer.f16s[..])).map(Into::into)
        }
        PixelType::U8 => {
            to.fill(&mut buffer.bytes, |_, b| b);
            TensorRef::from_array_view((shape, &buffer.bytes[..])).map(Into::into)
        }
    }
}

/// `run` images of `batch` from `first`, in the input's layout and
/// channel order.
struct Fill<'a, 'b> {
    layout: Layout,
    channels: Channels,
    batch: &'a PixelBatch<'b>,
    first: usize,
    run: usize,
}

impl Fill<'_, '_> {
    /// `values` as the `run` images: byte `b` of picture channel `s` as
    /// `value(s, b)`, rows past the batch as zero bytes; every value
    /// written, on rayon's threads (a plane, or an NHWC image row, each).
    fn fill<T: Copy + Default + Send + Sync>(
        &self,
        values: &mut Vec<T>,
        value: impl Fn(usize, u8) -> T + Sync,
    ) {
        let side = self.batch.side;
        let plane = side * side;
        let image = 3 * plane;
        values.resize(self.run * image, T::default());
        // Picture channel `s`'s bytes of batch row `row`, from `offset`;
        // `None` past the real rows.
        let source = |row: usize, s: usize, offset: usize, len: usize| {
            (row < self.batch.rows)
                .then(|| &self.batch.pixels[row * image + s * plane + offset..][..len])
        };
        match self.layout {
            Layout::Nchw => {
                values
                    .par_chunks_exact_mut(plane)
                    .enumerate()
                    .for_each(|(k, out)| {
                        let s = self.channels.source(k % 3);
                        match source(self.first + k / 3, s, 0, plane) {
                            Some(src) => {
                                for (v, &b) in out.iter_mut().zip(src) {
                                    *v = value(s, b);
                                }
                            }
                            None => out.fill(value(s, 0)),
                        }
                    });
            }
            Layout::Nhwc => {
                values
                    .par_chunks_exact_mut(3 * side)
                    .with_min_len(16)
                    .enumerate()
                    .for_each(|(k, out)| {
                        let (row, y) = (self.first + k / side, k % side);
                        for c in 0..3 {
                            let s = self.channels.source(c);
                            let out = out[c..].iter_mut().step_by(3);
                            match source(row, s, y * side, side) {
                                Some(src) => {
                                    for (v, &b) in out.zip(src) {
                                        *v = value(s, b);
                                    }
                                }
                                None => out.for_each(|v| *v = value(s, 0)),
                            }
                        }
                    });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use pipeline_core::{Channels, Normalize};

    use super::{Fill, Layout};
    use engine_seam::PixelBatch;

    /// What the input holds at (image `i`, model channel `c`, `y`, `x`) of
    /// a run from `first`: the picture channel's byte through its table,
    /// a zero byte past the batch's rows.
    fn expected(
        batch: &PixelBatch<'_>,
        layout: Layout,
        channels: Channels,
        first: usize,
        run: usize,
    ) -> Vec<u16> {
        let side = batch.side;
        let mut want = vec![u16::MAX; run * 3 * side * side];
        for i in 0..run {
            for c in 0..3 {
                let s = channels.source(c);
                for y in 0..side {
                    for x in 0..side {
                        let row = first + i;
                        let byte = if row < batch.rows {
                            batch.pixels[((row * 3 + s) * side + y) * side + x]
                        } else {
                            0
                        };
                        let at = match layout {
                            Layout::Nchw => ((i * 3 + c) * side + y) * side + x,
                            Layout::Nhwc => ((i * side + y) * side + x) * 3 + c,
                        };
                        want[at] = table(s, byte);
                    }
                }
            }
        }
        want
    }

    /// A value that names its channel and byte.
    fn table(s: usize, b: u8) -> u16 {
        (s as u16) << 8 | u16::from(b)
    }

    /// Every layout, channel order, side, batch and run (the first, the
    /// middle and the padded last of a fixed batch, or the whole padded
    /// batch) gets each value from its own byte, through one buffer kept
    /// across the passes as the engine keeps it, so a value a pass did not
    /// write would show the last pass's.
    #[test]
    fn every_value_comes_from_its_own_byte_in_a_reused_buffer() {
        let normalize = Normalize::imagenet();
        let mut seed = 7u32;
        let mut checked = 0;
        for layout in [Layout::Nchw, Layout::Nhwc] {
            for channels in [Channels::Rgb, Channels::Bgr] {
                let mut buffer = Vec::new();
                for (side, rows, padded, fixed) in [
                    (5, 3, 4, None),
                    (5, 3, 5, Some(2)),
                    (3, 1, 1, Some(1)),
                    (7, 4, 8, None),
                    (1, 2, 3, Some(3)),
                    (5, 2, 3, Some(2)),
                    (4, 1, 1, Some(2)),
                ] {
                    let pixels: Vec<u8> = (0..rows * 3 * side * side)
                        .map(|_| {
                            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                            (seed >> 24) as u8
                        })
                        .collect();
                    let batch = PixelBatch::new(&pixels, rows, padded, side, &normalize);
                    let run: usize = fixed.unwrap_or(padded);
                    for first in (0..padded).step_by(run) {
                        let to = Fill {
                            layout,
                            channels,
                            batch: &batch,
                            first,
                            run,
                        };
                        to.fill(&mut buffer, table);
                        let want = expected(&batch, layout, channels, first, run);
                        assert_eq!(
                            buffer, want,
                            "{layout:?} {channels:?} side {side}, {rows} rows of {padded}, run {run} from {first}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 4 * 10);
    }
}
