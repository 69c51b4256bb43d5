//! The burn engine: the model families written for burn (`model/`) on a
//! burn device — `flex` for the CPU, the wgpu runtime on Vulkan for GPUs
//! and for Mesa's lavapipe — behind the worker's seam (`engine.rs`), and
//! the machine's GPU list, Vulkan's adapters joined with NVIDIA's GPUs by
//! PCI bus id, that `gpu:N` counts over (`device.rs`).
//!
//! It may use `pipeline-core`, `engine-seam`, `model-families`,
//! `nvidia-devices` (for the GPUs Vulkan cannot see) and burn; never the worker or another engine.
//! Nothing above it names burn: its CNN loader reaches the CUDA engine
//! as a function the worker hands over ([`lowered_cnn`]).

#![deny(missing_docs)]

pub mod device;
mod engine;
pub mod model;

pub use device::{
    AdapterSummary, adapters, device_for, gpu_index_by_pci, gpus, gpus_with_cuda_order,
    nvml_gpu_names, open, open_with, resolve_precision, same_pci_bus,
};
pub use engine::BurnEngine;
pub use model::{Architecture, Model, NUM_CLASSES, checkpoint_layouts, lowered_cnn};
