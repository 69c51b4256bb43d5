//! One device's life: open an engine (its device and model, with the
//! model's weights), run batches, and back off when device memory runs
//! out. The top of the engine crates: the worker loop (`worker.rs`), the
//! out-of-memory backoff (`backoff.rs`), `--model-only` (`model_only.rs`),
//! the text encoder (`text/`), and the factory (`factory.rs`), the one
//! place that names an engine type.
//!
//! The worker talks to the `Engine` trait of `engine-seam`. Below it, each
//! a crate of its own under `gpu-worker/`: the engines (`engine-burn`,
//! `engine-cuda`, `engine-onnx`), NVIDIA's devices (`nvidia-devices`), the
//! model families (`model-families`) and the tokenizers
//! (`text-tokenizers`). This crate re-exports what the coordinator and the
//! CLI use, so they name none of them.

#![deny(missing_docs)]

mod backoff;
mod factory;
mod model_only;
pub mod text;
mod worker;

pub use backoff::{BatchSizeChange, ItemResult, MAX_START_BATCH, OomBackoff, start_batch};
pub use engine_burn::model::text::TextTower;
pub use engine_burn::{
    AdapterSummary, Architecture, BurnEngine, Model, NUM_CLASSES, adapters, checkpoint_layouts,
    device_for, gpu_index_by_pci, gpus, gpus_with_cuda_order, nvml_gpu_names, open, open_with,
    resolve_precision, same_pci_bus,
};
pub use engine_cuda as cuda;
pub use engine_onnx as onnx;
pub use engine_seam::{
    DeviceError, Engine, EngineError, InFlight, OpenError, PendingPass, PixelBatch, failpoints,
    predictions, python_env, top_k_of,
};
pub use factory::{cnn_plan, cnn_plan_seeded, cuda_wiring};
pub use model_families::WeightsError;
pub use model_families::convnext::ConvNextConfig;
pub use model_families::text::{TextConfig, TextPooling};
pub use model_families::vit::{Activation, Pooling, PosInterpolation, VitConfig};
pub use model_families::zero_shot;
pub use model_only::{ModelOnlyError, ModelOnlyRun, model_only};
pub use nvidia_devices::nvidia;
pub use worker::{PREFETCH_SPANS, SetupError, WorkerError, ignore_stop_signals, serve};
