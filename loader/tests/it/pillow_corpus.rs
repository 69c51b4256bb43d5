//! Pillow's own test images — real broken, truncated, fuzzer-found and
//! decompression-bomb files, 531 of them in the formats `pipeline` scans —
//! through the loader's per-item path (read, decode, preprocess), under
//! tight decode limits. Every file must come back as a crop or an error of
//! a sensible kind, never a crash or a hang, and the process's peak memory
//! must stay within what the limits allow.
//!
//! The files come from `scripts/fetch-pillow-images.sh` (the README's test
//! command runs it). This test is alone in its binary so that the peak RSS
//! it reads is its own.

use std::collections::BTreeMap;
use std::path::PathBuf;

use loader::{Loader, LoaderConfig};
use pipeline_core::{DecodeLimits, ItemErrorKind, ModelKind, PreprocessSpec};

const MIB: u64 = 1 << 20;

fn corpus() -> PathBuf {
    let dir = std::env::var_os("PIPELINE_PILLOW_IMAGES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/pillow-images"),
        PathBuf::from,
    );
    assert!(
        dir.join(".complete").is_file(),
        "{} is missing: run scripts/fetch-pillow-images.sh",
        dir.display()
    );
    dir
}

/// The process's peak resident set (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM in /proc/self/status")
        * 1024
}

#[test]
fn every_pillow_test_image_is_a_crop_or_an_error_record_within_the_memory_limits() {
    let dir = corpus();
    let limits = DecodeLimits {
        max_pixels: 16_000_000,
        max_alloc_bytes: 128 * MIB,
        max_file_bytes: 64 * MIB,
    };
    let loader = Loader::new(LoaderConfig {
        threads: 1,
        batch_size: 1,
        spec: ModelKind::Resnet50.default_preprocess(),
        limits,
        remote: Default::default(),
    })
    .expect("valid loader config");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("corpus folder")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.file_name().is_none_or(|n| n != ".complete"))
        .collect();
    files.sort();
    assert!(files.len() > 500, "{} files", files.len());

    let before = peak_rss();
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut outcome = BTreeMap::new();
    for file in &files {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        let result = loader.load_one(file);
        if let Err(e) = &result
            && std::env::var_os("PILLOW_CORPUS_VERBOSE").is_some()
        {
            eprintln!("{name}: {e}");
        }
        let kind = match result {
            Ok(crop) => {
                assert_eq!(crop.len(), 3 * 224 * 224, "{name}");
                "ok".to_owned()
            }
            Err(e) => {
                assert!(!e.message.is_empty(), "{name}");
                e.kind.to_string()
            }
        };
        *kinds.entry(kind.clone()).or_default() += 1;
        outcome.insert(name.to_owned(), kind);
    }
    let peak = peak_rss();
    eprintln!(
        "kinds: {kinds:?}; peak RSS {} MiB (before {} MiB)",
        peak / MIB,
        before / MIB
    );

    // Files whose fate is known from their names and Pillow's own tests.
    let expect = |name: &str, kind: ItemErrorKind| {
        assert_eq!(
            outcome.get(name).map(String::as_str),
            Some(kind.as_str()),
            "{name}"
        );
    };
    // A 32×32 screen whose frame data ends early.
    expect("decompression_bomb.gif", ItemErrorKind::Decode);
    expect("truncated_image.png", ItemErrorKind::Decode);
    expect("truncated_jpeg.jpg", ItemErrorKind::Decode);
    expect("broken.png", ItemErrorKind::Decode);
    expect("zero_width.gif", ItemErrorKind::Decode);
    // Pillow opens these (libjpeg skips junk between segments), so must we.
    let good = [
        "hopper.jpg",
        "hopper.png",
        "hopper.gif",
        "hopper.webp",
        "hopper.bmp",
        "junk_jpeg_header.jpg",
        "photoshop-200dpi-broken.jpg",
    ];
    for good in good {
        assert_eq!(outcome.get(good).map(String::as_str), Some("ok"), "{good}");
    }
    // Most of the corpus is valid images in odd modes; they must decode.
    assert!(
        kinds.get("ok").copied().unwrap_or(0) > files.len() as u64 / 2,
        "{kinds:?}"
    );
    // Kinds a file can have; `oom` and `worker_crash` belong to devices.
    for kind in kinds.keys() {
        assert!(
            ["ok", "decode", "unsupported", "too_large", "io"].contains(&kind.as_str()),
            "{kind}"
        );
    }
    // One image at a time: the largest allowed decode, its RGB copy and the
    // resize buffers, over what the process held before.
    let allowed = before + 2 * limits.max_alloc_bytes + 64 * MIB;
    assert!(
        peak <= allowed,
        "peak RSS {} MiB over the {} MiB the limits allow",
        peak / MIB,
        allowed / MIB
    );

    // Draft mode goes through libjpeg-turbo (C), whose errors unwind
    // through C frames: every JPEG again, with a target small enough that
    // draft engages on all but the tiniest, must come back as a crop or an
    // error, and the files Pillow opens must still open.
    let draft = Loader::new(LoaderConfig {
        threads: 1,
        batch_size: 1,
        spec: PreprocessSpec {
            resize_shorter: 16,
            crop: 16,
            jpeg_draft: true,
            ..ModelKind::Resnet50.default_preprocess()
        },
        limits,
        remote: Default::default(),
    })
    .expect("valid loader config");
    let jpegs: Vec<&PathBuf> = files
        .iter()
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| ["jpg", "jpeg"].contains(&e.to_ascii_lowercase().as_str()))
        })
        .collect();
    assert!(jpegs.len() > 50, "{} JPEGs", jpegs.len());
    let mut draft_kinds: BTreeMap<String, u64> = BTreeMap::new();
    for file in jpegs {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        let kind = match draft.load_one(file) {
            Ok(crop) => {
                assert_eq!(crop.len(), 3 * 16 * 16, "{name}");
                "ok".to_owned()
            }
            Err(e) => e.kind.to_string(),
        };
        if [
            "hopper.jpg",
            "junk_jpeg_header.jpg",
            "photoshop-200dpi-broken.jpg",
        ]
        .contains(&name)
        {
            assert_eq!(kind, "ok", "{name} in draft mode");
        }
        if name == "truncated_jpeg.jpg" {
            assert_eq!(kind, "decode", "{name} in draft mode");
        }
        *draft_kinds.entry(kind).or_default() += 1;
    }
    eprintln!("draft mode, JPEGs: {draft_kinds:?}");
    assert!(
        draft_kinds.get("ok").copied().unwrap_or(0) > 50,
        "{draft_kinds:?}"
    );
}
