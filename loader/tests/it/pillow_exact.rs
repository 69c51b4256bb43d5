//! What the model sees equals what Pillow makes, byte for byte, over the
//! whole space (#39): Pillow itself (`scripts/make_pillow_cases.py`, run
//! here) makes a few hundred images of random sizes from a fixed seed,
//! weighted toward the edges, in every mode people's files have (16-bit
//! PNGs included), and crops each with the five filters models use, both
//! crop roundings, shorter-side and square resizes; the loader opens
//! the same files and must give the same bytes, on every resampler path
//! this CPU runs (scalar, SSSE3, AVX2), each forced in turn.
//!
//! `PIPELINE_PILLOW_SEED=N` runs a fresh set (`PIPELINE_PILLOW_IMAGES=N`
//! sets its size) for local hunting; a failure names the seed and the
//! file, which is kept under `target/pillow-exact/` (removed on success).
//!
//! Needs `python3` with Pillow 13 (`pip install pillow==13.0.0`;
//! `scripts/test.sh` installs it): Pillow 13 orders its two passes by the
//! shape (`loader/src/resample/mod.rs`), so its crops of tall photos differ
//! from older Pillows' in the last bit.

use std::path::{Path, PathBuf};
use std::process::Command;

use loader::{ResamplePath, force_resample_path, load_bytes};
use pipeline_core::{CropRounding, DecodeLimits, PreprocessSpec, ResizeFilter};

#[derive(serde::Deserialize)]
struct Manifest {
    pillow: String,
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    file: String,
    mode: String,
    width: u32,
    height: u32,
    resize: u32,
    crop: u32,
    /// Both sides to `resize` (SigLIP's processor), not the shorter one.
    square: bool,
    filter: String,
    rounding: String,
    offset: usize,
}

impl Case {
    fn spec(&self) -> PreprocessSpec {
        PreprocessSpec {
            resize_shorter: self.resize,
            square: self.square,
            crop: self.crop,
            filter: match self.filter.as_str() {
                "nearest" => ResizeFilter::Nearest,
                "box" => ResizeFilter::Box,
                "bilinear" => ResizeFilter::Bilinear,
                "bicubic" => ResizeFilter::Bicubic,
                "lanczos" => ResizeFilter::Lanczos3,
                other => panic!("unknown filter {other} in the manifest"),
            },
            crop_rounding: match self.rounding.as_str() {
                "half_even" => CropRounding::HalfEven,
                "floor" => CropRounding::Floor,
                other => panic!("unknown rounding {other} in the manifest"),
            },
            ..PreprocessSpec::default()
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} ({} {}x{}) Resize({}{}, {}) CenterCrop({}) {}",
            self.file,
            self.mode,
            self.width,
            self.height,
            self.resize,
            if self.square { " square" } else { "" },
            self.filter,
            self.crop,
            self.rounding
        )
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
    })
}

/// Runs the generator; its folder is kept for a failure to be looked at.
fn make_cases(seed: u64, count: u64) -> (PathBuf, Manifest) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = root.join(format!("target/pillow-exact/seed-{seed}-{count}"));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new("python3")
        .arg(root.join("scripts/make_pillow_cases.py"))
        .args(["--seed", &seed.to_string(), "--count", &count.to_string()])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("python3 runs (it makes the reference crops with Pillow)");
    assert!(
        run.status.success(),
        "scripts/make_pillow_cases.py failed (needs Pillow 13: \
         python3 -m pip install pillow==13.0.0):\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let json = std::fs::read_to_string(out.join("manifest.json")).expect("the manifest");
    let manifest: Manifest = serde_json::from_str(&json).expect("the manifest parses");
    let major: u32 = manifest
        .pillow
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(
        major >= 13,
        "the reference is Pillow {}, the loader follows Pillow 13's pass order: \
         python3 -m pip install pillow==13.0.0",
        manifest.pillow
    );
    (out, manifest)
}

#[test]
fn every_crop_equals_pillows_on_every_resampler_path() {
    let seed = env_number("PIPELINE_PILLOW_SEED", 39);
    let count = env_number("PIPELINE_PILLOW_IMAGES", 200);
    let (dir, manifest) = make_cases(seed, count);
    let expected = std::fs::read(dir.join("expected.bin")).expect("expected.bin");
    let limits = DecodeLimits::default();
    let paths: Vec<_> = ResamplePath::ALL
        .into_iter()
        .filter(|&p| p <= ResamplePath::best())
        .collect();
    #[cfg(target_arch = "x86_64")]
    assert!(
        paths.contains(&ResamplePath::Ssse3),
        "every x86-64 CPU since 2006 runs SSSE3: {paths:?}"
    );
    let mut failures = Vec::new();
    let mut checked = 0;
    let mut files = std::collections::HashMap::new();
    for &path in &paths {
        force_resample_path(Some(path)).expect("the path is one this CPU runs");
        for case in &manifest.cases {
            let bytes = files
                .entry(case.file.clone())
                .or_insert_with(|| std::fs::read(dir.join(&case.file)).expect("the image file"));
            let side = case.crop as usize;
            let want = &expected[case.offset..case.offset + 3 * side * side];
            let mut got = vec![0u8; 3 * side * side];
            if let Err(e) = load_bytes(bytes, &case.spec(), &limits, &mut got) {
                failures.push(format!("{} on {path:?}: {e}", case.describe()));
                continue;
            }
            checked += 1;
            if got != want {
                let differing = got.iter().zip(want).filter(|(a, b)| a != b).count();
                let worst = got.iter().zip(want).map(|(a, b)| a.abs_diff(*b)).max();
                let first = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                failures.push(format!(
                    "{} on {path:?}: {differing} of {} values differ, by up to {}; first at \
                     channel {} row {} column {}",
                    case.describe(),
                    got.len(),
                    worst.unwrap_or(0),
                    first / (side * side),
                    first % (side * side) / side,
                    first % side
                ));
            }
        }
    }
    force_resample_path(None).expect("unforcing always works");
    let total = failures.len();
    failures.truncate(25);
    assert!(
        failures.is_empty(),
        "{total} crops differ from Pillow {} (seed {seed}, files in {}):\n{}",
        manifest.pillow,
        dir.display(),
        failures.join("\n")
    );
    assert_eq!(checked, manifest.cases.len() * paths.len());
    // The space was covered: every mode and filter, and the shapes of #39.
    for mode in [
        "RGB",
        "L",
        "LA",
        "RGBA",
        "P",
        "CMYK",
        "I;16",
        "I;16+tRNS",
        "RGB;16",
        "RGBA;16",
        "LA;16",
    ] {
        assert!(
            manifest.cases.iter().any(|c| c.mode == mode),
            "no {mode} image"
        );
    }
    let tall = manifest
        .cases
        .iter()
        .filter(|c| c.height >= 2 * c.width && c.width > c.resize)
        .count();
    assert!(tall >= 100, "{tall} crops of tall photos");
    // One axis resized alone (a square resize of a side already at size).
    let one_axis = manifest
        .cases
        .iter()
        .filter(|c| c.square && (c.width == c.resize) != (c.height == c.resize))
        .count();
    assert!(one_axis >= 20, "{one_axis} crops with one axis resized");
    println!(
        "{} crops of {count} images (seed {seed}) equal Pillow {}'s on {paths:?}",
        manifest.cases.len(),
        manifest.pillow
    );
    // Kept only when something failed (about 200 MB).
    std::fs::remove_dir_all(&dir).expect("the cases' folder is removed");
}
