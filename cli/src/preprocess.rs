//! `pipeline preprocess`: what the model sees of each image, written out.
//!
//! Each item of `--data` goes through the same loader `infer` runs (the
//! model's resize, crop, filter and crop rounding, or those a `--config`
//! file describes: a Hugging Face `preprocessor_config.json` or a timm
//! `config.json`; `--size`, `--resize`, `--crop` and `--interpolation` laid
//! over either; `--jpeg-draft` and `--fast-preprocess` as `infer` takes
//! them) and its crop, the model's
//! exact `u8` input before normalisation, is written as an RGB PNG named
//! after the item: `NNNNNNNN_<file name>.png`, the index first so that a
//! listing is input order. `index.jsonl` lists every item in input order:
//! `{"index","path","png"}`, or `{"index","path","error"}` for an item
//! that could not be loaded, the error as `infer` writes it. Exit 1 when
//! some item failed, as `infer`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use image::ImageEncoder;
use image::codecs::png::PngEncoder;
use loader::{Batch, Loader, LoaderConfig, WorkItem};
use pipeline_core::{
    CropRounding, ItemError, ItemIndex, Manifest, ModelKind, PreprocessSpec, RemoteSpec,
    spec_from_config,
};
use serde::Serialize;

use crate::args::PreprocessArgs;
use crate::exit::Outcome;

/// Items per loader batch: enough to keep every decoder busy.
const BATCH: usize = 32;

/// One line of `index.jsonl`.
#[derive(Serialize)]
struct Line<'a> {
    index: ItemIndex,
    path: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    png: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ItemError>,
}

pub(crate) fn run(args: &PreprocessArgs) -> Outcome {
    match preprocess(args) {
        Ok(0) => Outcome::Success,
        Ok(_) => Outcome::ItemsFailed,
        Err(message) => Outcome::Failed(message),
    }
}

/// Writes every item's crop; returns how many items failed.
fn preprocess(args: &PreprocessArgs) -> Result<usize, String> {
    let spec = match &args.config {
        Some(path) => {
            let spec = config_spec(path)?;
            PreprocessSpec {
                jpeg_draft: args.decode.jpeg_draft,
                fast: args.decode.fast_preprocess,
                ..spec
            }
        }
        None => {
            let model: ModelKind = args.model.parse().map_err(|e| format!("--model: {e}"))?;
            let crop_rounding = match &args.weights {
                None => CropRounding::HalfEven,
                Some(path) => crate::plan::checked_weights(model, path)?.crop_rounding(),
            };
            crate::plan::preprocess_spec(model, &args.decode, crop_rounding)
        }
    };
    let spec = pipeline_core::spec_from_flags(&args.flags.flags(), spec)?;
    let data = crate::plan::data_spec(&args.data, &args.source)?;
    prepare_out(&args.out)?;
    let remote = RemoteSpec::default();
    let manifest = loader::source::open(&data, remote).map_err(|e| e.to_string())?;
    for problem in &manifest.problems {
        eprintln!(
            "pipeline: warning: skipped {}: {}",
            problem.path.display(),
            problem.message
        );
    }
    let threads = args.loader_threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |n| n as usize,
    );
    let loader = Loader::new(LoaderConfig {
        threads,
        batch_size: BATCH,
        spec,
        limits: crate::plan::decode_limits(&args.limits),
        remote,
    })
    .map_err(|e| e.to_string())?;
    let items = manifest
        .entries
        .iter()
        .map(|entry| WorkItem {
            index: entry.index,
            location: entry.location,
        })
        .collect();
    let index_path = args.out.join("index.jsonl");
    let written = |e: std::io::Error| format!("{}: {e}", index_path.display());
    let mut index = BufWriter::new(File::create(&index_path).map_err(written)?);
    let mut failed = 0;
    for batch in loader.load_all(items).map_err(|e| e.to_string())? {
        failed += write_batch(&batch, &manifest, &args.out, &mut index)?;
    }
    index.flush().map_err(written)?;
    Ok(failed)
}

/// The preprocessing a `--config` file describes, or why not in one line.
fn config_spec(path: &Path) -> Result<PreprocessSpec, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--config {}: cannot read it: {e}", path.display()))?;
    spec_from_config(&text)
        .map(|(spec, _)| spec)
        .map_err(|e| format!("--config {}: {e}", path.display()))
}

/// `--out` is a new or empty folder, so that its listing is this run's.
fn prepare_out(out: &Path) -> Result<(), String> {
    match std::fs::read_dir(out).map(|mut entries| entries.next().is_none()) {
        Ok(false) => Err(format!(
            "--out {}: the folder is not empty (give a new or empty one)",
            out.display()
        )),
        Ok(true) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(out)
            .map_err(|e| format!("--out {}: cannot create it: {e}", out.display())),
        Err(e) => Err(format!("--out {}: {e}", out.display())),
    }
}

/// The batch's items in input order: a PNG and a line for each crop, a
/// line for each failure. Returns the failures.
fn write_batch(
    batch: &Batch,
    manifest: &Manifest,
    out: &Path,
    index: &mut impl Write,
) -> Result<usize, String> {
    let mut loaded = batch.indices.iter().enumerate().peekable();
    let mut failures = batch.failures.iter().peekable();
    let side = batch.side;
    loop {
        // Both lists are in input order: merge them.
        let take_loaded = match (loaded.peek(), failures.peek()) {
            (Some((_, i)), Some((j, _))) => **i < *j,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return Ok(batch.failures.len()),
        };
        let (item, error) = if take_loaded {
            (*loaded.peek().expect("peeked").1, None)
        } else {
            let (item, error) = failures.next().expect("peeked");
            (*item, Some(error))
        };
        let path = manifest.entries.name(item as usize);
        let png = if take_loaded {
            let (row, _) = loaded.next().expect("peeked");
            let name = png_name(item, &path);
            write_png(&out.join(&name), batch.image(row), side)?;
            Some(name)
        } else {
            None
        };
        let line = Line {
            index: item,
            path: &path.to_string_lossy(),
            png: png.as_deref(),
            error,
        };
        serde_json::to_writer(&mut *index, &line)
            .and_then(|()| index.write_all(b"\n").map_err(serde_json::Error::io))
            .map_err(|e| format!("{}: {e}", out.join("index.jsonl").display()))?;
    }
}

/// `NNNNNNNN_<file name>.png`, the file name's characters past the
/// portable ones (letters, digits, `.`, `-`, `_`) as `_`, and its length
/// kept below file systems' limits.
fn png_name(index: ItemIndex, path: &Path) -> String {
    let file = path
        .file_name()
        .unwrap_or(path.as_os_str())
        .to_string_lossy();
    let safe: String = file
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect();
    format!("{index:08}_{safe}.png")
}

/// A CHW crop as an RGB PNG, encoded in memory and written in one call,
/// so that a write error (a full disk) is an error, not a cut file.
fn write_png(path: &Path, chw: &[u8], side: u32) -> Result<(), String> {
    let plane = (side * side) as usize;
    let rgb: Vec<u8> = (0..plane)
        .flat_map(|i| [chw[i], chw[plane + i], chw[2 * plane + i]])
        .collect();
    let mut png = Vec::new();
    PngEncoder::new(&mut png)
        .write_image(&rgb, side, side, image::ExtendedColorType::Rgb8)
        .and_then(|()| std::fs::write(path, &png).map_err(image::ImageError::IoError))
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_names_lead_with_the_index_and_keep_portable_characters() {
        assert_eq!(
            png_name(7, Path::new("a/b/cat.jpg")),
            "00000007_cat.jpg.png"
        );
        assert_eq!(
            png_name(12_345_678, Path::new("x/été photo?.png")),
            "12345678__t__photo_.png.png"
        );
        assert_eq!(
            png_name(0, Path::new(&"n".repeat(300))).len(),
            8 + 1 + 120 + 4
        );
    }
}
