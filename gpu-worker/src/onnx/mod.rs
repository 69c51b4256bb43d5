//! The ONNX Runtime engine (#41), for users' own models (`--model
//! FILE.onnx`). Built so far: finding and loading ONNX Runtime at run time
//! (`runtime.rs`), which `pipeline devices` reports. **Not built yet:** the
//! engine behind the seam, the model's description from the graph, and
//! `--model FILE.onnx` itself (the CLI says so in one line).

pub mod runtime;
