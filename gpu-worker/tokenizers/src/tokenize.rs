//! Tokenizers exactly as upstream runs them.
//!
//! - **OpenCLIP / OpenAI checkpoints:** open_clip's `SimpleTokenizer`:
//!   `ftfy.fix_text`, `html.unescape` twice, strip, whitespace runs to one
//!   space, lower case; its regex splits words (leftmost-first, as Python's
//!   `regex`, with `<start_of_text>` and `<end_of_text>` as words of their
//!   own); each word's UTF-8 bytes as byte-level characters; BPE with `</w>`
//!   ending a word, by Hugging Face `tokenizers`' BPE model over
//!   open_clip's `bpe_simple_vocab_16e6` (MIT), which ships in the binary.
//!   Then start and end tokens, cut to the context keeping the end token,
//!   padded with 0.
//! - **Hugging Face checkpoints:** the `tokenizer.json` beside the weights
//!   (or `--tokenizer FILE`), run by `tokenizers` as transformers' fast
//!   tokenizer runs it, cut to the context with its special tokens kept and
//!   padded with its padding id (else its end token). For SigLIP, after
//!   open_clip's `canonicalize_text`, as open_clip's `HFTokenizer` runs
//!   SigLIP's `tokenizer.json`.
//! - **SigLIP's `spiece.model`:** transformers' `SiglipTokenizer`
//!   (`sentencepiece.rs`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::{Model, PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::ftfy;
use crate::pystr::is_python_space;
use crate::sentencepiece::{SiglipTokenizer, open_clip_canonicalize};
use model_families::text::TokenizerFamily;

/// open_clip's BPE merges, gzipped as open_clip ships them.
const CLIP_BPE_GZ: &[u8] = include_bytes!("bpe_simple_vocab_16e6.txt.gz");
/// The merges open_clip uses: lines 1 ..= 48894 of the file.
const CLIP_MERGES: usize = 49152 - 256 - 2;
/// open_clip's word pattern, its special tokens first.
const CLIP_PATTERN: &str =
    r"<start_of_text>|<end_of_text>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+";

/// A tokenizer that cannot be used, in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tokenizer {path}: {problem}")]
pub struct TokenizerError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong, in one line.
    pub problem: String,
}

/// A text → token ids function, as the checkpoint's upstream tokenizes.
#[derive(Debug)]
pub enum TextTokenizer {
    /// open_clip's `SimpleTokenizer` on its built-in vocabulary.
    OpenClip,
    /// A Hugging Face `tokenizer.json`.
    HuggingFace {
        /// Where it was read from.
        path: PathBuf,
        /// The tokenizer, with truncation and padding to the context set.
        tokenizer: Box<Tokenizer>,
        /// SigLIP's: texts are canonicalised first (open_clip's
        /// `canonicalize_text`).
        canonicalize: bool,
    },
    /// SigLIP's SentencePiece `spiece.model`, run as transformers'
    /// `SiglipTokenizer`.
    SentencePiece {
        /// Where it was read from.
        path: PathBuf,
        /// The tokenizer.
        tokenizer: Box<SiglipTokenizer>,
    },
}

impl TextTokenizer {
    /// The tokenizer file at `path` for a `family` text tower, cutting and
    /// padding to `context`: a SentencePiece `.model` (SigLIP's), else a
    /// `tokenizer.json`.
    pub fn from_file(
        path: &Path,
        family: TokenizerFamily,
        context: usize,
    ) -> Result<Self, TokenizerError> {
        let error = |problem: String| TokenizerError {
            path: path.to_path_buf(),
            problem,
        };
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".model") {
            if family == TokenizerFamily::Clip {
                return Err(error(
                    "a SentencePiece model; CLIP's tokenizer is byte-level BPE: give its \
                     tokenizer.json, or none for an OpenCLIP/OpenAI checkpoint"
                        .into(),
                ));
            }
            let bytes = std::fs::read(path).map_err(|e| error(e.to_string()))?;
            let tokenizer = SiglipTokenizer::from_bytes(&bytes).map_err(error)?;
            return Ok(Self::SentencePiece {
                path: path.to_path_buf(),
                tokenizer: Box::new(tokenizer),
            });
        }
        let mut tokenizer = Tokenizer::from_file(path).map_err(|e| {
            let first = e.to_string();
            let first = first.lines().next().unwrap_or("").to_owned();
            error(format!("not a Hugging Face tokenizer.json ({first})"))
        })?;
        // The end token the post-processor appends pads, unless the file
        // says how to pad: CLIP's and SigLIP's pad token is their end token.
        let plain = tokenizer
            .encode("", true)
            .map_err(|e| error(format!("cannot encode with it: {e}")))?;
        let padding = tokenizer.get_padding().cloned();
        let pad_id = padding
            .as_ref()
            .map(|p| p.pad_id)
            .or_else(|| plain.get_ids().last().copied())
            .unwrap_or(0);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: context,
                ..TruncationParams::default()
            }))
            .map_err(|e| error(format!("cannot truncate to {context}: {e}")))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::Fixed(context),
            pad_id,
            ..padding.unwrap_or_default()
        }));
        Ok(Self::HuggingFace {
            path: path.to_path_buf(),
            tokenizer: Box::new(tokenizer),
            canonicalize: family == TokenizerFamily::Siglip,
        })
    }

    /// What the run identity records: which tokenizer, and for a file its
    /// path (the identity hashes the file itself).
    pub fn describe(&self) -> String {
        match self {
            Self::OpenClip => "open_clip bpe_simple_vocab_16e6".to_owned(),
            Self::HuggingFace { path, .. } => format!("tokenizer.json {}", path.display()),
            Self::SentencePiece { path, .. } => format!("spiece.model {}", path.display()),
        }
    }

    /// The file it was read from; none for the built-in one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Self::OpenClip => None,
            Self::HuggingFace { path, .. } | Self::SentencePiece { path, .. } => Some(path),
        }
    }

    /// The ids of `text`, exactly `context` of them.
    pub fn encode(&self, text: &str, context: usize) -> Vec<u32> {
        match self {
            Self::OpenClip => clip_ids(text, context),
            Self::SentencePiece { tokenizer, .. } => tokenizer.encode(text, context),
            Self::HuggingFace {
                tokenizer,
                canonicalize,
                ..
            } => match tokenizer.encode(
                if *canonicalize {
                    open_clip_canonicalize(text)
                } else {
                    text.to_owned()
                },
                true,
            ) {
                Ok(encoding) => {
                    let mut ids = encoding.get_ids().to_vec();
                    ids.resize(context, 0);
                    ids
                }
                // tokenizers fails only on an internal error of a model
                // (e.g. an id its vocabulary lacks): an empty text instead
                // would hide it, so it stops the run.
                Err(e) => panic!("the tokenizer failed on a text: {e}"),
            },
        }
    }
}

/// open_clip's cleaning: `whitespace_clean(basic_clean(text)).lower()`.
pub fn clip_clean(text: &str) -> String {
    let fixed = ftfy::fix_text(text);
    let unescaped = ftfy::html_unescape(&ftfy::html_unescape(&fixed));
    let words: Vec<&str> = unescaped
        .split(is_python_space)
        .filter(|w| !w.is_empty())
        .collect();
    words.join(" ").to_lowercase()
}

/// open_clip's vocabulary, BPE model and word regex, built once.
struct ClipBpe {
    bpe: BPE,
    words: regex::Regex,
    bytes: [char; 256],
}

fn clip_bpe() -> &'static ClipBpe {
    static BPE_MODEL: OnceLock<ClipBpe> = OnceLock::new();
    BPE_MODEL.get_or_init(|| {
        let mut text = String::new();
        flate2::read::GzDecoder::new(CLIP_BPE_GZ)
            .read_to_string(&mut text)
            .expect("the built-in BPE vocabulary is gzipped UTF-8");
        let merges: Vec<(String, String)> = text
            .split('\n')
            .skip(1)
            .take(CLIP_MERGES)
            .map(|line| {
                let (a, b) = line.split_once(' ').expect("a merge is two symbols");
                (a.to_owned(), b.to_owned())
            })
            .collect();
        let bytes = bytes_to_unicode();
        let mut order: Vec<String> = byte_order()
            .iter()
            .map(|&b| bytes[b as usize].to_string())
            .collect();
        order.extend(
            byte_order()
                .iter()
                .map(|&b| format!("{}</w>", bytes[b as usize])),
        );
        order.extend(merges.iter().map(|(a, b)| format!("{a}{b}")));
        order.push("<start_of_text>".into());
        order.push("<end_of_text>".into());
        let vocab: Vocab = order
            .into_iter()
            .enumerate()
            .map(|(i, token)| (token, i as u32))
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .end_of_word_suffix("</w>".into())
            .build()
            .expect("open_clip's vocabulary builds a BPE model");
        ClipBpe {
            bpe,
            words: regex::Regex::new(CLIP_PATTERN).expect("open_clip's word pattern"),
            bytes,
        }
    })
}

/// GPT-2's byte order: the printable bytes, then the rest.
fn byte_order() -> Vec<u8> {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    let mut order: Vec<u8> = (0..=255u8).filter(|&b| printable(b)).collect();
    order.extend((0..=255u8).filter(|&b| !printable(b)));
    order
}

/// GPT-2's `bytes_to_unicode`: printable bytes as themselves, the others
/// as U+0100 onwards, in byte order.
fn bytes_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        table[b as usize] = if printable {
            char::from(b)
        } else {
            next += 1;
            char::from_u32(next - 1).expect("below U+0200")
        };
    }
    table
}

/// open_clip's start and end tokens.
pub(crate) const CLIP_START: u32 = 49406;
/// open_clip's end token.
pub(crate) const CLIP_END: u32 = 49407;

/// open_clip's `tokenize(text, context_length)` for one text.
fn clip_ids(text: &str, context: usize) -> Vec<u32> {
    let model = clip_bpe();
    let cleaned = clip_clean(text);
    let mut ids = vec![CLIP_START];
    for word in model.words.find_iter(&cleaned) {
        match word.as_str() {
            "<start_of_text>" => ids.push(CLIP_START),
            "<end_of_text>" => ids.push(CLIP_END),
            word => {
                let mapped: String = word.bytes().map(|b| model.bytes[b as usize]).collect();
                let tokens = model
                    .bpe
                    .tokenize(&mapped)
                    .expect("every byte-level symbol is in the vocabulary");
                ids.extend(tokens.iter().map(|t| t.id));
            }
        }
        if ids.len() > context {
            break;
        }
    }
    ids.push(CLIP_END);
    if ids.len() > context {
        ids.truncate(context);
        ids[context - 1] = CLIP_END;
    }
    ids.resize(context, 0);
    ids
}
