//! `--classes` (zero-shot classification with CLIP or SigLIP): a class
//! matrix file checked against the model, or labels that the model's text
//! tower (a built-in model's checkpoint, or a hub repo's) turns into one.

use std::path::Path;

use gpu_worker::zero_shot::{ClassMatrix, ZeroShotModel, ZeroShotRule};
use pipeline_core::{DeviceSpec, EngineKind, Prompts, ZeroShotClasses};

use crate::args::RunArgs;
use crate::embed_text::TextModel;

/// `--classes`: a class matrix file, read and checked against the model
/// and its weights before any worker starts (the workers read it again,
/// by its absolute path); or labels, inline or in a `.txt`, which the
/// checkpoint's text tower turns into a class matrix here, in a child
/// process on `device` (`embed_text::class_matrix_in_child`). `text`
/// gives the text tower of `model`, asked for only for labels.
pub(super) fn classes(
    value: &str,
    args: &RunArgs,
    model: &ZeroShotModel<'_>,
    text: impl FnOnce() -> Result<TextModel, String>,
    (device, engine): (&DeviceSpec, EngineKind),
) -> Result<(Option<ZeroShotClasses>, Option<tempfile::TempDir>), String> {
    let path = Path::new(value);
    let matrix_file = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("npy" | "safetensors")
    );
    if matrix_file {
        if !args.prompts.is_empty() || args.tokenizer.is_some() {
            return Err(
                "--prompt and --tokenizer go with --classes labels, not a class matrix file"
                    .to_owned(),
            );
        }
        let matrix = ClassMatrix::open(path).map_err(|e| format!("--classes: {e}"))?;
        gpu_worker::zero_shot::check(model, &matrix)
            .map_err(|e| format!("--classes {}: {e}", path.display()))?;
        let path = std::fs::canonicalize(path)
            .map_err(|e| format!("--classes {}: {e}", path.display()))?;
        let classes = ZeroShotClasses {
            path,
            labels: matrix.labels().to_vec(),
            prompts: None,
        };
        return Ok((Some(classes), None));
    }
    let labels = class_labels(value)?;
    if ZeroShotRule::of(model.family).is_none() {
        return Err(format!(
            "--classes needs a CLIP or SigLIP model; {} classifies with its own head",
            model.name
        ));
    }
    let templates = gpu_worker::text::prompts::templates(&args.prompts)?;
    let text = text()?;
    let tokenizer = match text.tokenizer.file() {
        Some(file) => {
            let bytes =
                std::fs::read(file).map_err(|e| format!("--tokenizer {}: {e}", file.display()))?;
            let kind = match text.tokenizer {
                gpu_worker::text::TextTokenizer::SentencePiece { .. } => "spiece.model",
                _ => "tokenizer.json",
            };
            format!(
                "{kind} of {} bytes, xxh3 {:016x}",
                bytes.len(),
                xxhash_rust::xxh3::xxh3_64(&bytes)
            )
        }
        None => text.tokenizer.describe(),
    };
    let dir = crate::embed_text::class_matrix_dir()?;
    let out = dir.path().join("classes.safetensors");
    let request = crate::embed_text::ClassRequest {
        model: &text,
        tokenizer: args.tokenizer.as_deref(),
        seed: args.seed,
        labels: &labels,
        templates: &templates,
        device: device.clone(),
        engine,
    };
    crate::embed_text::class_matrix_in_child(&request, &out)?;
    let classes = ZeroShotClasses {
        path: out,
        labels,
        prompts: Some(Prompts {
            templates,
            tokenizer,
        }),
    };
    Ok((Some(classes), Some(dir)))
}

/// The labels of `--classes`: a `.txt` file's lines, or an inline list
/// split on commas, each trimmed; none may be empty or repeated. Another
/// existing file (a checkpoint given by mistake) is refused.
fn class_labels(value: &str) -> Result<Vec<String>, String> {
    let path = Path::new(value);
    let text_file = path.extension().is_some_and(|e| e == "txt");
    if path.is_file() && !text_file {
        // A checkpoint or another file given by mistake, not labels.
        return Err(format!(
            "--classes {value}: expected a .npy or .safetensors matrix of class text \
             embeddings, or labels (inline \"cat,dog\", or a .txt with one per line)"
        ));
    }
    let labels: Vec<String> = if text_file {
        crate::embed_text::read_texts(value, "--classes")?
            .into_iter()
            .map(|l| l.trim().to_owned())
            .collect()
    } else {
        value.split(',').map(|l| l.trim().to_owned()).collect()
    };
    if labels.is_empty() {
        return Err(format!("--classes {value}: no labels"));
    }
    if let Some(i) = labels.iter().position(String::is_empty) {
        return Err(format!(
            "--classes: label {} is empty (labels are one per line, or split on commas)",
            i + 1
        ));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(twice) = labels.iter().find(|l| !seen.insert(l.as_str())) {
        return Err(format!("--classes: label {twice:?} appears twice"));
    }
    Ok(labels)
}
