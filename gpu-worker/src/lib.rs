//! One device's life: open it, build the model and load its weights, run
//! batches (normalise on the device, forward, softmax or pooled features),
//! and back off when device memory runs out.
//!
//! Devices are burn 0.22 runtime `Device`s: `flex` for the CPU, the wgpu
//! runtime on Vulkan for GPUs and for Mesa's software adapter.

#![deny(missing_docs)]

mod backoff;
mod checkpoint;
mod device;
mod engine;
pub mod failpoints;
mod model;
mod model_only;
mod weights;
mod weights_error;
mod worker;
pub mod zero_shot;

pub use backoff::{BatchSizeChange, ItemResult, MAX_START_BATCH, OomBackoff, start_batch};
pub use device::{
    AdapterSummary, DeviceError, adapters, device_for, gpu_index_by_pci, gpus, nvml_gpu_names,
    open, open_with, resolve_precision, same_pci_bus,
};
pub use engine::{Engine, EngineError, InFlight, top_k_of};
pub use model::convnext::ConvNextConfig;
pub use model::vit::{Activation, Pooling, PosInterpolation, VitConfig};
pub use model::{Architecture, Model, NUM_CLASSES, checkpoint_layouts};
pub use model_only::{ModelOnlyError, ModelOnlyRun, model_only};
pub use weights_error::WeightsError;
pub use worker::{PREFETCH_SPANS, SetupError, WorkerError, ignore_stop_signals, serve};
