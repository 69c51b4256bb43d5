//! The shared vocabulary of `pipeline`: what an item is, how one can fail,
//! how images are preprocessed and which limits guard decoding.
//!
//! This crate links neither burn nor `image`, so the coordinator, the loader
//! and the workers can all speak it without pulling in each other's weight.

#![deny(missing_docs)]

mod device;
mod item;
mod labels;
mod model;
mod preprocess;

pub use device::{DeviceSpec, UnknownDevice};
pub use item::{ItemError, ItemErrorKind, ItemIndex};
pub use labels::{IMAGENET_CLASSES, imagenet_label, imagenet_labels};
pub use model::{ClassScore, ModelKind, Prediction, Task, UnknownModel};
pub use preprocess::{DecodeLimits, Normalize, PreprocessSpec, ResizeFilter, SpecError};
