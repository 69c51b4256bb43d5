//! Model-only throughput on the CPU backend (`flex`): pre-made `u8` batches,
//! no loader, seeded random weights (speed does not depend on the values).
//! The whole forward pass including normalisation, softmax and read-back is
//! timed, so the device is synchronised before the clock stops.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use gpu_worker::{BurnEngine, Engine, Model, PixelBatch};
use pipeline_core::{DeviceSpec, ModelKind, Normalize, Task};

fn model_only(c: &mut Criterion) {
    let device = gpu_worker::open(&DeviceSpec::Cpu).expect("cpu opens");
    let mut group = c.benchmark_group("model_only_flex");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(8));
    for kind in [
        ModelKind::Resnet18,
        ModelKind::Resnet50,
        ModelKind::EfficientnetLite0,
    ] {
        let engine = BurnEngine::for_device(
            &DeviceSpec::Cpu,
            device.clone(),
            Model::random(kind, 1, &device),
            Task::Classify { top_k: 5 },
        );
        for batch in [1usize, 8, 32] {
            let pixels: Vec<u8> = (0..batch * 3 * 224 * 224)
                .map(|i| (i * 31 % 251) as u8)
                .collect();
            group.throughput(Throughput::Elements(batch as u64));
            group.bench_function(BenchmarkId::new(kind.name(), batch), |b| {
                b.iter(|| {
                    engine
                        .infer(&PixelBatch::new(
                            &pixels,
                            batch,
                            batch,
                            224,
                            &Normalize::imagenet(),
                        ))
                        .expect("forward pass")
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, model_only);
