//! Decode + preprocess throughput of one loader thread (per-core numbers), on
//! ImageNet-sized JPEGs (500×375) and 12-megapixel photos (4032×3024), with
//! full decode (torchvision-exact) and with the opt-in reduced-DCT draft mode.
//! Reported twice: images/s and pixels/s of the source images.
//!
//! `split_decode`: the CPU's share of `--decode gpu`, parsing and entropy
//! decoding a JPEG to its quantised coefficients
//! (`loader::exact_jpeg::read_coefficients`), then packing them for the
//! bus (`PackedComponent`), against the exact loader's whole decode and
//! resize of the same file, one thread each. What the coefficients weigh
//! (dense, and packed) is printed once per set.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use fixtures::jpeg_photo;
use loader::exact_jpeg::{Coefficients, PackedComponent, read_coefficients, read_packed};
use loader::{Loader, LoaderConfig};
use pipeline_core::{DecodeLimits, PreprocessSpec};

struct Set {
    name: &'static str,
    width: u32,
    height: u32,
    files: Vec<PathBuf>,
}

fn sets(dir: &std::path::Path) -> Vec<Set> {
    [
        ("small_500x375", 500, 375, 8),
        ("large_4032x3024", 4032, 3024, 2),
    ]
    .into_iter()
    .map(|(name, width, height, count)| {
        let files = (0..count)
            .map(|seed| {
                let path = dir.join(format!("{name}_{seed}.jpg"));
                let bytes = jpeg_photo(width, height, seed, 90).expect("encode bench JPEG");
                std::fs::write(&path, bytes).expect("write bench JPEG");
                path
            })
            .collect();
        Set {
            name,
            width,
            height,
            files,
        }
    })
    .collect()
}

fn loader(draft: bool) -> Loader {
    Loader::new(LoaderConfig {
        threads: 1,
        batch_size: 1,
        spec: PreprocessSpec {
            jpeg_draft: draft,
            ..PreprocessSpec::default()
        },
        limits: DecodeLimits::default(),
        remote: Default::default(),
    })
    .expect("valid loader config")
}

fn decode_preprocess(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let sets = sets(dir.path());
    for (group_name, per_pixel) in [
        ("decode_preprocess", false),
        ("decode_preprocess_pixels", true),
    ] {
        let mut group = c.benchmark_group(group_name);
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(4));
        for set in &sets {
            let pixels = u64::from(set.width) * u64::from(set.height);
            group.throughput(Throughput::Elements(if per_pixel { pixels } else { 1 }));
            for (mode, draft) in [("full", false), ("draft", true)] {
                let loader = loader(draft);
                let mut next = set.files.iter().cycle();
                group.bench_function(BenchmarkId::new(set.name, mode), |b| {
                    b.iter(|| {
                        let path = next.next().expect("cycle never ends");
                        black_box(loader.load_one(path).expect("bench image loads"))
                    })
                });
            }
        }
        group.finish();
    }
}

/// The split path's CPU work per image against the exact loader's, on the
/// same files: both read the file, then one decodes and resizes it whole,
/// the other stops at the quantised coefficients the GPU would take.
fn split_decode(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let sets = sets(dir.path());
    let mut group = c.benchmark_group("split_decode");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(4));
    group.throughput(Throughput::Elements(1));
    for set in &sets {
        let weights: Vec<(usize, usize)> = set
            .files
            .iter()
            .map(|path| {
                let bytes = std::fs::read(path).expect("bench JPEG");
                coefficient_weight(&read_coefficients(&bytes).expect("bench JPEG reads"))
            })
            .collect();
        let images = weights.len();
        let (dense, packed) = weights
            .iter()
            .fold((0, 0), |(d, p), (dd, pp)| (d + dd, p + pp));
        eprintln!(
            "split_decode/{}: {} coefficient bytes an image dense (i16 blocks), \
             {} packed, against {} RGB bytes",
            set.name,
            dense / images,
            packed / images,
            u64::from(set.width) * u64::from(set.height) * 3
        );
        let loader = loader(false);
        let mut next = set.files.iter().cycle();
        group.bench_function(BenchmarkId::new(set.name, "exact_loader"), |b| {
            b.iter(|| {
                let path = next.next().expect("cycle never ends");
                black_box(loader.load_one(path).expect("bench image loads"))
            })
        });
        let mut next = set.files.iter().cycle();
        group.bench_function(BenchmarkId::new(set.name, "coefficients"), |b| {
            b.iter(|| {
                let path = next.next().expect("cycle never ends");
                let bytes = std::fs::read(path).expect("bench JPEG");
                black_box(read_coefficients(&bytes).expect("bench JPEG reads"))
            })
        });
        let mut next = set.files.iter().cycle();
        group.bench_function(BenchmarkId::new(set.name, "coefficients_packed"), |b| {
            b.iter(|| {
                let path = next.next().expect("cycle never ends");
                let bytes = std::fs::read(path).expect("bench JPEG");
                black_box(read_packed(&bytes).expect("bench JPEG reads"))
            })
        });
    }
    group.finish();
}

/// Bytes of the dense coefficient blocks (64 `i16` each), and packed.
fn coefficient_weight(coefficients: &Coefficients) -> (usize, usize) {
    coefficients
        .components
        .iter()
        .fold((0, 0), |(dense, packed), component| {
            let sent = PackedComponent::pack(component).expect("packs").bytes();
            (dense + component.blocks.len() * 64 * 2, packed + sent)
        })
}

criterion_group!(benches, decode_preprocess, split_decode);
