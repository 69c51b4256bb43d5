//! The CUDA engine. What runs without a GPU, and is tested here:
//! finding and loading NVIDIA's libraries at run time (`nvidia-devices`), the
//! engine's own kernels, compiled by NVRTC (`kernels.rs`), and every
//! family lowered to the GEMMs, LayerNorms, attentions and convolutions it
//! runs, over weights packed at load time, with an f32 reference of each
//! plan checked against PyTorch (`plan/`).
//!
//! Written without a GPU, then **run on an H100** (2026-11-26: every
//! family passed against its reference, BENCHMARKS.md): one GPU driven through cuBLASLt and the kernels
//! (`gpu.rs`) and cuDNN's convolutions (`cudnn.rs`), the transformer
//! encoder on it (`encoder_run.rs`), every family's forward pass (the
//! ViT image towers in `vit_run.rs`, the ResNets and EfficientNet-Lite0
//! in `cnn_run.rs`, ConvNeXt in `convnext_run.rs`, the text towers in
//! `text_run.rs`), held to the plans' references by `gpu-worker/tests/cuda_gpu.rs`
//! wherever a GPU opens (`scripts/cuda-kit.sh` carries it there), and the
//! engine behind the worker's seam (`engine.rs`, `--engine cuda`) and
//! behind `embed-text --engine cuda`, which check one input against the
//! reference at every start.

#![deny(missing_docs)]

mod bind;
pub mod cnn_run;
pub mod convnext_run;
mod cudnn;
mod encoder_run;
pub mod engine;
pub mod gpu;
pub mod kernels;
pub mod plan;
pub mod text_run;
pub mod vit_run;
pub mod zero_shot_head;

pub use engine::{GpuAddress, Wiring};
pub use nvidia_devices::{libs, nvidia};
pub use plan::LowerCnn;

/// The oldest compute capability the CUDA engine runs, `(8, 0)`
/// (Ampere): its attention kernel's tensor-core `mma.sync.m16n8k16` on
/// f16 needs sm_80 (Turing's 7.5 has only the `m16n8k8` shape, Volta's
/// 7.0 no such instruction), older than any architecture NVRTC may still
/// compile for. `Gpu::open` refuses a GPU below it and `--engine auto`
/// keeps such a GPU on Vulkan, both from this one number.
pub const MIN_COMPUTE_CAPABILITY: (i32, i32) = (8, 0);
