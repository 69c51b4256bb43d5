//! The trial of ONNX Runtime's CUDA provider that `--gpus all` makes for
//! an ONNX model runs in a child process (`pipeline probe-onnx-cuda`), so
//! that the coordinator holds no CUDA context or memory on a GPU.

use std::process::Command;

/// Where the CUDA provider cannot start (no GPU visible to it, whatever
/// the runtime), the child says why in one line and exits 2, which the
/// coordinator reads as "run the CPU". Where ONNX Runtime is CPU-only
/// (CI), the same.
#[test]
fn the_cuda_provider_trial_says_in_one_line_why_it_cannot_start() {
    if !super::runtime_or_skip() {
        return;
    }
    let runtime = gpu_worker::onnx::runtime::onnx_runtime()
        .as_ref()
        .expect("ONNX Runtime loads")
        .library
        .clone();
    let model = super::model("classifier_known");
    let run = Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .arg("probe-onnx-cuda")
        .arg(&model)
        .args(["--runtime", &runtime])
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .expect("pipeline runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    // A CPU-only runtime refuses the provider; a GPU build with no GPU
    // visible fails to make the session on it: each names CUDA.
    assert!(
        last.starts_with("pipeline: error: ") && last.contains("CUDA"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("pipeline: error: ").count(), 1, "{stderr}");
}
