//! Helpers shared by the integration tests.

use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};

/// One tensor for a `.safetensors` file: name, little-endian bytes, shape, dtype.
pub(crate) type RawTensor = (String, Vec<u8>, Vec<usize>, Dtype);

/// Writes `tensors` as a `.safetensors` file, as PyTorch users export them.
pub(crate) fn write_safetensors(path: &Path, tensors: &[RawTensor]) {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, bytes, shape, dtype)| {
            let view =
                TensorView::new(*dtype, shape.clone(), bytes).expect("consistent tensor view");
            (name.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).expect("write safetensors");
}
