use super::*;

fn fixture(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/onnx_upstream")
        .join(file)
}

/// A model without external data keeps the fingerprint it always had (the
/// FNV-1a of its bytes), so earlier runs resume; one with external data
/// folds in its file, so changed weights beside an unchanged graph are a
/// changed model, and resume refuses them.
#[test]
fn the_fingerprint_covers_external_data() {
    let whole = fixture("hf_vit/model.onnx");
    let bytes = std::fs::read(&whole).expect("fixture");
    let mut hash = Fnv64::default();
    hash.write(&bytes);
    assert_eq!(
        identify(&whole, "m"),
        Ok((format!("{:016x}", hash.finish()), vec![]))
    );

    let dir = tempfile::tempdir().expect("tempdir");
    for file in ["model.onnx", "model.onnx_data"] {
        std::fs::copy(fixture("hf_vit_external").join(file), dir.path().join(file)).expect("copy");
    }
    let model = dir.path().join("model.onnx");
    let (before, external) = identify(&model, "m").expect("its file is there");
    assert_eq!(
        external,
        vec![(
            "model.onnx_data".to_owned(),
            dir.path().join("model.onnx_data")
        )]
    );
    let graph = std::fs::read(&model).expect("read");
    assert_eq!(Ok(before.clone()), fingerprint(&graph, &external));
    assert_ne!(Ok(before.clone()), fingerprint(&graph, &[]));
    let data = dir.path().join("model.onnx_data");
    let mut bytes = std::fs::read(&data).expect("read");
    bytes[1000] ^= 1;
    std::fs::write(&data, bytes).expect("write");
    assert_ne!(Ok(before), identify(&model, "m").map(|(f, _)| f));
}

/// Unless `--scores` says, a classifier scores as transformers'
/// image-classification pipeline scores the model its `config.json`
/// describes (`postprocess`: `regression` none, `multi_label_classification`
/// or one label a sigmoid, else softmax), over each `problem_type`, with
/// and without a config, the head's width fixed by the graph or only
/// counted from its names; a config that is not JSON is one line naming it.
#[test]
fn a_classifier_scores_as_its_config_says() {
    use pipeline_core::Scores::{Raw, Sigmoid, Softmax};
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("model.onnx");
    for (width, names, want) in [
        (Some(1), 0, Sigmoid),
        (None, 1, Sigmoid),
        (Some(4), 4, Softmax),
        (None, 4, Softmax),
    ] {
        assert_eq!(config_scores(&model, width, names), Ok(want), "no config");
    }
    let config = dir.path().join("config.json");
    for (problem_type, width, names, want) in [
        ("\"multi_label_classification\"", Some(4), 4, Sigmoid),
        ("\"multi_label_classification\"", None, 4, Sigmoid),
        ("\"single_label_classification\"", Some(4), 4, Softmax),
        ("\"single_label_classification\"", Some(1), 1, Sigmoid),
        ("\"regression\"", Some(4), 4, Raw),
        ("\"regression\"", Some(1), 1, Raw),
        ("null", Some(1), 1, Sigmoid),
        ("null", None, 1, Sigmoid),
        ("null", Some(3), 3, Softmax),
    ] {
        std::fs::write(
            &config,
            format!(r#"{{"model_type": "vit", "problem_type": {problem_type}}}"#),
        )
        .expect("config.json");
        assert_eq!(
            config_scores(&model, width, names),
            Ok(want),
            "{problem_type} {width:?} {names}"
        );
    }
    std::fs::write(&config, "{").expect("config.json");
    let e = config_scores(&model, Some(4), 4).expect_err("not JSON");
    assert!(
        e.starts_with(&format!("{}: not JSON", config.display())),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
}
