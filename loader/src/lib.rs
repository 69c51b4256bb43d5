//! Turning image paths into ready batches: read, decode, convert to RGB,
//! resize and centre-crop exactly as torchvision does on PIL images, and pack
//! into `u8` NCHW batches that carry their item indices.
//!
//! Decoding runs on a rayon pool of a chosen size; finished batches wait in a
//! bounded crossbeam channel ([`BATCH_QUEUE_CAPACITY`]) so a slow consumer
//! slows the decoders down instead of growing memory. A bad item is an
//! [`ItemError`](pipeline_core::ItemError) in its batch, never a panic.

#![deny(missing_docs)]

mod batch;
mod decode;
pub mod exact_jpeg;
mod fetch;
mod jpeg_simd;
mod preprocess;
pub mod remote;
mod resample;
pub mod source;
mod stream;
pub mod synthetic;

pub use batch::{Batch, WorkGroup, WorkItem};
pub use decode::{RgbImage, decode_rgb};
pub use jpeg_simd::{JpegDecoder, jpeg_decoder};
pub use preprocess::Preprocessor;
pub use resample::{ResamplePath, force_resample_path, keys_cubic, resample_path};
pub use stream::{
    BATCH_QUEUE_CAPACITY, BatchStream, DecoderPriority, FETCH_QUEUE_MIN, Loader, LoaderConfig,
    LoaderError, Ready, load_bytes,
};
