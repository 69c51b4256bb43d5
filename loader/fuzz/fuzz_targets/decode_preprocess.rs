//! Any bytes through the loader's per-item work (format sniffing, header
//! checks, decode under limits, resize, crop): it must return a crop or an
//! error, never panic, and never allocate past the limits (run with
//! `-malloc_limit_mb` just above `max_alloc_bytes`, see the README).
//! Odd-length inputs take the JPEG draft (reduced-DCT) path.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pipeline_core::{DecodeLimits, ModelKind};

fuzz_target!(|data: &[u8]| {
    let mut spec = ModelKind::Resnet50.default_preprocess();
    spec.jpeg_draft = data.len() % 2 == 1;
    let limits = DecodeLimits {
        max_pixels: 16_000_000,
        max_alloc_bytes: 256 << 20,
        max_file_bytes: 64 << 20,
    };
    let mut out = vec![0u8; 3 * 224 * 224];
    let _ = loader::load_bytes(data, &spec, &limits, &mut out);
});
