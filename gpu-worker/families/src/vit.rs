//! What tells the Vision Transformer families apart ([`VitConfig`]):
//! torchvision's ViT, OpenAI/OpenCLIP CLIP image towers, SigLIP and
//! DINOv2, and the canonical tensors each takes ([`VitConfig::tensors`]).
//! The engines build their forward passes from it.

pub use crate::pos_embed::PosInterpolation;
pub use crate::transformer::Activation;
use crate::transformer::{EncoderShape, attention_tensors, mlp_tensors, norm_tensors};

/// How the token sequence becomes one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The class token.
    Class,
    /// The mean of the patch tokens (not class or registers).
    Mean,
    /// Class token and patch mean, concatenated (DINOv2's linear probe).
    ClassAndMean,
    /// SigLIP's multihead attention pooling head.
    Map,
}

/// Everything that tells the ViT families apart.
#[derive(Debug, Clone, PartialEq)]
pub struct VitConfig {
    /// Patch side in pixels.
    pub patch: usize,
    /// Token width.
    pub width: usize,
    /// Transformer blocks.
    pub depth: usize,
    /// Attention heads.
    pub heads: usize,
    /// Hidden width of the MLPs.
    pub mlp: usize,
    /// A class token before the patches.
    pub class_token: bool,
    /// Register tokens after the class token (no position embedding).
    pub registers: usize,
    /// Side of the checkpoint's position-embedding grid.
    pub pos_grid: usize,
    /// Side of the input images.
    pub image: usize,
    /// The patch convolution has a bias.
    pub patch_bias: bool,
    /// A LayerNorm before the first block (CLIP's `ln_pre`).
    pub pre_norm: bool,
    /// Every LayerNorm's eps.
    pub eps: f64,
    /// The MLPs' activation (a CLIP checkpoint's config beside the weights
    /// overrides it: `clip_config.rs`).
    pub activation: Activation,
    /// Per-channel scales on both residual branches (DINOv2).
    pub layer_scale: bool,
    /// How tokens become one vector.
    pub pooling: Pooling,
    /// The final LayerNorm runs on the tokens before pooling; without it
    /// the pooling reads the encoder's output (`CLIPForImageClassification`,
    /// whose head averages the patch tokens before `post_layernorm`).
    pub final_norm: bool,
    /// How position embeddings are resampled to the input grid.
    pub interpolation: PosInterpolation,
    /// Output width of the final projection (no bias), if any.
    pub projection: Option<usize>,
    /// Classes of the classifier head, if any.
    pub classes: Option<usize>,
    /// L2-normalise the output (CLIP and SigLIP embeddings).
    pub normalize: bool,
    /// Built from a Hugging Face repo's config (#42): its checkpoint may be
    /// in transformers' ViT layouts, whose LayerNorm eps the config gives
    /// (the named torchvision ViTs keep to torchvision's layout).
    pub hub: bool,
}

impl VitConfig {
    /// Tokens before the patches.
    pub fn prefix(&self) -> usize {
        usize::from(self.class_token) + self.registers
    }

    /// Length of the output vector.
    pub fn feature_dim(&self) -> usize {
        match (self.projection, self.pooling) {
            (Some(e), _) => e,
            (None, Pooling::ClassAndMean) => 2 * self.width,
            (None, _) => self.width,
        }
    }

    /// Every tensor the model needs, canonical name and shape (PyTorch's
    /// conventions: Linear weights `[out, in]`).
    pub fn tensors(&self) -> Vec<(String, Vec<usize>)> {
        let (d, p) = (self.width, self.patch);
        let mut t: Vec<(String, Vec<usize>)> = vec![("patch.weight".into(), vec![d, 3, p, p])];
        if self.patch_bias {
            t.push(("patch.bias".into(), vec![d]));
        }
        if self.class_token {
            t.push(("cls".into(), vec![d]));
        }
        if self.registers > 0 {
            t.push(("reg".into(), vec![self.registers, d]));
        }
        let pos_tokens = usize::from(self.class_token) + self.pos_grid * self.pos_grid;
        t.push(("pos".into(), vec![pos_tokens, d]));
        if self.pre_norm {
            t.extend(norm_tensors("pre_norm", d));
        }
        t.extend(self.encoder().tensors());
        if self.final_norm {
            t.extend(norm_tensors("norm", d));
        }
        if self.pooling == Pooling::Map {
            t.push(("map.probe".into(), vec![d]));
            t.extend(attention_tensors("map", d));
            t.extend(norm_tensors("map.norm", d));
            t.extend(mlp_tensors("map", d, (self.mlp, self.mlp)));
        }
        if let Some(e) = self.projection {
            t.push(("proj.weight".into(), vec![e, d]));
        }
        if let Some(k) = self.classes {
            // The head reads the pooled tokens: DINOv2's classifier the
            // class token and the patch mean, concatenated.
            let pooled = if self.pooling == Pooling::ClassAndMean {
                2 * d
            } else {
                d
            };
            t.push(("head.weight".into(), vec![k, pooled]));
            t.push(("head.bias".into(), vec![k]));
        }
        t
    }

    /// The blocks' shape.
    pub fn encoder(&self) -> EncoderShape {
        EncoderShape {
            width: self.width,
            depth: self.depth,
            heads: self.heads,
            mlp: self.mlp,
            eps: self.eps,
            activation: self.activation,
            layer_scale: self.layer_scale,
            causal: false,
        }
    }
}
