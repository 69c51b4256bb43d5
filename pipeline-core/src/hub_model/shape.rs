//! The model description's types: a hub model's family and sizes
//! ([`HubShape`]), what a repo's `config.json` says ([`HubConfig`]) and
//! the resolved model a worker builds ([`HubModel`]).

use serde::{Deserialize, Serialize};

use crate::model::{Family, Scores};

/// The MLP activation of a transformer, as transformers' `hidden_act`
/// names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HubActivation {
    /// Exact GELU (`gelu`).
    Gelu,
    /// GELU's tanh approximation (`gelu_pytorch_tanh`, `gelu_new`).
    GeluTanh,
    /// OpenAI's `x·σ(1.702x)` (`quick_gelu`).
    QuickGelu,
    /// DINOv2's gated MLP (`use_swiglu_ffn`, the giant): the first layer
    /// twice as wide, `silu(gate) · up` of its two halves into the second.
    SwiGlu,
}

/// A transformer image tower's family and sizes, from its config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HubShape {
    /// `Vit`, `Dinov2`, `Clip` or `Siglip`.
    pub family: Family,
    /// Patch side in pixels.
    pub patch: usize,
    /// Token width (`hidden_size`).
    pub width: usize,
    /// Blocks (`num_hidden_layers`).
    pub depth: usize,
    /// Attention heads.
    pub heads: usize,
    /// The MLPs' hidden width.
    pub mlp: usize,
    /// Side of the checkpoint's position-embedding grid
    /// (`image_size / patch_size`).
    pub pos_grid: usize,
    /// Side of the images the model is fed (the preprocessing's crop).
    pub image: usize,
    /// Every LayerNorm's eps.
    pub eps: f64,
    /// The MLPs' activation.
    pub activation: HubActivation,
    /// Output width of CLIP's projection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<usize>,
    /// Classes of a classifier head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<usize>,
    /// A ConvNeXt's channels per stage (`hidden_sizes`); empty for the
    /// transformers, whose sizes are the fields above. A ConvNeXt's `eps`
    /// is its final LayerNorm's (`layer_norm_eps`: the others' is 1e-6 as
    /// upstream's), its `width` the last stage's, its `depth` all blocks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dims: Vec<usize>,
    /// A ConvNeXt's or ResNet's blocks per stage (`depths`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depths: Vec<usize>,
    /// What a ResNet's config says beside its stage widths (`dims`) and
    /// depths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resnet: Option<HubResNet>,
    /// A DINOv2 with registers (`dinov2_with_registers`): its register
    /// tokens, after the class token, without position embeddings; its
    /// position embeddings are resampled antialiased, as its transformers
    /// class does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registers: Option<usize>,
}

/// A transformers `ResNetConfig`'s blocks: the network is torchvision's
/// ResNet at these sizes and strides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HubResNet {
    /// The stem convolution's width (`embedding_size`).
    pub stem: usize,
    /// Bottleneck blocks (`layer_type: bottleneck`), else basic ones.
    pub bottleneck: bool,
    /// The first stage strides by 2 (`downsample_in_first_stage`).
    pub downsample_in_first_stage: bool,
    /// A bottleneck strides in its first 1×1 convolution
    /// (`downsample_in_bottleneck`), not in its 3×3.
    pub downsample_in_bottleneck: bool,
    /// A timm repo's ResNet (torchvision's network, by torchvision's
    /// tensor names), not transformers'.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timm: bool,
}

// eps is never NaN: it is read from a config and checked positive.
impl Eq for HubShape {}

impl HubShape {
    /// Length of the embedding (`--task embed`).
    pub fn feature_dim(&self) -> usize {
        match (self.projection, self.family) {
            (Some(e), _) => e,
            (None, Family::Dinov2) if self.classes.is_some() => 2 * self.width,
            (None, _) => self.width,
        }
    }
}

/// A CLIP or SigLIP repo's text tower, from its config's `text_config`
/// (`text.rs`): CLIP's causal transformer pooling its end token, or
/// SigLIP's pooling its last, each with its projection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HubText {
    /// `Clip` or `Siglip`: the tokenizer, attention and pooling.
    pub family: Family,
    /// Token ids the embedding table holds (`vocab_size`).
    pub vocab: usize,
    /// Tokens in a context (`max_position_embeddings`).
    pub context: usize,
    /// Token width (`hidden_size`).
    pub width: usize,
    /// Blocks (`num_hidden_layers`).
    pub depth: usize,
    /// Attention heads.
    pub heads: usize,
    /// The MLPs' hidden width (`intermediate_size`).
    pub mlp: usize,
    /// Every LayerNorm's eps.
    pub eps: f64,
    /// The MLPs' activation.
    pub activation: HubActivation,
    /// Output width: CLIP's `projection_dim`, SigLIP's `projection_size`.
    pub projection: usize,
}

/// A Hugging Face model, resolved once by the coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HubModel {
    /// The repo id as given (`org/name`).
    pub repo: String,
    /// The commit the files are from (40 hex digits), so that resume
    /// refuses a model that changed.
    pub revision: String,
    /// The weight file, in the cache's snapshot of that commit.
    pub weights: std::path::PathBuf,
    /// The family and its sizes.
    pub shape: HubShape,
    /// A classifier's class names in class order (`id2label`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// How a classifier's logits become scores: softmax, or a sigmoid per
    /// label for `problem_type: multi_label_classification`.
    #[serde(default)]
    pub scores: Scores,
}

/// What a repo's `config.json` says of its model: the shape (with `image`
/// set to the config's own image size), its labels and their scoring.
#[derive(Debug, Clone, PartialEq)]
pub struct HubConfig {
    /// Family and sizes.
    pub shape: HubShape,
    /// Class names, in class order, where the checkpoint is a classifier.
    pub labels: Vec<String>,
    /// Softmax, or sigmoid for a multi-label classifier.
    pub scores: Scores,
    /// The config's `image_size`.
    pub image_size: usize,
}
