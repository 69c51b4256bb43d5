//! The pre-norm transformer encoder the image and text towers share, as
//! shapes: its MLP activation, its blocks' widths, and the canonical
//! tensors under a prefix (`blocks.3.qkv.weight`) that the checkpoint
//! layouts map (`layout/`).

/// The MLP's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `x·Φ(x)` with the exact erf.
    Gelu,
    /// GELU's tanh approximation (SigLIP's `gelu_pytorch_tanh`).
    GeluTanh,
    /// OpenAI CLIP's `x·σ(1.702x)`.
    QuickGelu,
    /// DINOv2 giant's gated MLP: `fc1` twice as wide as the hidden width,
    /// `silu(gate) · up` of its two halves (gate first) into `fc2`.
    SwiGlu,
}

impl Activation {
    /// `fc1`'s outputs for an MLP `hidden` wide.
    pub fn fc1_width(self, hidden: usize) -> usize {
        if self == Self::SwiGlu {
            2 * hidden
        } else {
            hidden
        }
    }
}

impl From<pipeline_core::HubActivation> for Activation {
    /// A hub config's `hidden_act`.
    fn from(act: pipeline_core::HubActivation) -> Self {
        match act {
            pipeline_core::HubActivation::Gelu => Self::Gelu,
            pipeline_core::HubActivation::GeluTanh => Self::GeluTanh,
            pipeline_core::HubActivation::QuickGelu => Self::QuickGelu,
            pipeline_core::HubActivation::SwiGlu => Self::SwiGlu,
        }
    }
}

impl From<Activation> for pipeline_core::HubActivation {
    /// As a model description holds it.
    fn from(act: Activation) -> Self {
        match act {
            Activation::Gelu => Self::Gelu,
            Activation::GeluTanh => Self::GeluTanh,
            Activation::QuickGelu => Self::QuickGelu,
            Activation::SwiGlu => Self::SwiGlu,
        }
    }
}

/// The shape of an encoder: what its tensors and forward pass need.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EncoderShape {
    /// Token width.
    pub width: usize,
    /// Blocks.
    pub depth: usize,
    /// Attention heads.
    pub heads: usize,
    /// Hidden width of the MLPs.
    pub mlp: usize,
    /// Every LayerNorm's eps.
    pub eps: f64,
    /// The MLPs' activation.
    pub activation: Activation,
    /// Per-channel scales on both residual branches (DINOv2).
    pub layer_scale: bool,
    /// Each token attends only to itself and the tokens before it.
    pub causal: bool,
}

/// `prefix.qkv` and `prefix.out`: a fused q/k/v projection and the output
/// projection, canonical names and shapes.
pub fn attention_tensors(prefix: &str, d: usize) -> Vec<(String, Vec<usize>)> {
    vec![
        (format!("{prefix}.qkv.weight"), vec![3 * d, d]),
        (format!("{prefix}.qkv.bias"), vec![3 * d]),
        (format!("{prefix}.out.weight"), vec![d, d]),
        (format!("{prefix}.out.bias"), vec![d]),
    ]
}

/// `prefix.fc1` and `prefix.fc2` of an MLP `f` wide, canonical names and
/// shapes (`fc1` is `f1` wide: `f`, or `2f` gated).
pub fn mlp_tensors(prefix: &str, d: usize, (f1, f): (usize, usize)) -> Vec<(String, Vec<usize>)> {
    vec![
        (format!("{prefix}.fc1.weight"), vec![f1, d]),
        (format!("{prefix}.fc1.bias"), vec![f1]),
        (format!("{prefix}.fc2.weight"), vec![d, f]),
        (format!("{prefix}.fc2.bias"), vec![d]),
    ]
}

/// A LayerNorm's canonical tensors.
pub fn norm_tensors(prefix: &str, d: usize) -> Vec<(String, Vec<usize>)> {
    vec![
        (format!("{prefix}.weight"), vec![d]),
        (format!("{prefix}.bias"), vec![d]),
    ]
}

impl EncoderShape {
    /// Every block's tensors (`blocks.{i}.…`), canonical names and shapes.
    pub fn tensors(&self) -> Vec<(String, Vec<usize>)> {
        let (d, f) = (self.width, self.mlp);
        let mut t = Vec::new();
        for i in 0..self.depth {
            let b = format!("blocks.{i}");
            t.extend(norm_tensors(&format!("{b}.norm1"), d));
            t.extend(attention_tensors(&b, d));
            if self.layer_scale {
                t.push((format!("{b}.ls1"), vec![d]));
            }
            t.extend(norm_tensors(&format!("{b}.norm2"), d));
            t.extend(mlp_tensors(&b, d, (self.activation.fc1_width(f), f)));
            if self.layer_scale {
                t.push((format!("{b}.ls2"), vec![d]));
            }
        }
        t
    }
}
