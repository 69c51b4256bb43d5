//! Weight files that do not fit the model are errors naming the tensor;
//! bookkeeping tensors (`num_batches_tracked`) are skipped.

use std::path::Path;

use crate::common;

use gpu_worker::{Model, WeightsError};
use pipeline_core::{DeviceSpec, ModelKind};
use safetensors::tensor::Dtype;

/// `tiny`'s tensors with PyTorch's names: `features.N.conv/bn`, `fc`.
fn tiny_keys() -> Vec<(String, Vec<usize>)> {
    let mut keys = Vec::new();
    let mut cin = 3;
    for (i, cout) in [16usize, 32, 64, 128].into_iter().enumerate() {
        keys.push((format!("features.{i}.conv.weight"), vec![cout, cin, 3, 3]));
        for leaf in ["weight", "bias", "running_mean", "running_var"] {
            keys.push((format!("features.{i}.bn.{leaf}"), vec![cout]));
        }
        cin = cout;
    }
    keys.push(("fc.weight".into(), vec![1000, 128]));
    keys.push(("fc.bias".into(), vec![1000]));
    keys
}

fn write(path: &Path, keys: &[(String, Vec<usize>)], with_tracking: bool) {
    let mut data: Vec<common::RawTensor> = keys
        .iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let bytes = (0..n)
                .flat_map(|i| ((i % 7) as f32 * 0.1 + 0.5).to_le_bytes())
                .collect();
            (name.clone(), bytes, shape.clone(), Dtype::F32)
        })
        .collect();
    if with_tracking {
        data.push((
            "features.0.bn.num_batches_tracked".into(),
            7i64.to_le_bytes().to_vec(),
            vec![],
            Dtype::I64,
        ));
    }
    common::write_safetensors(path, &data);
}

fn load(keys: &[(String, Vec<usize>)], with_tracking: bool) -> Result<Model, WeightsError> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tiny.safetensors");
    write(&path, keys, with_tracking);
    let device = gpu_worker::open(&DeviceSpec::Cpu).expect("cpu opens");
    Model::load(ModelKind::Tiny, &path, &device)
}

fn mismatch(result: Result<Model, WeightsError>) -> String {
    match result {
        Err(WeightsError::Mismatch { problem, model, .. }) => {
            assert_eq!(model, "tiny");
            problem
        }
        other => panic!("expected a mismatch error, got {other:?}"),
    }
}

#[test]
fn a_complete_file_loads_its_values_and_num_batches_tracked_is_skipped() {
    let model = load(&tiny_keys(), true).expect("a complete file loads");
    // With zero features the logits are `fc.bias`, as the file holds it.
    let device = gpu_worker::open(&DeviceSpec::Cpu).expect("cpu opens");
    let zeros = burn::tensor::Tensor::<2>::zeros([1, 128], &device);
    let logits: Vec<f32> = model
        .head(zeros)
        .into_data()
        .try_to_vec::<f32>()
        .expect("f32 logits");
    let written: Vec<f32> = (0..1000).map(|i| (i % 7) as f32 * 0.1 + 0.5).collect();
    assert_eq!(logits, written);
}

#[test]
fn a_missing_tensor_is_named() {
    let keys: Vec<_> = tiny_keys()
        .into_iter()
        .filter(|(n, _)| n != "features.2.bn.running_var")
        .collect();
    let problem = mismatch(load(&keys, false));
    assert!(
        problem.contains("missing") && problem.contains("features.2.bn.running_var"),
        "{problem}"
    );
}

#[test]
fn an_extra_tensor_is_named() {
    let mut keys = tiny_keys();
    keys.push(("classifier.weight".into(), vec![10, 128]));
    let problem = mismatch(load(&keys, false));
    assert!(problem.contains("classifier.weight"), "{problem}");
}

#[test]
fn a_wrong_shape_is_named() {
    let keys: Vec<_> = tiny_keys()
        .into_iter()
        .map(|(n, s)| {
            if n == "fc.weight" {
                (n, vec![10, 128])
            } else {
                (n, s)
            }
        })
        .collect();
    let problem = mismatch(load(&keys, false));
    assert!(
        problem.contains("fc.weight") && problem.contains("10"),
        "{problem}"
    );
    println!("{problem}");
}

#[test]
fn missing_files_and_unknown_formats_are_clear_errors() {
    let device = gpu_worker::open(&DeviceSpec::Cpu).expect("cpu opens");
    let err = Model::load(ModelKind::Tiny, Path::new("/nonexistent/w.pth"), &device)
        .expect_err("no file");
    assert!(matches!(err, WeightsError::NotFound(_)), "{err}");
    let dir = tempfile::tempdir().expect("temp dir");
    let onnx = dir.path().join("w.onnx");
    std::fs::write(&onnx, b"not weights").expect("write");
    let err = Model::load(ModelKind::Tiny, &onnx, &device).expect_err("unknown format");
    assert!(matches!(err, WeightsError::UnknownFormat(_)), "{err}");
    let garbage = dir.path().join("w.pth");
    std::fs::write(&garbage, b"not a zip or pickle").expect("write");
    let err = Model::load(ModelKind::Tiny, &garbage, &device).expect_err("unreadable");
    assert!(matches!(err, WeightsError::Unreadable { .. }), "{err}");
}

#[test]
fn a_file_of_another_model_is_one_short_line() {
    // Names of another model for `tiny`: its 22 tensors are missing and
    // the 120 in the file are extra.
    let keys: Vec<(String, Vec<usize>)> = (0..120)
        .map(|i| {
            (
                format!("layer{}.{i}.conv1.weight", i % 4 + 1),
                vec![8, 8, 3, 3],
            )
        })
        .collect();
    let problem = mismatch(load(&keys, false));
    assert!(!problem.contains('\n') && problem.len() < 400, "{problem}");
    assert!(problem.contains("142 tensors do not match"), "{problem}");
    assert!(
        problem.contains("and 139 more mismatched tensors"),
        "{problem}"
    );
}
