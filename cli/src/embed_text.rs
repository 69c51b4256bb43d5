//! `pipeline embed-text`: one L2-normalised embedding per line of text, in
//! input order, from a CLIP or SigLIP checkpoint's text tower, comparable with the
//! image embeddings `infer --task embed` writes from the same checkpoint.
//!
//! Its hidden `--class-matrix` form is how `infer --classes "cat,dog"`
//! turns labels into a zero-shot class matrix: `infer` runs it as a child
//! process on the run's first device (so that a driver crash costs the
//! child, and a GPU does the 80 000 prompts of `--prompt imagenet` in
//! seconds), and the workers read the file it writes like any
//! `--classes FILE`.

use std::io::IsTerminal;
use std::path::Path;

use coordinator::{EmbeddingDtype, TextEmbeddings, TextFormat, write_text_embeddings};
use gpu_worker::text::{TextEncoder, prompts, text_config, tokenizer_for};
use gpu_worker::zero_shot::ClassMatrix;
use pipeline_core::ModelKind;

use crate::args::EmbedTextArgs;
use crate::exit::Outcome;

/// Texts per progress step when a file is large.
const PROGRESS_FROM: usize = 1000;

pub(crate) fn run(args: &EmbedTextArgs) -> Outcome {
    match embed(args) {
        Ok(()) => Outcome::Success,
        Err(message) => Outcome::Failed(message),
    }
}

/// The texts `--text` names: a file's lines (UTF-8, `\n` or `\r\n`; a
/// last line without a newline counts, an empty file has none), or the
/// value itself as one text.
pub(crate) fn read_texts(value: &str, flag: &str) -> Result<Vec<String>, String> {
    let path = Path::new(value);
    if !path.is_file() {
        if value.ends_with(".txt") {
            return Err(format!("{flag} {value}: no such file"));
        }
        return Ok(vec![value.to_owned()]);
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{flag} {value}: {e}"))?;
    let mut lines = Vec::new();
    let body = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    if bytes.is_empty() {
        return Ok(lines);
    }
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let text = std::str::from_utf8(line).map_err(|e| {
            format!(
                "{flag} {value}: line {} is not valid UTF-8 (byte {} of the line)",
                i + 1,
                e.valid_up_to() + 1
            )
        })?;
        lines.push(text.to_owned());
    }
    Ok(lines)
}

fn embed(args: &EmbedTextArgs) -> Result<(), String> {
    let model: ModelKind = args.model.parse().map_err(|e| format!("--model: {e}"))?;
    let Some(config) = text_config(model) else {
        return Err(format!(
            "--model {model}: no text tower here; text embeddings need a CLIP or SigLIP \
             model (clip_vit_b_32, clip_vit_b_16, clip_vit_l_14, siglip_base_patch16_224)"
        ));
    };
    if let Some(w) = &args.weights
        && !w.is_file()
    {
        return Err(format!("--weights {}: no such file", w.display()));
    }
    if let Some(t) = &args.tokenizer
        && !t.is_file()
    {
        return Err(format!("--tokenizer {}: no such file", t.display()));
    }
    if args.out.exists() && !args.overwrite {
        return Err(format!(
            "--out {} exists; pass --overwrite to replace it",
            args.out.display()
        ));
    }
    let format = match &args.format {
        Some(f) => f
            .parse::<TextFormat>()
            .map_err(|e| format!("--format {e}"))?,
        None => TextFormat::of_path(&args.out),
    };
    let dtype: EmbeddingDtype = args
        .embedding_dtype
        .parse()
        .map_err(|e| format!("--embedding-dtype: {e}"))?;
    let texts = read_texts(&args.text, "--text")?;
    let templates = if args.class_matrix {
        if texts.is_empty() || texts.iter().any(|t| t.trim().is_empty()) {
            return Err("--classes: a label is empty".to_owned());
        }
        prompts::templates(&args.prompts)?
    } else {
        Vec::new()
    };
    let tokenizer = tokenizer_for(args.weights.as_deref(), args.tokenizer.as_deref(), &config)
        .map_err(|e| e.to_string())?;
    if args.weights.is_none() && !args.quiet {
        eprintln!(
            "pipeline: no --weights: {model}'s text tower runs with seeded random weights \
             (seed {}), so its embeddings mean nothing",
            args.seed
        );
    }
    let (devices, _) = crate::devices::chosen_devices(&args.gpus)?;
    let device = devices[0].clone();
    let encoder = TextEncoder::open(
        model,
        args.weights.as_deref(),
        tokenizer,
        args.seed,
        &device,
    )
    .map_err(|e| e.to_string())?;
    let batch = args.batch_size as usize;
    let total = if args.class_matrix {
        texts.len() * templates.len()
    } else {
        texts.len()
    };
    let bar = progress(total, args.quiet);
    let mut embed_batch = |batch_texts: &[String]| {
        let mut out = Vec::with_capacity(batch_texts.len() * encoder.dim());
        for chunk in batch_texts.chunks(batch) {
            out.extend(encoder.embed(chunk));
            if let Some(bar) = &bar {
                bar.inc(chunk.len() as u64);
            }
        }
        out
    };
    let dim = encoder.dim();
    if args.class_matrix {
        let rows = prompts::class_embeddings(&texts, &templates, dim, &mut embed_batch);
        ClassMatrix::new(texts, dim, rows)
            .write_safetensors(&args.out)
            .map_err(|e| format!("--out {}: {e}", args.out.display()))?;
    } else {
        let values = embed_batch(&texts);
        let rows = TextEmbeddings {
            texts: &texts,
            dim,
            values: &values,
        };
        write_text_embeddings(&args.out, format, dtype, &rows)
            .map_err(|e| format!("--out {}: {e}", args.out.display()))?;
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if !args.quiet {
        eprintln!(
            "pipeline: {} text{} embedded on {device} into {}",
            total,
            if total == 1 { "" } else { "s" },
            args.out.display()
        );
    }
    Ok(())
}

/// A progress bar on a terminal for a large input.
fn progress(total: usize, quiet: bool) -> Option<indicatif::ProgressBar> {
    if quiet || total < PROGRESS_FROM || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} texts, {per_sec}, eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}

/// A zero-shot class matrix for `labels` through `templates`, computed by
/// this executable's `embed-text --class-matrix` in a child process on
/// `device`, written to `out`.
pub(crate) fn class_matrix_in_child(request: &ClassRequest<'_>, out: &Path) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let dir = out.parent().unwrap_or(Path::new("."));
    let labels_file = dir.join("labels.txt");
    std::fs::write(&labels_file, request.labels.join("\n") + "\n")
        .map_err(|e| format!("cannot write the labels for the text tower: {e}"))?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("embed-text")
        .arg("--class-matrix")
        .arg("--quiet")
        .args(["--model", request.model.name()])
        .arg("--text")
        .arg(&labels_file)
        .arg("--out")
        .arg(out)
        .args(["--gpus", &request.device.to_string()])
        .args(["--seed", &request.seed.to_string()]);
    if let Some(w) = request.weights {
        command.arg("--weights").arg(w);
    }
    if let Some(t) = request.tokenizer {
        command.arg("--tokenizer").arg(t);
    }
    for t in request.templates {
        command.arg("--prompt").arg(t);
    }
    let output = command
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot start the text tower: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let why = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("pipeline: error: "))
        .map_or_else(|| coordinator::describe_exit(&output.status), str::to_owned);
    Err(format!("--classes: the text tower failed: {why}"))
}

/// What the class matrix of `--classes "…"` is made from.
pub(crate) struct ClassRequest<'a> {
    pub(crate) model: ModelKind,
    pub(crate) weights: Option<&'a Path>,
    pub(crate) tokenizer: Option<&'a Path>,
    pub(crate) seed: u64,
    pub(crate) labels: &'a [String],
    pub(crate) templates: &'a [String],
    pub(crate) device: pipeline_core::DeviceSpec,
}

/// Where the computed class matrix goes: a private folder under the
/// system's temporary directory, kept for the run.
pub(crate) fn class_matrix_dir() -> Result<tempfile::TempDir, String> {
    tempfile::Builder::new()
        .prefix("pipeline-classes-")
        .tempdir()
        .map_err(|e| format!("--classes: cannot make a temporary folder: {e}"))
}
