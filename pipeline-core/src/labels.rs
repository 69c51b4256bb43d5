//! Class names: the 1000 ImageNet ones, in class-index order, as torchvision
//! lists them (`torchvision.models._meta._IMAGENET_CATEGORIES`), or the
//! user's own for zero-shot classification (`--classes`).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

const RAW: &str = include_str!("imagenet_labels.txt");

static LABELS: OnceLock<Vec<&'static str>> = OnceLock::new();

/// Number of ImageNet classes.
pub const IMAGENET_CLASSES: usize = 1000;

/// The name of ImageNet class `class`, or `None` past the end.
pub fn imagenet_label(class: u32) -> Option<&'static str> {
    imagenet_labels().get(class as usize).copied()
}

/// All labels, in class order (split once, on first use).
pub fn imagenet_labels() -> &'static [&'static str] {
    LABELS.get_or_init(|| RAW.lines().collect())
}

/// The text side of zero-shot classification (`--classes`): the matrix
/// of class text embeddings the worker reads, and one label per row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZeroShotClasses {
    /// The `.npy` or `.safetensors` matrix, `[classes, embedding dim]`.
    pub path: PathBuf,
    /// The label of each row, in row order.
    pub labels: Vec<String>,
    /// Set when the matrix was made here from plain labels (`--classes
    /// "cat,dog"`): what it was made with. The run's identity records this
    /// instead of the matrix's bytes, which differ in their last bits
    /// between kinds of device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<Prompts>,
}

/// How labels became class embeddings: the prompt templates, and the
/// tokenizer (which one, and a fingerprint of its file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompts {
    /// `--prompt` templates, each with `{}` for the label.
    pub templates: Vec<String>,
    /// The tokenizer, in words, with its file's fingerprint if any.
    pub tokenizer: String,
}

/// The names output records give classes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ClassLabels {
    /// ImageNet's, for the built-in classifiers.
    #[default]
    Imagenet,
    /// The rows of a zero-shot class matrix.
    Named(Arc<[String]>),
}

impl ClassLabels {
    /// The labels of `classes`' rows, or ImageNet's without one.
    pub fn of(classes: Option<&ZeroShotClasses>) -> Self {
        match classes {
            Some(c) => Self::Named(c.labels.iter().cloned().collect()),
            None => Self::Imagenet,
        }
    }

    /// The labels a run of `model` writes: `classes`' rows; ImageNet's for
    /// a built-in classifier; none (empty) for a user's ONNX model, whose
    /// classes are not ImageNet's.
    pub fn for_model(classes: Option<&ZeroShotClasses>, model: &crate::ModelRef) -> Self {
        match (classes, model) {
            (None, crate::ModelRef::Onnx(_)) => Self::Named(Vec::new().into()),
            (classes, _) => Self::of(classes),
        }
    }

    /// The name of `class` (empty past the end).
    pub fn get(&self, class: u32) -> &str {
        match self {
            Self::Imagenet => imagenet_label(class).unwrap_or(""),
            Self::Named(labels) => labels.get(class as usize).map_or("", String::as_str),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_complete_and_in_order() {
        assert_eq!(imagenet_labels().len(), IMAGENET_CLASSES);
        assert_eq!(imagenet_label(0), Some("tench"));
        assert_eq!(imagenet_label(281), Some("tabby"));
        assert_eq!(imagenet_label(999), Some("toilet tissue"));
        assert_eq!(imagenet_label(1000), None);
    }

    #[test]
    fn named_labels_replace_imagenet_ones() {
        let classes = ZeroShotClasses {
            prompts: None,
            path: "classes.npy".into(),
            labels: vec!["cat".into(), "dog, running".into()],
        };
        let named = ClassLabels::of(Some(&classes));
        assert_eq!(named.get(1), "dog, running");
        assert_eq!(named.get(2), "");
        assert_eq!(ClassLabels::of(None).get(281), "tabby");
    }
}
