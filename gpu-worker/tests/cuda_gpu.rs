//! The CUDA engine on an NVIDIA GPU (#28), in one test binary that a GPU
//! session carries to the machine with the `pipeline` binary
//! (`scripts/cuda-kit.sh`): every family's forward pass at its real size,
//! on the burn engine's seeded weights (their loading and layouts are
//! checked on the CPU against PyTorch: `tests/it/families.rs`, `parity.rs`,
//! `text.rs`), against its plan's f32 reference on the host; the engine
//! behind the worker's seam; an image's bytes whatever images come with
//! it.
//!
//! One test per family, so that the kit runs each in its own process
//! (`cuda_gpu --exact NAME`, under its own timeout) and a sticky device
//! fault in one family leaves the others' results standing. Within a
//! family every model runs whatever the others did: each one's cosines
//! and top-1s are printed as they come, a failing model is printed when
//! known, and the test fails at the end listing every failed model.
//!
//! Without a GPU each test says so in one line and passes, unless
//! `PIPELINE_REQUIRE_GPU=1` (the kit sets it), which makes that a failure.

mod common;

use gpu_worker::cuda::gpu::{Gpu, Images, Norm3, Tower};
use gpu_worker::{Architecture, Pooling};
use pipeline_core::{DeviceSpec, ModelKind, Normalize};

/// The lowest cosine between the GPU's f16 result and the f32 reference,
/// per image (the engine's start-up check uses the same).
const MIN_COSINE: f32 = 0.999;

/// `n` textured `side × side` images, u8 NCHW, each different.
fn images(n: usize, side: usize) -> Vec<u8> {
    (0..n * 3 * side * side)
        .map(|i| {
            let (img, c) = (i / (3 * side * side), (i / (side * side)) % 3);
            let (y, x) = ((i / side) % side, i % side);
            ((x * (3 + img) + y * 5 + c * 70 + (x * y) % (17 + img)) % 256) as u8
        })
        .collect()
}

/// Each of `rows` rows of `got` (`dim` wide) at cosine ≥ [`MIN_COSINE`]
/// to `want`'s (every row's cosine printed, then the low ones, NaN
/// included, named in one failure).
fn assert_rows(what: &str, (got, want): (&[f32], &[f32]), rows: usize) {
    let dim = want.len() / rows;
    let mut low = Vec::new();
    for i in 0..rows {
        let c = common::cosine(&got[i * dim..][..dim], &want[i * dim..][..dim]);
        println!("{what}, image {i}: cosine {c:.6}");
        if c.is_nan() || c < MIN_COSINE {
            low.push(format!("image {i}: cosine {c}"));
        }
    }
    assert!(
        low.is_empty(),
        "{what}: below cosine {MIN_COSINE}: {}",
        low.join(", ")
    );
}

/// Where there are logits, each of `rows` rows' top-1 that of `want`
/// (every row's printed, then those that differ named in one failure).
fn assert_top1(what: &str, (got, want): (&[f32], &[f32]), rows: usize) {
    let k = want.len() / rows;
    let mut differ = Vec::new();
    for i in 0..rows {
        let top = common::argmax(&got[i * k..][..k]);
        let reference = common::argmax(&want[i * k..][..k]);
        println!("{what}, image {i}: top-1 {top:?}, reference {reference:?}");
        if top != reference {
            differ.push(format!("image {i}: top-1 {top:?}, reference {reference:?}"));
        }
    }
    assert!(
        differ.is_empty(),
        "{what}: top-1 differs: {}",
        differ.join(", ")
    );
}

/// The message a panic was raised with.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<String>() {
        return message.clone();
    }
    if let Some(message) = payload.downcast_ref::<&str>() {
        return (*message).to_owned();
    }
    "a panic without a message".to_owned()
}

/// Runs `check` on every one of a family's `cases` (each with its name),
/// to its end whatever the others did: a case that panics (an engine
/// error, a cosine or top-1 off its bound) is printed when known and the
/// next one runs; then the test fails listing every failed case.
fn each_case<T: Copy>(family: &str, cases: &[(String, T)], check: impl Fn(T)) {
    let mut failed = Vec::new();
    for (name, case) in cases {
        println!("{family}: {name}: running");
        let started = std::time::Instant::now();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(*case)));
        let seconds = started.elapsed().as_secs_f64();
        match outcome {
            Ok(()) => println!("{family}: {name}: ok ({seconds:.1} s)"),
            Err(payload) => {
                let why = panic_message(&*payload);
                println!("{family}: {name}: FAILED ({seconds:.1} s): {why}");
                failed.push(format!("{name}: {why}"));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{family}: {} of {} failed:\n  {}",
        failed.len(),
        cases.len(),
        failed.join("\n  ")
    );
}

fn gpu(test: &str) -> Option<Gpu> {
    common::cuda_gpu_or_skip(test)
}

/// Three images padded to four rows: the padding row is computed and
/// changes none of them.
const REAL: usize = 3;
const PADDED: usize = 4;

/// `pixels` as a batch of [`PADDED`] rows.
fn batch(pixels: &[u8], side: usize, norm: Norm3) -> Images<'_> {
    Images {
        pixels,
        padded: PADDED,
        side,
        norm,
    }
}

/// One ViT image tower (with `pooling`, where given) against its
/// reference.
fn vit_case(gpu: &Gpu, kind: ModelKind, pooling: Option<Pooling>) {
    use gpu_worker::cuda::plan::vit_plan_seeded;
    let what = format!("{kind} ({pooling:?}) on {}", gpu.name());
    let mut plan = vit_plan_seeded(&Architecture::of(kind), kind.name(), 1)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    if let Some(pooling) = pooling {
        plan.config.pooling = pooling;
    }
    let preprocess = kind.default_preprocess();
    let side = preprocess.crop as usize;
    vit_plan_case(gpu, &what, &plan, side, preprocess.normalize);
}

/// A ViT plan on the GPU against its reference, on `side × side` images.
fn vit_plan_case(
    gpu: &Gpu,
    what: &str,
    plan: &gpu_worker::cuda::plan::VitPlan,
    side: usize,
    n: Normalize,
) {
    use gpu_worker::cuda::vit_run::CudaVit;
    let pixels = images(REAL, side);
    let cuda = CudaVit::new(gpu, plan).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (features, logits) = cuda
        .forward(gpu, batch(&pixels, side, Norm3::new(n.mean, n.std)))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let (want, want_logits) = plan.reference(&pixels, side, n.mean, n.std);
    assert_rows(what, (&features, &want), REAL);
    if let (Some(got), Some(want)) = (logits, want_logits) {
        assert_top1(what, (&got, &want), REAL);
    }
}

/// The repos of `cli/tests/hub_repos/` (#42): beside this crate, or under
/// the working folder (the GPU kit runs this binary from the repo's root,
/// wherever the repo lies there).
fn hub_repos() -> std::path::PathBuf {
    let beside = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/hub_repos");
    if beside.is_dir() {
        beside
    } else {
        std::path::PathBuf::from("cli/tests/hub_repos")
    }
}

/// Hugging Face repos (#42) of sizes no built-in name has, planned from
/// their `config.json` as the worker plans them: transformers' bare
/// `ViTModel`, a 2-label `ViTForImageClassification`, a multi-label
/// `Dinov2ForImageClassification`, CLIP's and SigLIP's vision towers, a
/// 5-label `ConvNextForImageClassification` (64 px), a 7-class timm
/// ConvNeXt.
/// Their heads are 16 wide, so attention runs unfused (two batched GEMMs
/// and a row softmax): the path of head widths the fused kernel lacks.
#[test]
fn the_hub_repos_on_the_gpu_are_their_reference() {
    let test = "the_hub_repos_on_the_gpu_are_their_reference";
    let Some(gpu) = gpu(test) else {
        return;
    };
    let mut dirs: Vec<std::path::PathBuf> = std::fs::read_dir(hub_repos())
        .unwrap_or_else(|e| panic!("{}: {e}", hub_repos().display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| common::hub_repo_config(p).is_some())
        .collect();
    dirs.sort();
    let cases: Vec<(String, usize)> = dirs
        .iter()
        .enumerate()
        .filter_map(|(i, dir)| {
            common::hub_repo_config(dir)?.ok()?;
            Some((dir.file_name()?.to_string_lossy().replace("--", "/"), i))
        })
        .collect();
    // Every fixture repo but BEiT's, whose family is not built in.
    assert_eq!(
        cases.len(),
        dirs.len() - 1,
        "hub repos with a built-in model type"
    );
    each_case(test, &cases, |i| {
        use gpu_worker::cuda::cnn_run::CudaCnn;
        use gpu_worker::cuda::convnext_run::CudaConvNext;
        let dir = &dirs[i];
        let config = common::hub_repo_config(dir)
            .and_then(Result::ok)
            .expect("checked above");
        let repo = dir.file_name().expect("a folder").to_string_lossy();
        let what = format!("{repo} on {}", gpu.name());
        let arch = Architecture::of_hub(&config.shape);
        // One file, or a sharded checkpoint's index.
        let weights = common::hub_repo_weights(dir);
        let normalize = Normalize {
            mean: [0.5; 3],
            std: [0.5; 3],
        };
        let side = config.shape.image;
        let pixels = images(REAL, side);
        let norm = Norm3::new(normalize.mean, normalize.std);
        let ((features, logits), (want, want_logits)) = match arch {
            Architecture::ConvNext(_) => {
                let plan = gpu_worker::cuda::plan::convnext_plan(&arch, &repo, &weights)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let cuda = CudaConvNext::new(&gpu, &plan).unwrap_or_else(|e| panic!("{what}: {e}"));
                (
                    cuda.forward(&gpu, batch(&pixels, side, norm))
                        .unwrap_or_else(|e| panic!("{what}: {e}")),
                    plan.reference(&pixels, side, normalize.mean, normalize.std),
                )
            }
            Architecture::ResNet(_) => {
                let plan = gpu_worker::cnn_plan(&arch, &repo, &weights)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let cuda = CudaCnn::new(&gpu, &plan).unwrap_or_else(|e| panic!("{what}: {e}"));
                (
                    cuda.forward(&gpu, batch(&pixels, side, norm))
                        .unwrap_or_else(|e| panic!("{what}: {e}")),
                    plan.reference(&pixels, side, normalize.mean, normalize.std),
                )
            }
            _ => {
                let plan = gpu_worker::cuda::plan::vit_plan(&arch, &repo, &weights)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                vit_plan_case(&gpu, &what, &plan, side, normalize);
                return;
            }
        };
        assert_rows(&what, (&features, &want), REAL);
        // A head's logits where the repo has one; none without (the
        // reference's are empty then).
        match (logits, config.shape.classes) {
            (Some(logits), Some(_)) => assert_top1(&what, (&logits, &want_logits), REAL),
            (None, None) => assert!(want_logits.is_empty(), "{what}: the reference's head"),
            (got, classes) => panic!("{what}: logits {:?} for classes {classes:?}", got.is_some()),
        }
    });
}

/// The ViT image towers of `cases`, each to its end.
fn vit_family(test: &str, cases: &[(ModelKind, Option<Pooling>)]) {
    let Some(gpu) = gpu(test) else {
        return;
    };
    let cases: Vec<(String, (ModelKind, Option<Pooling>))> = cases
        .iter()
        .map(|&(kind, pooling)| (format!("{kind} ({pooling:?})"), (kind, pooling)))
        .collect();
    each_case(test, &cases, |(kind, pooling)| {
        vit_case(&gpu, kind, pooling);
    });
}

/// torchvision's ViT (class token, head).
#[test]
fn the_torchvision_vit_on_the_gpu_is_its_reference() {
    vit_family(
        "the_torchvision_vit_on_the_gpu_is_its_reference",
        &[(ModelKind::VitB16, None)],
    );
}

/// CLIP's image towers (pre-norm, projection, QuickGELU), base and large.
#[test]
fn the_clip_image_towers_on_the_gpu_are_their_reference() {
    vit_family(
        "the_clip_image_towers_on_the_gpu_are_their_reference",
        &[(ModelKind::ClipVitB32, None), (ModelKind::ClipVitL14, None)],
    );
}

/// SigLIP's image tower (attention pooling, tanh GELU).
#[test]
fn the_siglip_image_tower_on_the_gpu_is_its_reference() {
    vit_family(
        "the_siglip_image_tower_on_the_gpu_is_its_reference",
        &[(ModelKind::SiglipBasePatch16_224, None)],
    );
}

/// DINOv2 (layer scales), and its `--pooling cls_mean`.
#[test]
fn the_dinov2_towers_on_the_gpu_are_their_reference() {
    vit_family(
        "the_dinov2_towers_on_the_gpu_are_their_reference",
        &[
            (ModelKind::Dinov2Vits14, None),
            (ModelKind::Dinov2Vits14, Some(Pooling::ClassAndMean)),
        ],
    );
}

/// One CNN against its reference: a ResNet or EfficientNet-Lite0 on
/// cuDNN (Lite0 on its real weights, as seeded ones fade below f16's
/// range through its 16 blocks), or ConvNeXt (GEMMs over patches, the
/// depthwise 7×7 kernel).
fn cnn_case(gpu: &Gpu, kind: ModelKind) {
    use gpu_worker::cuda::cnn_run::CudaCnn;
    use gpu_worker::cuda::convnext_run::CudaConvNext;
    use gpu_worker::cuda::plan::convnext_plan_seeded;
    use gpu_worker::{cnn_plan, cnn_plan_seeded};
    let what = format!("{kind} on {}", gpu.name());
    let arch = Architecture::of(kind);
    let n: Normalize = kind.default_preprocess().normalize;
    let pixels = images(REAL, 224);
    let norm = Norm3::new(n.mean, n.std);
    let ((features, logits), (want, want_logits)) = if kind == ModelKind::ConvnextTiny {
        let plan =
            convnext_plan_seeded(&arch, kind.name(), 1).unwrap_or_else(|e| panic!("{what}: {e}"));
        let cuda = CudaConvNext::new(gpu, &plan).unwrap_or_else(|e| panic!("{what}: {e}"));
        (
            cuda.forward(gpu, batch(&pixels, 224, norm))
                .unwrap_or_else(|e| panic!("{what}: {e}")),
            plan.reference(&pixels, 224, n.mean, n.std),
        )
    } else {
        let plan = if kind == ModelKind::EfficientnetLite0 {
            cnn_plan(&arch, kind.name(), &common::lite0_weights())
        } else {
            cnn_plan_seeded(&arch, kind.name(), 1)
        }
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let cuda = CudaCnn::new(gpu, &plan).unwrap_or_else(|e| panic!("{what}: {e}"));
        (
            cuda.forward(gpu, batch(&pixels, 224, norm))
                .unwrap_or_else(|e| panic!("{what}: {e}")),
            plan.reference(&pixels, 224, n.mean, n.std),
        )
    };
    assert_rows(&what, (&features, &want), REAL);
    let logits = logits.unwrap_or_else(|| panic!("{what}: no logits"));
    assert_top1(&what, (&logits, &want_logits), REAL);
}

/// The CNNs of `kinds`, each to its end.
fn cnn_family(test: &str, kinds: &[ModelKind]) {
    let Some(gpu) = gpu(test) else {
        return;
    };
    let cases: Vec<(String, ModelKind)> = kinds.iter().map(|&k| (k.to_string(), k)).collect();
    each_case(test, &cases, |kind| cnn_case(&gpu, kind));
}

/// The ResNets (basic and bottleneck blocks) on cuDNN.
#[test]
fn the_resnets_on_the_gpu_are_their_reference() {
    cnn_family(
        "the_resnets_on_the_gpu_are_their_reference",
        &[ModelKind::Resnet18, ModelKind::Resnet50],
    );
}

/// EfficientNet-Lite0 (depthwise convolutions, ReLU6, asymmetric padding)
/// on cuDNN, on its real weights (`PIPELINE_WEIGHTS_DIR`; the kit carries
/// them).
#[test]
fn efficientnet_lite0_on_the_gpu_is_its_reference() {
    cnn_family(
        "efficientnet_lite0_on_the_gpu_is_its_reference",
        &[ModelKind::EfficientnetLite0],
    );
}

/// ConvNeXt (GEMMs over patches, the depthwise 7×7 kernel).
#[test]
fn convnext_on_the_gpu_is_its_reference() {
    cnn_family(
        "convnext_on_the_gpu_is_its_reference",
        &[ModelKind::ConvnextTiny],
    );
}

/// One text tower against its reference.
fn text_case(gpu: &Gpu, kind: ModelKind) {
    use gpu_worker::cuda::plan::text_plan_seeded;
    use gpu_worker::cuda::text_run::CudaText;
    let what = format!("{kind}'s text tower on {}", gpu.name());
    let config = gpu_worker::TextConfig::of(kind).expect("a text tower");
    let (vocab, context) = (config.vocab, config.context);
    // Texts of different lengths, each ended by the vocabulary's last
    // id (CLIP's end of text), padded with zeros.
    let ids: Vec<Vec<u32>> = (0..5)
        .map(|t| {
            let len = 3 + 7 * t;
            (0..context)
                .map(|p| match p {
                    p if p < len => ((p * 31 + t * 7) % (vocab - 2) + 1) as u32,
                    p if p == len => (vocab - 1) as u32,
                    _ => 0,
                })
                .collect()
        })
        .collect();
    let plan = text_plan_seeded(config, kind.name(), 1);
    let got = CudaText::new(gpu, &plan)
        .and_then(|text| text.embed(gpu, &ids))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_rows(&what, (&got, &plan.reference(&ids)), ids.len());
}

/// CLIP's causal text tower (pooled at the end-of-text token) and
/// SigLIP's (the last token, a projection bias).
#[test]
fn the_text_towers_on_the_gpu_are_their_reference() {
    let test = "the_text_towers_on_the_gpu_are_their_reference";
    let Some(gpu) = gpu(test) else {
        return;
    };
    let cases: Vec<(String, ModelKind)> = [ModelKind::ClipVitB32, ModelKind::SiglipBasePatch16_224]
        .iter()
        .map(|&k| (format!("{k}'s text tower"), k))
        .collect();
    each_case(test, &cases, |kind| text_case(&gpu, kind));
}

/// The engine behind the worker's seam for `model` (`--engine cuda` on
/// GPU 0, as the worker opens it, its start-up check included).
fn engine_case(model: ModelKind) {
    use gpu_worker::cuda::engine::CudaEngine;
    use gpu_worker::{Engine, PixelBatch};
    use pipeline_core::{DecodeLimits, EngineKind, Precision, Prediction, Task, WorkerConfig};
    let config = WorkerConfig {
        name: "gpu#0".into(),
        device: DeviceSpec::Gpu(0),
        model: model.into(),
        weights: None,
        resolved: Default::default(),
        seed: 2,
        task: Task::Embed,
        pooling: None,
        classes: None,
        precision: Precision::Auto,
        engine: EngineKind::Cuda,
        batch_size: Some(PADDED),
        loader_threads: 1,
        preprocess: model.default_preprocess(),
        limits: DecodeLimits::default(),
        remote: Default::default(),
        cuda_uuids: Default::default(),
        onnx_runtime: None,
    };
    let engine = CudaEngine::open(&config, gpu_worker::cuda_wiring())
        .unwrap_or_else(|e| panic!("{model}: {e}"));
    let side = config.preprocess.crop as usize;
    let normalize = config.preprocess.normalize;
    let plane = 3 * side * side;
    let a = images(PADDED, side);
    // The same first image, other images beside it.
    let mut b = images(PADDED + 3, side)[3 * plane..].to_vec();
    b[..plane].copy_from_slice(&a[..plane]);
    let embed = |pixels: &[u8]| -> Vec<Vec<f32>> {
        engine
            .infer(&PixelBatch::new(pixels, PADDED, PADDED, side, &normalize))
            .unwrap_or_else(|e| panic!("{model}: {e}"))
            .into_iter()
            .map(|p| match p {
                Prediction::Embedding(v) => v,
                other => panic!("{model}: embed gave {other:?}"),
            })
            .collect()
    };
    let (first, second) = (embed(&a), embed(&b));
    assert_eq!(
        first[0].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        second[0].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "{model}: image 0's bytes changed with its neighbours"
    );
    assert_ne!(first[1], second[1], "{model}: other images, other rows");
    // One image in a batch of one, another shape: printed, not
    // asserted (cuBLASLt may pick other algorithms for other shapes).
    let alone = engine
        .infer(&PixelBatch::new(&a[..plane], 1, 1, side, &normalize))
        .unwrap_or_else(|e| panic!("{model}: {e}"));
    if let Prediction::Embedding(v) = &alone[0] {
        println!(
            "{model}: in a batch of one, the same bytes: {}",
            v == &first[0]
        );
    }
}

/// The engine behind the worker's seam: an image's bytes do not depend on
/// the images that come with it in a batch of the same shape, and the
/// embeddings are the plan's reference (its start-up check).
#[test]
fn an_images_bytes_do_not_depend_on_the_images_beside_it() {
    let test = "an_images_bytes_do_not_depend_on_the_images_beside_it";
    if gpu(test).is_none() {
        return;
    }
    let cases: Vec<(String, ModelKind)> = [ModelKind::Resnet50, ModelKind::ClipVitB32]
        .iter()
        .map(|&k| (k.to_string(), k))
        .collect();
    each_case(test, &cases, engine_case);
}
