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
    /// a built-in classifier; a user's ONNX or hub model's own (none where it has
    /// none: its classes are not ImageNet's).
    pub fn for_model(classes: Option<&ZeroShotClasses>, model: &crate::ModelRef) -> Self {
        match (classes, model) {
            (None, crate::ModelRef::Onnx(m)) => Self::Named(m.labels.iter().cloned().collect()),
            (None, crate::ModelRef::Hub(m)) => Self::Named(m.labels.iter().cloned().collect()),
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

/// A classifier's class names from a model's `config.json`: Hugging
/// Face's `id2label` (`{"0": "cat", ...}`, every index from 0 once) or
/// timm's `label_names` (a list); `None` where it has neither, and an
/// error for a map with gaps, a non-number key or a non-string name.
pub fn labels_from_config(text: &str) -> Result<Option<Vec<String>>, String> {
    let config: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    if let Some(names) = config.get("label_names").filter(|n| !n.is_null()) {
        let names = names
            .as_array()
            .ok_or("label_names is not a list")?
            .iter()
            .map(|n| n.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or("label_names holds a value that is not a string")?;
        return Ok(Some(names));
    }
    let Some(map) = config.get("id2label").filter(|m| !m.is_null()) else {
        return Ok(None);
    };
    let map = map.as_object().ok_or("id2label is not an object")?;
    let mut labels = vec![None; map.len()];
    for (key, name) in map {
        let index: usize = key
            .parse()
            .map_err(|_| format!("id2label's key {key:?} is not a class index"))?;
        let name = name
            .as_str()
            .ok_or_else(|| format!("id2label's {key:?} is not a string"))?;
        let slot = labels.get_mut(index).ok_or_else(|| {
            format!(
                "id2label's key {index} is past its {} classes (indices from 0, each once)",
                map.len()
            )
        })?;
        if slot.replace(name.to_owned()).is_some() {
            return Err(format!("id2label names class {index} twice"));
        }
    }
    // map.len() indices, each below map.len() and set once: every slot is.
    Ok(Some(labels.into_iter().flatten().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// id2label in index order whatever the key order, timm's label_names
    /// as listed, neither: none; a gap, a bad key or a bad value: an error.
    #[test]
    fn config_labels_are_read_in_class_order() {
        let read = |text: &str| labels_from_config(text);
        let refused = |text: &str| read(text).expect_err("refused");
        assert_eq!(
            read(r#"{"id2label": {"1": "dog", "0": "cat", "2": "car"}}"#),
            Ok(Some(vec!["cat".into(), "dog".into(), "car".into()]))
        );
        assert_eq!(
            read(r#"{"label_names": ["a", "b"], "id2label": {"0": "x"}}"#),
            Ok(Some(vec!["a".into(), "b".into()]))
        );
        assert_eq!(read(r#"{"model_type": "vit"}"#), Ok(None));
        assert_eq!(read(r#"{"id2label": null, "label_names": null}"#), Ok(None));
        let gap = refused(r#"{"id2label": {"0": "cat", "2": "car"}}"#);
        assert!(gap.contains("past its 2 classes"), "{gap}");
        let key = refused(r#"{"id2label": {"zero": "cat"}}"#);
        assert!(key.contains("not a class index"), "{key}");
        let value = refused(r#"{"id2label": {"0": 7}}"#);
        assert!(value.contains("not a string"), "{value}");
        let twice = refused(r#"{"id2label": {"1": "a", "01": "b"}}"#);
        assert!(twice.contains("class 1 twice"), "{twice}");
        assert!(read(r#"{"label_names": "cat"}"#).is_err());
        assert!(refused("{").starts_with("not JSON"));
    }

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
