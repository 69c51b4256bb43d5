//! The loader against the outside world: torchvision's reference crops,
//! real broken files, many threads, a slow consumer.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fixtures::{DatasetSpec, generate, jpeg_photo};
use loader::{
    BATCH_QUEUE_CAPACITY, Batch, FETCH_QUEUE_MIN, Loader, LoaderConfig, WorkGroup, WorkItem,
};
use pipeline_core::{DecodeLimits, ItemErrorKind, PreprocessSpec, ResizeFilter};
use serde::Deserialize;

fn loader(threads: usize, batch_size: usize, spec: PreprocessSpec) -> Loader {
    Loader::new(LoaderConfig {
        threads,
        batch_size,
        spec,
        limits: DecodeLimits::default(),
        remote: Default::default(),
    })
    .expect("valid loader config")
}

#[derive(Deserialize)]
struct Vectors {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    input: String,
    resize: u32,
    crop: u32,
    filter: String,
    expected: String,
}

/// Each crop is byte-identical to torchvision's `Resize(n) + CenterCrop(m)`
/// on the same PIL image: JPEGs decode with libjpeg-turbo as in Pillow, and
/// the resize is Pillow's fixed-point algorithm. One documented exception:
/// CMYK JPEGs (rare) convert to RGB through the `image` crate, within ±1.
/// The opt-in fast path (`--fast-preprocess`) stays within ±4 for JPEGs and
/// ±1 otherwise, mean ≤ 0.5.
#[test]
fn crops_match_torchvision_reference_vectors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let json =
        std::fs::read_to_string(dir.join("vectors.json")).expect("vectors.json is committed");
    let vectors: Vectors = serde_json::from_str(&json).expect("vectors.json parses");
    assert!(vectors.cases.len() >= 20, "the vector set was truncated");
    let mut report = Vec::new();
    let mut failed = Vec::new();
    for (case, fast) in vectors
        .cases
        .iter()
        .flat_map(|case| [(case, false), (case, true)])
    {
        let spec = PreprocessSpec {
            resize_shorter: case.resize,
            crop: case.crop,
            filter: match case.filter.as_str() {
                "bilinear" => ResizeFilter::Bilinear,
                "bicubic" => ResizeFilter::Bicubic,
                other => panic!("unknown filter {other} in vectors.json"),
            },
            fast,
            ..PreprocessSpec::default()
        };
        let got = loader(1, 1, spec)
            .load_one(&dir.join(&case.input))
            .unwrap_or_else(|e| panic!("{}: {e}", case.input));
        let expected = image::open(dir.join(&case.expected))
            .expect("expected crop decodes")
            .into_rgb8();
        assert_eq!(
            expected.dimensions(),
            (case.crop, case.crop),
            "{}",
            case.expected
        );
        let side = case.crop as usize;
        let mut max = 0u8;
        let mut sum = 0u64;
        for (i, px) in expected.as_raw().chunks_exact(3).enumerate() {
            for c in 0..3 {
                let d = px[c].abs_diff(got[c * side * side + i]);
                max = max.max(d);
                sum += u64::from(d);
            }
        }
        let mean = sum as f64 / (3 * side * side) as f64;
        // --fast-preprocess: zune-jpeg and fast_image_resize round
        // differently from libjpeg-turbo and Pillow, by a few levels.
        let (tolerance, mean_limit) = match (fast, case.input.ends_with(".jpg")) {
            (false, _) => (u8::from(case.input.contains("cmyk")), 0.01),
            (true, true) => (4, 0.5),
            (true, false) => (1, 0.5),
        };
        let mode = if fast { "fast" } else { "exact" };
        report.push(format!(
            "{:<60} {mode:<5} max {max:>3} mean {mean:.3}",
            case.expected
        ));
        if max > tolerance || mean > mean_limit {
            failed.push(format!(
                "{} ({mode}): max {max} > {tolerance} or mean {mean:.3} > {mean_limit}",
                case.expected
            ));
        }
    }
    println!("{}", report.join("\n"));
    assert!(
        failed.is_empty(),
        "crops differ from torchvision:\n{}",
        failed.join("\n")
    );
}

/// Drops the thread's DAC override so mode-000 files are unreadable even
/// for root; returns false when that is not possible.
fn drop_dac_override() -> bool {
    use caps::{CapSet, Capability};
    for cap in [
        Capability::CAP_DAC_OVERRIDE,
        Capability::CAP_DAC_READ_SEARCH,
    ] {
        if caps::has_cap(None, CapSet::Effective, cap).unwrap_or(false)
            && caps::drop(None, CapSet::Effective, cap).is_err()
        {
            return false;
        }
    }
    true
}

#[test]
fn every_broken_case_gives_its_error_kind() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dataset = generate(
        tmp.path(),
        &DatasetSpec {
            images: 0,
            ..DatasetSpec::default()
        },
    )
    .expect("fixtures generate");
    let kinds: Vec<ItemErrorKind> = dataset.broken.iter().map(|b| b.expected).collect();
    for kind in [
        ItemErrorKind::NotFound,
        ItemErrorKind::Permission,
        ItemErrorKind::Decode,
        ItemErrorKind::Unsupported,
        ItemErrorKind::TooLarge,
    ] {
        assert!(kinds.contains(&kind), "fixtures lack a {kind} case");
    }
    let cases = dataset.broken.clone();
    // Capabilities are per thread: run the cases on a thread of our own.
    let outcomes = std::thread::spawn(move || {
        assert!(
            drop_dac_override(),
            "cannot drop CAP_DAC_OVERRIDE for the permission case"
        );
        let loader = loader(1, 1, PreprocessSpec::default());
        cases
            .iter()
            .map(|case| {
                (
                    case.path.clone(),
                    case.expected,
                    loader.load_one(&case.path),
                )
            })
            .collect::<Vec<_>>()
    })
    .join()
    .expect("broken cases never panic");
    for (path, expected, outcome) in outcomes {
        match outcome {
            Err(e) => assert_eq!(e.kind, expected, "{}: {e}", path.display()),
            Ok(_) => panic!("{} loaded, expected {expected}", path.display()),
        }
    }
}

#[test]
fn every_item_comes_out_exactly_once_under_many_threads() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dataset = generate(
        tmp.path(),
        &DatasetSpec {
            images: 60,
            ..DatasetSpec::default()
        },
    )
    .expect("fixtures generate");
    let mut paths: Vec<PathBuf> = dataset.good.clone();
    paths.extend(
        dataset
            .broken
            .iter()
            .filter(|b| !b.needs_unprivileged)
            .map(|b| b.path.clone()),
    );
    paths.sort();
    let spec = PreprocessSpec {
        resize_shorter: 64,
        crop: 56,
        ..PreprocessSpec::default()
    };
    let items: Vec<WorkItem> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| WorkItem::file(i as u64, p))
        .collect();
    // Groups of uneven sizes, batches that do not divide them.
    let mut groups = Vec::new();
    let mut rest = &items[..];
    let mut id = 0;
    while !rest.is_empty() {
        let take = (id % 4 + 3).min(rest.len() as u64) as usize;
        groups.push(WorkGroup {
            id,
            items: rest[..take].to_vec(),
        });
        rest = &rest[take..];
        id += 1;
    }
    let n_groups = groups.len() as u64;
    let reference = loader(1, 1, spec.clone());
    let mut stream = loader(8, 4, spec).stream(groups).expect("stream starts");
    let mut seen = Vec::new();
    let mut done_groups = Vec::new();
    let mut last_group = 0;
    for batch in stream.by_ref() {
        assert!(batch.group >= last_group, "groups come out in order");
        last_group = batch.group;
        assert!(batch.item_count() <= 4);
        assert_eq!(batch.pixels.len(), batch.indices.len() * batch.image_len());
        let mut in_batch: Vec<u64> = batch.indices.clone();
        in_batch.extend(batch.failures.iter().map(|(i, _)| *i));
        in_batch.sort_unstable();
        seen.extend(in_batch);
        for (row, &index) in batch.indices.iter().enumerate() {
            // Rows were compacted around failures: each row is its own image.
            let alone = reference
                .load_one(&paths[index as usize])
                .expect("good image loads alone");
            assert!(alone == batch.image(row), "row {row} is not item {index}");
        }
        if batch.group_done {
            done_groups.push(batch.group);
        }
    }
    stream.finish().expect("producer ends cleanly");
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "an item came out twice");
    assert_eq!(
        sorted,
        (0..items.len() as u64).collect::<Vec<_>>(),
        "an item is missing"
    );
    assert_eq!(seen, sorted, "items come out in input order");
    assert_eq!(done_groups, (0..n_groups).collect::<Vec<_>>());
}

#[test]
fn a_slow_consumer_holds_the_decoders_back() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dataset = generate(
        tmp.path(),
        &DatasetSpec {
            images: 12,
            broken: false,
            ..DatasetSpec::default()
        },
    )
    .expect("fixtures generate");
    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&pulled);
    // More one-item groups than the fetch stage may hold, so that an
    // unbounded fetch thread would pull them all.
    const GROUPS: usize = 4 * FETCH_QUEUE_MIN;
    let files = dataset.good.clone();
    let groups = (0..GROUPS).map(move |i| {
        counter.fetch_add(1, Ordering::SeqCst);
        WorkGroup {
            id: i as u64,
            items: vec![WorkItem::file(i as u64, &files[i % files.len()])],
        }
    });
    let spec = PreprocessSpec {
        resize_shorter: 32,
        crop: 32,
        ..PreprocessSpec::default()
    };
    let mut stream = loader(2, 1, spec).stream(groups).expect("stream starts");
    let first: Batch = stream.next().expect("a first batch");
    assert_eq!(first.indices, vec![0]);
    // Give an unbounded producer ample time to run ahead.
    std::thread::sleep(Duration::from_millis(500));
    let ahead = pulled.load(Ordering::SeqCst);
    // One consumed, CAPACITY queued, one blocked in `send`; the fetch
    // stage holds at most FETCH_QUEUE_MIN items (1 per group here) and one
    // blocked in its `send`.
    let bound = 1 + BATCH_QUEUE_CAPACITY + 1 + FETCH_QUEUE_MIN + 1;
    assert!(
        ahead <= bound,
        "the loader pulled {ahead} groups ahead of a consumer that took one (bound {bound})"
    );
    assert_eq!(stream.by_ref().count(), GROUPS - 1);
    stream.finish().expect("producer ends cleanly");
}

#[test]
fn draft_mode_decodes_big_jpegs_close_to_full_decode() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let path = tmp.path().join("big.jpg");
    std::fs::write(&path, jpeg_photo(2400, 1600, 3, 90).expect("encode")).expect("write");
    let full = loader(1, 1, PreprocessSpec::default())
        .load_one(&path)
        .expect("full decode");
    let draft_spec = PreprocessSpec {
        jpeg_draft: true,
        ..PreprocessSpec::default()
    };
    let image =
        loader::decode_rgb(&path, &draft_spec, &DecodeLimits::default()).expect("draft decode");
    // 2400x1600 towards 384x256: the 1/4 scale (600x400) is the smallest covering it.
    assert_eq!((image.width, image.height), (600, 400));
    let draft = loader(1, 1, draft_spec)
        .load_one(&path)
        .expect("draft load");
    let mean = full
        .iter()
        .zip(&draft)
        .map(|(a, b)| f64::from(a.abs_diff(*b)))
        .sum::<f64>()
        / full.len() as f64;
    assert!(
        mean < 3.0,
        "draft differs from full decode by {mean:.2} per byte on average"
    );
}

#[test]
fn decode_limits_refuse_large_images_and_can_be_raised() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let path = tmp.path().join("photo.jpg");
    std::fs::write(&path, jpeg_photo(800, 600, 1, 85).expect("encode")).expect("write");
    let strict = DecodeLimits {
        max_pixels: 100_000,
        ..DecodeLimits::default()
    };
    let err = loader::decode_rgb(&path, &PreprocessSpec::default(), &strict)
        .expect_err("over the pixel limit");
    assert_eq!(err.kind, ItemErrorKind::TooLarge);
    let small_files = DecodeLimits {
        max_file_bytes: 1000,
        ..DecodeLimits::default()
    };
    let err = loader::decode_rgb(&path, &PreprocessSpec::default(), &small_files)
        .expect_err("over the file limit");
    assert_eq!(err.kind, ItemErrorKind::TooLarge);
    let image = loader::decode_rgb(&path, &PreprocessSpec::default(), &DecodeLimits::default())
        .expect("default limits");
    assert_eq!((image.width, image.height), (800, 600));
}
