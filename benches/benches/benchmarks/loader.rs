//! Decode + preprocess throughput of one loader thread (per-core numbers), on
//! ImageNet-sized JPEGs (500×375) and 12-megapixel photos (4032×3024), with
//! full decode (torchvision-exact) and with the opt-in reduced-DCT draft mode.
//! Reported twice: images/s and pixels/s of the source images.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use fixtures::jpeg_photo;
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

criterion_group!(benches, decode_preprocess);
