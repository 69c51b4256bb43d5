//! Crops byte-identical to a model's own preprocessing config (#41): each
//! Hugging Face image processor's saved `preprocessor_config.json` and
//! each timm `config.json` in `tests/vectors/config_crops.json`
//! (`scripts/make_config_crop_vectors.py`: transformers' PIL processors
//! run on the sample photos, timm's eval transform written out on PIL),
//! read by `pipeline_core::spec_from_config`, gives through the loader the
//! same `uint8` crop of every photo as the upstream, and normalises with
//! the upstream's statistics.

use std::path::PathBuf;

use loader::{Loader, LoaderConfig};
use pipeline_core::{ConfigSource, DecodeLimits, Fnv64, spec_from_config};

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    source: String,
    config: serde_json::Value,
    photo: String,
    crop: String,
    mean: [f32; 3],
    std: [f32; 3],
}

#[test]
fn crops_equal_the_upstreams_own_preprocessing_config() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text =
        std::fs::read_to_string(root.join("tests/vectors/config_crops.json")).expect("vectors");
    let cases: Vec<Case> = serde_json::from_str(&text).expect("JSON");
    assert_eq!(cases.len(), 90, "18 configs × 5 photos");
    let mut wrong = Vec::new();
    for case in &cases {
        let what = format!("{} on {}", case.name, case.photo);
        let (spec, source) =
            spec_from_config(&case.config.to_string()).unwrap_or_else(|e| panic!("{what}: {e}"));
        let want_source = match case.source.as_str() {
            "hugging_face" => ConfigSource::HuggingFace,
            _ => ConfigSource::Timm,
        };
        assert_eq!(source, want_source, "{what}");
        for c in 0..3 {
            let (m, s) = (spec.normalize.mean[c], spec.normalize.std[c]);
            assert!(
                (m - case.mean[c]).abs() <= 1e-3 && (s - case.std[c]).abs() <= 1e-3,
                "{what}: statistics {:?} / {:?}, the upstream's {:?} / {:?}",
                spec.normalize.mean,
                spec.normalize.std,
                case.mean,
                case.std
            );
        }
        let loader = Loader::new(LoaderConfig {
            threads: 1,
            batch_size: 1,
            spec,
            limits: DecodeLimits::default(),
            remote: Default::default(),
        })
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let crop = loader
            .load_one(&root.join("../samples").join(&case.photo))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let mut h = Fnv64::default();
        h.write(&crop);
        let got = format!("{:016x}", h.finish());
        if got != case.crop {
            wrong.push(what);
        }
    }
    assert!(
        wrong.is_empty(),
        "crops that differ from the upstream's: {}",
        wrong.join(", ")
    );
}
