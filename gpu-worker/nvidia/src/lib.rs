//! NVIDIA's GPUs and libraries as the driver sees them, with no engine:
//! the GPUs from NVML or the CUDA driver's queries, without a context and
//! without Vulkan (`gpus.rs`, re-exported as `nvidia`), and where NVIDIA's
//! libraries are and which load (`libs.rs`). The burn engine numbers its
//! GPUs over this list; the CUDA engine opens its GPU and loads its
//! libraries through it; `pipeline devices` reports both.
//!
//! It may use `engine-seam` (for the Python folders the libraries' wheels
//! sit in), `cudarc`'s driver queries and NVML; never an engine.

#![deny(missing_docs)]

pub mod gpus;
pub mod libs;

pub use gpus as nvidia;
