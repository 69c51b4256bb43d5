//! The ONNX Runtime engine (#41) over small models made by
//! `scripts/make_onnx_fixtures.py` (`tests/onnx/`), whose outputs are known
//! in closed form (channel means of what the model was fed), so each test
//! computes its own reference: an f32 NCHW model sees the normalised
//! pixels, an f16 one their f16 roundings, a u8 NHWC one the bytes, in runs
//! of its fixed batch; an image's bytes do not depend on the images beside
//! it; outputs are picked by name; a classifier's logits become softmax,
//! sigmoid or raw scores. CI installs ONNX Runtime and sets
//! `PIPELINE_REQUIRE_ORT`.

use gpu_worker::onnx::engine::{OnnxEngine, OnnxOptions, Scores, scores};
use gpu_worker::{Engine, PixelBatch};
use pipeline_core::{Normalize, Prediction, Task};

mod common;

use common::{onnx_fixture as fixture, onnx_runtime_or_skip as runtime_or_skip};

fn options(name: &str, output: Option<&str>, task: Task, scores: Scores) -> OnnxOptions {
    OnnxOptions {
        path: fixture(name),
        output: output.map(str::to_owned),
        task,
        scores,
        threads: 1,
    }
}

fn open(options: &OnnxOptions) -> OnnxEngine {
    OnnxEngine::open(options).unwrap_or_else(|e| panic!("{}: {e}", options.path.display()))
}

/// `n` images of `side × side`, NCHW bytes, different in every image and
/// channel (a fixed-seed LCG).
fn images(n: usize, side: usize, seed: u32) -> Vec<u8> {
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n * 3 * side * side)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 24) as u8
        })
        .collect()
}

/// Each image's channel means of `value(c, byte)` over its pixels.
fn channel_means(pixels: &[u8], side: usize, value: impl Fn(usize, u8) -> f64) -> Vec<Vec<f64>> {
    let plane = side * side;
    pixels
        .chunks_exact(3 * plane)
        .map(|image| {
            (0..3)
                .map(|c| {
                    image[c * plane..(c + 1) * plane]
                        .iter()
                        .map(|&b| value(c, b))
                        .sum::<f64>()
                        / plane as f64
                })
                .collect()
        })
        .collect()
}

fn embeddings(predictions: Vec<Prediction>) -> Vec<Vec<f32>> {
    predictions
        .into_iter()
        .map(|p| match p {
            Prediction::Embedding(v) => v,
            Prediction::TopK(_) => panic!("embed gave classes"),
        })
        .collect()
}

fn assert_close(got: &[Vec<f32>], want: &[Vec<f64>], tolerance: f64) {
    assert_eq!(got.len(), want.len(), "rows");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "image {i}: width");
        for (c, (&g, &w)) in g.iter().zip(w).enumerate() {
            assert!(
                (f64::from(g) - w).abs() <= tolerance * w.abs().max(1.0),
                "image {i} value {c}: {g} against {w}"
            );
        }
    }
}

/// An f32 NCHW model of any size sees `(pixel - mean) / std` of each
/// channel, one row per real image, whatever the padding; an image's bytes
/// do not depend on the images beside it.
#[test]
fn an_f32_model_sees_the_normalised_pixels_one_row_per_image() {
    if !runtime_or_skip() {
        return;
    }
    let engine = open(&options("dynamic_size", None, Task::Embed, Scores::Softmax));
    let normalize = Normalize::imagenet();
    for (side, rows, padded) in [(5, 1, 1), (7, 3, 4), (9, 4, 8)] {
        let pixels = images(rows, side, side as u32);
        let got = embeddings(
            engine
                .infer(&PixelBatch::new(&pixels, rows, padded, side, &normalize))
                .expect("a pass"),
        );
        let want = channel_means(&pixels, side, |c, b| {
            (f64::from(b) - f64::from(normalize.mean[c])) / f64::from(normalize.std[c])
        });
        assert_close(&got, &want, 1e-5);
    }
    // Image 0 among other images, in the same padded shape: the same bits.
    let side = 6;
    let alone = images(1, side, 1);
    let mut beside = alone.clone();
    beside.extend(images(2, side, 2));
    let first = |pixels: &[u8], rows| {
        embeddings(
            engine
                .infer(&PixelBatch::new(pixels, rows, 4, side, &normalize))
                .expect("a pass"),
        )[0]
        .iter()
        .map(|v| v.to_bits())
        .collect::<Vec<_>>()
    };
    assert_eq!(first(&alone, 1), first(&beside, 3));
}

/// A u8 NHWC model with a fixed batch of 2 gets the bytes themselves
/// (it normalises itself), in runs of 2, the last one padded: three images
/// give three rows.
#[test]
fn a_u8_nhwc_model_gets_the_bytes_in_runs_of_its_fixed_batch() {
    if !runtime_or_skip() {
        return;
    }
    let engine = open(&options(
        "nhwc_u8_batch_2",
        None,
        Task::Embed,
        Scores::Softmax,
    ));
    assert_eq!(
        engine.default_batch(&pipeline_core::ModelKind::Tiny.into()),
        2
    );
    let pixels = images(3, 6, 9);
    let got = embeddings(
        engine
            .infer(&PixelBatch::new(&pixels, 3, 3, 6, &Normalize::imagenet()))
            .expect("a pass"),
    );
    assert_close(&got, &channel_means(&pixels, 6, |_, b| f64::from(b)), 1e-6);
    // Its fixed size is the images' side, or a one-line error.
    let e = engine
        .infer(&PixelBatch::new(
            &images(1, 5, 1),
            1,
            1,
            5,
            &Normalize::imagenet(),
        ))
        .expect_err("5×5 into a 6×6 input");
    assert!(e.to_string().contains("takes 6×6 images, not 5×5"), "{e}");
}

/// An f16 model gets each normalised value rounded to f16; an output is
/// picked by name (else the first), and one that is not there is a
/// one-line error listing the model's outputs.
#[test]
fn an_f16_model_gets_f16_values_and_outputs_are_picked_by_name() {
    if !runtime_or_skip() {
        return;
    }
    let normalize = Normalize::clip();
    let pixels = images(2, 16, 3);
    let want = channel_means(&pixels, 16, |c, b| {
        let v = (f32::from(b) - normalize.mean[c]) / normalize.std[c];
        f64::from(half::f16::from_f32(v).to_f32())
    });
    for output in [None, Some("embedding")] {
        let engine = open(&options(
            "two_outputs_f16",
            output,
            Task::Embed,
            Scores::Softmax,
        ));
        let got = embeddings(
            engine
                .infer(&PixelBatch::new(&pixels, 2, 2, 16, &normalize))
                .expect("a pass"),
        );
        assert_close(&got, &want, 1e-5);
    }
    let logits = open(&options(
        "two_outputs_f16",
        Some("logits"),
        Task::Embed,
        Scores::Raw,
    ));
    let rows = embeddings(
        logits
            .infer(&PixelBatch::new(&pixels, 2, 2, 16, &normalize))
            .expect("a pass"),
    );
    assert_eq!(rows.iter().map(Vec::len).collect::<Vec<_>>(), vec![7, 7]);
    let e = OnnxEngine::open(&options(
        "two_outputs_f16",
        Some("probs"),
        Task::Embed,
        Scores::Raw,
    ))
    .err()
    .expect("no output named probs");
    assert!(!e.contains('\n'), "{e}");
    assert!(
        e.contains(
            "no output named probs; its outputs: embedding [?, 3] Float32, logits [?, 7] Float32"
        ),
        "{e}"
    );
}

/// A classifier's logits (here known: the three channel means, 0.5, -0.5)
/// become the top-k of their softmax, of their sigmoids, or the raw
/// values, largest first.
#[test]
fn a_classifiers_logits_become_softmax_sigmoid_or_raw_top_k() {
    if !runtime_or_skip() {
        return;
    }
    let normalize = Normalize {
        mean: [0.0; 3],
        std: [255.0; 3],
    };
    let pixels = images(3, 8, 5);
    let logits: Vec<Vec<f32>> = channel_means(&pixels, 8, |_, b| f64::from(b) / 255.0)
        .into_iter()
        .map(|m| {
            let mut row: Vec<f32> = m.iter().map(|&v| v as f32).collect();
            row.extend([0.5, -0.5]);
            row
        })
        .collect();
    for how in [Scores::Softmax, Scores::Sigmoid, Scores::Raw] {
        let engine = open(&options(
            "classifier_known",
            None,
            Task::Classify { top_k: 3 },
            how,
        ));
        let got = engine
            .infer(&PixelBatch::new(&pixels, 3, 4, 8, &normalize))
            .expect("a pass");
        for (row, prediction) in logits.iter().zip(got) {
            let Prediction::TopK(top) = prediction else {
                panic!("classify gave an embedding");
            };
            let want = scores(row, how);
            let mut order: Vec<usize> = (0..want.len()).collect();
            order.sort_by(|&a, &b| want[b].total_cmp(&want[a]).then(a.cmp(&b)));
            assert_eq!(
                top.iter().map(|s| s.class as usize).collect::<Vec<_>>(),
                order[..3].to_vec(),
                "{how:?}"
            );
            for s in &top {
                let w = want[s.class as usize];
                assert!(
                    (s.prob - w).abs() <= 1e-5 * w.abs().max(1.0),
                    "{how:?}: {s:?} {w}"
                );
            }
        }
    }
}
