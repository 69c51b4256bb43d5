//! `pipeline embed-text` and zero-shot classification from plain labels,
//! through the real binary: every line once and in order in each format,
//! the classes made from labels equal to a class file made from
//! `embed-text`'s own prompt embeddings (upstream parity of both is in
//! `gpu-worker/tests/it/families.rs` and `tokenizers.rs`), resume refusing a
//! changed label list, and one-line errors.

use std::fs;
use std::path::Path;
use std::process::Output;

use fixtures::DatasetSpec;
use serde_json::Value;

use crate::common;

fn pipeline(args: &[&str], cwd: &Path) -> Output {
    common::pipeline(cwd)
        .args(args)
        .output()
        .expect("the pipeline binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn one_line_error(out: &Output, says: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", stderr(out));
    let text = stderr(out);
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("pipeline: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert!(errors[0].contains(says), "{text}");
}

fn embeddings(path: &Path) -> Vec<(String, Vec<f32>)> {
    common::records(path)
        .iter()
        .enumerate()
        .map(|(i, r)| {
            assert_eq!(r["index"], i, "{r}");
            let e = r["embedding"]
                .as_array()
                .expect("an embedding")
                .iter()
                .map(|v| v.as_f64().expect("a number") as f32)
                .collect();
            (r["text"].as_str().expect("text").to_owned(), e)
        })
        .collect()
}

#[test]
fn embed_text_writes_every_line_once_in_order_in_each_format() {
    let dir = tempfile::tempdir().expect("temp dir");
    let long = "word ".repeat(200);
    let lines = [
        "a photo of a cat.",
        "",
        "naïve café 😀",
        long.trim_end(),
        "a photo of a cat.",
    ];
    let file = dir.path().join("texts.txt");
    fs::write(&file, lines.join("\r\n") + "\n").expect("write");
    let run = |out: &str, extra: &[&str]| {
        let mut args = vec!["embed-text", "--model", "clip_vit_b_32", "--gpus", "cpu"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--out", out]);
        pipeline(&args, dir.path())
    };
    let out = run("t.jsonl", &["--text", "texts.txt"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("seeded random weights"),
        "{}",
        stderr(&out)
    );
    let rows = embeddings(&dir.path().join("t.jsonl"));
    assert_eq!(rows.len(), lines.len(), "one per line, the empty one too");
    for ((text, e), want) in rows.iter().zip(lines) {
        assert_eq!(text, want);
        assert_eq!(e.len(), 512);
        let norm: f32 = e.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "normalised: {norm}");
    }
    assert_eq!(rows[0].1, rows[4].1, "the same text, the same embedding");
    assert_ne!(rows[0].1, rows[1].1);

    // One text inline: the same bits as its line in a file.
    let out = run(
        "one.jsonl",
        &["--text", "a photo of a cat.", "--batch-size", "1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(embeddings(&dir.path().join("one.jsonl"))[0].1, rows[0].1);

    // Parquet and npy hold the same values.
    let out = run("t.parquet", &["--text", "texts.txt"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let file = fs::File::open(dir.path().join("t.parquet")).expect("parquet");
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("a parquet file")
        .build()
        .expect("a reader");
    let mut seen = 0;
    for batch in reader {
        let batch = batch.expect("a batch");
        let names: Vec<String> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["index", "text", "embedding"]);
        seen += batch.num_rows();
    }
    assert_eq!(seen, lines.len());
    let out = run("npy", &["--text", "texts.txt"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let bytes = fs::read(dir.path().join("npy/text_emb/text_emb_0.npy")).expect("npy");
    let values: Vec<f32> = bytes[bytes.len() - lines.len() * 512 * 4..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect();
    assert_eq!(&values[512..1024], rows[1].1.as_slice());
    assert!(dir.path().join("npy/metadata/metadata_0.parquet").is_file());

    // An existing output is kept unless --overwrite.
    one_line_error(&run("t.jsonl", &["--text", "texts.txt"]), "--overwrite");
}

#[test]
fn embed_text_errors_are_one_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(
        dir.path().join("bad.txt"),
        b"fine\nalso fine\n\xff\xfe broken\n",
    )
    .expect("write");
    let run = |args: &[&str]| {
        let mut all = vec!["embed-text", "--gpus", "cpu", "--out", "o.jsonl"];
        all.extend_from_slice(args);
        pipeline(&all, dir.path())
    };
    one_line_error(
        &run(&["--model", "clip_vit_b_32", "--text", "bad.txt"]),
        "line 3 is not valid UTF-8",
    );
    one_line_error(
        &run(&["--model", "resnet50", "--text", "x"]),
        "no text tower here",
    );
    one_line_error(
        &run(&["--model", "siglip_base_patch16_224", "--text", "x"]),
        "SigLIP's tokenizer is not built in: pass --tokenizer",
    );
    one_line_error(
        &run(&["--model", "clip_vit_b_32", "--text", "missing.txt"]),
        "missing.txt: no such file",
    );
    one_line_error(
        &run(&[
            "--model",
            "clip_vit_b_32",
            "--text",
            "x",
            "--engine",
            "cuda",
        ]),
        "--engine cuda: ",
    );
    // A Hugging Face checkpoint without its tokenizer.json beside it.
    let vectors = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../gpu-worker/tests/vectors/families/hf_clip/model.safetensors");
    let weights = vectors.to_str().expect("utf-8 path");
    one_line_error(
        &run(&[
            "--model",
            "clip_vit_b_32",
            "--text",
            "x",
            "--weights",
            weights,
        ]),
        "or pass --tokenizer FILE",
    );
    assert!(!dir.path().join("o.jsonl").exists());
}

/// `infer --classes LABELS --prompt …` on `model` (seeded weights, `extra`
/// flags such as its tokenizer) and `infer --classes FILE.npy` of the same
/// prompts embedded by `embed-text`, averaged per label and normalised by
/// hand, give the same probabilities. Returns the folder and the labels run's
/// records.
fn labels_equal_a_class_file(
    model: &str,
    dim: usize,
    extra: &[&str],
) -> (tempfile::TempDir, Vec<Value>) {
    let dir = tempfile::tempdir().expect("temp dir");
    fixtures::generate(
        &dir.path().join("data"),
        &DatasetSpec {
            images: 4,
            seed: 5,
            broken: false,
        },
    )
    .expect("fixtures");
    let labels = ["tabby cat", "dog", "a red car"];
    let templates = ["a photo of a {}.", "itap of a {}."];
    let infer = |out: &str, classes: &str, more: &[&str]| {
        let mut args = vec![
            "infer",
            "--data",
            "data",
            "--model",
            model,
            "--gpus",
            "cpu",
            "--quiet",
            "--top-k",
            "3",
            "--batch-size",
            "2",
            "--out",
            out,
            "--classes",
            classes,
        ];
        args.extend_from_slice(more);
        pipeline(&args, dir.path())
    };
    let mut prompt_flags: Vec<&str> = templates.iter().flat_map(|t| ["--prompt", *t]).collect();
    prompt_flags.extend_from_slice(extra);
    let from_labels = infer("labels.jsonl", &labels.join(","), &prompt_flags);
    assert_eq!(
        from_labels.status.code(),
        Some(0),
        "{}",
        stderr(&from_labels)
    );

    // The same classes by hand: embed-text's prompt embeddings, averaged
    // per label and normalised, as a .npy with its labels beside it.
    let prompts: Vec<String> = labels
        .iter()
        .flat_map(|l| templates.iter().map(move |t| t.replace("{}", l)))
        .collect();
    fs::write(dir.path().join("prompts.txt"), prompts.join("\n") + "\n").expect("write");
    let mut args = vec![
        "embed-text",
        "--model",
        model,
        "--gpus",
        "cpu",
        "--text",
        "prompts.txt",
        "--out",
        "prompts.jsonl",
    ];
    args.extend_from_slice(extra);
    let out = pipeline(&args, dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows = embeddings(&dir.path().join("prompts.jsonl"));
    let mut matrix = Vec::new();
    for per_label in rows.chunks_exact(templates.len()) {
        let mut mean = vec![0.0f64; dim];
        for (_, e) in per_label {
            for (m, v) in mean.iter_mut().zip(e) {
                *m += f64::from(*v) / templates.len() as f64;
            }
        }
        let norm = mean.iter().map(|m| m * m).sum::<f64>().sqrt();
        matrix.extend(mean.iter().map(|m| (m / norm) as f32));
    }
    let mut bytes = Vec::new();
    {
        use npyz::WriterBuilder;
        let mut writer = npyz::WriteOptions::<f32>::new()
            .default_dtype()
            .shape(&[labels.len() as u64, dim as u64])
            .writer(&mut bytes)
            .begin_nd()
            .expect("npy header");
        writer.extend(matrix).expect("npy data");
        writer.finish().expect("npy written");
    }
    fs::write(dir.path().join("classes.npy"), bytes).expect("write");
    fs::write(dir.path().join("classes.txt"), labels.join("\n") + "\n").expect("write");
    let from_file = infer("file.jsonl", "classes.npy", &[]);
    assert_eq!(from_file.status.code(), Some(0), "{}", stderr(&from_file));

    let got = common::records(&dir.path().join("labels.jsonl"));
    let want = common::records(&dir.path().join("file.jsonl"));
    assert_eq!(got.len(), 4);
    for (g, w) in got.iter().zip(&want) {
        let probs = |r: &Value| -> Vec<(String, f64)> {
            r["top_k"]
                .as_array()
                .expect("top_k")
                .iter()
                .map(|c| {
                    (
                        c["label"].as_str().expect("label").to_owned(),
                        c["prob"].as_f64().expect("prob"),
                    )
                })
                .collect()
        };
        let (g, w) = (probs(g), probs(w));
        assert_eq!(g.len(), 3);
        for ((gl, gp), (wl, wp)) in g.iter().zip(&w) {
            assert_eq!(gl, wl);
            assert!((gp - wp).abs() <= 1e-5, "{gp} vs {wp}");
        }
    }

    (dir, got)
}

#[test]
fn zero_shot_from_labels_equals_a_class_file_of_the_same_prompts() {
    let (dir, _) = labels_equal_a_class_file("clip_vit_b_32", 512, &[]);
    let infer = |out: &str, classes: &str, more: &[&str]| {
        let mut args = vec![
            "infer",
            "--data",
            "data",
            "--model",
            "clip_vit_b_32",
            "--gpus",
            "cpu",
            "--quiet",
            "--out",
            out,
            "--classes",
            classes,
        ];
        args.extend_from_slice(more);
        pipeline(&args, dir.path())
    };
    // A labels file works like the inline list; resume refuses other labels.
    fs::write(dir.path().join("labels.txt"), "tabby cat\ndog\na red car\n").expect("write");
    let partial = infer("part.jsonl", "labels.txt", &["--shard", "0/2"]);
    assert_eq!(partial.status.code(), Some(0), "{}", stderr(&partial));
    let refused = infer(
        "part.jsonl",
        "tabby cat,dog,a blue car",
        &["--shard", "1/2"],
    );
    one_line_error(
        &refused,
        "other --classes (file, labels, --prompt or tokenizer)",
    );
}

#[test]
fn siglip_zero_shot_from_labels_scores_each_class_by_a_sigmoid() {
    let spiece = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../gpu-worker/tests/vectors/text/siglip/spiece.model");
    let tokenizer = spiece.to_str().expect("utf-8 path");
    let (_dir, records) =
        labels_equal_a_class_file("siglip_base_patch16_224", 768, &["--tokenizer", tokenizer]);
    for record in &records {
        let probs: Vec<f64> = record["top_k"]
            .as_array()
            .expect("top_k")
            .iter()
            .map(|c| c["prob"].as_f64().expect("prob"))
            .collect();
        assert_eq!(probs.len(), 3);
        assert!(probs.iter().all(|p| *p > 0.0 && *p < 1.0), "{probs:?}");
        // Each class alone, not a softmax over them.
        let sum: f64 = probs.iter().sum();
        assert!((sum - 1.0).abs() > 1e-3, "{probs:?} sum to one");
    }
}

#[test]
fn label_and_prompt_mistakes_are_one_line_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::create_dir(dir.path().join("data")).expect("mkdir");
    let infer = |model: &str, extra: &[&str]| {
        let mut args = vec![
            "infer", "--data", "data", "--model", model, "--gpus", "cpu", "--out", "o.jsonl",
        ];
        args.extend_from_slice(extra);
        pipeline(&args, dir.path())
    };
    one_line_error(
        &infer("clip_vit_b_32", &["--classes", "cat,,dog"]),
        "label 2 is empty",
    );
    one_line_error(
        &infer("clip_vit_b_32", &["--classes", "cat,dog,cat"]),
        "appears twice",
    );
    one_line_error(
        &infer(
            "clip_vit_b_32",
            &["--classes", "cat,dog", "--prompt", "a photo"],
        ),
        "has no {} where the label goes",
    );
    one_line_error(
        &infer("clip_vit_b_32", &["--prompt", "a {}"]),
        "--prompt and --tokenizer go with --classes labels",
    );
    one_line_error(
        &infer("siglip_base_patch16_224", &["--classes", "cat,dog"]),
        "SigLIP's tokenizer is not built in: pass --tokenizer",
    );
    one_line_error(
        &infer("resnet50", &["--classes", "cat,dog"]),
        "needs a CLIP or SigLIP model",
    );
}
