//! Any bytes through the loader's per-item work (format sniffing, header
//! checks, decode under limits, resize, crop): it must return a crop or an
//! error, never panic, and never allocate past the limits (run with
//! `-malloc_limit_mb` just above `max_alloc_bytes`, see
//! docs/architecture/testing.md, "Fuzzing the loader").
//! Odd-length inputs take the JPEG draft (reduced-DCT) path.
//!
//! Every crop it makes is made again on the scalar resampler path and
//! must be the same bytes (#39): the SIMD paths are exact by
//! construction, and this holds them to it on every shape the fuzzer
//! reaches. The filter and the crop rounding follow the input's length,
//! so all five of Pillow's filters are exercised.
//!
//! A third-party decoder that panics (the `tiff` crate does, on some
//! files) is caught by the loader's `load_into` and becomes a `decode`
//! record: the target catches it the same way. A panic in this
//! workspace's own code is still a finding.

#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use loader::{ResamplePath, force_resample_path};
use pipeline_core::{CropRounding, DecodeLimits, ModelKind, ResizeFilter};

thread_local! {
    /// Where the last panic happened.
    static PANIC_AT: RefCell<String> = const { RefCell::new(String::new()) };
}

fuzz_target!(|data: &[u8]| {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let at = info.location().map(|l| l.file().to_owned()).unwrap_or_default();
            PANIC_AT.with(|p| *p.borrow_mut() = format!("{at}: {info}"));
        }))
    });
    let mut spec = ModelKind::Resnet50.default_preprocess();
    spec.jpeg_draft = data.len() % 2 == 1;
    spec.filter = [
        ResizeFilter::Bilinear,
        ResizeFilter::Bicubic,
        ResizeFilter::Lanczos3,
        ResizeFilter::Box,
        ResizeFilter::Nearest,
    ][data.len() / 2 % 5];
    if data.len() / 10 % 2 == 1 {
        spec.crop_rounding = CropRounding::Floor;
    }
    let limits = DecodeLimits {
        max_pixels: 16_000_000,
        max_alloc_bytes: 256 << 20,
        max_file_bytes: 64 << 20,
    };
    // SSSE3 or AVX2 first (as far as the CPU goes), then the scalar path.
    let simd = [ResamplePath::Ssse3, ResamplePath::Avx2][data.len() / 20 % 2].min(ResamplePath::best());
    force_resample_path(Some(simd)).expect("the CPU runs it");
    let mut out = vec![0u8; 3 * 224 * 224];
    let run = std::panic::AssertUnwindSafe(|| loader::load_bytes(data, &spec, &limits, &mut out));
    let first = std::panic::catch_unwind(run);
    if matches!(first, Ok(Ok(()))) && simd > ResamplePath::Scalar {
        let mut scalar = vec![0u8; out.len()];
        force_resample_path(Some(ResamplePath::Scalar)).expect("every CPU runs the scalar path");
        let again = loader::load_bytes(data, &spec, &limits, &mut scalar);
        assert!(again.is_ok(), "the scalar path failed where {simd:?} did not");
        assert!(scalar == out, "the {simd:?} resampler and the scalar one differ");
    }
    if first.is_err() {
        let at = PANIC_AT.with(|p| p.borrow().clone());
        // Third-party crates live under the cargo registry.
        if !at.contains("/registry/src/") {
            panic!("a panic in the workspace's own code: {at}");
        }
    }
});
