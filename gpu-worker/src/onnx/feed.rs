//! How the ONNX engine feeds a model (#41): the loader's NCHW bytes as the
//! graph's image input takes them (f32 or f16 normalised, or the bytes; NCHW
//! or NHWC; RGB or BGR), each byte through its channel's table of the 256
//! values it becomes, the rows past the batch's real ones zero images.

use half::f16;
use ort::value::Tensor;
use pipeline_core::Channels;

use super::graph::{ImageInput, Layout, PixelType};
use crate::engine::PixelBatch;

/// `batch`'s images as the input takes them, `run` images from `first`
/// (zero images past the batch's real rows): each byte through its
/// channel's table of the 256 values it becomes.
pub(super) fn tensor(
    input: &ImageInput,
    channels: Channels,
    batch: &PixelBatch<'_>,
    first: usize,
    run: usize,
) -> ort::Result<ort::value::DynValue> {
    let side = batch.side;
    let shape = match input.layout {
        Layout::Nchw => [run, 3, side, side],
        Layout::Nhwc => [run, side, side, 3],
    };
    let n = batch.normalize;
    let table = |to: &dyn Fn(usize, u8) -> f32| -> [[f32; 256]; 3] {
        std::array::from_fn(|c| std::array::from_fn(|b| to(c, b as u8)))
    };
    let normalised = table(&|c, b| (f32::from(b) - n.mean[c]) / n.std[c]);
    match input.pixels {
        PixelType::F32 => {
            let values = fill(input.layout, channels, batch, first, run, &normalised);
            Tensor::from_array((shape, values)).map(Tensor::into_dyn)
        }
        PixelType::F16 => {
            let halves = normalised.map(|t| t.map(f16::from_f32));
            let values = fill(input.layout, channels, batch, first, run, &halves);
            Tensor::from_array((shape, values)).map(Tensor::into_dyn)
        }
        PixelType::U8 => {
            let bytes: [[u8; 256]; 3] = [std::array::from_fn(|b| b as u8); 3];
            let values = fill(input.layout, channels, batch, first, run, &bytes);
            Tensor::from_array((shape, values)).map(Tensor::into_dyn)
        }
    }
}

/// `run` images from `first` in the input's layout and channel order,
/// byte `b` of picture channel `s` as `tables[s][b]`; rows past the
/// batch are zero bytes.
fn fill<T: Copy + Default>(
    layout: Layout,
    channels: Channels,
    batch: &PixelBatch<'_>,
    first: usize,
    run: usize,
    tables: &[[T; 256]; 3],
) -> Vec<T> {
    let plane = batch.side * batch.side;
    let image = 3 * plane;
    let zeros = vec![0u8; plane];
    let mut values = vec![T::default(); run * image];
    for (i, out) in values.chunks_exact_mut(image).enumerate() {
        let row = first + i;
        for c in 0..3 {
            let s = channels.source(c);
            let table = &tables[s];
            let src = if row < batch.rows {
                &batch.pixels[row * image + s * plane..][..plane]
            } else {
                &zeros[..]
            };
            match layout {
                Layout::Nchw => {
                    for (v, &b) in out[c * plane..][..plane].iter_mut().zip(src) {
                        *v = table[usize::from(b)];
                    }
                }
                Layout::Nhwc => {
                    for (v, &b) in out[c..].iter_mut().step_by(3).zip(src) {
                        *v = table[usize::from(b)];
                    }
                }
            }
        }
    }
    values
}
