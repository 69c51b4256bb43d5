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
