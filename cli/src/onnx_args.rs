//! The flags of `pipeline infer --model FILE.onnx` (#41) that describe the
//! model's outputs, beyond the preprocessing flags.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// `--output`, `--scores`, `--labels`, `--normalize`.
#[derive(Debug, Args)]
pub(crate) struct OnnxArgs {
    /// With --model FILE.onnx: the output read, by name (default: the
    /// model's first).
    #[arg(long, value_name = "NAME")]
    pub(crate) output: Option<String>,
    /// With --model FILE.onnx and --task classify: softmax (one class per
    /// image), sigmoid (multi-label) or raw values (default: as the
    /// config.json beside the model says, as transformers' pipeline reads
    /// it: sigmoid for a multi-label or single-logit head, else softmax).
    #[arg(long, value_enum, value_name = "softmax|sigmoid|raw")]
    pub(crate) scores: Option<ScoresArg>,
    /// With --model FILE.onnx: class names, one per line in class order
    /// (default: id2label or label_names of a config.json beside the
    /// model, else class indices). Implies --task classify.
    #[arg(long, value_name = "FILE")]
    pub(crate) labels: Option<PathBuf>,
    /// With --model FILE.onnx and --task embed: each row scaled to unit
    /// length (L2).
    #[arg(long)]
    pub(crate) normalize: bool,
}

/// How a classifier's values become scores (`--scores`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ScoresArg {
    /// Softmax over the row.
    Softmax,
    /// Each value's sigmoid (multi-label).
    Sigmoid,
    /// The values as the model gives them.
    Raw,
}
