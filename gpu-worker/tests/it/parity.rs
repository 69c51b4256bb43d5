//! Numerical parity with PyTorch on the same weights and the same inputs,
//! on every device kind this machine has: the CPU (`flex`) and the software
//! Vulkan adapter (lavapipe, the GPU code path). Reference outputs come from
//! `scripts/make_model_vectors.py`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::common;

use gpu_worker::{BurnEngine, Engine, Model, PixelBatch};
use pipeline_core::{DeviceSpec, ModelKind, Normalize, Prediction, Task};
use safetensors::tensor::Dtype;
use serde::Deserialize;

const TOLERANCE: f32 = 1e-4;

#[derive(Deserialize)]
struct Reference {
    cases: HashMap<String, Case>,
}

#[derive(Deserialize)]
struct Case {
    #[serde(default)]
    keys: Vec<Key>,
    probs: Vec<Vec<f32>>,
    #[serde(default)]
    photos: HashMap<String, Photo>,
}

#[derive(Deserialize)]
struct Key {
    name: String,
    shape: Vec<usize>,
    dtype: String,
}

#[derive(Deserialize)]
struct Photo {
    top5: Vec<u32>,
}

fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

fn reference() -> Reference {
    let json = std::fs::read_to_string(vectors().join("reference.json"))
        .expect("reference.json is committed");
    serde_json::from_str(&json).expect("reference.json parses")
}

fn images() -> Vec<u8> {
    std::fs::read(vectors().join("images_2x3x224x224.u8")).expect("input images are committed")
}

// --- the weight formula, identical to scripts/make_model_vectors.py -------

fn fnv1a(name: &str) -> u64 {
    name.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
    })
}

fn splitmix_units(seed: u64, n: usize) -> impl Iterator<Item = f32> {
    (1..=n as u64).map(move |i| {
        let mut z = seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 40) as f64 / (1u64 << 24) as f64) as f32
    })
}

fn formula_tensor(name: &str, shape: &[usize]) -> Vec<f32> {
    let n = shape.iter().product::<usize>().max(1);
    let units = splitmix_units(fnv1a(name), n);
    let leaf = name.rsplit('.').next().unwrap_or(name);
    match leaf {
        "running_var" => units.map(|u| 0.5 + u).collect(),
        "running_mean" | "bias" => units.map(|u| (u - 0.5) * 0.2).collect(),
        _ if shape.len() == 1 => units.map(|u| 0.75 + u * 0.5).collect(),
        _ => {
            let fan_in: usize = shape[1..].iter().product();
            let bound = (3.0f64 / fan_in as f64).sqrt() as f32;
            units.map(|u| (u * 2.0 - 1.0) * bound).collect()
        }
    }
}

/// A `.safetensors` file with torchvision's key names, dtypes and layouts.
fn write_formula_weights(keys: &[Key], path: &Path) {
    let data: Vec<common::RawTensor> = keys
        .iter()
        .map(|k| match k.dtype.as_str() {
            "i64" => (
                k.name.clone(),
                0i64.to_le_bytes().to_vec(),
                k.shape.clone(),
                Dtype::I64,
            ),
            _ => {
                let values = formula_tensor(&k.name, &k.shape);
                let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                (k.name.clone(), bytes, k.shape.clone(), Dtype::F32)
            }
        })
        .collect();
    common::write_safetensors(path, &data);
}

fn probabilities(engine: &dyn Engine, images: &[u8], normalize: &Normalize) -> Vec<Vec<f32>> {
    let predictions = engine
        .infer(&PixelBatch::new(images, 2, 2, 224, normalize))
        .expect("forward pass");
    predictions
        .into_iter()
        .map(|p| match p {
            Prediction::TopK(scores) => {
                let mut probs = vec![0.0; scores.len()];
                for s in scores {
                    probs[s.class as usize] = s.prob;
                }
                probs
            }
            other => panic!("classify returned {other:?}"),
        })
        .collect()
}

/// Each image's probabilities within `tolerance` of PyTorch's, with the
/// same top-1.
fn assert_close(
    model: &str,
    device: &DeviceSpec,
    got: &[Vec<f32>],
    want: &[Vec<f32>],
    tolerance: f32,
) {
    for (row, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len());
        let max = g
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        let argmax = |v: &[f32]| {
            v.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(i, _)| i)
        };
        println!("{model} on {device}, image {row}: max |Δp| = {max:.2e}");
        assert!(
            max <= tolerance,
            "{model} on {device}, image {row}: max |Δp| {max:e} > {tolerance:e}"
        );
        assert_eq!(
            argmax(g),
            argmax(w),
            "{model} on {device}, image {row}: top-1 differs"
        );
    }
}

fn resnet_parity(spec: DeviceSpec, kind: ModelKind) {
    let reference = reference();
    let case = &reference.cases[kind.name()];
    let dir = tempfile::tempdir().expect("temp dir");
    let weights = dir.path().join(format!("{kind}.safetensors"));
    write_formula_weights(&case.keys, &weights);
    let device = gpu_worker::open(&spec).expect("device opens");
    let model = Model::load(kind, &weights, &device).expect("torchvision-named weights load");
    let engine = BurnEngine::for_device(&spec, device, model, Task::Classify { top_k: 1000 });
    let got = probabilities(&engine, &images(), &Normalize::imagenet());
    assert_close(kind.name(), &spec, &got, &case.probs, TOLERANCE);
}

fn lite0_parity(spec: DeviceSpec) {
    let reference = reference();
    let case = &reference.cases["efficientnet_lite0"];
    let device = gpu_worker::open(&spec).expect("device opens");
    let model = Model::load(
        ModelKind::EfficientnetLite0,
        &common::lite0_weights(),
        &device,
    )
    .expect("real weights load");
    let engine = BurnEngine::for_device(&spec, device, model, Task::Classify { top_k: 1000 });
    let got = probabilities(&engine, &images(), &Normalize::efficientnet_lite());
    assert_close("efficientnet_lite0", &spec, &got, &case.probs, TOLERANCE);
}

/// One test per device kind, as candle's `test_device!` does. The software
/// Vulkan run goes through a child process, so that a crash inside Mesa's
/// lavapipe is reported by its signal and fails this test alone, instead of
/// killing the whole test binary. (burn 0.22's matmul kernels crash lavapipe;
/// the engine avoids them there, see `BurnEngine::for_device`.)
macro_rules! device_test {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn cpu() {
                ($body)(DeviceSpec::Cpu)
            }
            #[test]
            fn software_vulkan() {
                let test = "software_vulkan";
                let signal =
                    common::in_child(module_path!(), test, || ($body)(DeviceSpec::Software));
                assert_eq!(signal, None, "{test}: lavapipe died of signal {signal:?}");
            }
        }
    };
}

device_test!(resnet18_matches_pytorch, |spec| resnet_parity(
    spec,
    ModelKind::Resnet18
));
device_test!(resnet50_matches_pytorch, |spec| resnet_parity(
    spec,
    ModelKind::Resnet50
));
device_test!(efficientnet_lite0_matches_pytorch, lite0_parity);

/// The Vulkan code path on lavapipe where its driver holds: `u8` upload,
/// normalisation on the device, 3x3 convolutions, batch norm, ReLU, spatial
/// mean and read-back — `tiny`'s embeddings, no matmul — equal flex's.
#[test]
fn software_vulkan_runs_the_conv_path_like_the_cpu() {
    let signal = common::in_child(
        module_path!(),
        "software_vulkan_runs_the_conv_path_like_the_cpu",
        || {
            let images = images();
            let embed = |spec: DeviceSpec| {
                let device = gpu_worker::open(&spec).expect("device opens");
                let model = Model::random(ModelKind::Tiny, 7, &device);
                let engine = BurnEngine::for_device(&spec, device, model, Task::Embed);
                engine
                    .infer(&PixelBatch::new(&images, 2, 2, 224, &Normalize::imagenet()))
                    .expect("forward pass")
            };
            let (cpu, software) = (embed(DeviceSpec::Cpu), embed(DeviceSpec::Software));
            for (c, s) in cpu.iter().zip(&software) {
                let (Prediction::Embedding(c), Prediction::Embedding(s)) = (c, s) else {
                    panic!("embed returned a classification")
                };
                assert_eq!(c.len(), 128);
                let max = c
                    .iter()
                    .zip(s)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                let scale = c.iter().map(|v| v.abs()).fold(0.0f32, f32::max);
                println!(
                    "tiny embeddings, software vs cpu: max |Δ| = {max:.2e} (max |v| = {scale:.2})"
                );
                assert!(
                    max <= 1e-4 * scale.max(1.0),
                    "software Vulkan differs from the CPU by {max:e}"
                );
            }
        },
    );
    assert_eq!(signal, None, "lavapipe crashed on the conv-only path");
}

#[test]
fn real_efficientnet_lite0_weights_classify_photographs() {
    let reference = reference();
    let photos = &reference.cases["efficientnet_lite0"].photos;
    let spec = pipeline_core::ModelKind::EfficientnetLite0.default_preprocess();
    let loader = loader::Loader::new(loader::LoaderConfig {
        threads: 1,
        batch_size: 1,
        spec: spec.clone(),
        limits: pipeline_core::DecodeLimits::default(),
        remote: Default::default(),
    })
    .expect("loader");
    let device = gpu_worker::open(&DeviceSpec::Cpu).expect("cpu opens");
    let model = Model::load(
        ModelKind::EfficientnetLite0,
        &common::lite0_weights(),
        &device,
    )
    .expect("real weights load");
    let engine =
        BurnEngine::for_device(&DeviceSpec::Cpu, device, model, Task::Classify { top_k: 5 });
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples");
    // What a person would call each photo: any of these ImageNet classes.
    let expected: [(&str, &[u32]); 4] = [
        ("cat_chelsea.jpg", &[281, 282, 285]), // tabby, tiger cat, Egyptian cat
        ("coffee.jpg", &[967, 968]),           // espresso, cup
        ("rocket.jpg", &[657, 744, 812]),      // missile, projectile, space shuttle
        ("camera_gray.jpg", &[872]),           // tripod
    ];
    for (file, classes) in expected {
        let pixels = loader
            .load_one(&samples.join(file))
            .expect("sample decodes");
        let prediction = engine
            .infer(&PixelBatch::new(&pixels, 1, 1, 224, &spec.normalize))
            .expect("forward")
            .remove(0);
        let Prediction::TopK(top) = prediction else {
            panic!("classify gave an embedding")
        };
        assert!(
            classes.contains(&top[0].class),
            "{file}: top-1 {} is not one of {classes:?}",
            top[0].class
        );
        assert_eq!(
            top[0].class, photos[file].top5[0],
            "{file}: top-1 differs from PyTorch's"
        );
    }
}

/// `--precision f16` and `bf16` on the CPU (flex computes in both): the
/// same checkpoints as above, in a child process because a device's float
/// type is set once per process. Probabilities stay within `HALF_TOLERANCE`
/// of PyTorch's f32 ones, with the same top-1. (`auto` keeps f32 on the
/// CPU; on GPUs f16 is what it picks.)
#[test]
fn half_precision_on_the_cpu_stays_close_to_pytorch() {
    const HALF_TOLERANCE: f32 = 5e-3;
    let signal = common::in_child(
        module_path!(),
        "half_precision_on_the_cpu_stays_close_to_pytorch",
        || {
            use pipeline_core::Precision;
            let reference = reference();
            let spec = DeviceSpec::Cpu;
            let (device, dtype) = gpu_worker::open_with(&spec, Precision::F16).expect("cpu in f16");
            assert_eq!(dtype, burn::tensor::FloatDType::F16);
            let dir = tempfile::tempdir().expect("temp dir");
            let weights = dir.path().join("resnet50.safetensors");
            write_formula_weights(&reference.cases["resnet50"].keys, &weights);
            let cases = [
                (ModelKind::Resnet50, weights, Normalize::imagenet()),
                (
                    ModelKind::EfficientnetLite0,
                    common::lite0_weights(),
                    Normalize::efficientnet_lite(),
                ),
            ];
            for (kind, weights, normalize) in cases {
                let model = Model::load(kind, &weights, &device).expect("weights load");
                let engine = BurnEngine::for_device(
                    &spec,
                    device.clone(),
                    model,
                    Task::Classify { top_k: 1000 },
                )
                .with_float_dtype(dtype);
                let got = probabilities(&engine, &images(), &normalize);
                let want = &reference.cases[kind.name()].probs;
                assert_close(&format!("{kind} in f16"), &spec, &got, want, HALF_TOLERANCE);
            }
        },
    );
    assert_eq!(signal, None, "the f16 run died of a signal");
}

/// The CUDA engine's plan of the CNN families (#28): the same burn module
/// loaded and folded on the host, lowered to channels-last convolutions
/// with fused bias, residual and activation, run by its f32 reference on
/// the CPU step by step as the GPU will, gives PyTorch's probabilities
/// (ResNet's basic and bottleneck blocks, Lite0's depthwise convolutions
/// and asymmetric "SAME" padding, on its real weights). A checkpoint of
/// another depth is refused as the burn engine refuses it, in one line.
#[test]
fn the_cuda_engines_cnn_plans_give_pytorchs_probabilities() {
    use gpu_worker::Architecture;
    use gpu_worker::cnn_plan;
    let reference = reference();
    let dir = tempfile::tempdir().expect("temp dir");
    let formula = |kind: ModelKind| {
        let path = dir.path().join(format!("{kind}.safetensors"));
        write_formula_weights(&reference.cases[kind.name()].keys, &path);
        path
    };
    let cases = [
        (
            ModelKind::Resnet18,
            formula(ModelKind::Resnet18),
            Normalize::imagenet(),
        ),
        (
            ModelKind::Resnet50,
            formula(ModelKind::Resnet50),
            Normalize::imagenet(),
        ),
        (
            ModelKind::EfficientnetLite0,
            common::lite0_weights(),
            Normalize::efficientnet_lite(),
        ),
    ];
    for (kind, weights, normalize) in &cases {
        let what = format!("{kind}, the CUDA engine's plan");
        let plan = cnn_plan(&Architecture::of(*kind), kind.name(), weights)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let (features, logits) = plan.reference(&images(), 224, normalize.mean, normalize.std);
        assert_eq!(features.len(), 2 * plan.features, "{what}");
        let probs: Vec<Vec<f32>> = logits
            .chunks_exact(1000)
            .map(|row| {
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let exp: Vec<f32> = row.iter().map(|v| (v - max).exp()).collect();
                let sum: f32 = exp.iter().sum();
                exp.iter().map(|v| v / sum).collect()
            })
            .collect();
        assert_eq!(probs.len(), 2, "{what}");
        let want = &reference.cases[kind.name()].probs;
        assert_close(&what, &DeviceSpec::Cpu, &probs, want, TOLERANCE);
    }
    let error = cnn_plan(
        &Architecture::of(ModelKind::Resnet18),
        "resnet18",
        &cases[1].1,
    )
    .expect_err("ResNet-50's weights are not ResNet-18's");
    let error = error.to_string();
    assert!(error.contains("do not match"), "{error}");
    assert!(!error.contains('\n'), "{error}");
}

/// The softmax of each `classes`-wide row of `logits`.
fn softmax_rows(logits: &[f32], classes: usize) -> Vec<Vec<f32>> {
    logits
        .chunks_exact(classes)
        .map(|row| {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let exp: Vec<f32> = row.iter().map(|v| (v - max).exp()).collect();
            let sum: f32 = exp.iter().sum();
            exp.iter().map(|v| v / sum).collect()
        })
        .collect()
}

/// Without `--weights`, the CUDA engine plans the seeded weights the burn
/// engine draws (benchmarks run so): the CNN plans through the same burn
/// module drawn from the same seed, ConvNeXt's through the same seeded
/// tensors, giving the burn engine's probabilities on the CPU.
#[test]
fn the_cuda_engines_seeded_plans_are_the_burn_engines_seeded_models() {
    use gpu_worker::Architecture;
    use gpu_worker::cnn_plan_seeded;
    use gpu_worker::cuda::plan::convnext_plan_seeded;
    let spec = DeviceSpec::Cpu;
    let device = gpu_worker::open(&spec).expect("the CPU opens");
    for kind in [
        ModelKind::Resnet18,
        ModelKind::EfficientnetLite0,
        ModelKind::ConvnextTiny,
    ] {
        let (arch, seed) = (Architecture::of(kind), 11);
        let normalize = kind.spec().preprocess.normalize;
        let logits = match kind {
            ModelKind::ConvnextTiny => convnext_plan_seeded(&arch, kind.name(), seed).map(|plan| {
                plan.reference(&images(), 224, normalize.mean, normalize.std)
                    .1
            }),
            _ => cnn_plan_seeded(&arch, kind.name(), seed).map(|plan| {
                plan.reference(&images(), 224, normalize.mean, normalize.std)
                    .1
            }),
        }
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
        let model = Model::seeded(&arch, kind.name(), seed, &device);
        let engine =
            BurnEngine::for_device(&spec, device.clone(), model, Task::Classify { top_k: 1000 });
        let want = probabilities(&engine, &images(), &normalize);
        let got = softmax_rows(&logits, 1000);
        // Seeded weights give nearly flat probabilities, whose top-1 is a
        // near tie: compared as log-probabilities (the logits up to a
        // constant), where other weights would differ by far more.
        for (row, (g, w)) in got.iter().zip(&want).enumerate() {
            let max = g
                .iter()
                .zip(w)
                .map(|(a, b)| (a.ln() - b.ln()).abs())
                .fold(0.0f32, f32::max);
            println!("{kind}, seeded, image {row}: max |Δ ln p| = {max:.2e}");
            assert!(
                max <= 1e-3,
                "{kind}, seeded, image {row}: max |Δ ln p| {max:e}"
            );
        }
    }
}
