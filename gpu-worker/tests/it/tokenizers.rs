//! Token ids equal to upstream's on 233 strings (ASCII, accents, CJK,
//! emoji, HTML entities, mojibake for ftfy, control characters, long texts,
//! empty and whitespace-only ones; `scripts/make_tokenizer_vectors.py`):
//! open_clip's `SimpleTokenizer` with its cleaning, and transformers'
//! CLIP tokenizer from a `tokenizer.json`, padded and cut to 77 as CLIP's
//! processor does. SigLIP on 260 strings (those and its special tokens;
//! `scripts/make_siglip_text_vectors.py`): transformers' `SiglipTokenizer`
//! on a `spiece.model`, and open_clip's canonicalising `HFTokenizer` on its
//! `tokenizer.json`, both padded and cut to 64.

use std::path::{Path, PathBuf};

use gpu_worker::text::{TextTokenizer, TokenizerFamily, clip_clean};
use serde::Deserialize;

#[derive(Deserialize)]
struct Tokens {
    context: usize,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    clean: String,
    open_clip: Vec<u32>,
    hf_clip: Vec<u32>,
}

fn text_vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/text")
}

fn tokens() -> Tokens {
    let json = std::fs::read_to_string(text_vectors().join("tokens.json"))
        .expect("text/tokens.json is committed");
    serde_json::from_str(&json).expect("tokens.json parses")
}

#[test]
fn open_clips_cleaning_and_ids_on_every_string() {
    let tokens = tokens();
    assert!(tokens.cases.len() >= 200);
    let mut wrong = Vec::new();
    for case in &tokens.cases {
        let clean = clip_clean(&case.text);
        if clean != case.clean {
            wrong.push(format!(
                "clean {:?}: {clean:?}, want {:?}",
                case.text, case.clean
            ));
        }
        let ids = TextTokenizer::OpenClip.encode(&case.text, tokens.context);
        if ids != case.open_clip {
            wrong.push(format!(
                "ids {:?}: {ids:?}, want {:?}",
                case.text, case.open_clip
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn a_hugging_face_tokenizer_json_gives_transformers_ids() {
    let tokens = tokens();
    let file = text_vectors().join("hf_clip_tokenizer/tokenizer.json");
    let tokenizer = TextTokenizer::from_file(&file, TokenizerFamily::Clip, tokens.context)
        .expect("the file loads");
    let mut wrong = Vec::new();
    for case in &tokens.cases {
        let ids = tokenizer.encode(&case.text, tokens.context);
        if ids != case.hf_clip {
            wrong.push(format!("{:?}: {ids:?}, want {:?}", case.text, case.hf_clip));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[derive(Deserialize)]
struct SiglipTokens {
    context: usize,
    cases: Vec<SiglipCase>,
}

#[derive(Deserialize)]
struct SiglipCase {
    text: String,
    spiece: Vec<u32>,
    tokenizer_json: Vec<u32>,
}

/// Every SigLIP string through `file`, against `want`'s ids.
fn check_siglip(file: &str, want: impl Fn(&SiglipCase) -> &[u32]) {
    let json = std::fs::read_to_string(text_vectors().join("siglip_tokens.json"))
        .expect("text/siglip_tokens.json is committed");
    let tokens: SiglipTokens = serde_json::from_str(&json).expect("it parses");
    assert!(tokens.cases.len() >= 200);
    let file = text_vectors().join("siglip").join(file);
    let tokenizer = TextTokenizer::from_file(&file, TokenizerFamily::Siglip, tokens.context)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut wrong = Vec::new();
    for case in &tokens.cases {
        let ids = tokenizer.encode(&case.text, tokens.context);
        if ids != want(case) {
            wrong.push(format!("{:?}: {ids:?}, want {:?}", case.text, want(case)));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} wrong:\n{}",
        wrong.len(),
        tokens.cases.len(),
        wrong.join("\n")
    );
}

#[test]
fn siglips_spiece_model_gives_the_ids_of_transformers_siglip_tokenizer() {
    check_siglip("spiece.model", |case| &case.spiece);
}

#[test]
fn siglips_tokenizer_json_gives_the_ids_of_open_clips_hf_tokenizer() {
    check_siglip("tokenizer.json", |case| &case.tokenizer_json);
}

#[test]
fn a_siglip_checkpoint_finds_its_spiece_model_or_says_which_file_to_give() {
    use gpu_worker::text::{TextError, tokenizer_for};
    let config = gpu_worker::text::text_config(pipeline_core::ModelKind::SiglipBasePatch16_224)
        .expect("SigLIP has a text tower");
    let beside = text_vectors().join("siglip/model.safetensors");
    let found = tokenizer_for(Some(&beside), None, &config).expect("spiece.model is beside");
    assert_eq!(
        found.file(),
        Some(text_vectors().join("siglip/spiece.model").as_path())
    );
    let alone = text_vectors().join("../families/hf_siglip/model.safetensors");
    let error = tokenizer_for(Some(&alone), None, &config).expect_err("nothing beside");
    assert!(
        matches!(error, TextError::MissingTokenizer { .. }),
        "{error}"
    );
    let line = error.to_string();
    assert!(
        line.contains("put its spiece.model (or tokenizer.json) at") && !line.contains('\n'),
        "{line}"
    );
    let seeded = tokenizer_for(None, None, &config).expect_err("no tokenizer is built in");
    assert!(seeded.to_string().contains("pass --tokenizer"), "{seeded}");
}

#[test]
fn tokenizer_files_that_cannot_be_used_are_one_line_errors() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let junk = dir.path().join("tokenizer.json");
    std::fs::write(&junk, "{\"not\": \"a tokenizer\"}").expect("write");
    let spiece = dir.path().join("spiece.model");
    std::fs::write(&spiece, b"\x0a\x0b").expect("write");
    let real = text_vectors().join("siglip/spiece.model");
    for (file, family, says) in [
        (
            junk.clone(),
            TokenizerFamily::Clip,
            "not a Hugging Face tokenizer.json",
        ),
        (
            spiece.clone(),
            TokenizerFamily::Siglip,
            "not a SentencePiece model",
        ),
        (
            real,
            TokenizerFamily::Clip,
            "CLIP's tokenizer is byte-level BPE",
        ),
        (
            dir.path().join("missing.json"),
            TokenizerFamily::Clip,
            "not a Hugging Face tokenizer.json",
        ),
        (
            dir.path().join("missing.model"),
            TokenizerFamily::Siglip,
            "No such file",
        ),
    ] {
        let error = TextTokenizer::from_file(&file, family, 77)
            .expect_err("refused")
            .to_string();
        assert!(error.contains(says), "{error}");
        assert!(!error.contains('\n'), "{error}");
    }
}
