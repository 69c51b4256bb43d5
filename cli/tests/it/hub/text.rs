//! The text towers of hub CLIP and SigLIP repos (#42 item 5), from the
//! repo's own `config.json` sizes and tokenizer (`tokenizer.json`,
//! `spiece.model`), at contexts and widths no published model has:
//! - `embed-text --model ORG/NAME` gives transformers' unit-length
//!   `get_text_features`, at cosine ≥ 0.99999, a text longer than the
//!   context cut as the tokenizer cuts it;
//! - `infer --classes LABELS` scores each photo as `CLIPModel` (softmax)
//!   or `SiglipModel` (a sigmoid per class, with its bias) do: the same
//!   classes in the same order, |Δprob| ≤ 1e-4;
//! - with several `--prompt` templates, their class embeddings averaged
//!   as open_clip's zero-shot classifier averages them, likewise;
//! - the tokenizer is fetched only then, and a second run asks the hub
//!   nothing; a repo without a text tower is one line, exit 2.

use std::path::Path;

use super::common::{self, data::stderr};
use super::{infer_with, matches_embedding, matches_probs, records, reference, serve};

/// `embed-text` of `texts` with `repo`'s text tower, on the CPU.
fn embed_text(cwd: &Path, repo: &str, text: &str, env: &[(&str, &str)]) -> std::process::Output {
    common::pipeline(cwd)
        .args(["embed-text", "--model", repo, "--gpus", "cpu", "--quiet"])
        .args(["--text", text, "--out", "t.jsonl", "--overwrite"])
        .env("NO_PROXY", "127.0.0.1")
        .env("HF_HOME", cwd.join("hf-home-unset"))
        .envs(env.iter().copied())
        .output()
        .expect("the pipeline binary runs")
}

#[test]
fn hub_text_towers_match_transformers_in_embed_text_and_zero_shot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, hub, env) = serve(dir.path());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // open_clip's own repo has no tokenizer file: its vocabulary is
    // open_clip's built-in one.
    for (repo, tokenizer) in [
        ("tiny-org/clip-small", Some("tokenizer.json")),
        ("tiny-org/siglip-small", Some("spiece.model")),
        ("tiny-org/open-clip", None),
    ] {
        let want = &reference()[repo.replace('/', "--")];
        let texts: Vec<String> =
            serde_json::from_value(want["text"]["texts"].clone()).expect("texts");
        let file = dir.path().join("texts.txt");
        std::fs::write(&file, texts.join("\n") + "\n").expect("write");
        let run = embed_text(dir.path(), repo, "texts.txt", &env);
        assert_eq!(run.status.code(), Some(0), "{repo}: {}", stderr(&run));
        let rows = common::records(&dir.path().join("t.jsonl"));
        let reference_rows = want["text"]["embed"].as_array().expect("text rows");
        assert_eq!(rows.len(), texts.len(), "{repo}: one row per line");
        for ((row, text), reference_row) in rows.iter().zip(&texts).zip(reference_rows) {
            assert_eq!(row["text"], text.as_str(), "{repo}");
            let got: Vec<f64> = serde_json::from_value(row["embedding"].clone()).expect("row");
            let expected: Vec<f64> = serde_json::from_value(reference_row.clone()).expect("row");
            matches_embedding(&got, &expected, &format!("{repo} {text:?}"));
        }
        if let Some(tokenizer) = tokenizer {
            assert!(
                hub.requests()
                    .iter()
                    .any(|r| r.contains(&format!("{repo}/resolve/")) && r.contains(tokenizer)),
                "{repo}: its {tokenizer} fetched: {:?}",
                hub.requests()
            );
        }

        // Zero-shot from labels through the default template.
        let labels: Vec<String> =
            serde_json::from_value(want["zero_shot"]["labels"].clone()).expect("labels");
        let out = format!("{}-classes.jsonl", repo.replace('/', "_"));
        let classes = labels.join(",");
        let run = infer_with(
            dir.path(),
            &data,
            (repo, &out),
            &env,
            &["--classes", &classes],
        );
        assert_eq!(run.status.code(), Some(0), "{repo}: {}", stderr(&run));
        let records = records(dir.path(), &out, repo);
        let probs = want["zero_shot"]["probs"].as_array().expect("probs");
        matches_probs(&records, probs, repo);
        for record in &records {
            let top = &record["top_k"][0];
            let class = top["class"].as_u64().expect("a class") as usize;
            assert_eq!(top["label"], labels[class].as_str(), "{repo}: {record}");
        }

        // Several --prompt templates, averaged as open_clip averages them.
        let prompts: Vec<String> =
            serde_json::from_value(want["zero_shot_prompts"]["prompts"].clone()).expect("prompts");
        let mut flags = vec!["--classes".to_owned(), classes.clone()];
        for prompt in &prompts {
            flags.extend(["--prompt".to_owned(), prompt.clone()]);
        }
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let prompted = format!("{}-prompts.jsonl", repo.replace('/', "_"));
        let run = infer_with(dir.path(), &data, (repo, &prompted), &env, &flags);
        assert_eq!(run.status.code(), Some(0), "{repo}: {}", stderr(&run));
        let probs = want["zero_shot_prompts"]["probs"]
            .as_array()
            .expect("probs");
        matches_probs(&super::records(dir.path(), &prompted, repo), probs, repo);

        // Again: everything from the cache, the text tower's child too.
        let before = hub.requests().len();
        let again = format!("{}-again.jsonl", repo.replace('/', "_"));
        let run = infer_with(
            dir.path(),
            &data,
            (repo, &again),
            &env,
            &["--classes", &classes],
        );
        assert_eq!(run.status.code(), Some(0), "{repo}: {}", stderr(&run));
        assert_eq!(
            hub.requests().len(),
            before,
            "{repo}: a cached model asks nothing"
        );
        assert_eq!(
            common::records(&dir.path().join(&again)),
            records,
            "{repo}: the same bytes"
        );
    }

    // A classifier repo with --classes (its own head, no zero-shot), and a
    // CLIPVisionModel (no projection to score in), are one line, exit 2.
    for (repo, says) in [
        (
            "tiny-org/clip-classifier",
            "--classes: tiny-org/clip-classifier classifies with its own head",
        ),
        (
            "tiny-org/clip-vision-bare",
            "--classes: tiny-org/clip-vision-bare is a CLIPVisionModel without its projection",
        ),
    ] {
        let run = infer_with(
            dir.path(),
            &data,
            (repo, "no.jsonl"),
            &env,
            &["--classes", "cat,dog"],
        );
        let text = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{repo}: {text}");
        assert!(text.contains(says), "{repo}: {text}");
    }
    // A repo whose family has no text tower, and weights beside a repo,
    // are one line, exit 2.
    for (args, says) in [
        (
            &["--model", "tiny-org/vit-2labels"][..],
            "--model tiny-org/vit-2labels: vit has no text tower here",
        ),
        (
            &["--model", "tiny-org/clip-small", "--weights", "texts.txt"][..],
            "--weights does not go with a hub model",
        ),
    ] {
        let run = common::pipeline(dir.path())
            .args([
                "embed-text",
                "--gpus",
                "cpu",
                "--text",
                "a cat",
                "--out",
                "x.jsonl",
            ])
            .args(args)
            .env("NO_PROXY", "127.0.0.1")
            .envs(env.iter().copied())
            .output()
            .expect("runs");
        let text = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {text}");
        assert!(text.contains(says), "{args:?}: {text}");
        assert_eq!(text.trim().lines().count(), 1, "{args:?}: {text}");
    }
}
