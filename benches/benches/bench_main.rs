//! Criterion micro-benchmarks of `pipeline`, one module per area
//! (run: `cargo bench -p benches`, or `-- loader` for one area).

mod benchmarks;

criterion::criterion_main!(benchmarks::loader::benches);
