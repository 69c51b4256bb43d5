//! The built-in models, what each computes, and its preprocessing defaults.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::preprocess::PreprocessSpec;

/// A built-in model architecture. Each loads its upstream checkpoints as
/// published (see `pipeline models`).
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
    /// torchvision `vit_b_16`.
    VitB16,
    /// torchvision `vit_b_32`.
    VitB32,
    /// torchvision `vit_l_16`.
    VitL16,
    /// torchvision `convnext_tiny`.
    ConvnextTiny,
    /// torchvision `convnext_small`.
    ConvnextSmall,
    /// torchvision `convnext_base`.
    ConvnextBase,
    /// OpenAI CLIP ViT-B/32 image tower.
    ClipVitB32,
    /// OpenAI CLIP ViT-B/16 image tower.
    ClipVitB16,
    /// OpenAI CLIP ViT-L/14 image tower.
    ClipVitL14,
    /// Google SigLIP base, patch 16, 224 px.
    #[serde(rename = "siglip_base_patch16_224")]
    SiglipBasePatch16_224,
    /// DINOv2 ViT-S/14.
    Dinov2Vits14,
    /// DINOv2 ViT-B/14.
    Dinov2Vitb14,
    /// DINOv2 ViT-L/14.
    Dinov2Vitl14,
}

/// A group of models that share an architecture and a checkpoint family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// The test CNN.
    Tiny,
    /// torchvision ResNets.
    Resnet,
    /// EfficientNet-Lite.
    EfficientnetLite,
    /// torchvision Vision Transformers.
    Vit,
    /// torchvision ConvNeXts.
    Convnext,
    /// CLIP image towers.
    Clip,
    /// SigLIP image towers.
    Siglip,
    /// DINOv2 backbones.
    Dinov2,
}

impl ModelKind {
    /// Every model, in the order `--help` and `pipeline models` list them.
    pub const ALL: [ModelKind; 20] = [
        Self::Tiny,
        Self::Resnet18,
        Self::Resnet34,
        Self::Resnet50,
        Self::Resnet101,
        Self::Resnet152,
        Self::EfficientnetLite0,
        Self::VitB16,
        Self::VitB32,
        Self::VitL16,
        Self::ConvnextTiny,
        Self::ConvnextSmall,
        Self::ConvnextBase,
        Self::ClipVitB32,
        Self::ClipVitB16,
        Self::ClipVitL14,
        Self::SiglipBasePatch16_224,
        Self::Dinov2Vits14,
        Self::Dinov2Vitb14,
        Self::Dinov2Vitl14,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// The model's family.
    pub fn family(self) -> Family {
        self.spec().family
    }

    /// Whether `--task classify` works with the checkpoint's own head.
    pub fn classifies(self) -> bool {
        self.spec().classifier
    }

    /// Whether `--task classify --classes FILE` works: zero-shot
    /// classification against text embeddings (CLIP, SigLIP).
    pub fn zero_shot(self) -> bool {
        self.family().zero_shot()
    }

    /// Preprocessing the model was trained with, as its upstream runs it:
    /// torchvision's weights' transforms, open_clip's transform, Hugging
    /// Face's SigLIP image processor, DINOv2's evaluation transform.
    pub fn default_preprocess(self) -> PreprocessSpec {
        self.spec().preprocess.clone()
    }

    /// The Hugging Face repo whose checkpoint this name loads, where one
    /// is published in a layout it reads: `--model` with that id runs the
    /// same network from the Hugging Face cache (#42) (a tower as an
    /// embedder: zero-shot `--classes` needs the name and `--weights`).
    /// The ResNets' are timm's copies of torchvision's weights (`tv_in1k`,
    /// torchvision's names and transform); torchvision's ViTs and
    /// ConvNeXts, trained by torchvision, and EfficientNet-Lite0 have none.
    pub fn hub_id(self) -> Option<&'static str> {
        match self {
            Self::Resnet18 => Some("timm/resnet18.tv_in1k"),
            Self::Resnet34 => Some("timm/resnet34.tv_in1k"),
            Self::Resnet50 => Some("timm/resnet50.tv_in1k"),
            Self::Resnet101 => Some("timm/resnet101.tv_in1k"),
            Self::Resnet152 => Some("timm/resnet152.tv_in1k"),
            Self::ClipVitB32 => Some("openai/clip-vit-base-patch32"),
            Self::ClipVitB16 => Some("openai/clip-vit-base-patch16"),
            Self::ClipVitL14 => Some("openai/clip-vit-large-patch14"),
            Self::SiglipBasePatch16_224 => Some("google/siglip-base-patch16-224"),
            Self::Dinov2Vits14 => Some("facebook/dinov2-small"),
            Self::Dinov2Vitb14 => Some("facebook/dinov2-base"),
            Self::Dinov2Vitl14 => Some("facebook/dinov2-large"),
            _ => None,
        }
    }

    /// Length of the embedding (`--task embed`): the pooled penultimate
    /// features of classifiers, the projected embedding of CLIP, SigLIP's
    /// pooled output, DINOv2's class token.
    pub fn feature_dim(self) -> usize {
        self.spec().embedding_dim
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown model name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown model `{0}`; expected one of: {names}", names = ModelKind::ALL.map(ModelKind::name).join(", "))]
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

/// Which tokens of a ViT backbone (DINOv2) make the embedding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmbedPooling {
    /// The class token after the final LayerNorm (DINOv2's default).
    Cls,
    /// The mean of the patch tokens after the final LayerNorm.
    Mean,
    /// Both, concatenated (DINOv2's linear-probe features): twice as long.
    ClsMean,
}

impl FromStr for EmbedPooling {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cls" => Ok(Self::Cls),
            "mean" => Ok(Self::Mean),
            "cls+mean" => Ok(Self::ClsMean),
            other => Err(format!(
                "unknown pooling `{other}`; expected cls, mean or cls+mean"
            )),
        }
    }
}

impl ModelKind {
    /// Length of the embedding with `pooling` (which only DINOv2 takes).
    pub fn embedding_dim(self, pooling: Option<EmbedPooling>) -> usize {
        match pooling {
            Some(EmbedPooling::ClsMean) => 2 * self.feature_dim(),
            _ => self.feature_dim(),
        }
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
    /// Every output of an ONNX model, each image's slice as the model
    /// gives it (a detector's boxes, for the user to decode).
    Raw,
}

/// One class of a classification result.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClassScore {
    /// Class index (ImageNet order for the built-in models).
    pub class: u32,
    /// Probability: softmax over the classes, or for SigLIP's zero-shot
    /// classification each class's own sigmoid.
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
    /// `--task raw`: the image's slice of each output, in the model's
    /// output order.
    Outputs(Vec<OutputArray>),
}

/// An image's slice of one model output (`--task raw`): its name, shape
/// (the batch axis taken off) and values in row-major order. Written in
/// JSON as `{"name", "shape", "dtype", "values"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputArray {
    /// The output's name in the graph.
    pub name: String,
    /// Its dimensions for one image.
    pub shape: Vec<u32>,
    /// Its values.
    #[serde(flatten)]
    pub values: ArrayValues,
}

/// The values of an [`OutputArray`]: floats (f16 and f64 outputs as f32)
/// or integers (every integer and boolean output as i64).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dtype", content = "values", rename_all = "snake_case")]
pub enum ArrayValues {
    /// Floats (in JSON, NaN and the infinities as the strings `"NaN"`,
    /// `"Infinity"` and `"-Infinity"`, which JSON's numbers cannot hold).
    F32(#[serde(with = "finite_or_text")] Vec<f32>),
    /// Integers.
    I64(Vec<i64>),
}

/// f32 values in JSON: numbers, and the non-finite ones as text (a
/// detector's masked `-inf` must read back as itself, not as `null`).
mod finite_or_text {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize)]
    #[serde(untagged)]
    enum Value<'a> {
        Number(f32),
        Text(&'a str),
    }

    pub(super) fn serialize<S: Serializer>(values: &[f32], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(values.iter().map(|&v| match v {
            v if v.is_finite() => Value::Number(v),
            v if v.is_nan() => Value::Text("NaN"),
            v if v > 0.0 => Value::Text("Infinity"),
            _ => Value::Text("-Infinity"),
        }))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Owned {
            Number(f32),
            Text(String),
        }
        Vec::<Owned>::deserialize(d)?
            .into_iter()
            .map(|v| match v {
                Owned::Number(x) => Ok(x),
                Owned::Text(t) => match t.as_str() {
                    "NaN" => Ok(f32::NAN),
                    "Infinity" => Ok(f32::INFINITY),
                    "-Infinity" => Ok(f32::NEG_INFINITY),
                    other => Err(serde::de::Error::custom(format!(
                        "{other:?} is not a number"
                    ))),
                },
            })
            .collect()
    }
}

impl ArrayValues {
    /// How many values.
    pub fn len(&self) -> usize {
        match self {
            Self::F32(v) => v.len(),
            Self::I64(v) => v.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preprocess::Normalize;

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
        assert_eq!(
            "SigLIP-base-patch16-224".parse::<ModelKind>(),
            Ok(ModelKind::SiglipBasePatch16_224)
        );
        let err = "vgg16"
            .parse::<ModelKind>()
            .expect_err("vgg16 is not a model")
            .to_string();
        assert!(
            err.contains("dinov2_vitl14") && err.contains("tiny"),
            "{err}"
        );
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

/// The float type a model computes in (`--precision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// f16 on a GPU whose Vulkan driver computes in it (tensor cores where
    /// offered), f32 on the CPU and on Mesa's lavapipe.
    #[default]
    Auto,
    /// f32 everywhere.
    F32,
    /// f16 weights and activations; softmax and the read-back in f32.
    F16,
    /// bf16 weights and activations; softmax and the read-back in f32.
    Bf16,
}

impl FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "f32" | "fp32" | "float32" => Ok(Self::F32),
            "f16" | "fp16" | "float16" | "half" => Ok(Self::F16),
            "bf16" | "bfloat16" => Ok(Self::Bf16),
            other => Err(format!(
                "unknown precision `{other}`; expected auto, f32, f16 or bf16"
            )),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
        })
    }
}

/// How a classifier's output row becomes class scores (`--scores`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scores {
    /// One class per image: softmax over the row.
    #[default]
    Softmax,
    /// Multi-label: each value's sigmoid.
    Sigmoid,
    /// The values as the model gives them.
    Raw,
}
