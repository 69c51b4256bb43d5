//! The ONNX Runtime engine (#41), for users' own models (`--model
//! FILE.onnx`). Built so far: finding and loading ONNX Runtime at run time
//! (`runtime.rs`), which `pipeline devices` reports, and what a model takes
//! and gives, read from its graph (`graph.rs`), with which the CLI refuses
//! a model it could never feed, and the engine on ONNX Runtime's CPU
//! execution provider (`engine.rs`), tested on small models.
//! **Not built yet:** `--model FILE.onnx` itself (the CLI says so in one
//! line) and the CUDA execution provider.

pub mod engine;
pub mod graph;
pub mod runtime;
