//! `pipeline preprocess` (#39): each image's exact model input as a PNG,
//! the same bytes `infer` feeds the model, every item once in input order
//! in `index.jsonl`, a bad file as an error record as `infer` writes one,
//! and the exit codes scripts rely on.

use std::path::Path;

use fixtures::{DatasetSpec, generate};
use loader::{Loader, LoaderConfig};
use pipeline_core::{DecodeLimits, ModelKind, PreprocessSpec, spec_from_config};

use crate::common;

/// The loader's crop of `path` for `model`, as interleaved RGB.
fn loader_crop(model: ModelKind, path: &Path) -> Vec<u8> {
    spec_crop(model.default_preprocess(), path)
}

/// The loader's crop of `path` under `spec`, as interleaved RGB.
fn spec_crop(spec: PreprocessSpec, path: &Path) -> Vec<u8> {
    let loader = Loader::new(LoaderConfig {
        threads: 1,
        batch_size: 1,
        spec,
        limits: DecodeLimits::default(),
        remote: Default::default(),
    })
    .expect("a loader");
    let chw = loader.load_one(path).expect("a good image loads");
    let plane = chw.len() / 3;
    (0..plane)
        .flat_map(|i| [chw[i], chw[plane + i], chw[2 * plane + i]])
        .collect()
}

/// `pipeline preprocess ARGS --data DATA --out OUT` in `cwd`.
fn preprocess(cwd: &Path, args: &[&str], data: &Path, out: &Path) -> std::process::Output {
    common::pipeline(cwd)
        .arg("preprocess")
        .args(args)
        .arg("--data")
        .arg(data)
        .arg("--out")
        .arg(out)
        .output()
        .expect("pipeline runs")
}

#[test]
fn each_crop_is_a_png_of_the_models_input_in_input_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let data = generate(
        &cwd.join("data"),
        &DatasetSpec {
            images: 14,
            seed: 5,
            broken: true,
        },
    )
    .expect("dataset");
    // A list, so that the missing file is an item too; its order is the
    // input order.
    let mut listed: Vec<&Path> = data.good.iter().map(|p| p.as_path()).collect();
    listed.extend(data.broken.iter().map(|b| b.path.as_path()));
    listed.sort_by_key(|p| std::cmp::Reverse(p.to_path_buf()));
    let list = cwd.join("list.txt");
    let text: Vec<String> = listed.iter().map(|p| p.display().to_string()).collect();
    std::fs::write(&list, text.join("\n")).expect("list");
    let out = cwd.join("crops");
    let run = common::pipeline(cwd)
        .args(["preprocess", "--model", "clip_vit_b_32", "--data"])
        .arg(&list)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("pipeline runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "broken files fail: {stderr}");

    let lines = common::records(&out.join("index.jsonl"));
    let indices: Vec<u64> = lines
        .iter()
        .map(|l| l["index"].as_u64().expect("index"))
        .collect();
    assert_eq!(indices, (0..listed.len() as u64).collect::<Vec<_>>());
    let paths: Vec<&str> = lines
        .iter()
        .map(|l| l["path"].as_str().expect("path"))
        .collect();
    assert_eq!(paths, text, "every item once, in input order");
    let line_of = |p: &Path| &lines[listed.iter().position(|l| *l == p).expect("listed")];
    let mut pngs = 0;
    for good in &data.good {
        let line = line_of(good);
        let png = line["png"].as_str().unwrap_or_else(|| panic!("{line}"));
        let index = line["index"].as_u64().expect("index");
        assert!(png.starts_with(&format!("{index:08}_")), "{png}");
        let written = image::open(out.join(png))
            .expect("the PNG decodes")
            .into_rgb8();
        assert_eq!(written.dimensions(), (224, 224), "{png}");
        assert!(
            written.as_raw() == &loader_crop(ModelKind::ClipVitB32, good),
            "{png} is not the model's input"
        );
        pngs += 1;
    }
    let mut errors = 0;
    for broken in data.broken.iter().filter(|b| !b.needs_unprivileged) {
        let line = line_of(&broken.path);
        assert_eq!(
            line["error"]["kind"],
            serde_json::to_value(broken.expected).expect("kind"),
            "{line}"
        );
        assert!(line.get("png").is_none(), "{line}");
        errors += 1;
    }
    assert_eq!(pngs, 14);
    assert!(errors >= 3, "{errors} broken files");
    let files = std::fs::read_dir(&out).expect("out").count();
    let with_png = lines.iter().filter(|l| l.get("png").is_some()).count();
    assert_eq!(
        files,
        with_png + 1,
        "one PNG per loaded item, and index.jsonl"
    );

    // A folder that is not empty is refused in one line, exit 2.
    let again = common::pipeline(cwd)
        .args(["preprocess", "--data"])
        .arg(&data.root)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("pipeline runs");
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("not empty") && stderr.lines().count() == 1,
        "{stderr}"
    );
}

/// `--config`: a Hugging Face image processor's config runs instead of
/// `--model`'s preprocessing (SigLIP's 384 px square resize here, where
/// `--model` is a 224 px crop), each PNG the loader's crop under the spec
/// the file describes; a file that is not one, or that describes what the
/// loader cannot run, is one line, exit 2.
#[test]
fn a_preprocessing_config_file_runs_instead_of_the_models() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let data = generate(
        &cwd.join("data"),
        &DatasetSpec {
            images: 3,
            seed: 9,
            broken: false,
        },
    )
    .expect("dataset");
    let config = cwd.join("preprocessor_config.json");
    let text = r#"{"image_processor_type": "SiglipImageProcessor", "do_resize": true,
        "size": {"height": 384, "width": 384}, "resample": 3, "do_rescale": true,
        "rescale_factor": 0.00392156862745098, "do_normalize": true,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}"#;
    std::fs::write(&config, text).expect("config");
    let out = cwd.join("crops");
    let config_arg = config.to_str().expect("utf-8 path");
    let run = preprocess(
        cwd,
        &["--model", "clip_vit_b_32", "--config", config_arg],
        &data.root,
        &out,
    );
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let spec = spec_from_config(text).expect("a config").0;
    let lines = common::records(&out.join("index.jsonl"));
    assert_eq!(lines.len(), 3);
    for line in &lines {
        let png = line["png"].as_str().unwrap_or_else(|| panic!("{line}"));
        // Paths are relative to the --data folder.
        let source = data.root.join(line["path"].as_str().expect("path"));
        let written = image::open(out.join(png)).expect("a PNG").into_rgb8();
        assert_eq!(written.dimensions(), (384, 384), "{png}");
        assert!(
            written.as_raw() == &spec_crop(spec.clone(), &source),
            "{png} is not the config's crop"
        );
    }
    for (bad, says) in [
        ("not json", "not JSON"),
        (
            r#"{"size": {"height": 224, "width": 320}, "resample": 2}"#,
            "not square",
        ),
        (
            r#"{"pretrained_cfg": {"input_size": [3, 224, 224], "crop_mode": "border"}}"#,
            "border",
        ),
    ] {
        std::fs::write(&config, bad).expect("config");
        let run = common::pipeline(cwd)
            .args(["preprocess", "--config"])
            .arg(&config)
            .arg("--data")
            .arg(&data.root)
            .arg("--out")
            .arg(cwd.join("bad"))
            .output()
            .expect("pipeline runs");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{bad}: {stderr}");
        assert!(
            stderr.contains("--config") && stderr.contains(says) && stderr.lines().count() == 1,
            "{bad}: {stderr}"
        );
    }
}

/// Preprocessing flags (#41) laid over a model's own: each combination
/// crops exactly as the built-in model whose transform it spells out
/// (resnet50's 256/224 bilinear from CLIP's 224 bicubic, and back), and a
/// flag the loader cannot honour is one line, exit 2.
#[test]
fn preprocessing_flags_crop_as_the_transform_they_spell_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let data = generate(
        &cwd.join("data"),
        &DatasetSpec {
            images: 3,
            seed: 11,
            broken: false,
        },
    )
    .expect("dataset");
    let cases: [(&str, &[&str], ModelKind); 3] = [
        (
            "clip_vit_b_32",
            &[
                "--resize",
                "256",
                "--crop",
                "224",
                "--interpolation",
                "bilinear",
            ],
            ModelKind::Resnet50,
        ),
        (
            "resnet50",
            &["--size", "224", "--interpolation", "bicubic"],
            ModelKind::ClipVitB32,
        ),
        ("resnet50", &[], ModelKind::Resnet50),
    ];
    for (i, (model, flags, same_as)) in cases.into_iter().enumerate() {
        let out = cwd.join(format!("crops{i}"));
        let run = preprocess(
            cwd,
            &[&["--model", model], flags].concat(),
            &data.root,
            &out,
        );
        assert_eq!(
            run.status.code(),
            Some(0),
            "{flags:?}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let lines = common::records(&out.join("index.jsonl"));
        assert_eq!(lines.len(), 3);
        for line in &lines {
            let png = line["png"].as_str().unwrap_or_else(|| panic!("{line}"));
            let source = data.root.join(line["path"].as_str().expect("path"));
            let written = image::open(out.join(png)).expect("a PNG").into_rgb8();
            assert!(
                written.as_raw() == &loader_crop(same_as, &source),
                "{model} {flags:?}: {png} is not {same_as}'s crop"
            );
        }
    }
    for (flags, says) in [
        (
            &["--channels", "bgr"][..],
            "--channels bgr: the built-in models take RGB",
        ),
        (
            &["--resize", "200", "--crop", "224"],
            "--resize 200 is smaller than the 224-pixel crop",
        ),
        (&["--mean", "0.5,0.5,0.5"], "--mean needs --std too"),
        (&["--mean", "0.5,0.5"], "expected three numbers"),
        (&["--scale", "3"], "--scale 3: expected 1 or 255"),
    ] {
        let out = cwd.join("refused");
        let run = preprocess(
            cwd,
            &[&["--model", "resnet50"], flags].concat(),
            &data.root,
            &out,
        );
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(says), "{flags:?}: {err}");
        assert!(!out.join("index.jsonl").exists(), "{flags:?} wrote crops");
    }
}
