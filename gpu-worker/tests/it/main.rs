//! gpu-worker's integration tests, one binary: each module was a test
//! binary of its own, and each linked the whole dependency tree again
//! (burn, cudarc, ort). Gathered, they link once; they still run in
//! parallel, as the tests inside one binary always did, and the tests that
//! drive lavapipe still re-run themselves in a child process
//! (`common::in_child`). Two stay binaries of their own: `cuda_gpu.rs`,
//! which the GPU kit ships alone to a GPU machine, and `oom.rs`, whose
//! failpoints are process-wide and would reach every engine test beside it.

#[path = "../common/mod.rs"]
mod common;

mod families;
mod hub_plans;
mod overlap;
mod parity;
mod text;
mod tokenizers;
mod weights;
mod zero_shot_head;
