//! ONNX Runtime found and loaded at run time (#41 item 2), where users have
//! it: `scripts/test.sh` installs the `onnxruntime` wheel and sets
//! `PIPELINE_REQUIRE_ORT`, so in CI it must be found in that wheel (by the
//! search of pip's folders, not by a path given) and report its version and
//! execution providers.

use engine_onnx::runtime::{MIN_MINOR, onnx_runtime};

#[test]
fn onnx_runtime_loads_from_pips_wheel_with_its_version_and_providers() {
    let runtime = match onnx_runtime() {
        Ok(runtime) => runtime,
        Err(e) => {
            assert!(!e.contains('\n'), "{e}");
            assert!(
                std::env::var_os("PIPELINE_REQUIRE_ORT").is_none(),
                "ONNX Runtime must load here and did not: {e}"
            );
            eprintln!("skipped, no ONNX Runtime ({e})");
            return;
        }
    };
    let minor: u32 = runtime
        .version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("version {}", runtime.version));
    assert!(runtime.version.starts_with("1."), "{runtime:?}");
    assert!(minor >= MIN_MINOR, "{runtime:?}");
    assert!(
        runtime
            .providers
            .iter()
            .any(|p| p == "CPUExecutionProvider"),
        "{runtime:?}"
    );
    if std::env::var_os("PIPELINE_REQUIRE_ORT").is_some()
        && std::env::var_os("ORT_DYLIB_PATH").is_none()
    {
        assert!(
            runtime
                .library
                .contains("onnxruntime/capi/libonnxruntime.so"),
            "found in pip's wheel: {runtime:?}"
        );
    }
}
