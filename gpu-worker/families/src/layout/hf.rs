//! Hugging Face's layouts (transformers' CLIP, SigLIP, DINOv2 and ViT):
//! where each names the tensors of our canonical ViT, as rules for
//! `super::place`; and transformers' ConvNeXt, where it names
//! torchvision's ConvNeXt tensors.

use super::rules::{ConvNextNames, Place, Rule, convnext_feature, key, renamed, rule};

/// HF's CLIP and SigLIP encoders name blocks alike.
fn hf_block(c: &str) -> Place {
    let (i, rest) = c.split_once('.').unwrap_or((c, ""));
    let base = format!("vision_model.encoder.layers.{i}");
    match rest {
        "qkv.weight" | "qkv.bias" => {
            let leaf = &rest[4..];
            Place::Stacked(
                ["q_proj", "k_proj", "v_proj"]
                    .iter()
                    .map(|p| format!("{base}.self_attn.{p}.{leaf}"))
                    .collect(),
            )
        }
        _ => {
            let table = [
                ("norm1", "layer_norm1"),
                ("out", "self_attn.out_proj"),
                ("norm2", "layer_norm2"),
                ("fc1", "mlp.fc1"),
                ("fc2", "mlp.fc2"),
            ];
            key(format!("{base}.{}", renamed(rest, &table)))
        }
    }
}

pub(super) static HF_CLIP: &[Rule] = &[
    rule!(r"^patch\.weight$", |_c| key(
        "vision_model.embeddings.patch_embedding.weight".into()
    )),
    rule!(r"^cls$", |_c| key(
        "vision_model.embeddings.class_embedding".into()
    )),
    rule!(r"^pos$", |_c| key(
        "vision_model.embeddings.position_embedding.weight".into()
    )),
    rule!(r"^pre_norm\.(.*)$", |c| key(format!(
        "vision_model.pre_layrnorm.{c}"
    ))),
    rule!(r"^blocks\.(.*)$", |c| hf_block(c)),
    rule!(r"^norm\.(.*)$", |c| key(format!(
        "vision_model.post_layernorm.{c}"
    ))),
    rule!(r"^proj\.weight$", |_c| key(
        "visual_projection.weight".into()
    )),
    // CLIPForImageClassification's head.
    rule!(r"^head\.(.*)$", |c| key(format!("classifier.{c}"))),
];

pub(super) static HF_SIGLIP: &[Rule] = &[
    rule!(r"^patch\.(.*)$", |c| key(format!(
        "vision_model.embeddings.patch_embedding.{c}"
    ))),
    rule!(r"^pos$", |_c| key(
        "vision_model.embeddings.position_embedding.weight".into()
    )),
    rule!(r"^blocks\.(.*)$", |c| hf_block(c)),
    rule!(r"^norm\.(.*)$", |c| key(format!(
        "vision_model.post_layernorm.{c}"
    ))),
    rule!(r"^map\.probe$", |_c| Place::Unsqueezed(
        "vision_model.head.probe".into(),
        2
    )),
    rule!(r"^map\.(.*)$", |c| {
        let table = [
            ("qkv.weight", "attention.in_proj_weight"),
            ("qkv.bias", "attention.in_proj_bias"),
            ("out", "attention.out_proj"),
            ("norm", "layernorm"),
            ("fc1", "mlp.fc1"),
            ("fc2", "mlp.fc2"),
        ];
        key(format!("vision_model.head.{}", renamed(c, &table)))
    }),
    // SiglipForImageClassification's head.
    rule!(r"^head\.(.*)$", |c| key(format!("classifier.{c}"))),
];

pub(super) static HF_DINOV2: &[Rule] = &[
    rule!(r"^patch\.(.*)$", |c| key(format!(
        "embeddings.patch_embeddings.projection.{c}"
    ))),
    rule!(r"^cls$", |_c| Place::Unsqueezed(
        "embeddings.cls_token".into(),
        2
    )),
    rule!(r"^reg$", |_c| Place::Unsqueezed(
        "embeddings.register_tokens".into(),
        1
    )),
    rule!(r"^pos$", |_c| Place::Unsqueezed(
        "embeddings.position_embeddings".into(),
        1
    )),
    rule!(r"^blocks\.(.*)$", |c| hf_dinov2_layer(c)),
    rule!(r"^norm\.(.*)$", |c| key(format!("layernorm.{c}"))),
];

/// A DINOv2 layer: its MLP as `mlp.fc1` and `mlp.fc2`, or gated (the
/// giant's SwiGLU) as `mlp.weights_in` (the gate's rows, then the up
/// projection's) and `mlp.weights_out`: the names of the hub's
/// checkpoints, which transformers 5's `save_pretrained` still writes
/// (its `gate_proj`, `up_proj` and `down_proj` live in memory only).
fn hf_dinov2_layer(c: &str) -> Place {
    let (i, rest) = c.split_once('.').unwrap_or((c, ""));
    let mlp = format!("encoder.layer.{i}.mlp");
    if let Some(leaf) = rest.strip_prefix("fc1.") {
        return Place::First(vec![
            key(format!("{mlp}.fc1.{leaf}")),
            key(format!("{mlp}.weights_in.{leaf}")),
        ]);
    }
    if let Some(leaf) = rest.strip_prefix("fc2.") {
        return Place::First(
            ["fc2", "weights_out"]
                .iter()
                .map(|m| key(format!("{mlp}.{m}.{leaf}")))
                .collect(),
        );
    }
    hf_layer(
        c,
        &[
            ("out", "attention.output.dense"),
            ("ls1", "layer_scale1.lambda1"),
            ("ls2", "layer_scale2.lambda1"),
        ],
    )
}

/// transformers' encoder layer (`encoder.layer.N`, ViT's and DINOv2's):
/// q/k/v stacked from `attention.attention.{query,key,value}`, the rest
/// renamed by `table`. `c` is `N.rest`.
fn hf_layer(c: &str, table: &[(&str, &str)]) -> Place {
    let (i, rest) = c.split_once('.').unwrap_or((c, ""));
    let base = format!("encoder.layer.{i}");
    if let Some(leaf) = rest.strip_prefix("qkv.") {
        return Place::Stacked(
            ["query", "key", "value"]
                .iter()
                .map(|p| format!("{base}.attention.attention.{p}.{leaf}"))
                .collect(),
        );
    }
    key(format!("{base}.{}", renamed(rest, table)))
}

/// transformers' `ViTModel`'s layers (the prefix-free names; `place`
/// adds `vit.`); its embeddings and final norm are named as DINOv2's.
pub(super) static HF_VIT: &[Rule] = &[rule!(r"^blocks\.(.*)$", |c| hf_layer(
    c,
    &[
        ("norm1", "layernorm_before"),
        ("out", "attention.output.dense"),
        ("norm2", "layernorm_after"),
        ("fc1", "intermediate.dense"),
        ("fc2", "output.dense"),
    ]
))];

/// transformers' `ConvNextForImageClassification` for torchvision's names.
pub(super) static HF_CONVNEXT: &[Rule] = &[
    rule!(r"^features\.(.*)$", |c| convnext_feature(
        &HF_CONVNEXT_NAMES,
        c
    )),
    rule!(r"^classifier\.0\.(.*)$", |c| key(format!(
        "convnext.layernorm.{c}"
    ))),
    rule!(r"^classifier\.2\.(.*)$", |c| key(format!("classifier.{c}"))),
];

/// transformers' `ConvNextModel` (no head): the same names without the
/// `convnext.` prefix.
pub(super) static HF_CONVNEXT_BARE: &[Rule] = &[
    rule!(r"^features\.(.*)$", |c| convnext_feature(
        &HF_CONVNEXT_BARE_NAMES,
        c
    )),
    rule!(r"^classifier\.0\.(.*)$", |c| key(format!("layernorm.{c}"))),
];

static HF_CONVNEXT_BARE_NAMES: ConvNextNames = ConvNextNames {
    stem: ["embeddings.patch_embeddings", "embeddings.layernorm"],
    stages: "encoder.stages",
    ..HF_CONVNEXT_NAMES
};

static HF_CONVNEXT_NAMES: ConvNextNames = ConvNextNames {
    stem: [
        "convnext.embeddings.patch_embeddings",
        "convnext.embeddings.layernorm",
    ],
    stages: "convnext.encoder.stages",
    downsample: "downsampling_layer",
    blocks: "layers",
    scale: "layer_scale_parameter",
    modules: ["dwconv", "layernorm", "pwconv1", "pwconv2"],
};
