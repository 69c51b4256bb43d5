//! The ONNX Runtime engine (#41) over small models made by
//! `scripts/make_onnx_fixtures.py` (`tests/models/`), whose outputs are known
//! in closed form (channel means of what the model was fed), so each test
//! computes its own reference: an f32 NCHW model sees the normalised
//! pixels, an f16 one their f16 roundings, a u8 NHWC one the bytes, in runs
//! of its fixed batch; an image's bytes do not depend on the images beside
//! it; outputs are picked by name; a classifier's logits become softmax,
//! sigmoid or raw scores. CI installs ONNX Runtime and sets
//! `PIPELINE_REQUIRE_ORT`.

use engine_onnx::engine::{Channels, OnnxEngine, OnnxOptions, Scores, scores};
use engine_seam::{Engine, PixelBatch};
use pipeline_core::{Normalize, Prediction, Task};

use crate::common::{onnx_fixture as fixture, onnx_runtime_or_skip as runtime_or_skip};

fn options(name: &str, output: Option<&str>, task: Task, scores: Scores) -> OnnxOptions {
    OnnxOptions {
        path: fixture(name),
        output: output.map(str::to_owned),
        raw: Vec::new(),
        task,
        scores,
        threads: 1,
        channels: Channels::Rgb,
        normalize: false,
        cuda: false,
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
            other => panic!("embed gave {other:?}"),
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

/// A BGR model (`--channels bgr`) gets blue first, each plane normalised
/// with its own colour's mean and std, in every input type; `--normalize`
/// scales each row to unit length.
#[test]
fn a_bgr_model_gets_the_planes_reversed_and_rows_can_be_unit_length() {
    if !runtime_or_skip() {
        return;
    }
    let normalize = Normalize::imagenet();
    let side = 7;
    let pixels = images(3, side, 5);
    let rgb = channel_means(&pixels, side, |c, b| {
        (f64::from(b) - f64::from(normalize.mean[c])) / f64::from(normalize.std[c])
    });
    let reversed = |rows: &[Vec<f64>]| -> Vec<Vec<f64>> {
        rows.iter()
            .map(|r| r.iter().rev().copied().collect())
            .collect()
    };
    let run = |name: &str, unit: bool| {
        let engine = open(&OnnxOptions {
            channels: Channels::Bgr,
            normalize: unit,
            ..options(name, None, Task::Embed, Scores::Softmax)
        });
        embeddings(
            engine
                .infer(&PixelBatch::new(&pixels, 3, 3, side, &normalize))
                .expect("a pass"),
        )
    };
    assert_close(&run("dynamic_size", false), &reversed(&rgb), 1e-5);
    let unit: Vec<Vec<f64>> = reversed(&rgb)
        .iter()
        .map(|r| {
            let norm = r.iter().map(|v| v * v).sum::<f64>().sqrt();
            r.iter().map(|v| v / norm).collect()
        })
        .collect();
    assert_close(&run("dynamic_size", true), &unit, 1e-5);
    // The bytes of a u8 NHWC model, blue first.
    let bytes = channel_means(&pixels, side, |_, b| f64::from(b));
    let engine = open(&OnnxOptions {
        channels: Channels::Bgr,
        ..options("nhwc_u8_batch_2", None, Task::Embed, Scores::Softmax)
    });
    let side6 = images(3, 6, 9);
    let got = embeddings(
        engine
            .infer(&PixelBatch::new(&side6, 3, 3, 6, &normalize))
            .expect("a pass"),
    );
    let want = reversed(&channel_means(&side6, 6, |_, b| f64::from(b)));
    assert_close(&got, &want, 1e-6);
    assert_ne!(
        bytes,
        reversed(&bytes),
        "the test's images tell the channels apart"
    );
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

/// `--task raw`: each real image's slice of every output with a batch axis,
/// named, in the graph's order: floats as f32 (the boxes: the channel
/// means twice, `[2, 3]`), integers and booleans as i64 (the brightest
/// channel, a scalar; which means are positive, `[3]`); an output with no
/// batch axis is left out of "every output" and refused by name.
#[test]
fn raw_outputs_are_each_images_slice_of_every_output() {
    use pipeline_core::{ArrayValues, OutputArray};
    if !runtime_or_skip() {
        return;
    }
    let normalize = Normalize {
        mean: [128.0; 3],
        std: [64.0; 3],
    };
    let side = 8;
    let pixels = images(3, side, 4);
    let means = channel_means(&pixels, side, |c, b| {
        (f64::from(b) - f64::from(normalize.mean[c])) / f64::from(normalize.std[c])
    });
    let raw = |outputs: &[&str]| OnnxOptions {
        raw: outputs.iter().map(|o| (*o).to_owned()).collect(),
        ..options("detector_like", None, Task::Raw, Scores::Softmax)
    };
    let engine = open(&raw(&[]));
    let got = engine
        .infer(&PixelBatch::new(&pixels, 3, 4, side, &normalize))
        .expect("a pass");
    assert_eq!(got.len(), 3, "one prediction per real image");
    for (image, (prediction, m)) in got.iter().zip(&means).enumerate() {
        let Prediction::Outputs(arrays) = prediction else {
            panic!("image {image}: {prediction:?}");
        };
        let names: Vec<&str> = arrays.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["boxes", "classes", "positive"], "image {image}");
        let floats = |a: &OutputArray| match &a.values {
            ArrayValues::F32(v) => v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(),
            ArrayValues::I64(v) => panic!("{}: integers {v:?}", a.name),
        };
        let ints = |a: &OutputArray| match &a.values {
            ArrayValues::I64(v) => v.clone(),
            ArrayValues::F32(v) => panic!("{}: floats {v:?}", a.name),
        };
        assert_eq!(arrays[0].shape, [2, 3]);
        let boxes = floats(&arrays[0]);
        for (k, v) in boxes.iter().enumerate() {
            assert!(
                (v - m[k % 3]).abs() < 1e-5,
                "image {image} box value {k}: {v} vs {}",
                m[k % 3]
            );
        }
        let brightest = (0..3).fold(0, |best, c| if m[c] > m[best] { c } else { best });
        assert_eq!(arrays[1].shape, Vec::<u32>::new(), "a scalar per image");
        assert_eq!(ints(&arrays[1]), [brightest as i64], "image {image}");
        assert_eq!(arrays[2].shape, [3]);
        let positive: Vec<i64> = m.iter().map(|&v| i64::from(v > 0.0)).collect();
        assert_eq!(ints(&arrays[2]), positive, "image {image}");
    }
    // Picked by name, in the order given.
    let picked = open(&raw(&["positive", "boxes"]))
        .infer(&PixelBatch::new(&pixels, 3, 3, side, &normalize))
        .expect("a pass");
    let Prediction::Outputs(arrays) = &picked[0] else {
        panic!("{:?}", picked[0]);
    };
    let names: Vec<&str> = arrays.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["positive", "boxes"]);
    // An output with no batch axis, asked for by name: one line.
    let e = OnnxEngine::open(&raw(&["input_shape"]))
        .err()
        .expect("refused");
    assert!(
        e.contains("input_shape [4] Int64 cannot be read per image: no batch axis"),
        "{e}"
    );
    // A dynamic first axis named otherwise than the input's batch (an NMS
    // output's `num_dets`): left out of every output above; named, it is
    // read, and the pass finds its first axis is not the batch.
    let e = open(&raw(&["detections"]))
        .infer(&PixelBatch::new(&pixels, 3, 4, side, &normalize))
        .expect_err("12 rows for a batch of 4");
    assert!(
        e.to_string().contains(
            "output detections has shape [12, 1] for a batch of 4: its first axis is not the batch"
        ),
        "{e}"
    );
    let e = OnnxEngine::open(&raw(&["boxes", "boxes"]))
        .err()
        .expect("refused");
    assert!(e.contains("output boxes is named twice"), "{e}");
    let e = OnnxEngine::open(&raw(&["scores"])).err().expect("refused");
    assert!(
        e.contains("no output named scores; its outputs: boxes"),
        "{e}"
    );
}

/// ONNX Runtime's CUDA provider where the loaded runtime has none (the CPU
/// build CI installs): one line saying what it needs, never a silent run
/// on the CPU.
#[test]
fn a_cuda_session_without_the_provider_is_one_line() {
    if !runtime_or_skip() {
        return;
    }
    let runtime = engine_onnx::runtime::onnx_runtime()
        .as_ref()
        .expect("loaded");
    if runtime
        .providers
        .iter()
        .any(|p| p == "CUDAExecutionProvider")
    {
        eprintln!("skipped: this ONNX Runtime has the CUDA provider");
        return;
    }
    let e = OnnxEngine::open(&OnnxOptions {
        cuda: true,
        ..options("classifier_known", None, Task::Embed, Scores::Softmax)
    })
    .err()
    .expect("no CUDA provider here");
    assert!(
        e.starts_with("ONNX Runtime's CUDA provider does not start here ("),
        "{e}"
    );
    assert!(e.contains("pip install onnxruntime-gpu"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}
