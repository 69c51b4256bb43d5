//! The model a run runs (#41): one of the built-in architectures, or a
//! user's ONNX file as the coordinator resolved it before any worker
//! started (its fingerprint, the output read, how a classifier's values
//! become scores), or a Hugging Face repo's model (#42, `hub_model/`). A built-in model is written as its name, as before, so
//! earlier runs' identities stay the same.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::hub_model::HubModel;
use crate::model::{EmbedPooling, ModelKind, Scores};

use crate::registry::EngineKind;

/// The order of the channels a model takes (`--channels`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channels {
    /// Red, green, blue.
    #[default]
    Rgb,
    /// Blue, green, red (OpenCV- and Caffe-trained models).
    Bgr,
}

impl Channels {
    /// The RGB channel fed at the model's channel `c` (0, 1 or 2).
    pub fn source(self, c: usize) -> usize {
        match self {
            Self::Rgb => c,
            Self::Bgr => 2 - c,
        }
    }
}

/// A user's ONNX model, resolved once by the coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnnxModel {
    /// The model file (absolute).
    pub onnx: PathBuf,
    /// FNV-1a 64 of its bytes, so that resume refuses a changed file.
    pub fnv64: String,
    /// The output read, by name.
    pub output: String,
    /// Values per image of that output, where the graph fixes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<usize>,
    /// How a classifier's values become scores.
    #[serde(default)]
    pub scores: Scores,
    /// A classifier's class names in class order (`--labels`, else the
    /// `id2label` or timm `label_names` of a `config.json` beside the
    /// model); empty: class indices only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// The channel order the model takes.
    #[serde(default, skip_serializing_if = "is_rgb")]
    pub channels: Channels,
    /// `--task raw`: the outputs read, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub raw: Vec<String>,
    /// Embeddings scaled to unit length (`--normalize`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub normalize: bool,
}

fn is_rgb(c: &Channels) -> bool {
    *c == Channels::Rgb
}

/// The model a run runs: written as the built-in model's `--model` name
/// (as before ONNX models), or as the ONNX model's description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelRef {
    /// A built-in architecture (`--model resnet50`).
    Builtin(ModelKind),
    /// A user's ONNX file (`--model FILE.onnx`).
    Onnx(OnnxModel),
    /// A Hugging Face repo (`--model org/name`), #42.
    Hub(HubModel),
}

const ONNX: &[EngineKind] = &[EngineKind::Onnx];
/// Hub models build the burn engine's networks and the CUDA engine's
/// plans from their configs.
const HUB: &[EngineKind] = &[EngineKind::Burn, EngineKind::Cuda];

impl ModelRef {
    /// The built-in architecture, if it is one.
    pub fn builtin(&self) -> Option<ModelKind> {
        match self {
            Self::Builtin(kind) => Some(*kind),
            Self::Onnx(_) | Self::Hub(_) => None,
        }
    }

    /// The engines that run it: the registry row's, or ONNX Runtime.
    pub fn engines(&self) -> &'static [EngineKind] {
        match self {
            Self::Builtin(kind) => kind.spec().engines,
            Self::Onnx(_) => ONNX,
            Self::Hub(_) => HUB,
        }
    }

    /// Values per image of `--task embed` (0 where an ONNX graph leaves it
    /// dynamic).
    pub fn embedding_dim(&self, pooling: Option<EmbedPooling>) -> usize {
        match self {
            Self::Builtin(kind) => kind.embedding_dim(pooling),
            Self::Onnx(m) => m.width.unwrap_or(0),
            Self::Hub(m) => match pooling {
                Some(EmbedPooling::ClsMean) => 2 * m.shape.width,
                _ => m.shape.feature_dim(),
            },
        }
    }
}

impl Serialize for ModelRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Builtin(kind) => s.serialize_str(kind.name()),
            Self::Onnx(onnx) => onnx.serialize(s),
            Self::Hub(hub) => hub.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ModelRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// A name, or an ONNX model's description.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Name(String),
            Onnx(OnnxModel),
            Hub(HubModel),
        }
        match Written::deserialize(d)? {
            Written::Name(name) => name
                .parse()
                .map(Self::Builtin)
                .map_err(serde::de::Error::custom),
            Written::Onnx(onnx) => Ok(Self::Onnx(onnx)),
            Written::Hub(hub) => Ok(Self::Hub(hub)),
        }
    }
}

impl From<ModelKind> for ModelRef {
    fn from(kind: ModelKind) -> Self {
        Self::Builtin(kind)
    }
}

impl fmt::Display for ModelRef {
    /// `resnet50`, the ONNX file's name, or the repo id.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Builtin(kind) => write!(f, "{kind}"),
            Self::Onnx(m) => write!(
                f,
                "{}",
                m.onnx.file_name().map_or_else(
                    || m.onnx.display().to_string(),
                    |n| n.to_string_lossy().into()
                )
            ),
            Self::Hub(m) => write!(f, "{}", m.repo),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A built-in model is written as its name, as before ModelRef, so
    /// earlier runs' identities and frames read the same; an ONNX model as
    /// its resolved description; each reads back as itself.
    #[test]
    fn a_builtin_model_is_written_as_its_name() {
        let builtin = ModelRef::from(ModelKind::Resnet50);
        assert_eq!(
            serde_json::to_string(&builtin).expect("json"),
            "\"resnet50\""
        );
        let onnx = ModelRef::Onnx(OnnxModel {
            onnx: "/models/m.onnx".into(),
            fnv64: "0123456789abcdef".into(),
            output: "logits".into(),
            width: Some(5),
            scores: Scores::Sigmoid,
            labels: ["a", "b", "c", "d", "e"].map(String::from).to_vec(),
            channels: Channels::Bgr,
            raw: vec!["boxes".into()],
            normalize: true,
        });
        for model in [builtin, onnx] {
            let text = serde_json::to_string(&model).expect("json");
            let back: ModelRef = serde_json::from_str(&text).expect("reads back");
            assert_eq!(back, model, "{text}");
        }
        let old: ModelRef = serde_json::from_str("\"clip_vit_b_32\"").expect("an old name");
        assert_eq!(old.builtin(), Some(ModelKind::ClipVitB32));
        // Every built-in model by its --model name.
        for kind in ModelKind::ALL {
            let text = serde_json::to_string(&ModelRef::from(kind)).expect("json");
            assert_eq!(text, format!("\"{}\"", kind.name()));
            let back: ModelRef = serde_json::from_str(&text).expect("reads back");
            assert_eq!(back.builtin(), Some(kind));
        }
    }
}
