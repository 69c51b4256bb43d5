//! The text towers' shapes: CLIP's text transformer and SigLIP's text
//! model ([`TextConfig`]), the canonical tensors each takes, and where a
//! checkpoint holds them (`layout/`'s text places). Every engine's text
//! tower loads through [`with_text_tensors`].

use std::path::Path;

use pipeline_core::{Family, HubText, ModelKind};

use crate::checkpoint::Checkpoint;
use crate::clip_config::{self, Tower};
use crate::layout::{Layout, LayoutRules};
use crate::tensors::Tensors;
use crate::transformer::{Activation, EncoderShape, norm_tensors};
use crate::weights_error::WeightsError;

/// How a text tower turns its tokens into one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextPooling {
    /// The end-of-text token: the first position of the highest id (CLIP).
    EndOfText,
    /// The last position of the padded context (SigLIP).
    Last,
}

/// Which upstream tokenizer a text tower was trained with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerFamily {
    /// CLIP's byte-level BPE: open_clip's built in, or a `tokenizer.json`.
    Clip,
    /// SigLIP's SentencePiece: `spiece.model`, or a `tokenizer.json`.
    Siglip,
}

/// Everything that tells the text towers apart.
#[derive(Debug, Clone, PartialEq)]
pub struct TextConfig {
    /// Token ids the embedding table holds.
    pub vocab: usize,
    /// Tokens in a context (inputs are padded or cut to it).
    pub context: usize,
    /// Token width.
    pub width: usize,
    /// Transformer blocks.
    pub depth: usize,
    /// Attention heads.
    pub heads: usize,
    /// Hidden width of the MLPs.
    pub mlp: usize,
    /// Every LayerNorm's eps.
    pub eps: f64,
    /// The MLPs' activation (a CLIP checkpoint's config beside the weights
    /// overrides it: `clip_config.rs`).
    pub activation: Activation,
    /// Causal attention (CLIP).
    pub causal: bool,
    /// How tokens become one vector.
    pub pooling: TextPooling,
    /// Output width of the final projection: `text_projection` without a
    /// bias (CLIP) or SigLIP's `head` with one.
    pub projection: usize,
    /// The projection has a bias (SigLIP's head).
    pub projection_bias: bool,
    /// The tokenizer it was trained with.
    pub tokenizer: TokenizerFamily,
}

impl TextConfig {
    /// The text tower of a named model: OpenAI CLIP's (QuickGELU, as the
    /// image towers here), or SigLIP's (`siglip-base-patch16-224`:
    /// transformers' `SiglipTextConfig` defaults).
    pub fn of(kind: ModelKind) -> Option<Self> {
        let clip = |width: usize, heads: usize, projection: usize| Self {
            vocab: 49408,
            context: 77,
            width,
            depth: 12,
            heads,
            mlp: 4 * width,
            eps: 1e-5,
            activation: Activation::QuickGelu,
            causal: true,
            pooling: TextPooling::EndOfText,
            projection,
            projection_bias: false,
            tokenizer: TokenizerFamily::Clip,
        };
        match kind {
            ModelKind::ClipVitB32 | ModelKind::ClipVitB16 => Some(clip(512, 8, 512)),
            ModelKind::ClipVitL14 => Some(clip(768, 12, 768)),
            ModelKind::SiglipBasePatch16_224 => Some(Self {
                vocab: 32000,
                context: 64,
                width: 768,
                depth: 12,
                heads: 12,
                mlp: 3072,
                eps: 1e-6,
                activation: Activation::GeluTanh,
                causal: false,
                pooling: TextPooling::Last,
                projection: 768,
                projection_bias: true,
                tokenizer: TokenizerFamily::Siglip,
            }),
            _ => None,
        }
    }

    /// The text tower a hub CLIP or SigLIP repo's config describes
    /// (`pipeline_core::hub_text`): the family's attention, pooling,
    /// projection and tokenizer at the config's sizes.
    pub fn of_hub(text: &HubText) -> Self {
        let clip = text.family == Family::Clip;
        Self {
            vocab: text.vocab,
            context: text.context,
            width: text.width,
            depth: text.depth,
            heads: text.heads,
            mlp: text.mlp,
            eps: text.eps,
            activation: text.activation.into(),
            causal: clip,
            pooling: if clip {
                TextPooling::EndOfText
            } else {
                TextPooling::Last
            },
            projection: text.projection,
            projection_bias: !clip,
            tokenizer: if clip {
                TokenizerFamily::Clip
            } else {
                TokenizerFamily::Siglip
            },
        }
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
            layer_scale: false,
            causal: self.causal,
        }
    }

    /// Every tensor the tower needs, canonical name and shape.
    pub fn tensors(&self) -> Vec<(String, Vec<usize>)> {
        let d = self.width;
        let mut t = vec![
            ("tok".to_owned(), vec![self.vocab, d]),
            ("pos".to_owned(), vec![self.context, d]),
        ];
        t.extend(self.encoder().tensors());
        t.extend(norm_tensors("norm", d));
        t.push(("proj.weight".into(), vec![self.projection, d]));
        if self.projection_bias {
            t.push(("proj.bias".into(), vec![self.projection]));
        }
        t
    }
}
/// `use_` on the text tower's canonical tensors in the checkpoint at
/// `path`, with `config` as the checkpoint runs it (a CLIP config beside
/// the weights names the activation). Every engine's text tower loads
/// through here.
pub fn with_text_tensors<R>(
    mut config: TextConfig,
    name: &str,
    path: &Path,
    use_: impl FnOnce(TextConfig, &Tensors<'_>) -> Result<R, WeightsError>,
) -> Result<R, WeightsError> {
    let checkpoint = Checkpoint::open(path)?;
    let layout = text_layout(name, &checkpoint)?;
    if let Some(activation) = clip_config::activation(path, layout, Tower::Text, name)? {
        config.activation = activation;
    }
    let tensors = Tensors::check_text(&checkpoint, layout, name, config.tensors())?;
    use_(config, &tensors)
}

/// The first position of the highest id: PyTorch's `argmax`.
pub fn first_max(ids: &[u32]) -> usize {
    let mut at = 0;
    for (i, &id) in ids.iter().enumerate() {
        if id > ids[at] {
            at = i;
        }
    }
    at
}

/// Whether the checkpoint at `path` is in a Hugging Face layout (its
/// tokenizer is then the `tokenizer.json` beside it). Reads names only.
pub fn checkpoint_is_hugging_face(path: &Path) -> Result<bool, WeightsError> {
    let checkpoint = Checkpoint::open(path)?;
    Ok(matches!(
        text_layout("the model", &checkpoint),
        Ok(Layout::HfClip | Layout::HfSiglip)
    ))
}

/// The layout of `checkpoint` if it holds a text tower this tool reads.
fn text_layout(name: &str, checkpoint: &Checkpoint) -> Result<Layout, WeightsError> {
    let mismatch = |problem: &str| WeightsError::Mismatch {
        path: checkpoint.path().to_path_buf(),
        model: name.to_owned(),
        problem: problem.to_owned(),
    };
    let has_text = |layout: Layout| checkpoint.has(&layout.text_marker());
    match Layout::detect(checkpoint) {
        Some(layout @ (Layout::OpenClip | Layout::HfClip | Layout::HfSiglip))
            if has_text(layout) =>
        {
            Ok(layout)
        }
        Some(
            layout @ (Layout::OpenClip | Layout::HfClip | Layout::HfSiglip | Layout::HfSiglipBare),
        ) => Err(mismatch(&format!(
            "it is {layout} checkpoint without a text tower (a vision tower alone); \
                 text needs the full model's checkpoint"
        ))),
        Some(layout) => Err(mismatch(&format!(
            "it is {layout} checkpoint, which has no text tower"
        ))),
        None if checkpoint.has(&Layout::OpenClip.text_marker()) => Ok(Layout::OpenClip),
        None if checkpoint.has(&Layout::HfClip.text_marker()) => {
            if checkpoint.has("text_projection.weight") {
                Ok(Layout::HfClip)
            } else {
                Ok(Layout::HfSiglip)
            }
        }
        None => Err(mismatch(
            "it holds no CLIP or SigLIP text tower this tool knows",
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Model → layout → tensor name → shape, as upstream code builds them.
    type Shapes = BTreeMap<String, BTreeMap<String, BTreeMap<String, Vec<usize>>>>;

    /// The full-size CLIP and SigLIP text towers fit the names and shapes
    /// open_clip and transformers build (`named_shapes.json`) in every
    /// layout that holds a text tower; a vision tower alone is refused.
    #[test]
    fn text_towers_fit_their_upstream_checkpoints_at_full_size() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/vectors/families/named_shapes.json"
        );
        let text = std::fs::read_to_string(path).expect("named_shapes.json is committed");
        let all: Shapes = serde_json::from_str(&text).expect("named_shapes.json parses");
        let mut checked = 0;
        for kind in [
            ModelKind::ClipVitB32,
            ModelKind::ClipVitB16,
            ModelKind::ClipVitL14,
            ModelKind::SiglipBasePatch16_224,
        ] {
            let config = TextConfig::of(kind).expect("CLIP and SigLIP have a text tower");
            assert_eq!(config.projection, kind.feature_dim(), "{kind}");
            for (layout, shapes) in &all[kind.name()] {
                let checkpoint = Checkpoint::from_shapes(layout, shapes.clone());
                let found = text_layout(kind.name(), &checkpoint);
                if layout.ends_with("_vision") {
                    assert!(found.is_err(), "{kind}: a vision tower alone has no text");
                    continue;
                }
                let found = found.unwrap_or_else(|e| panic!("{kind} {layout}: {e}"));
                if let Err(e) =
                    Tensors::check_text(&checkpoint, found, kind.name(), config.tensors())
                {
                    panic!("{kind} in the {layout} layout: {e}");
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 7, "three CLIPs in two layouts, SigLIP in one");
    }
}
