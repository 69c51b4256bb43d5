//! Overlapped passes, as a worker runs them: [`Engine::launch`] queues a
//! pass and asks for its read-back, [`Engine::finish`] waits for it, and the
//! next pass is launched before the last one is finished. Each pass must
//! give exactly (bit for bit) the predictions of the same pass waited for on
//! its own, on the CPU and on Mesa's lavapipe, for both tasks, with a padded
//! short batch among them. On the CPU the pass runs inside `launch`, and
//! says so (the worker dates its results by the launch, for the steady
//! window).

use crate::common;

use gpu_worker::{BurnEngine, Engine, Model, PixelBatch};
use pipeline_core::{DeviceSpec, ModelKind, Normalize, Prediction, SpanTimes, Task};

const SIDE: usize = 32;
const BATCH: usize = 4;

/// `rows` images of seeded noise.
fn pixels(rows: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..rows * 3 * SIDE * SIDE)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 56) as u8
        })
        .collect()
}

fn check(spec: &DeviceSpec) {
    let device = gpu_worker::open(spec).unwrap_or_else(|e| panic!("{spec} opens: {e}"));
    let normalize = Normalize {
        mean: [0.485, 0.456, 0.406],
        std: [0.229, 0.224, 0.225],
    };
    // A full batch, a short one (padded), and another full one.
    let batches = [pixels(BATCH, 1), pixels(BATCH - 1, 2), pixels(BATCH, 3)];
    let rows = |b: &Vec<u8>| b.len() / (3 * SIDE * SIDE);
    for task in [Task::Embed, Task::Classify { top_k: 3 }] {
        let model = Model::random(ModelKind::Tiny, 7, &device);
        let engine = BurnEngine::for_device(spec, device.clone(), model, task);
        let alone: Vec<Vec<Prediction>> = batches
            .iter()
            .map(|b| {
                engine
                    .infer(&PixelBatch::new(b, rows(b), BATCH, SIDE, &normalize))
                    .expect("a pass waited for")
            })
            .collect();

        let mut times = SpanTimes::default();
        let launch = |b: &Vec<u8>, times: &mut SpanTimes| {
            engine
                .launch(&PixelBatch::new(b, rows(b), BATCH, SIDE, &normalize), times)
                .expect("a launched pass")
        };
        let first = launch(&batches[0], &mut times);
        if *spec == DeviceSpec::Cpu {
            assert!(
                first.ended_in_launch(),
                "{spec}: flex runs the pass in launch"
            );
        }
        let second = launch(&batches[1], &mut times);
        let got_first = engine.finish(first, &mut times).expect("first");
        let third = launch(&batches[2], &mut times);
        let got_second = engine.finish(second, &mut times).expect("second");
        let got_third = engine.finish(third, &mut times).expect("third");

        let what = format!("{task:?} on {spec}");
        assert_eq!(got_first, alone[0], "{what}: first batch");
        assert_eq!(got_second.len(), BATCH - 1, "{what}: padding dropped");
        assert_eq!(got_second, alone[1], "{what}: the short batch");
        assert_eq!(got_third, alone[2], "{what}: third batch");
        assert_ne!(alone[0], alone[2], "{what}: different inputs differ");
        assert_eq!(times.batch_s.len(), 3, "{what}: every pass timed");
        assert!(times.compute_s > 0.0, "{what}: {times:?}");
    }
}

#[test]
fn overlapped_passes_equal_passes_run_alone_on_the_cpu() {
    check(&DeviceSpec::Cpu);
}

/// In a child process, so that a crash inside the driver fails this test by
/// its signal instead of killing the test binary.
#[test]
fn overlapped_passes_equal_passes_run_alone_on_the_software_adapter() {
    let test = "overlapped_passes_equal_passes_run_alone_on_the_software_adapter";
    let signal = common::in_child(module_path!(), test, || check(&DeviceSpec::Software));
    assert_eq!(signal, None, "{test}: lavapipe died of signal {signal:?}");
}
