//! Backoff on device memory exhaustion, with the out-of-memory injected by
//! the `engine-oom` failpoint (no machine here has a GPU to exhaust). One
//! test function: failpoint configuration is global to the process.

use std::path::PathBuf;

use fixtures::{DatasetSpec, generate};
use gpu_worker::{BatchSizeChange, BurnEngine, Engine, ItemResult, Model, OomBackoff};
use loader::{Batch, Loader, LoaderConfig, WorkItem};
use pipeline_core::{
    DecodeLimits, DeviceSpec, ItemErrorKind, ModelKind, PreprocessSpec, SpanTimes, Task,
};

fn batch_of_64(dir: &std::path::Path) -> Batch {
    let dataset = generate(
        dir,
        &DatasetSpec {
            images: 64,
            broken: false,
            ..DatasetSpec::default()
        },
    )
    .expect("fixtures generate");
    let items: Vec<WorkItem> = dataset
        .good
        .iter()
        .enumerate()
        .map(|(i, p): (usize, &PathBuf)| WorkItem::file(i as u64, p))
        .collect();
    let spec = PreprocessSpec {
        resize_shorter: 64,
        crop: 64,
        ..PreprocessSpec::default()
    };
    let loader = Loader::new(LoaderConfig {
        threads: 2,
        batch_size: 64,
        spec,
        limits: DecodeLimits::default(),
        remote: Default::default(),
    })
    .expect("loader");
    let mut stream = loader.load_all(items).expect("stream");
    let batch = stream.next().expect("one batch");
    assert_eq!(batch.indices.len(), 64);
    batch
}

fn run(
    engine: &dyn Engine,
    batch: &Batch,
    start: usize,
) -> (Vec<ItemResult>, Vec<BatchSizeChange>, usize) {
    let mut backoff = OomBackoff::new(start);
    let mut changes = Vec::new();
    let mut times = SpanTimes::default();
    let results = backoff
        .run(engine, batch, &mut times, &mut |c| changes.push(c.clone()))
        .expect("no device error");
    // Every pass that produced results was timed, stage by stage, and the
    // stages of a pass add up to its latency.
    let ok = results.iter().filter(|(_, r)| r.is_ok()).count();
    let passes = ok.div_ceil(backoff.batch_size());
    assert!(
        times.batch_s.len() >= passes,
        "{} of {passes} passes timed: {times:?}",
        times.batch_s.len()
    );
    if ok > 0 {
        assert!(times.upload_s > 0.0 && times.compute_s > 0.0 && times.readback_s > 0.0);
    }
    let latency: f64 = times.batch_s.iter().sum();
    assert!(
        (times.device_s() - latency).abs() <= 1e-6 * times.batch_s.len() as f64,
        "{times:?}"
    );
    (results, changes, backoff.batch_size())
}

#[test]
fn batch_of_64_shrinks_to_what_fits_with_identical_results() {
    let dir = tempfile::tempdir().expect("temp dir");
    let batch = batch_of_64(dir.path());
    let device = gpu_worker::open(&DeviceSpec::Cpu).expect("cpu opens");
    let engine = BurnEngine::for_device(
        &DeviceSpec::Cpu,
        device.clone(),
        Model::random(ModelKind::Tiny, 1, &device),
        Task::Classify { top_k: 5 },
    );

    // Reference: the same 64 images at batch size 16 with nothing injected.
    let (clean, none, _) = run(&engine, &batch, 16);
    assert!(none.is_empty());
    assert_eq!(clean.len(), 64);

    // Injected: anything over 16 images "does not fit".
    fail::cfg("engine-oom", "return(16)").expect("failpoint config");
    let (results, changes, size) = run(&engine, &batch, 64);
    let steps: Vec<(usize, usize)> = changes.iter().map(|c| (c.from, c.to)).collect();
    assert_eq!(steps, vec![(64, 32), (32, 16)], "every halving is reported");
    assert!(changes.iter().all(|c| c.reason.contains("out of memory")));
    assert_eq!(size, 16);
    assert_eq!(
        results, clean,
        "every image's result equals the uninjected run"
    );

    // Nothing fits: halve down to 1, then fail each item as `oom`, no loop.
    fail::cfg("engine-oom", "return(0)").expect("failpoint config");
    let (results, changes, size) = run(&engine, &batch, 8);
    assert_eq!(changes.len(), 3, "8 -> 4 -> 2 -> 1");
    assert_eq!(size, 1);
    assert_eq!(results.len(), 64);
    assert!(
        results
            .iter()
            .all(|(_, r)| matches!(r, Err(e) if e.kind == ItemErrorKind::Oom))
    );

    // The runtime's other way of saying it: a panic from the error handler.
    fail::cfg("engine-oom", "panic(out of memory: wgpu validation error)")
        .expect("failpoint config");
    let (results, changes, _) = run(&engine, &batch, 2);
    assert_eq!(changes.len(), 1);
    assert!(
        results
            .iter()
            .all(|(_, r)| matches!(r, Err(e) if e.kind == ItemErrorKind::Oom))
    );
    fail::remove("engine-oom");
}
