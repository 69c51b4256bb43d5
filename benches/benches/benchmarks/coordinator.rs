//! The coordinator's work per result, from a worker's `SpanDone` frame to
//! a part file's bytes: decode the frame (binary results), check the
//! outcomes, attach each item's path, encode the JSONL records — the code
//! the scheduler runs (`coordinator::check_outcomes`, `encode_part`), on one
//! core. Issue #7 asks for at least 500,000 records/s. Writing the part
//! (fsync) is not in it: see BENCHMARKS.md for that cost.

use std::hint::black_box;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group};
use pipeline_core::{
    ClassLabels, ClassScore, FromWorker, ItemOutcome, Kept, Location, Manifest, ManifestEntry,
    Prediction, SpanTimes, read_frame, write_frame,
};

/// A manifest of `n` paths shaped like an ImageNet folder.
fn manifest(n: u64) -> Manifest {
    Manifest {
        source: "/data/imagenet/val".to_owned(),
        entries: (0..n)
            .map(|index| {
                let name = PathBuf::from(format!(
                    "n{:08}/ILSVRC2012_val_{:08}.JPEG",
                    1_440_764 + index % 1000,
                    index + 1
                ));
                ManifestEntry {
                    index,
                    location: Location::File {
                        path: Path::new("/data/imagenet/val")
                            .join(&name)
                            .into_os_string()
                            .into_vec(),
                        range: None,
                    },
                    name,
                }
            })
            .collect(),
        kept: Kept::default(),
        problems: Vec::new(),
        revision: None,
    }
}

/// One `SpanDone` frame of `size` top-5 results, as a worker sends it.
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
    let message = FromWorker::SpanDone {
        span: 0,
        outcomes,
        times: SpanTimes::default(),
        held_s: 0.0,
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
                    let Some(FromWorker::SpanDone { outcomes, .. }) = message else {
                        unreachable!("the bench frame is a SpanDone");
                    };
                    coordinator::check_outcomes(0..size, &outcomes).expect("whole and in order");
                    black_box(coordinator::encode_part(
                        &manifest,
                        &ClassLabels::Imagenet,
                        outcomes,
                    ))
                });
            },
        );
        // The two halves on their own, to see which one to work on.
        group.bench_with_input(BenchmarkId::new("decode_only", size), &bytes, |b, bytes| {
            b.iter(|| {
                let message: Option<FromWorker> =
                    read_frame(&mut black_box(&bytes[..])).expect("the frame decodes");
                black_box(message)
            });
        });
        let Some(FromWorker::SpanDone { outcomes, .. }) =
            read_frame(&mut &bytes[..]).expect("the frame decodes")
        else {
            unreachable!("the bench frame is a SpanDone");
        };
        group.bench_with_input(
            BenchmarkId::new("encode_only", size),
            &outcomes,
            |b, outcomes| {
                b.iter(|| {
                    black_box(coordinator::encode_part(
                        &manifest,
                        &ClassLabels::Imagenet,
                        outcomes.clone(),
                    ))
                });
            },
        );
    }
    group.finish();
}

/// Committing part files (temp file, fsync, rename, fsync the folder) of
/// 256 top-5 records each, from 1 thread and from the coordinator's
/// [`coordinator::COMMIT_THREADS`]: the disk's share of the path above.
fn part_commit(c: &mut Criterion) {
    const PARTS: u64 = 32;
    const SIZE: u64 = 256;
    let mut group = c.benchmark_group("part_commit");
    group.sample_size(10);
    group.throughput(Throughput::Elements(PARTS * SIZE));
    let manifest = manifest(SIZE);
    let Some(FromWorker::SpanDone { outcomes, .. }) =
        read_frame(&mut &frame(0, SIZE)[..]).expect("the frame decodes")
    else {
        unreachable!("the bench frame is a SpanDone");
    };
    let bytes = coordinator::encode_part(&manifest, &ClassLabels::Imagenet, outcomes);
    // On the disk the results go to: the working directory's, not /tmp
    // (often a RAM disk).
    let base = std::env::current_dir().expect("a working directory");
    for threads in [1, coordinator::COMMIT_THREADS] {
        group.bench_function(BenchmarkId::new("threads", threads), |b| {
            b.iter_batched(
                || {
                    let dir = tempfile::tempdir_in(&base).expect("temp dir");
                    let out = dir.path().join("out.jsonl");
                    let store = coordinator::PartStore::open(
                        &out,
                        &coordinator::RunIdentity::example(pipeline_core::ModelKind::Tiny, 0, 1),
                    )
                    .expect("part store");
                    (dir, store)
                },
                |(dir, store)| {
                    let next = AtomicU64::new(0);
                    std::thread::scope(|scope| {
                        for _ in 0..threads {
                            scope.spawn(|| {
                                loop {
                                    let chunk = next.fetch_add(1, Ordering::Relaxed);
                                    if chunk >= PARTS {
                                        break;
                                    }
                                    store.commit(chunk, &bytes).expect("commit");
                                }
                            });
                        }
                    });
                    dir
                },
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, coordinator_path, part_commit);
