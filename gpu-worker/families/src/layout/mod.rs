//! Published checkpoint layouts, told apart by their tensor names, and how
//! each names the tensors of our models.
//!
//! A model asks for its tensors by canonical name (`blocks.3.qkv.weight`);
//! a layout's rules say where that tensor is in the file: one key, three
//! keys to stack (HF's separate q/k/v), a key to transpose (OpenCLIP's
//! `proj`) or one with extra unit axes (`[1, 1, D]` class tokens). Keys a
//! layout knows the model does not use (a CLIP text tower, buffers) are
//! skipped; any other key left over is a mismatch, as is a missing or
//! mis-shaped one. Mismatches are reported in one line: the layout the file
//! looks like and the first few problems, with a count of the rest.

use regex::Regex;

use crate::checkpoint::Checkpoint;

/// A published way of naming a model's tensors: the coordinator detects
/// it once (`pipeline_core::ResolvedWeights`); its rules are here.
pub use pipeline_core::CheckpointLayout as Layout;

/// The layouts that can hold a model, checked against a file's names, and
/// how each names the tensors.
pub trait LayoutRules: Sized {
    /// Which layout `checkpoint` is in, from names only one layout has.
    fn detect(checkpoint: &Checkpoint) -> Option<Self>;
    /// A key only a checkpoint of this layout with a text tower has.
    fn text_marker(self) -> String;
    /// What a file that is no known layout looks like, for the error.
    fn describe_unknown(checkpoint: &Checkpoint) -> &'static str;
    /// Keys this layout has that no image model here uses.
    fn skipped(self) -> &'static [&'static str];
}

impl LayoutRules for Layout {
    fn detect(checkpoint: &Checkpoint) -> Option<Self> {
        let has = |name: &str| checkpoint.has(name);
        let any = |prefix: &str| checkpoint.names().any(|n| n.starts_with(prefix));
        if has("conv_proj.weight") && any("encoder.layers.encoder_layer_") {
            Some(Self::TorchvisionVit)
        } else if has("features.0.0.weight") && any("features.1.0.block.") {
            Some(Self::TorchvisionConvNext)
        } else if has("convnext.embeddings.patch_embeddings.weight") {
            Some(Self::HfConvNext)
        } else if has("embeddings.patch_embeddings.weight")
            && any("encoder.stages.0.layers.0.dwconv.")
        {
            Some(Self::HfConvNextBare)
        } else if has("stem.0.weight") && any("stages.0.blocks.0.conv_dw.") {
            Some(Self::TimmConvNext)
        } else if has("visual.conv1.weight") {
            Some(Self::OpenClip)
        } else if has("vision_model.embeddings.class_embedding") {
            Some(Self::HfClip)
        } else if has("embeddings.class_embedding") && has("pre_layrnorm.weight") {
            Some(Self::HfClipBare)
        } else if has("vision_model.embeddings.patch_embedding.weight") {
            Some(Self::HfSiglip)
        } else if has("embeddings.patch_embedding.weight") && has("head.probe") {
            Some(Self::HfSiglipBare)
        } else if has("vit.embeddings.cls_token") {
            Some(Self::HfVit)
        } else if has("dinov2.embeddings.cls_token") {
            Some(Self::HfDinov2Classifier)
        } else if has("dinov2_with_registers.embeddings.cls_token") {
            Some(Self::HfDinov2RegistersClassifier)
        } else if has("embeddings.cls_token") && has("encoder.layer.0.layernorm_before.weight") {
            Some(Self::HfVitBare)
        } else if has("embeddings.cls_token") && any("encoder.layer.0.attention.") {
            Some(Self::HfDinov2)
        } else if has("cls_token")
            && has("patch_embed.proj.weight")
            && (has("mask_token") || any("blocks.0.ls1."))
        {
            Some(Self::HubDinov2)
        } else if has("cls_token") && has("patch_embed.proj.weight") {
            Some(Self::TimmVit)
        } else {
            None
        }
    }

    fn text_marker(self) -> String {
        match text_place(self, "tok") {
            Place::Key(k) => k,
            other => unreachable!("token embeddings are one key, not {other:?}"),
        }
    }

    fn describe_unknown(checkpoint: &Checkpoint) -> &'static str {
        let any = |prefix: &str| checkpoint.names().any(|n| n.starts_with(prefix));
        if any("text_model.") || any("transformer.resblocks.") || any("token_embedding") {
            "a text tower only (no vision tower)"
        } else if any("layer1.0.conv1.") {
            "a torchvision ResNet"
        } else {
            "no layout this tool knows"
        }
    }

    fn skipped(self) -> &'static [&'static str] {
        match self {
            Self::TorchvisionVit
            | Self::TorchvisionConvNext
            | Self::HfConvNext
            | Self::HfConvNextBare
            | Self::TimmConvNext
            | Self::TimmVit => &[],
            Self::OpenClip => &[
                r"^(transformer|token_embedding|ln_final|text)\b",
                r"^(positional_embedding|text_projection|logit_scale|logit_bias|attn_mask)$",
                // The state_dict of OpenAI's TorchScript archives also
                // carries these (`clip.build_model` deletes them).
                r"^(input_resolution|context_length|vocab_size)$",
                r"^text\.",
            ],
            Self::HfClip | Self::HfClipBare | Self::HfSiglip | Self::HfSiglipBare => &[
                r"^text_model\.",
                r"^(text_projection\.weight|logit_scale|logit_bias)$",
                r"position_ids$",
                // Off the classifiers' paths: CLIPForImageClassification's
                // post_layernorm, SiglipForImageClassification's pooling head.
                r"^vision_model\.(post_layernorm|head)\.",
            ],
            Self::HfDinov2 => &[r"^embeddings\.mask_token$"],
            Self::HubDinov2 => &[r"^mask_token$"],
            Self::HfDinov2Classifier => &[r"^dinov2\.embeddings\.mask_token$"],
            Self::HfDinov2RegistersClassifier => {
                &[r"^dinov2_with_registers\.embeddings\.mask_token$"]
            }
            Self::HfVit => &[r"^vit\.embeddings\.mask_token$"],
            Self::HfVitBare => &[r"^embeddings\.mask_token$", r"^pooler\.dense\."],
        }
    }
}

/// Where each canonical tensor of `layout` is in the file.
fn rules(layout: Layout) -> &'static [Rule] {
    match layout {
        Layout::TorchvisionVit => TORCHVISION_VIT,
        Layout::TorchvisionConvNext => IDENTITY,
        Layout::OpenClip => OPEN_CLIP,
        Layout::HfClip | Layout::HfClipBare => HF_CLIP,
        Layout::HfSiglip | Layout::HfSiglipBare => HF_SIGLIP,
        Layout::HfDinov2 | Layout::HfDinov2Classifier | Layout::HfDinov2RegistersClassifier => {
            HF_DINOV2
        }
        Layout::HubDinov2 => HUB_DINOV2,
        Layout::HfVit | Layout::HfVitBare => HF_VIT,
        Layout::HfConvNext => HF_CONVNEXT,
        Layout::HfConvNextBare => HF_CONVNEXT_BARE,
        Layout::TimmConvNext => TIMM_CONVNEXT,
        Layout::TimmVit => TIMM_VIT,
    }
}

mod hf;
mod rules;

use self::hf::{HF_CLIP, HF_CONVNEXT, HF_CONVNEXT_BARE, HF_DINOV2, HF_SIGLIP, HF_VIT};
pub use self::rules::Place;
use self::rules::{ConvNextNames, Rule, convnext_feature, key, renamed, rule};

/// Canonical names are the file's names (ConvNeXt: torchvision's own).
static IDENTITY: &[Rule] = &[rule!(r"^(.*)$", |c| key(c.to_owned()))];

static TORCHVISION_VIT: &[Rule] = &[
    rule!(r"^patch\.(weight|bias)$", |c| key(format!(
        "conv_proj.{}",
        c
    ))),
    rule!(r"^cls$", |_c| Place::Unsqueezed("class_token".into(), 2)),
    rule!(r"^pos$", |_c| Place::Unsqueezed(
        "encoder.pos_embedding".into(),
        1
    )),
    rule!(r"^blocks\.(.*)$", |c| {
        let (i, rest) = c.split_once('.').unwrap_or((c, ""));
        let table = [
            ("norm1", "ln_1"),
            ("qkv.weight", "self_attention.in_proj_weight"),
            ("qkv.bias", "self_attention.in_proj_bias"),
            ("out", "self_attention.out_proj"),
            ("norm2", "ln_2"),
            ("fc1", "mlp.0"),
            ("fc2", "mlp.3"),
        ];
        key(format!(
            "encoder.layers.encoder_layer_{i}.{}",
            renamed(rest, &table)
        ))
    }),
    rule!(r"^norm\.(.*)$", |c| key(format!("encoder.ln.{c}"))),
    rule!(r"^head\.(.*)$", |c| key(format!("heads.head.{c}"))),
];

static OPEN_CLIP: &[Rule] = &[
    rule!(r"^patch\.weight$", |_c| key("visual.conv1.weight".into())),
    rule!(r"^cls$", |_c| key("visual.class_embedding".into())),
    rule!(r"^pos$", |_c| key("visual.positional_embedding".into())),
    rule!(r"^pre_norm\.(.*)$", |c| key(format!("visual.ln_pre.{c}"))),
    rule!(r"^blocks\.(.*)$", |c| {
        let (i, rest) = c.split_once('.').unwrap_or((c, ""));
        let table = [
            ("norm1", "ln_1"),
            ("qkv.weight", "attn.in_proj_weight"),
            ("qkv.bias", "attn.in_proj_bias"),
            ("out", "attn.out_proj"),
            ("norm2", "ln_2"),
            ("fc1", "mlp.c_fc"),
            ("fc2", "mlp.c_proj"),
            ("ls1", "ls_1.gamma"),
            ("ls2", "ls_2.gamma"),
        ];
        key(format!(
            "visual.transformer.resblocks.{i}.{}",
            renamed(rest, &table)
        ))
    }),
    rule!(r"^norm\.(.*)$", |c| key(format!("visual.ln_post.{c}"))),
    rule!(r"^proj\.weight$", |_c| Place::Transposed(
        "visual.proj".into()
    )),
];

static HUB_DINOV2: &[Rule] = &[
    rule!(r"^patch\.(.*)$", |c| key(format!("patch_embed.proj.{c}"))),
    rule!(r"^cls$", |_c| Place::Unsqueezed("cls_token".into(), 2)),
    rule!(r"^reg$", |_c| Place::Unsqueezed(
        "register_tokens".into(),
        1
    )),
    rule!(r"^pos$", |_c| Place::Unsqueezed("pos_embed".into(), 1)),
    rule!(r"^blocks\.(.*)$", |c| timm_block(c)),
    rule!(r"^norm\.(.*)$", |c| key(format!("norm.{c}"))),
];

/// A block of timm's `VisionTransformer` (DINOv2's torch-hub file is one);
/// `c` is `N.rest`.
fn timm_block(c: &str) -> Place {
    let (i, rest) = c.split_once('.').unwrap_or((c, ""));
    let table = [
        ("qkv", "attn.qkv"),
        ("out", "attn.proj"),
        ("ls1", "ls1.gamma"),
        ("ls2", "ls2.gamma"),
        ("fc1", "mlp.fc1"),
        ("fc2", "mlp.fc2"),
    ];
    key(format!("blocks.{i}.{}", renamed(rest, &table)))
}

/// timm's plain ViT: its class token, position embeddings (the class
/// token's first), blocks, final norm and head.
static TIMM_VIT: &[Rule] = &[
    rule!(r"^patch\.(.*)$", |c| key(format!("patch_embed.proj.{c}"))),
    rule!(r"^cls$", |_c| Place::Unsqueezed("cls_token".into(), 2)),
    rule!(r"^pos$", |_c| Place::Unsqueezed("pos_embed".into(), 1)),
    rule!(r"^blocks\.(.*)$", |c| timm_block(c)),
    rule!(r"^norm\.(.*)$", |c| key(format!("norm.{c}"))),
    rule!(r"^head\.(.*)$", |c| key(format!("head.{c}"))),
];

/// timm's ConvNeXt for torchvision's names.
static TIMM_CONVNEXT: &[Rule] = &[
    rule!(r"^features\.(.*)$", |c| convnext_feature(
        &TIMM_CONVNEXT_NAMES,
        c
    )),
    rule!(r"^classifier\.0\.(.*)$", |c| key(format!("head.norm.{c}"))),
    rule!(r"^classifier\.2\.(.*)$", |c| key(format!("head.fc.{c}"))),
];

static TIMM_CONVNEXT_NAMES: ConvNextNames = ConvNextNames {
    stem: ["stem.0", "stem.1"],
    stages: "stages",
    downsample: "downsample",
    blocks: "blocks",
    scale: "gamma",
    modules: ["conv_dw", "norm", "mlp.fc1", "mlp.fc2"],
};

/// A canonical tensor's place in a layout.
pub fn place(layout: Layout, canonical: &str) -> Place {
    // transformers 5's vision models: their towers' names without the
    // `vision_model.` prefix.
    let prefixed = match layout {
        Layout::HfSiglipBare => Some(Layout::HfSiglip),
        Layout::HfClipBare => Some(Layout::HfClip),
        _ => None,
    };
    if let Some(prefixed) = prefixed {
        let bare = |k: String| {
            k.strip_prefix("vision_model.")
                .map_or(k.clone(), str::to_owned)
        };
        return place(prefixed, canonical).renamed(&bare);
    }
    // The classifiers' backbones are their bare models' under a prefix,
    // their heads a `classifier` beside it.
    let prefix = match layout {
        Layout::HfVit => Some("vit."),
        Layout::HfDinov2Classifier => Some("dinov2."),
        Layout::HfDinov2RegistersClassifier => Some("dinov2_with_registers."),
        _ => None,
    };
    if let Some(prefix) = prefix {
        if let Some(leaf) = canonical.strip_prefix("head.") {
            return Place::Key(format!("classifier.{leaf}"));
        }
        let base = if layout == Layout::HfVit {
            Layout::HfVitBare
        } else {
            Layout::HfDinov2
        };
        let prefixed = |k: String| format!("{prefix}{k}");
        return place(base, canonical).renamed(&prefixed);
    }
    if layout == Layout::HfVitBare && !canonical.starts_with("blocks.") {
        return place(Layout::HfDinov2, canonical);
    }
    for rule in rules(layout) {
        let re = Regex::new(rule.pattern).expect("layout patterns are valid regexes");
        if let Some(caps) = re.captures(canonical) {
            // The groups after the first joined by '.' are the rule's input
            // (e.g. "3.norm1.weight" for blocks.3.norm1.weight).
            let groups: Vec<&str> = caps.iter().skip(1).flatten().map(|m| m.as_str()).collect();
            let input = if groups.is_empty() {
                canonical.to_owned()
            } else {
                groups.join(".")
            };
            return (rule.place)(&input);
        }
    }
    Place::Key(canonical.to_owned())
}

/// A text tower's canonical tensor's place (`text.rs`): OpenCLIP's
/// unprefixed text keys, HF's `text_model.`. Blocks are named as in the
/// image tower of the same layout, under the text tower's prefix.
pub fn text_place(layout: Layout, canonical: &str) -> Place {
    let hf = |rest: &str| key(format!("text_model.{rest}"));
    let retitled =
        |place: Place, from: &str, to: &str| place.renamed(&|k: String| k.replacen(from, to, 1));
    let block = canonical.starts_with("blocks.");
    match layout {
        Layout::OpenClip => match canonical {
            "tok" => key("token_embedding.weight".into()),
            "pos" => key("positional_embedding".into()),
            "proj.weight" => Place::Transposed("text_projection".into()),
            c if block => retitled(place(layout, c), "visual.transformer.", "transformer."),
            c => key(format!("ln_final.{}", c.strip_prefix("norm.").unwrap_or(c))),
        },
        Layout::HfClip | Layout::HfSiglip | Layout::HfSiglipBare => match canonical {
            "tok" => hf("embeddings.token_embedding.weight"),
            "pos" => hf("embeddings.position_embedding.weight"),
            "proj.weight" if layout == Layout::HfClip => key("text_projection.weight".into()),
            c if block => retitled(place(Layout::HfClip, c), "vision_model.", "text_model."),
            c if c.starts_with("proj.") => hf(&format!("head.{}", &c["proj.".len()..])),
            c => hf(&format!(
                "final_layer_norm.{}",
                c.strip_prefix("norm.").unwrap_or(c)
            )),
        },
        _ => key(canonical.to_owned()),
    }
}

/// The tensor shapes a place needs in the file for a canonical `shape`.
pub fn file_shapes(place: &Place, shape: &[usize]) -> Vec<(String, Vec<usize>)> {
    match place {
        Place::Key(k) => vec![(k.clone(), shape.to_vec())],
        Place::Flat(k) => vec![(k.clone(), vec![shape.iter().product()])],
        Place::Unsqueezed(k, ones) => {
            let mut s = vec![1; *ones];
            s.extend_from_slice(shape);
            vec![(k.clone(), s)]
        }
        Place::Transposed(k) => vec![(k.clone(), shape.iter().rev().copied().collect())],
        Place::Stacked(keys) => {
            let mut s = shape.to_vec();
            s[0] /= keys.len();
            keys.iter().map(|k| (k.clone(), s.clone())).collect()
        }
        Place::First(places) => places
            .first()
            .map_or_else(Vec::new, |p| file_shapes(p, shape)),
    }
}

/// `place` with a [`Place::First`] narrowed to the first alternative whose
/// every key `has` (else its first), recursively.
pub fn chosen(place: Place, has: &dyn Fn(&str) -> bool) -> Place {
    match place {
        Place::First(places) => {
            let whole = |p: &Place| {
                let p = chosen(p.clone(), has);
                file_shapes(&p, &[1]).iter().all(|(k, _)| has(k))
            };
            let pick = places.iter().position(whole).unwrap_or(0);
            places
                .into_iter()
                .nth(pick)
                .map_or(Place::Stacked(Vec::new()), |p| chosen(p, has))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests;
