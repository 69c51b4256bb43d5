//! The text towers' tokenizers, as their upstreams tokenize: open_clip's
//! BPE (built in, with its ftfy cleaning) for OpenCLIP and OpenAI
//! checkpoints; the `tokenizer.json` beside a Hugging Face checkpoint;
//! SigLIP's `spiece.model` (`sentencepiece.rs`); and zero-shot's prompt
//! templates (`prompts.rs`). Texts in, token ids out: no tower, no device.
//!
//! It may use `model-families` (which tokenizer a family takes) and the
//! tokenizer libraries; never the worker or an engine.

#![deny(missing_docs)]

mod ftfy;
mod ftfy_data;
pub mod prompts;
mod pystr;
mod sentencepiece;
mod tokenize;

pub use tokenize::{TextTokenizer, TokenizerError, clip_clean};
