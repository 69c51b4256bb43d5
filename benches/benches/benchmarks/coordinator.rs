//! The coordinator's work per result, from a worker's `ChunkDone` frame to
//! a part file's bytes: decode the frame (length-prefixed JSON), check the
//! outcomes, attach each item's path, encode the JSONL records — the code
//! the scheduler runs (`coordinator::check_outcomes`, `encode_part`), on one
//! core. Issue #7 asks for at least 500,000 records/s. Writing the part
//! (fsync) is not in it: see BENCHMARKS.md for that cost.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use pipeline_core::{
    ChunkTimes, ClassScore, FromWorker, ItemOutcome, Manifest, ManifestEntry, Prediction,
    read_frame, write_frame,
};

/// A manifest of `n` paths shaped like an ImageNet folder.
fn manifest(n: u64) -> Manifest {
    Manifest {
        root: PathBuf::from("/data/imagenet/val"),
        entries: (0..n)
            .map(|index| ManifestEntry {
                index,
                relative: PathBuf::from(format!(
                    "n{:08}/ILSVRC2012_val_{:08}.JPEG",
                    1_440_764 + index % 1000,
                    index + 1
                )),
            })
            .collect(),
        problems: Vec::new(),
    }
}

/// One `ChunkDone` frame of `size` top-5 results, as a worker sends it.
fn frame(start: u64, size: u64) -> Vec<u8> {
    let outcomes = (start..start + size)
        .map(|index| ItemOutcome {
            index,
            result: Ok(Prediction::TopK(
                (0..5)
                    .map(|k| ClassScore {
                        class: ((index * 7 + k * 131) % 1000) as u32,
                        prob: 0.9 / (k as f32 + 1.0) + (index % 97) as f32 * 1e-4,
                    })
                    .collect(),
            )),
        })
        .collect();
    let message = FromWorker::ChunkDone {
        chunk: 0,
        outcomes,
        times: ChunkTimes::default(),
    };
    let mut bytes = Vec::new();
    write_frame(&mut bytes, &message).expect("a frame encodes");
    bytes
}

fn coordinator_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("coordinator_path");
    for size in [256u64, 4096] {
        let manifest = manifest(size);
        let bytes = frame(0, size);
        group.throughput(Throughput::Elements(size));
        group.bench_with_input(
            BenchmarkId::new("top5_records", size),
            &bytes,
            |b, bytes| {
                b.iter(|| {
                    let message: Option<FromWorker> =
                        read_frame(&mut black_box(&bytes[..])).expect("the frame decodes");
                    let Some(FromWorker::ChunkDone { outcomes, .. }) = message else {
                        unreachable!("the bench frame is a ChunkDone");
                    };
                    coordinator::check_outcomes(0..size, &outcomes).expect("whole and in order");
                    black_box(coordinator::encode_part(&manifest, outcomes))
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, coordinator_path);
