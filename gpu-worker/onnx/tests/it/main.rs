//! The ONNX Runtime engine's integration tests, one binary: the runtime
//! found where users have it, models' graphs read, and the engine run over
//! the small models of `tests/models/` (`scripts/make_onnx_fixtures.py`).

mod common;
mod engine;
mod graph;
mod runtime;
