//! How often the loader's opt-in fast JPEG mode (reduced-DCT "draft"
//! decode) changes a top-1 prediction: every JPEG under DIR is decoded twice,
//! exactly as torchvision does and in draft mode, and both crops go through
//! EfficientNet-Lite0 with its real ImageNet weights on the CPU.
//!
//! cargo run --release -p gpu-worker --example draft_top1 -- DIR WEIGHTS.pth

use std::path::PathBuf;

use gpu_worker::{BurnEngine, Engine, Model, PixelBatch};
use loader::{Loader, LoaderConfig};
use pipeline_core::{DecodeLimits, DeviceSpec, ModelKind, Prediction, PreprocessSpec, Task};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: draft_top1 DIR WEIGHTS.pth";
    let dir = PathBuf::from(args.next().ok_or(usage)?);
    let weights = PathBuf::from(args.next().ok_or(usage)?);
    let kind = ModelKind::EfficientnetLite0;
    let loader = |draft| {
        let spec = PreprocessSpec {
            jpeg_draft: draft,
            ..kind.default_preprocess()
        };
        Loader::new(LoaderConfig {
            threads: 1,
            batch_size: 1,
            spec,
            limits: DecodeLimits::default(),
            remote: Default::default(),
        })
    };
    let (full, draft) = (loader(false)?, loader(true)?);
    let device = gpu_worker::open(&DeviceSpec::Cpu)?;
    let engine = BurnEngine::for_device(
        &DeviceSpec::Cpu,
        device.clone(),
        Model::load(kind, &weights, &device)?,
        Task::Classify { top_k: 1 },
    );
    let normalize = kind.default_preprocess().normalize;
    let top1 = |pixels: &[u8]| -> Result<(u32, f32), Box<dyn std::error::Error>> {
        match engine
            .infer(&PixelBatch::new(pixels, 1, 1, 224, &normalize))?
            .remove(0)
        {
            Prediction::TopK(top) => Ok((top[0].class, top[0].prob)),
            other => Err(format!("classify returned {other:?}").into()),
        }
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("jpg") || e.eq_ignore_ascii_case("jpeg"))
        })
        .collect();
    files.sort();
    let (mut same, mut total, mut byte_diff) = (0usize, 0usize, 0.0f64);
    for path in &files {
        let (a, b) = (full.load_one(path)?, draft.load_one(path)?);
        byte_diff += a
            .iter()
            .zip(&b)
            .map(|(x, y)| f64::from(x.abs_diff(*y)))
            .sum::<f64>()
            / a.len() as f64;
        let ((ca, pa), (cb, pb)) = (top1(&a)?, top1(&b)?);
        total += 1;
        same += usize::from(ca == cb);
        println!(
            "{}: full {ca} ({pa:.3})  draft {cb} ({pb:.3})",
            path.display()
        );
    }
    println!(
        "top-1 unchanged on {same}/{total} images ({:.1}%); mean |Δ| per byte {:.2}",
        100.0 * same as f64 / total.max(1) as f64,
        byte_diff / total.max(1) as f64
    );
    Ok(())
}
