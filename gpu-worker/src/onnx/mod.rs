//! The ONNX Runtime engine (#41), for users' own models (`--model
//! FILE.onnx`): finding and loading ONNX Runtime at run time
//! (`runtime.rs`), which `pipeline devices` reports; what a model takes and
//! gives, read from its graph (`graph.rs`), with which the CLI refuses a
//! model it could never feed; the engine on ONNX Runtime's CPU execution
//! provider (`engine.rs`), and `--task raw`'s per-image slices of every
//! output (`raw.rs`). **Not built yet:** the CUDA execution provider.

pub mod engine;
pub mod graph;
pub mod raw;
pub mod runtime;
