//! cli's integration tests, one binary: each module was a test binary of
//! its own, and each linked the whole dependency tree again. Gathered, they
//! link once; they still run in parallel, as the tests inside one binary
//! always did, and each drives the real `pipeline` binary
//! (`common::pipeline`). Test names carry their module (`infer::…`).

mod common;

mod bench;
mod cli;
mod faults;
mod house;
mod hub;
mod infer;
mod inputs;
mod keep;
mod limits;
mod network;
mod onnx;
mod outputs;
mod preprocess;
mod remote_urls;
mod shards;
mod slurm;
mod text;
mod update;
