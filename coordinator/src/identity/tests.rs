//! What resume compares: every part of a run's identity, and the models
//! (built-in, ONNX, hub) as their descriptions.

use super::*;

/// An ONNX model is written as its description, and another file
/// (another fingerprint), another output, other class names, channel
/// order or normalisation at the same path is another model, which
/// resume refuses.
#[test]
fn an_onnx_models_file_output_labels_and_feeding_are_its_identity() {
    let onnx = |fnv64: &str, output: &str| {
        pipeline_core::ModelRef::Onnx(pipeline_core::OnnxModel {
            onnx: "/models/m.onnx".into(),
            fnv64: fnv64.into(),
            output: output.into(),
            width: Some(3),
            scores: pipeline_core::Scores::Softmax,
            labels: Vec::new(),
            channels: pipeline_core::Channels::Rgb,
            raw: Vec::new(),
            normalize: false,
        })
    };
    let mut old = RunIdentity::example(ModelKind::Tiny, 5, 2);
    old.model = onnx("00000000000000aa", "y");
    let text = serde_json::to_string(&old).expect("json");
    assert!(text.contains("\"fnv64\":\"00000000000000aa\""), "{text}");
    let back: RunIdentity = serde_json::from_str(&text).expect("reads back");
    assert_eq!(back.difference(&old), None);
    // Other class names write other records: another model too.
    let mut named = onnx("00000000000000aa", "y");
    if let pipeline_core::ModelRef::Onnx(m) = &mut named {
        m.labels = vec!["cat".into(), "dog".into(), "car".into()];
    }
    // So does another channel order or normalisation.
    let mut bgr = onnx("00000000000000aa", "y");
    let mut unit = onnx("00000000000000aa", "y");
    if let (pipeline_core::ModelRef::Onnx(b), pipeline_core::ModelRef::Onnx(u)) =
        (&mut bgr, &mut unit)
    {
        b.channels = pipeline_core::Channels::Bgr;
        u.normalize = true;
    }
    for other in [
        onnx("00000000000000bb", "y"),
        onnx("00000000000000aa", "z"),
        named,
        bgr,
        unit,
    ] {
        let mut now = old.clone();
        now.model = other;
        let message = old.difference(&now).expect("another model");
        assert!(message.starts_with("another --model"), "{message}");
    }
    // A hub model is its repo at a commit: the same repo at another
    // commit, or with other labels, is another model.
    let hub = |revision: &str, labels: &[&str]| {
        pipeline_core::ModelRef::Hub(pipeline_core::HubModel {
            repo: "org/vit".into(),
            revision: revision.into(),
            weights: format!("/hf/snapshots/{revision}/model.safetensors").into(),
            shape: pipeline_core::hub_config(
                r#"{"model_type": "vit", "hidden_size": 48, "num_attention_heads": 3}"#,
            )
            .expect("a config")
            .shape,
            labels: labels.iter().map(|&l| l.to_owned()).collect(),
            scores: pipeline_core::Scores::Softmax,
        })
    };
    let mut pinned = old.clone();
    pinned.model = hub(&"a".repeat(40), &["x", "y"]);
    let text = serde_json::to_string(&pinned).expect("json");
    let back: RunIdentity = serde_json::from_str(&text).expect("reads back");
    assert_eq!(back.difference(&pinned), None, "{text}");
    // The cache mounted elsewhere is the same model.
    let mut moved = pinned.clone();
    if let pipeline_core::ModelRef::Hub(m) = &mut moved.model {
        m.weights = format!("/mnt/hf/snapshots/{}/model.safetensors", "a".repeat(40)).into();
    }
    assert_eq!(pinned.difference(&moved), None);
    for other in [
        hub(&"b".repeat(40), &["x", "y"]),
        hub(&"a".repeat(40), &["x", "z"]),
    ] {
        let mut now = pinned.clone();
        now.model = other;
        let message = pinned.difference(&now).expect("another model");
        assert!(message.starts_with("another --model"), "{message}");
    }
    // A built-in model is still written as its name.
    let builtin = serde_json::to_value(RunIdentity::example(ModelKind::Tiny, 5, 2)).expect("json");
    assert_eq!(builtin["model"], "tiny");
}

#[test]
fn each_difference_is_named_with_its_old_and_new_value() {
    let old = RunIdentity::example(ModelKind::Tiny, 5, 2);
    assert_eq!(old.difference(&old.clone()), None);
    let mut now = old.clone();
    now.model = ModelKind::Resnet18.into();
    now.chunk_size = 4;
    let message = old.difference(&now).expect("two differences");
    assert!(
        message.contains("another --model (was \"tiny\", now \"resnet18\")"),
        "{message}"
    );
    assert!(
        message.contains("another --chunk-size (was 2, now 4)"),
        "{message}"
    );
    let mut pooled = old.clone();
    pooled.pooling = Some(EmbedPooling::Mean);
    let message = old.difference(&pooled).expect("pooling");
    assert!(
        message.starts_with("another --pooling (was nothing"),
        "{message}"
    );
    let mut half = old.clone();
    half.precision = Precision::F16;
    let message = old.difference(&half).expect("precision");
    assert_eq!(message, "another --precision (was \"auto\", now \"f16\")");
    let mut cuda = old.clone();
    cuda.engine = EngineKind::Cuda;
    let message = old.difference(&cuda).expect("engine");
    assert_eq!(message, "another engine (was \"burn\", now \"cuda\")");
    let encoded = serde_json::to_value(&cuda).expect("encoded");
    assert_eq!(encoded["engine"], "cuda");
    let mut kept = old.clone();
    kept.kept_columns = vec!["caption".into()];
    let message = old.difference(&kept).expect("kept columns");
    assert_eq!(message, "other --keep-columns (was [], now [\"caption\"])");
    // A run.json from before the field reads as `auto`.
    let mut text = serde_json::to_value(&old).expect("encoded");
    text.as_object_mut().expect("object").remove("precision");
    assert!(text.get("engine").is_none(), "burn's engine is not written");
    let back: RunIdentity = serde_json::from_value(text).expect("decoded");
    assert_eq!(back, old);
}

/// Runs record xxh3 of the weights; a run.json from before records
/// FNV-64, and its run still resumes, with the same weights only.
#[test]
fn a_run_begun_with_fnv_weights_resumes_with_the_same_weights_only() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("w.bin");
    std::fs::write(&path, b"the weights of a model").expect("written");
    let (bytes, xxh3) = hash_file(&path, FileHash::Xxh3).expect("read");
    let (_, fnv) = hash_file(&path, FileHash::Fnv64).expect("read");
    assert_ne!(xxh3, fnv);
    // xxh3-64's published value for the empty input.
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").expect("written");
    assert_eq!(
        hash_file(&empty, FileHash::Xxh3).expect("read").1,
        "2d06800538d394c2"
    );
    let mut now = RunIdentity::example(ModelKind::Tiny, 5, 2);
    now.weights = Weights::File {
        bytes,
        xxh3: Some(xxh3),
        fnv64: None,
    };
    assert_eq!(
        now.clone()
            .fingerprinted_like(None, Some(&path))
            .expect("read"),
        now
    );
    let mut legacy = serde_json::to_value(&now).expect("encoded");
    legacy["weights"] = serde_json::json!({ "bytes": bytes, "fnv64": fnv });
    let stored: RunIdentity = serde_json::from_value(legacy).expect("decoded");
    assert!(
        stored.difference(&now).is_some(),
        "the hashes differ as such"
    );
    let aligned = now
        .clone()
        .fingerprinted_like(Some(&stored), Some(&path))
        .expect("read");
    assert_eq!(stored.difference(&aligned), None);
    std::fs::write(&path, b"other weights, same size").expect("written");
    let changed = now
        .fingerprinted_like(Some(&stored), Some(&path))
        .expect("read");
    let what = stored.difference(&changed).expect("other weights");
    assert!(what.contains("other weights"), "{what}");
}

#[test]
fn run_json_round_trips_and_names_the_model_as_typed() {
    let mut id = RunIdentity::example(ModelKind::ClipVitB32, 7, 3);
    id.classes = Some(ClassFile {
        bytes: 10,
        fnv64: "00".into(),
        labels: vec!["cat".into(); 500],
        prompts: None,
    });
    let text = serde_json::to_string(&id).expect("encoded");
    assert!(text.contains("\"model\":\"clip_vit_b_32\""), "{text}");
    let back: RunIdentity = serde_json::from_str(&text).expect("decoded");
    assert_eq!(back, id);
    let mut other = id.clone();
    if let Some(c) = other.classes.as_mut() {
        c.labels[0] = "dog".into();
    }
    let message = id.difference(&other).expect("labels differ");
    assert!(message.len() < 400 && message.contains('…'), "{message}");
}
