//! One device's life: open an engine (its device and model, with the
//! model's weights), run batches (normalise on the device, forward, softmax
//! or pooled features), and back off when device memory runs out.
//!
//! The worker talks to the [`Engine`] trait (`engine.rs`). The burn engine
//! (`burn_engine/`, burn 0.22: `flex` for the CPU, the wgpu runtime on
//! Vulkan for GPUs and for Mesa's software adapter) runs the model families
//! written for it (`model/`); nothing else in this crate names burn.

#![deny(missing_docs)]

mod backoff;
mod burn_engine;
pub mod cuda;
mod engine;
pub mod failpoints;
mod model;
mod model_only;
pub mod nvidia;
pub mod onnx;
pub mod python_env;
pub mod text;
mod weights_error;
mod worker;
pub mod zero_shot;

pub use backoff::{BatchSizeChange, ItemResult, MAX_START_BATCH, OomBackoff, start_batch};
pub use burn_engine::BurnEngine;
pub use burn_engine::device::{
    AdapterSummary, adapters, device_for, gpu_index_by_pci, gpus, gpus_with_cuda_order,
    nvml_gpu_names, open, open_with, resolve_precision, same_pci_bus,
};
pub use engine::{
    DeviceError, Engine, EngineError, InFlight, OpenError, PendingPass, PixelBatch, predictions,
    top_k_of,
};
pub use model::convnext::ConvNextConfig;
pub use model::text::{TextConfig, TextPooling, TextTower};
pub use model::vit::{Activation, Pooling, PosInterpolation, VitConfig};
pub use model::{Architecture, Model, NUM_CLASSES, checkpoint_layouts};
pub use model_only::{ModelOnlyError, ModelOnlyRun, model_only};
pub use weights_error::WeightsError;
pub use worker::{PREFETCH_SPANS, SetupError, WorkerError, ignore_stop_signals, serve};
