//! The model families every engine shares, with no engine and no device:
//! what each architecture is ([`Architecture`]: networks' shapes and
//! configs), the checkpoint files (`.pth`, `.safetensors`, sharded) and
//! the upstream layouts their tensors are named in, the canonical tensors
//! a model takes ([`tensors::Tensors`]), zero-shot class matrices, and a
//! CNN lowered to host data ([`lowered::CnnGraph`]).
//!
//! It may use `pipeline-core` and crates that read files; never an engine
//! crate, burn, cudarc or ort.

#![deny(missing_docs)]

pub mod architecture;
pub mod checkpoint;
pub mod clip_config;
pub mod convnext;
pub mod layout;
pub mod lowered;
pub mod pos_embed;
pub mod resnet;
pub mod tensors;
pub mod text;
pub mod transformer;
pub mod vit;
pub mod weights_error;
pub mod zero_shot;

pub use architecture::{Architecture, checkpoint_layouts};
pub use weights_error::WeightsError;
