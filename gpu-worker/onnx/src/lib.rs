//! The ONNX Runtime engine, for users' own models (`--model
//! FILE.onnx`): finding and loading ONNX Runtime at run time
//! (`runtime.rs`), which `pipeline devices` reports; what a model takes and
//! gives, read from its graph (`graph.rs`), with which the CLI refuses a
//! model it could never feed; the files a model keeps its weights in beside
//! it (`external.rs`); the engine on ONNX Runtime's CPU execution
//! provider, or its CUDA provider on NVIDIA GPUs (untested on a GPU: the
//! machines lent carry ONNX Runtime's CPU build), `engine.rs`, with its
//! feed of the loader's bytes (`feed.rs`); and `--task raw`'s choice of
//! outputs and per-image slices (`raw.rs`).
//!
//! It may use `engine-seam`, `pipeline-core` and `ort`; never the
//! worker, another engine, burn or cudarc.

#![deny(missing_docs)]

pub mod engine;
pub mod external;
mod feed;
pub mod graph;
pub mod raw;
pub mod runtime;
