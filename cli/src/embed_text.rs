//! `pipeline embed-text`: one L2-normalised embedding per line of text, in
//! input order, from a CLIP or SigLIP checkpoint's text tower, comparable
//! with the image embeddings `infer --task embed` writes from the same
//! checkpoint.
//!
//! Its hidden `--class-matrix` form is how `infer --classes "cat,dog"`
//! turns labels into a zero-shot class matrix: `infer` runs it as a child
//! process on the run's first device (so that a driver crash costs the
//! child, and a GPU does the 80 000 prompts of `--prompt imagenet` in
//! seconds), and the workers read the file it writes like any
//! `--classes FILE`.

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal};
use std::path::{Path, PathBuf};

use coordinator::{EmbeddingDtype, TextEmbeddings, TextFormat, TextWriter};
use gpu_worker::text::{
    TextConfig, TextEncoder, TextTokenizer, hub_text_config, prompts, text_config, tokenizer_for,
};
use gpu_worker::zero_shot::ClassMatrix;
use pipeline_core::ModelKind;

use crate::args::EmbedTextArgs;
use crate::exit::Outcome;

/// Texts per progress step when a file is large.
const PROGRESS_FROM: u64 = 1000;

pub(crate) fn run(args: &EmbedTextArgs) -> Outcome {
    match embed(args) {
        Ok(()) => Outcome::Success,
        Err(message) => Outcome::Failed(message),
    }
}

/// Texts embedded and written together: memory stays bounded whatever
/// the file's size.
const CHUNK: usize = 8192;

/// What `--text` names: a file of lines, or the value itself as one text.
enum TextSource {
    One(String),
    File(PathBuf),
}

fn text_source(value: &str, flag: &str) -> Result<TextSource, String> {
    let path = Path::new(value);
    if path.is_file() {
        return Ok(TextSource::File(path.to_path_buf()));
    }
    if value.ends_with(".txt") {
        return Err(format!("{flag} {value}: no such file"));
    }
    Ok(TextSource::One(value.to_owned()))
}

/// The lines of `path` as they are read: UTF-8, `\n` or `\r\n`; a last line
/// without a newline counts, an empty file has none. A line that is not
/// UTF-8 is an error naming it.
fn lines(path: &Path, flag: &str) -> Result<impl Iterator<Item = Result<String, String>>, String> {
    let shown = path.display().to_string();
    let file = File::open(path).map_err(|e| format!("{flag} {shown}: {e}"))?;
    let flag = flag.to_owned();
    Ok(BufReader::with_capacity(1 << 20, file)
        .split(b'\n')
        .enumerate()
        .map(move |(i, line)| {
            let mut line = line.map_err(|e| format!("{flag} {shown}: {e}"))?;
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            String::from_utf8(line).map_err(|e| {
                format!(
                    "{flag} {shown}: line {} is not valid UTF-8 (byte {} of the line)",
                    i + 1,
                    e.utf8_error().valid_up_to() + 1
                )
            })
        }))
}

/// The texts `--text` names, all of them (labels for `--classes`).
pub(crate) fn read_texts(value: &str, flag: &str) -> Result<Vec<String>, String> {
    match text_source(value, flag)? {
        TextSource::One(text) => Ok(vec![text]),
        TextSource::File(path) => lines(&path, flag)?.collect(),
    }
}

/// A text tower as `--model` names it: a built-in model's (from
/// `--weights`, else seeded random weights) or a hub CLIP or SigLIP
/// repo's; with its tokenizer (`--tokenizer`, else the one beside the
/// weights or in the repo).
#[derive(Debug)]
pub(crate) struct TextModel {
    /// How `--model` names it again, in the class matrix's child: the
    /// built-in name, or the repo at the commit its files are from.
    pub(crate) arg: String,
    /// The `--weights` that child is given (a built-in model's).
    pub(crate) weights_arg: Option<PathBuf>,
    /// Its name, for messages.
    pub(crate) name: String,
    pub(crate) config: TextConfig,
    /// The checkpoint it loads from; `None`: seeded random weights.
    pub(crate) weights: Option<PathBuf>,
    pub(crate) tokenizer: TextTokenizer,
}

/// open_clip's `SimpleTokenizer`'s vocabulary size (OpenAI's BPE).
const OPEN_CLIP_VOCAB: usize = 49408;

/// The text tower `model` names, with `weights` and `tokenizer` as the
/// flags give them; or why not, in one line.
pub(crate) fn text_model(
    model: &str,
    weights: Option<&Path>,
    tokenizer: Option<&Path>,
) -> Result<TextModel, String> {
    if let Some(t) = tokenizer
        && !t.is_file()
    {
        return Err(format!("--tokenizer {}: no such file", t.display()));
    }
    if let Some(id) = crate::plan::hub::text::hub_id(model) {
        if weights.is_some() {
            return Err(format!(
                "--weights does not go with a hub model (--model {id}): the repo holds them"
            ));
        }
        let tower = crate::plan::hub::text::tower(&id)?;
        let config = hub_text_config(&tower.text);
        let tokenizer = match tokenizer.or(tower.tokenizer.as_deref()) {
            Some(file) => TextTokenizer::from_file(file, config.tokenizer, config.context)
                .map_err(|e| format!("--model {id}: {e}"))?,
            // An open_clip repo: open_clip's own vocabulary, whose ids
            // must fit its embedding table.
            None if tower.text.vocab == OPEN_CLIP_VOCAB => TextTokenizer::OpenClip,
            None => {
                return Err(format!(
                    "--model {id}: its text_cfg.vocab_size {} is not that of open_clip's \
                     tokenizer ({OPEN_CLIP_VOCAB}); give its tokenizer with --tokenizer",
                    tower.text.vocab
                ));
            }
        };
        return Ok(TextModel {
            arg: tower.pinned,
            weights_arg: None,
            name: id.repo.clone(),
            config,
            weights: Some(tower.weights),
            tokenizer,
        });
    }
    let kind: ModelKind = model.parse().map_err(|e| format!("--model: {e}"))?;
    let Some(config) = text_config(kind) else {
        return Err(format!(
            "--model {kind}: no text tower here; text embeddings need a CLIP or SigLIP \
             model (clip_vit_b_32, clip_vit_b_16, clip_vit_l_14, siglip_base_patch16_224, \
             or a hub CLIP or SigLIP repo)"
        ));
    };
    if let Some(w) = weights
        && !w.is_file()
    {
        return Err(format!("--weights {}: no such file", w.display()));
    }
    let tokenizer = tokenizer_for(weights, tokenizer, &config).map_err(|e| e.to_string())?;
    Ok(TextModel {
        arg: kind.name().to_owned(),
        weights_arg: weights.map(Path::to_path_buf),
        name: kind.name().to_owned(),
        config,
        weights: weights.map(Path::to_path_buf),
        tokenizer,
    })
}

fn embed(args: &EmbedTextArgs) -> Result<(), String> {
    let text = text_model(
        &args.model,
        args.weights.as_deref(),
        args.tokenizer.as_deref(),
    )?;
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
    // Labels for a class matrix are few and read whole; texts to embed are
    // counted (and checked as UTF-8) first, then streamed a chunk at a time.
    let (source, total) = if args.class_matrix {
        (TextSource::One(String::new()), 0)
    } else {
        match text_source(&args.text, "--text")? {
            TextSource::One(text) => (TextSource::One(text), 1),
            TextSource::File(path) => {
                let mut count = 0u64;
                for line in lines(&path, "--text")? {
                    line?;
                    count += 1;
                }
                (TextSource::File(path), count)
            }
        }
    };
    let labels = if args.class_matrix {
        let labels = read_texts(&args.text, "--text")?;
        if labels.is_empty() || labels.iter().any(|t| t.trim().is_empty()) {
            return Err("--classes: a label is empty".to_owned());
        }
        labels
    } else {
        Vec::new()
    };
    let templates = if args.class_matrix {
        prompts::templates(&args.prompts)?
    } else {
        Vec::new()
    };
    // A hub repo's files from the cache alone, the hub out of reach.
    if let Some(warning) = crate::plan::hub::cache::offline_warning()
        && !args.quiet
    {
        eprintln!("{warning}");
    }
    if text.weights.is_none() && !args.quiet {
        eprintln!(
            "pipeline: no --weights: {}'s text tower runs with seeded random weights \
             (seed {}), so its embeddings mean nothing",
            text.name, args.seed
        );
    }
    // The CUDA engine runs every text tower there is (CLIP's, SigLIP's).
    let (devices, engine, _) = crate::devices::engine_devices(args.engine, &args.gpus, Ok(()))?;
    let device = devices[0].clone();
    let encoder = TextEncoder::open(
        text.config,
        &text.name,
        text.weights.as_deref(),
        text.tokenizer,
        args.seed,
        (&device, engine),
    )
    .map_err(|e| e.to_string())?;
    let batch = args.batch_size as usize;
    let total = if args.class_matrix {
        (labels.len() * templates.len()) as u64
    } else {
        total
    };
    let bar = progress(total, args.quiet);
    let mut embed_batch = |batch_texts: &[String]| -> Result<Vec<f32>, String> {
        let mut out = Vec::with_capacity(batch_texts.len() * encoder.dim());
        for chunk in batch_texts.chunks(batch) {
            out.extend(encoder.embed(chunk).map_err(|e| e.to_string())?);
            if let Some(bar) = &bar {
                bar.inc(chunk.len() as u64);
            }
        }
        Ok(out)
    };
    let dim = encoder.dim();
    let out_error = |e: std::io::Error| format!("--out {}: {e}", args.out.display());
    if args.class_matrix {
        let rows = prompts::class_embeddings(&labels, &templates, dim, &mut embed_batch)?;
        ClassMatrix::new(labels, dim, rows)
            .write_safetensors(&args.out)
            .map_err(|e| format!("--out {}: {e}", args.out.display()))?;
    } else {
        let mut writer =
            TextWriter::create(&args.out, format, dtype, dim, total).map_err(out_error)?;
        let mut write = |texts: &[String]| {
            let values = embed_batch(texts)?;
            let rows = TextEmbeddings {
                texts,
                dim,
                values: &values,
            };
            writer.write(&rows).map_err(out_error)
        };
        match source {
            TextSource::One(text) => write(&[text])?,
            TextSource::File(path) => {
                let mut chunk = Vec::with_capacity(CHUNK);
                for line in lines(&path, "--text")? {
                    chunk.push(line?);
                    if chunk.len() == CHUNK {
                        write(&chunk)?;
                        chunk.clear();
                    }
                }
                if !chunk.is_empty() {
                    write(&chunk)?;
                }
            }
        }
        writer.finish().map_err(out_error)?;
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
fn progress(total: u64, quiet: bool) -> Option<indicatif::ProgressBar> {
    if quiet || total < PROGRESS_FROM || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
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
        .args(["--model", &request.model.arg])
        .arg("--text")
        .arg(&labels_file)
        .arg("--out")
        .arg(out)
        .args(["--gpus", &request.device.to_string()])
        .args(["--engine", child_engine(request)])
        .args(["--seed", &request.seed.to_string()]);
    if let Some(w) = &request.model.weights_arg {
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
    pub(crate) model: &'a TextModel,
    pub(crate) tokenizer: Option<&'a Path>,
    pub(crate) seed: u64,
    pub(crate) labels: &'a [String],
    pub(crate) templates: &'a [String],
    pub(crate) device: pipeline_core::DeviceSpec,
    /// The run's engine: the text tower runs on the same one, so a run's
    /// class matrix and image embeddings come from one engine.
    pub(crate) engine: pipeline_core::EngineKind,
}

/// The `--engine` that runs `request`'s text tower on its device: the run's
/// own (burn's is `cpu` on the CPU, `vulkan` on a GPU or lavapipe).
fn child_engine(request: &ClassRequest<'_>) -> &'static str {
    match (request.engine, &request.device) {
        (pipeline_core::EngineKind::Cuda, _) => "cuda",
        (pipeline_core::EngineKind::Burn, pipeline_core::DeviceSpec::Cpu) => "cpu",
        (pipeline_core::EngineKind::Burn, _) => "vulkan",
        // No ONNX model has a text tower: zero-shot runs are built-in ones.
        (pipeline_core::EngineKind::Onnx, _) => "cpu",
    }
}

/// Where the computed class matrix goes: a private folder under the
/// system's temporary directory, kept for the run.
pub(crate) fn class_matrix_dir() -> Result<tempfile::TempDir, String> {
    tempfile::Builder::new()
        .prefix("pipeline-classes-")
        .tempdir()
        .map_err(|e| format!("--classes: cannot make a temporary folder: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The class matrix's child runs the run's own engine on its device.
    #[test]
    fn the_class_matrix_runs_on_the_runs_engine() {
        use pipeline_core::{DeviceSpec, EngineKind};
        let model = text_model("clip_vit_b_32", None, None).expect("a built-in text tower");
        let request = |engine, device| ClassRequest {
            model: &model,
            tokenizer: None,
            seed: 0,
            labels: &[],
            templates: &[],
            device,
            engine,
        };
        for (engine, device, want) in [
            (EngineKind::Cuda, DeviceSpec::Gpu(1), "cuda"),
            (EngineKind::Burn, DeviceSpec::Gpu(1), "vulkan"),
            (EngineKind::Burn, DeviceSpec::Software, "vulkan"),
            (EngineKind::Burn, DeviceSpec::Cpu, "cpu"),
        ] {
            assert_eq!(
                child_engine(&request(engine, device.clone())),
                want,
                "{device}"
            );
        }
    }

    /// A file's lines as upstream reads captions: `\n` or `\r\n`, a last
    /// line without a newline counted, empty lines kept, an empty file none.
    #[test]
    fn a_text_files_lines_are_read_as_written() {
        let dir = tempfile::tempdir().expect("a temp dir");
        for (bytes, want) in [
            (&b"a\r\nb\n\nlast"[..], vec!["a", "b", "", "last"]),
            (b"one\n", vec!["one"]),
            (b"\n", vec![""]),
            (b"", vec![]),
        ] {
            let file = dir.path().join("t.txt");
            std::fs::write(&file, bytes).expect("write");
            let got = read_texts(file.to_str().expect("utf-8"), "--text").expect("read");
            assert_eq!(got, want, "{bytes:?}");
        }
        assert_eq!(
            read_texts("a cat", "--text").expect("one text"),
            vec!["a cat"]
        );
        let file = dir.path().join("bad.txt");
        std::fs::write(&file, b"ok\n\xc3\x28\n").expect("write");
        let error = read_texts(file.to_str().expect("utf-8"), "--text").expect_err("refused");
        assert!(
            error.contains("line 2 is not valid UTF-8 (byte 1 of the line)"),
            "{error}"
        );
    }
}
