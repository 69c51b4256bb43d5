//! Helpers the ONNX tests share.

use std::path::{Path, PathBuf};

/// A small ONNX model of `tests/models/` (`scripts/make_onnx_fixtures.py`).
pub(crate) fn onnx_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/models")
        .join(format!("{name}.onnx"))
}

/// Whether ONNX Runtime loaded; where it must (CI sets
/// `PIPELINE_REQUIRE_ORT`) and did not, a failure.
pub(crate) fn onnx_runtime_or_skip() -> bool {
    match engine_onnx::runtime::onnx_runtime() {
        Ok(_) => true,
        Err(e) => {
            assert!(
                std::env::var_os("PIPELINE_REQUIRE_ORT").is_none(),
                "ONNX Runtime must load here: {e}"
            );
            eprintln!("skipped, no ONNX Runtime ({e})");
            false
        }
    }
}
