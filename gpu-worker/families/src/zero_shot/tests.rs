use super::*;

fn write_npy<T: npyz::AutoSerialize + Copy>(path: &Path, shape: &[u64], values: &[T]) {
    use npyz::WriterBuilder;
    let mut out = Vec::new();
    let mut writer = npyz::WriteOptions::<T>::new()
        .default_dtype()
        .shape(shape)
        .writer(&mut out)
        .begin_nd()
        .expect("header");
    writer.extend(values.iter().copied()).expect("data");
    writer.finish().expect("finish");
    std::fs::write(path, out).expect("written");
}

#[test]
fn npy_matrices_of_every_float_width_read_the_same() {
    let dir = tempfile::tempdir().expect("tempdir");
    let values = [1.0f32, -2.0, 0.5, 4.0, 0.0, 3.0];
    std::fs::write(dir.path().join("a.txt"), "cat\ndog\n").expect("labels");
    std::fs::copy(dir.path().join("a.txt"), dir.path().join("b.txt")).expect("labels");
    std::fs::copy(dir.path().join("a.txt"), dir.path().join("c.txt")).expect("labels");
    write_npy(&dir.path().join("a.npy"), &[2, 3], &values);
    let wide: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
    write_npy(&dir.path().join("b.npy"), &[2, 3], &wide);
    let half: Vec<half::f16> = values.iter().map(|&v| half::f16::from_f32(v)).collect();
    write_npy(&dir.path().join("c.npy"), &[2, 3], &half);
    for name in ["a.npy", "b.npy", "c.npy"] {
        let m = ClassMatrix::open(&dir.path().join(name)).expect(name);
        assert_eq!((m.rows(), m.dim()), (2, 3), "{name}");
        assert_eq!(m.values, values, "{name}");
        assert_eq!(m.labels(), ["cat", "dog"], "{name}");
    }
}

#[test]
fn bad_class_files_are_one_line_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let error = |name: &str| {
        let e = ClassMatrix::open(&dir.path().join(name)).expect_err(name);
        let text = e.to_string();
        assert!(!text.contains('\n'), "{text}");
        text
    };
    write_npy(&dir.path().join("nolabels.npy"), &[2, 2], &[1.0f32; 4]);
    assert!(error("nolabels.npy").contains("nolabels.txt"));
    write_npy(&dir.path().join("count.npy"), &[2, 2], &[1.0f32; 4]);
    std::fs::write(dir.path().join("count.txt"), "one\n").expect("labels");
    assert!(error("count.npy").contains("2 rows but 1 labels"));
    write_npy(&dir.path().join("flat.npy"), &[4], &[1.0f32; 4]);
    std::fs::write(dir.path().join("flat.txt"), "a\n").expect("labels");
    assert!(error("flat.npy").contains("[4]"));
    write_npy(&dir.path().join("ints.npy"), &[1, 2], &[1i32, 2]);
    std::fs::write(dir.path().join("ints.txt"), "a\n").expect("labels");
    assert!(error("ints.npy").contains("<i4"));
    write_npy(
        &dir.path().join("zero.npy"),
        &[2, 2],
        &[1.0f32, 1.0, 0.0, 0.0],
    );
    std::fs::write(dir.path().join("zero.txt"), "a\nb\n").expect("labels");
    assert!(error("zero.npy").contains("row 1 (b) is all zeros"));
    write_npy(&dir.path().join("nan.npy"), &[1, 2], &[1.0f32, f32::NAN]);
    std::fs::write(dir.path().join("nan.txt"), "a\n").expect("labels");
    assert!(error("nan.npy").contains("not finite"));
    std::fs::write(dir.path().join("cut.npy"), b"\x93NUMPY\x01\x00").expect("cut");
    assert!(error("cut.npy").contains("not a readable .npy"));
    std::fs::write(dir.path().join("m.csv"), "1,2\n").expect("csv");
    assert!(error("m.csv").contains(".npy or .safetensors"));
    assert!(error("absent.npy").contains("does not exist"));
    write_npy(&dir.path().join("blank.npy"), &[2, 2], &[1.0f32; 4]);
    std::fs::write(dir.path().join("blank.txt"), "a\n\n").expect("labels");
    assert!(error("blank.npy").contains("line 2"));
}

#[test]
fn rows_are_normalised() {
    let m = ClassMatrix::new(vec!["a".into()], 2, vec![3.0, 4.0]);
    assert_eq!(m.normalised(), vec![0.6, 0.8]);
}

#[test]
fn only_clip_and_siglip_classify_zero_shot() {
    let m = ClassMatrix::new(vec!["a".into()], 512, vec![1.0; 512]);
    assert!(
        check(
            &ZeroShotModel::builtin(ModelKind::ClipVitB32, None, None),
            &m
        )
        .is_ok()
    );
    let wrong = check(
        &ZeroShotModel::builtin(ModelKind::ClipVitL14, None, None),
        &m,
    )
    .expect_err("768 wide");
    assert!(
        matches!(
            wrong,
            ZeroShotError::Width {
                rows: 512,
                dim: 768,
                ..
            }
        ),
        "{wrong}"
    );
    let head =
        check(&ZeroShotModel::builtin(ModelKind::Resnet50, None, None), &m).expect_err("resnet");
    assert!(head.to_string().contains("CLIP or SigLIP"), "{head}");
    // Weights: the logit parameters the coordinator read from them, else
    // the family's fallback (CLIP's), else refused (SigLIP has none).
    let weights = Some(Path::new("w.safetensors"));
    let siglip = |logit| {
        check(
            &ZeroShotModel::builtin(ModelKind::SiglipBasePatch16_224, weights, logit),
            &ClassMatrix::new(vec!["a".into()], 768, vec![1.0; 768]),
        )
    };
    let read = LogitParams {
        log_scale: 2.0,
        bias: Some(-1.0),
    };
    assert!(siglip(Some(read)).is_ok());
    assert!(matches!(
        siglip(None),
        Err(ZeroShotError::NoLogitParams { .. })
    ));
    assert!(
        check(
            &ZeroShotModel::builtin(ModelKind::ClipVitB32, weights, None),
            &m
        )
        .is_ok()
    );
    assert_eq!(
        ZeroShotRule::of(Family::Siglip).map(|r| r.activation),
        Some(Probabilities::Sigmoid)
    );
}
