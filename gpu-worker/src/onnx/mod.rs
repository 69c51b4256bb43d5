//! The ONNX Runtime engine (#41), for users' own models (`--model
//! FILE.onnx`). Built so far: finding and loading ONNX Runtime at run time
//! (`runtime.rs`), which `pipeline devices` reports, and what a model takes
//! and gives, read from its graph (`graph.rs`), with which the CLI refuses
//! a model it could never feed. **Not built yet:** the engine behind the
//! seam and `--model FILE.onnx` itself (the CLI says so in one line).

pub mod graph;
pub mod runtime;
