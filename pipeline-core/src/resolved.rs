//! What the coordinator reads from a model's weight file once, before any
//! worker starts (#42 item 7): the layout its tensor names are in, the
//! image tower's activation a CLIP config beside it names, and its
//! zero-shot logit scale and bias. Workers and
//! engines take these from their [`crate::WorkerConfig`] and detect,
//! read and decide neither again: every engine's network is built from
//! the same value, whatever named the model (a built-in name with
//! `--weights`, or a hub repo's snapshot).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::hub_model::HubActivation;
use crate::preprocess::CropRounding;

/// A published way of naming a model's tensors, told from a checkpoint's
/// names (`gpu_worker`'s `layout/` holds each one's rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointLayout {
    /// torchvision `VisionTransformer` (`vit_b_16`, …).
    TorchvisionVit,
    /// torchvision `ConvNeXt`.
    TorchvisionConvNext,
    /// OpenCLIP / OpenAI CLIP (`visual.*`, the text tower beside it).
    OpenClip,
    /// Hugging Face `CLIPModel` or `CLIPVisionModel(WithProjection)`.
    HfClip,
    /// Hugging Face `CLIPVisionModel` as transformers 5 saves it (no
    /// `vision_model.` prefix).
    HfClipBare,
    /// Hugging Face `SiglipModel`, or `SiglipVisionModel` as transformers 4
    /// saved it (`vision_model.` prefix).
    HfSiglip,
    /// Hugging Face `SiglipVisionModel` as transformers 5 saves it (no
    /// `vision_model.` prefix).
    HfSiglipBare,
    /// Hugging Face `Dinov2Model`.
    HfDinov2,
    /// DINOv2's torch-hub `.pth` (facebookresearch/dinov2).
    HubDinov2,
    /// Hugging Face `ViTForImageClassification` (`vit.` prefix, a
    /// `classifier`).
    HfVit,
    /// Hugging Face `ViTModel` (no prefix; its `pooler` is not used).
    HfVitBare,
    /// Hugging Face `Dinov2ForImageClassification` (`dinov2.` prefix, a
    /// `classifier` over the class token and the patch mean).
    HfDinov2Classifier,
    /// Hugging Face `Dinov2WithRegistersForImageClassification`
    /// (`dinov2_with_registers.` prefix, a `classifier`).
    HfDinov2RegistersClassifier,
    /// Hugging Face `ConvNextForImageClassification` (`convnext.` prefix,
    /// a `classifier`): torchvision's ConvNeXt under other names, the
    /// layer scales `[C]` where torchvision's are `[C, 1, 1]`.
    HfConvNext,
    /// Hugging Face `ConvNextModel`: the same without the `convnext.`
    /// prefix and the head (its `layernorm` is the pooled features').
    HfConvNextBare,
    /// timm's `ConvNeXt` (`stem`, `stages.S.blocks.J`, `head`): the same
    /// network, its layer scales `gamma` flat.
    TimmConvNext,
    /// timm's plain `VisionTransformer` (`patch_embed.proj`,
    /// `blocks.N.attn.qkv`, `norm`, `head`): torchvision's ViT, named as
    /// DINOv2's torch-hub file is, with no mask token or layer scales.
    TimmVit,
}

impl fmt::Display for CheckpointLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::TorchvisionVit => "a torchvision ViT",
            Self::TorchvisionConvNext => "a torchvision ConvNeXt",
            Self::OpenClip => "an OpenCLIP/OpenAI CLIP",
            Self::HfClip | Self::HfClipBare => "a Hugging Face CLIP",
            Self::HfSiglip | Self::HfSiglipBare => "a Hugging Face SigLIP",
            Self::HfDinov2 => "a Hugging Face DINOv2",
            Self::HubDinov2 => "a torch-hub DINOv2",
            Self::HfVit | Self::HfVitBare => "a Hugging Face ViT",
            Self::HfDinov2Classifier | Self::HfDinov2RegistersClassifier => {
                "a Hugging Face DINOv2 classifier"
            }
            Self::HfConvNext | Self::HfConvNextBare => "a Hugging Face ConvNeXt",
            Self::TimmConvNext => "a timm ConvNeXt",
            Self::TimmVit => "a timm ViT",
        })
    }
}

impl CheckpointLayout {
    /// How the upstream that publishes this layout rounds its centre crop:
    /// checkpoints are used with their upstream's preprocessing, and HF's
    /// image processors floor an odd margin where torchvision rounds it.
    pub fn crop_rounding(self) -> CropRounding {
        match self {
            Self::TorchvisionVit
            | Self::TorchvisionConvNext
            | Self::OpenClip
            | Self::HubDinov2
            | Self::TimmConvNext
            | Self::TimmVit => CropRounding::HalfEven,
            Self::HfClip
            | Self::HfClipBare
            | Self::HfSiglip
            | Self::HfSiglipBare
            | Self::HfDinov2
            | Self::HfVit
            | Self::HfVitBare
            | Self::HfDinov2Classifier
            | Self::HfDinov2RegistersClassifier
            | Self::HfConvNext
            | Self::HfConvNextBare => CropRounding::Floor,
        }
    }
}

/// The learned temperature and bias of zero-shot scoring, as checkpoints
/// store them: the scale as its logarithm.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LogitParams {
    /// `logit_scale`; the logits are multiplied by its exponential.
    pub log_scale: f32,
    /// `logit_bias`, added after scaling (SigLIP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bias: Option<f32>,
}

/// A weight file as the coordinator read it: what every engine builds the
/// network from. The default is seeded weights, or a CNN that loads by its
/// own field names (no layout).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ResolvedWeights {
    /// The layout the file's tensor names are in (the ViTs and ConvNeXt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<CheckpointLayout>,
    /// The image tower's activation, where a CLIP config beside the
    /// weights names one that differs from the family's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation: Option<HubActivation>,
    /// The checkpoint's `logit_scale` and `logit_bias`, where it has them
    /// (CLIP, SigLIP): zero-shot scoring's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logit: Option<LogitParams>,
}

impl ResolvedWeights {
    /// How the layout's upstream rounds its centre crop (torchvision's
    /// half to even where there is no layout: the CNNs load torchvision's).
    pub fn crop_rounding(&self) -> CropRounding {
        self.layout
            .map_or(CropRounding::HalfEven, CheckpointLayout::crop_rounding)
    }
}
