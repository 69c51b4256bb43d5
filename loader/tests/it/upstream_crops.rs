//! Crops byte-identical to each upstream's (#27): the sample photos through
//! the loader with torchvision's crop rounding equal torchvision's
//! `Resize` + `CenterCrop`, and with Hugging Face's equal HF's image
//! processors (`scripts/make_upstream_crop_vectors.py`). `rocket.jpg`'s
//! resizes have odd half-margins, where the two upstreams differ by a
//! pixel; the other photos' margins are even, where they agree.

use std::path::PathBuf;

use loader::{Loader, LoaderConfig};
use pipeline_core::{CropRounding, DecodeLimits, Fnv64, ModelKind};

#[derive(serde::Deserialize)]
struct Case {
    photo: String,
    model: String,
    torchvision: String,
    hugging_face: String,
}

fn crop_hash(model: ModelKind, rounding: CropRounding, photo: &str) -> String {
    let mut spec = model.default_preprocess();
    spec.crop_rounding = rounding;
    let loader = Loader::new(LoaderConfig {
        threads: 1,
        batch_size: 1,
        spec,
        limits: DecodeLimits::default(),
        remote: Default::default(),
    })
    .expect("valid loader config");
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../samples")
        .join(photo);
    let crop = loader.load_one(&path).expect("a sample photo");
    let mut h = Fnv64::default();
    h.write(&crop);
    format!("{:016x}", h.finish())
}

#[test]
fn crops_equal_torchvision_or_hugging_face_as_the_checkpoint_says() {
    let vectors =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/upstream_crops.json");
    let cases: Vec<Case> =
        serde_json::from_str(&std::fs::read_to_string(vectors).expect("vectors")).expect("JSON");
    assert_eq!(cases.len(), 10);
    let differing = cases
        .iter()
        .filter(|c| c.torchvision != c.hugging_face)
        .count();
    assert_eq!(differing, 2, "rocket.jpg for both models");
    for case in &cases {
        let model: ModelKind = case.model.parse().expect("a model name");
        let what = format!("{} for {}", case.photo, case.model);
        assert_eq!(
            crop_hash(model, CropRounding::HalfEven, &case.photo),
            case.torchvision,
            "torchvision: {what}"
        );
        assert_eq!(
            crop_hash(model, CropRounding::Floor, &case.photo),
            case.hugging_face,
            "Hugging Face: {what}"
        );
    }
}
