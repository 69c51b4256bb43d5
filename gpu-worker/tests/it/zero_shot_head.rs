//! The CUDA engine's zero-shot head (scored on the host from the GPU's
//! embeddings) against the burn engine's zero-shot classification: the
//! two engines meet here, above both.

use gpu_worker::cuda::zero_shot_head::ZeroShotHead;
use gpu_worker::zero_shot::ClassMatrix;
use gpu_worker::{BurnEngine, Engine, PixelBatch};
use pipeline_core::{
    ClassScore, DecodeLimits, DeviceSpec, EngineKind, ModelKind, Precision, Prediction, Task,
    WorkerConfig, ZeroShotClasses,
};

fn config(model: ModelKind, task: Task, classes: Option<ZeroShotClasses>) -> WorkerConfig {
    WorkerConfig {
        name: "cpu#0".into(),
        device: DeviceSpec::Cpu,
        model: model.into(),
        weights: None,
        resolved: Default::default(),
        seed: 3,
        task,
        pooling: None,
        classes,
        precision: Precision::Auto,
        engine: EngineKind::Burn,
        batch_size: Some(2),
        loader_threads: 1,
        preprocess: model.default_preprocess(),
        limits: DecodeLimits::default(),
        remote: Default::default(),
        cuda_uuids: Default::default(),
        onnx_runtime: None,
    }
}

/// The CUDA engine's zero-shot head scores embeddings as the burn
/// engine's scores its own: from the burn engine's embeddings of two
/// images, the probabilities of the burn engine's zero-shot
/// classification, CLIP's softmax and SigLIP's sigmoid, on seeded
/// weights (the GPU's side of it is the embedding, checked elsewhere).
#[test]
fn its_zero_shot_head_scores_embeddings_as_the_burn_engine_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    let side = 224;
    let pixels: Vec<u8> = (0..2 * 3 * side * side)
        .map(|i| ((i * 7 + i / 997) % 251) as u8)
        .collect();
    for model in [ModelKind::ClipVitB32, ModelKind::SiglipBasePatch16_224] {
        let dim = model.feature_dim();
        let labels: Vec<String> = (0..5).map(|i| format!("class {i}")).collect();
        let rows: Vec<f32> = (0..5 * dim)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let path = dir.path().join(format!("{model}.safetensors"));
        ClassMatrix::new(labels.clone(), dim, rows)
            .write_safetensors(&path)
            .expect("class matrix written");
        let classes = ZeroShotClasses {
            path,
            labels,
            prompts: None,
        };
        let normalize = model.default_preprocess().normalize;
        let batch = PixelBatch::new(&pixels, 2, 2, side, &normalize);
        let run = |config: &WorkerConfig| {
            BurnEngine::open(config)
                .unwrap_or_else(|e| panic!("{model}: {e}"))
                .infer(&batch)
                .unwrap_or_else(|e| panic!("{model}: {e}"))
        };
        let embeddings: Vec<f32> = run(&config(model, Task::Embed, None))
            .into_iter()
            .flat_map(|p| match p {
                Prediction::Embedding(v) => v,
                other => panic!("embed gave {other:?}"),
            })
            .collect();
        let classify = config(model, Task::Classify { top_k: 5 }, Some(classes.clone()));
        let want = run(&classify);
        let head = ZeroShotHead::open(&classify, &classes, dim).expect("the head opens");
        let got = gpu_worker::predictions(
            classify.task,
            &head.probabilities(&embeddings),
            2,
            head.classes(),
        );
        for (row, (g, w)) in got.iter().zip(&want).enumerate() {
            let (Prediction::TopK(g), Prediction::TopK(w)) = (g, w) else {
                panic!("{model}: classify gave embeddings");
            };
            let classes = |v: &[ClassScore]| v.iter().map(|s| s.class).collect::<Vec<_>>();
            assert_eq!(classes(g), classes(w), "{model}, image {row}: class order");
            for (a, b) in g.iter().zip(w) {
                assert!(
                    (a.prob - b.prob).abs() <= 1e-4,
                    "{model}, image {row}, class {}: {} against the burn engine's {}",
                    a.class,
                    a.prob,
                    b.prob
                );
            }
        }
    }
}
