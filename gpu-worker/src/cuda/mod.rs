//! The CUDA engine's house (#28). The engine itself (cuDNN convolutions,
//! cuBLASLt GEMMs, the model families on them) is not built yet: it needs
//! an NVIDIA GPU to be measured on, and `--engine cuda` says so. What runs
//! without one is here: finding and loading NVIDIA's libraries at run time
//! (`libs.rs`), the engine's own kernels, compiled by NVRTC
//! (`kernels.rs`), and the transformer families and ConvNeXt lowered to
//! the GEMMs, LayerNorms, attentions and convolutions it will run, over
//! weights packed at load time, with an f32 reference of each plan
//! checked against PyTorch (`plan/`).

pub mod kernels;
pub mod libs;
pub mod plan;
