//! Helpers shared by the integration tests.

// Each test binary includes this module and uses part of it.
#![allow(dead_code)]

use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};

/// One tensor for a `.safetensors` file: name, little-endian bytes, shape, dtype.
pub(crate) type RawTensor = (String, Vec<u8>, Vec<usize>, Dtype);

/// Writes `tensors` as a `.safetensors` file, as PyTorch users export them.
pub(crate) fn write_safetensors(path: &Path, tensors: &[RawTensor]) {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, bytes, shape, dtype)| {
            let view =
                TensorView::new(*dtype, shape.clone(), bytes).expect("consistent tensor view");
            (name.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).expect("write safetensors");
}

/// Runs `body` in a child process (this test binary, re-run on one test)
/// so that a driver crash is caught and reported instead of killing the
/// whole test run. Returns the signal that killed the child, if one did;
/// any other failure of the child fails the test, and so does a child that
/// did not run exactly the test named (a renamed test would run none, and
/// pass).
///
/// `module` is the caller's `module_path!()`: libtest names a test by its
/// path inside the test crate (`families::name` in the gathered binary),
/// which is the module path without the crate's own name.
pub(crate) fn in_child(module: &str, test: &str, body: impl FnOnce()) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    if std::env::var_os("PIPELINE_TEST_CHILD").is_some() {
        body();
        return None;
    }
    let test = &match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{test}"),
        None => test.to_owned(),
    };
    let exe = std::env::current_exe().expect("test binary path");
    let output = std::process::Command::new(exe)
        .args([
            test.as_str(),
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("PIPELINE_TEST_CHILD", "1")
        .output()
        .expect("re-run the test binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    if let Some(signal) = output.status.signal() {
        return Some(signal);
    }
    assert!(
        output.status.success(),
        "{test} failed in its child process:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        tests_passed(&stdout),
        Some(1),
        "the child process did not run exactly `{test}` (is the name in_child was given the \
         test's own?):\n{stdout}"
    );
    None
}

/// How many tests the libtest summary line in `stdout` says passed.
pub(crate) fn tests_passed(stdout: &str) -> Option<u32> {
    stdout.lines().find_map(|line| {
        line.strip_prefix("test result: ok. ")?
            .split(' ')
            .next()?
            .parse()
            .ok()
    })
}

/// GPU 0 for the CUDA engine's parity tests (#28), or `None` where none
/// opens: then opening one must have been a one-line error, and the test
/// is skipped, unless `PIPELINE_REQUIRE_GPU` is set, which makes it fail.
pub(crate) fn cuda_gpu_or_skip(test: &str) -> Option<gpu_worker::cuda::gpu::Gpu> {
    match gpu_worker::cuda::gpu::Gpu::open(0) {
        Ok(gpu) => Some(gpu),
        Err(e) => {
            let e = e.to_string();
            assert!(!e.contains('\n'), "{e}");
            assert!(
                std::env::var_os("PIPELINE_REQUIRE_GPU").is_none(),
                "{test}: a GPU must open here: {e}"
            );
            eprintln!("{test}: skipped, no GPU ({e})");
            None
        }
    }
}

/// The cosine between `a` and `b`.
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b)).max(1e-30)
}

/// The index of `v`'s largest value.
pub(crate) fn argmax(v: &[f32]) -> Option<usize> {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i)
}

/// The real EfficientNet-Lite0 ImageNet weights, fetched by
/// `scripts/fetch-weights.sh` (the test command runs it; on a GPU machine
/// `PIPELINE_WEIGHTS_DIR` names the folder carried there).
pub(crate) fn lite0_weights() -> std::path::PathBuf {
    let dir = std::env::var_os("PIPELINE_WEIGHTS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/weights"));
    let path = dir.join("efficientnet-lite0-57934424.pth");
    assert!(
        path.is_file(),
        "{} is missing: run scripts/fetch-weights.sh",
        path.display()
    );
    path
}

/// A hub fixture repo's model (`cli/tests/hub_repos/`): its transformers
/// or timm `config.json`, else open_clip's `open_clip_config.json`;
/// `None` without either.
pub(crate) fn hub_repo_config(dir: &Path) -> Option<Result<pipeline_core::HubConfig, String>> {
    if let Ok(text) = std::fs::read_to_string(dir.join("config.json")) {
        return Some(pipeline_core::hub_config(&text));
    }
    let text = std::fs::read_to_string(dir.join("open_clip_config.json")).ok()?;
    Some(pipeline_core::open_clip_config(&text).map(|(config, _)| config))
}

/// A hub fixture repo's weight file, as the tool picks it: one file, a
/// sharded checkpoint's index, a `.bin`, or open_clip's.
pub(crate) fn hub_repo_weights(dir: &Path) -> std::path::PathBuf {
    [
        "model.safetensors",
        "model.safetensors.index.json",
        "pytorch_model.bin",
        "open_clip_model.safetensors",
        "open_clip_pytorch_model.bin",
    ]
    .iter()
    .map(|name| dir.join(name))
    .find(|path| path.is_file())
    .unwrap_or_else(|| panic!("{}: no weights", dir.display()))
}
