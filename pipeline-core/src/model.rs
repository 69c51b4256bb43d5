//! The built-in models, what each computes, and its preprocessing defaults.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::preprocess::{Normalize, PreprocessSpec};

/// A built-in model architecture (torchvision-compatible key names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// A small CNN for fast tests (4 conv layers, 1000 classes).
    Tiny,
    /// torchvision `resnet18`.
    Resnet18,
    /// torchvision `resnet34`.
    Resnet34,
    /// torchvision `resnet50`.
    Resnet50,
    /// torchvision `resnet101`.
    Resnet101,
    /// torchvision `resnet152`.
    Resnet152,
    /// EfficientNet-Lite0 (`efficientnet-lite-pytorch` layout).
    EfficientnetLite0,
}

impl ModelKind {
    /// Every model, in the order `--help` lists them.
    pub const ALL: [ModelKind; 7] = [
        Self::Tiny,
        Self::Resnet18,
        Self::Resnet34,
        Self::Resnet50,
        Self::Resnet101,
        Self::Resnet152,
        Self::EfficientnetLite0,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tiny => "tiny",
            Self::Resnet18 => "resnet18",
            Self::Resnet34 => "resnet34",
            Self::Resnet50 => "resnet50",
            Self::Resnet101 => "resnet101",
            Self::Resnet152 => "resnet152",
            Self::EfficientnetLite0 => "efficientnet_lite0",
        }
    }

    /// Preprocessing the model was trained with.
    pub fn default_preprocess(self) -> PreprocessSpec {
        match self {
            Self::EfficientnetLite0 => PreprocessSpec {
                normalize: Normalize::efficientnet_lite(),
                ..PreprocessSpec::default()
            },
            _ => PreprocessSpec::default(),
        }
    }

    /// Length of the pooled penultimate features (`--task embed`).
    pub fn feature_dim(self) -> usize {
        match self {
            Self::Tiny => 128,
            Self::Resnet18 | Self::Resnet34 => 512,
            Self::Resnet50 | Self::Resnet101 | Self::Resnet152 => 2048,
            Self::EfficientnetLite0 => 1280,
        }
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown model name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown model `{0}`; expected one of: tiny, resnet18, resnet34, resnet50, resnet101, resnet152, efficientnet_lite0"
)]
pub struct UnknownModel(pub String);

impl FromStr for ModelKind {
    type Err = UnknownModel;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // Separators are free: ResNet-50, resnet_50, efficientnet-lite0.
        let bare = |t: &str| -> String {
            t.chars()
                .filter(|c| !matches!(c, '-' | '_'))
                .map(|c| c.to_ascii_lowercase())
                .collect()
        };
        let wanted = bare(s);
        Self::ALL
            .into_iter()
            .find(|m| bare(m.name()) == wanted)
            .ok_or_else(|| UnknownModel(s.to_owned()))
    }
}

/// What the model's output becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "task")]
pub enum Task {
    /// Softmax over the classes, keeping the `top_k` most probable.
    Classify {
        /// How many classes to keep per image.
        top_k: usize,
    },
    /// The pooled penultimate features.
    Embed,
}

/// One class of a classification result.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClassScore {
    /// Class index (ImageNet order for the built-in models).
    pub class: u32,
    /// Softmax probability.
    pub prob: f32,
}

/// What the device computed for one image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prediction {
    /// Top-k classes, most probable first (ties: lower class first).
    TopK(Vec<ClassScore>),
    /// Pooled features.
    Embedding(Vec<f32>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_round_trip() {
        for model in ModelKind::ALL {
            assert_eq!(model.name().parse::<ModelKind>(), Ok(model));
        }
        assert_eq!("ResNet-50".parse::<ModelKind>(), Ok(ModelKind::Resnet50));
        assert_eq!(
            "efficientnet-lite0".parse::<ModelKind>(),
            Ok(ModelKind::EfficientnetLite0)
        );
        assert!("vgg16".parse::<ModelKind>().is_err());
    }

    #[test]
    fn efficientnet_lite_has_its_own_normalisation() {
        let spec = ModelKind::EfficientnetLite0.default_preprocess();
        assert_eq!(spec.normalize, Normalize::efficientnet_lite());
        assert_eq!(
            ModelKind::Resnet50.default_preprocess().normalize,
            Normalize::imagenet()
        );
    }
}
