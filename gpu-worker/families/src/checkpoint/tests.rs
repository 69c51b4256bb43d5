//! The checkpoint reader against whole files, headers, shards and
//! half-precision data.

use super::*;

/// A safetensors file's header alone gives the same names and shapes
/// as the whole file; a file cut short, or with bytes past what its
/// header says, is one line.
#[test]
fn shapes_from_the_header_alone() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/vectors/families/hf_clip/model.safetensors");
    let whole = Checkpoint::open(&file).expect("opens");
    let shapes = Checkpoint::open_shapes(&file).expect("its header");
    assert!(whole.names().eq(shapes.names()));
    for name in whole.names() {
        assert_eq!(whole.shape(name), shapes.shape(name), "{name}");
        // A tensor asked for is read from the file, the same values.
        let (a, b) = (whole.read(name), shapes.read(name));
        assert_eq!(a.expect("reads").values, b.expect("reads").values, "{name}");
    }
    let bytes = std::fs::read(&file).expect("reads");
    let dir = tempfile::tempdir().expect("tempdir");
    let cut = dir.path().join("cut.safetensors");
    let long = dir.path().join("long.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() - 1]).expect("writes");
    std::fs::write(&long, [bytes.as_slice(), &[0]].concat()).expect("writes");
    for path in [cut, long] {
        let error = Checkpoint::open_shapes(&path)
            .expect_err("not whole")
            .to_string();
        assert!(error.contains("not a complete safetensors file"), "{error}");
        assert!(!error.contains('\n'), "{error}");
    }
}

/// A checkpoint split into shards by its index reads as the whole
/// file, by data and by shapes alone; an index naming a file outside
/// its folder, a tensor its shard lacks, or no `weight_map` is one line.
#[test]
fn a_sharded_checkpoint_reads_as_the_whole_file() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/vectors/families/hf_clip/model.safetensors");
    let whole = Checkpoint::open(&file).expect("opens");
    let names: Vec<String> = whole.names().map(str::to_owned).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut map = serde_json::Map::new();
    for (i, part) in names.chunks(names.len().div_ceil(3)).enumerate() {
        let shard = format!("model-{i}.safetensors");
        let tensors: Vec<(String, HostTensor)> = part
            .iter()
            .map(|n| (n.clone(), whole.read(n).expect("reads")))
            .collect();
        let bytes: Vec<Vec<u8>> = tensors
            .iter()
            .map(|(_, t)| t.values.iter().flat_map(|v| v.to_le_bytes()).collect())
            .collect();
        let views = tensors.iter().zip(&bytes).map(|((n, t), b)| {
            let view = safetensors::tensor::TensorView::new(StDtype::F32, t.shape.clone(), b)
                .expect("a view");
            (n.clone(), view)
        });
        safetensors::serialize_to_file(views, None, &dir.path().join(&shard))
            .expect("writes a shard");
        for n in part {
            map.insert(n.clone(), serde_json::Value::String(shard.clone()));
        }
    }
    let write_index = |name: &str, value: serde_json::Value| {
        let path = dir.path().join(name);
        std::fs::write(&path, value.to_string()).expect("writes");
        path
    };
    let index = write_index(
        "model.safetensors.index.json",
        serde_json::json!({ "weight_map": map }),
    );
    let sharded = Checkpoint::open(&index).expect("opens by its index");
    let shapes = Checkpoint::open_shapes(&index).expect("its shards' headers");
    assert!(whole.names().eq(sharded.names()) && whole.names().eq(shapes.names()));
    for name in whole.names() {
        let (a, b) = (whole.read(name), sharded.read(name));
        assert_eq!(a.expect("reads").values, b.expect("reads").values, "{name}");
        assert_eq!(whole.shape(name), shapes.shape(name), "{name}");
    }
    let mut outside = map.clone();
    outside.insert(names[0].clone(), "../model-0.safetensors".into());
    let mut itself = map.clone();
    itself.insert(names[0].clone(), "bad.index.json".into());
    let mut missing = map.clone();
    missing.insert("not.a.tensor".into(), "model-0.safetensors".into());
    for (value, says) in [
        (
            serde_json::json!({ "weight_map": outside }),
            "not a file name",
        ),
        (
            serde_json::json!({ "weight_map": itself }),
            "not a file name",
        ),
        (
            serde_json::json!({ "weight_map": missing }),
            "not.a.tensor is not in its shard",
        ),
        (
            serde_json::json!({ "metadata": {} }),
            "without a weight_map",
        ),
    ] {
        let bad = write_index("bad.index.json", value);
        let error = Checkpoint::open(&bad).expect_err(says).to_string();
        assert!(error.contains(says) && !error.contains('\n'), "{error}");
    }
}

#[test]
fn transpose_swaps_rows_and_columns() {
    let t = HostTensor::new(vec![2, 3], vec![1., 2., 3., 4., 5., 6.]);
    let u = t.transposed();
    assert_eq!(u.shape, vec![3, 2]);
    assert_eq!(u.values, vec![1., 4., 2., 5., 3., 6.]);
    // Past the cache blocks, ragged on both sides.
    let (rows, cols) = (67, 131);
    let t = HostTensor::new(
        vec![rows, cols],
        (0..rows * cols).map(|i| i as f32).collect(),
    );
    let u = t.transposed();
    assert_eq!(u.shape, vec![cols, rows]);
    for r in 0..rows {
        for c in 0..cols {
            assert_eq!(u.values[c * rows + r], t.values[r * cols + c]);
        }
    }
}

#[test]
fn half_precision_widens() {
    let bytes: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
        .collect();
    assert_eq!(
        safetensors_to_f32(StDtype::F16, &bytes),
        Some(vec![1.5, -2.0])
    );
    assert_eq!(safetensors_to_f32(StDtype::I64, &bytes), None);
}
