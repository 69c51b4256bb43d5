//! Criterion micro-benchmarks of `pipeline`, one module per area.
//! Run all with `cargo bench -p benches`, or one area by name filter:
//! `cargo bench -p benches -- decode_preprocess`, `-- model_only`,
//! `-- coordinator_path`.

mod benchmarks;

criterion::criterion_main!(
    benchmarks::coordinator::benches,
    benchmarks::loader::benches,
    benchmarks::model::benches
);
