//! Inputs the fuzz targets (`loader/fuzz`) found, kept as regression tests:
//! each must stay a record or a reported problem, never a crash.

use std::path::PathBuf;

use loader::{Loader, LoaderConfig};
use pipeline_core::{DataSpec, DecodeLimits, InputFormat, ItemErrorKind, Location, ModelKind};

fn found(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_found")
        .join(name)
}

fn loader() -> Loader {
    Loader::new(LoaderConfig {
        threads: 1,
        batch_size: 1,
        spec: ModelKind::Resnet50.default_preprocess(),
        limits: DecodeLimits::default(),
        remote: Default::default(),
    })
    .expect("valid loader config")
}

/// `decode_preprocess`: a TIFF whose rows run past its buffer makes the
/// `tiff` crate panic; the loader's per-item path turns that into a
/// `decode` record.
#[test]
fn a_tiff_that_panics_its_decoder_is_a_decode_record() {
    let error = loader()
        .load_one(&found("tiff-row-stride-past-the-buffer.tif"))
        .expect_err("not an image");
    assert_eq!(error.kind, ItemErrorKind::Decode, "{error}");
}

/// `decode_preprocess`: a 1×11620 PNG (the fuzzer's was 703 bytes, with
/// a CRC its build does not check) would resize to 256×2974720, 2.3 GB:
/// `too_large`, before anything is allocated.
#[test]
fn a_strip_that_would_resize_past_the_pixel_limit_is_too_large() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("strip.png");
    image::RgbImage::new(1, 11620).save(&path).expect("a PNG");
    let error = loader()
        .load_one(&path)
        .expect_err("too large once resized");
    assert_eq!(error.kind, ItemErrorKind::TooLarge, "{error}");
    assert!(error.message.contains("--max-pixels"), "{error}");
}

/// `manifest_parsers`: a shard whose member's header claims more bytes than
/// the file holds keeps that member (it becomes an `io` record when read)
/// and says the shard is truncated.
#[test]
fn a_member_past_the_end_of_its_shard_is_kept_and_reported() {
    let path = found("member-past-the-end-of-its-shard.tar");
    let size = std::fs::metadata(&path).expect("the shard").len();
    let mut spec = DataSpec::new(path.to_string_lossy().into_owned());
    spec.format = Some(InputFormat::Webdataset);
    let manifest = loader::source::open(&spec, Default::default()).expect("a manifest");
    assert_eq!(manifest.entries.len(), 1);
    let Location::File {
        range: Some(range), ..
    } = manifest.entries.get(0).location
    else {
        panic!("a member's range");
    };
    assert!(range.offset + range.len > size, "{range:?} of {size} bytes");
    assert_eq!(manifest.problems.len(), 1, "{:?}", manifest.problems);
    assert!(
        manifest.problems[0].message.contains("truncated"),
        "{:?}",
        manifest.problems
    );
}
