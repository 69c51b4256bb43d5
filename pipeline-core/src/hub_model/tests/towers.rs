//! More of what a repo's `config.json` makes of a model: CLIP's and
//! SigLIP's text towers, vision towers saved alone, CLIP's and SigLIP's
//! classifiers, CNNs without heads, DINOv2 with registers and timm's
//! ResNets.

use super::super::*;
use crate::model::Scores;

/// A CLIP's or SigLIP's text tower from its `text_config`: transformers'
/// defaults for the keys left out (the published base sizes), the older
/// `text_config_dict` laid over it, CLIP's projection from the top level
/// and SigLIP's `projection_size` (else its width).
#[test]
fn text_towers_from_their_configs_with_transformers_defaults() {
    let clip = hub_text(r#"{"model_type": "clip"}"#).expect("CLIP's defaults");
    assert_eq!(clip.family, Family::Clip);
    assert_eq!(
        (clip.vocab, clip.context, clip.width, clip.depth, clip.heads),
        (49408, 77, 512, 12, 8)
    );
    assert_eq!((clip.mlp, clip.projection, clip.eps), (2048, 512, 1e-5));
    assert_eq!(clip.activation, HubActivation::QuickGelu);
    let large = hub_text(
        r#"{"model_type": "clip", "projection_dim": 768,
            "text_config": {"hidden_size": 768, "num_attention_heads": 12,
                            "intermediate_size": 3072, "projection_dim": 512,
                            "hidden_act": "gelu", "eos_token_id": 2},
            "text_config_dict": {"max_position_embeddings": 32}}"#,
    )
    .expect("CLIP L/14's text tower");
    assert_eq!(
        (large.width, large.heads, large.mlp, large.context),
        (768, 12, 3072, 32)
    );
    assert_eq!(
        (large.projection, large.activation),
        (768, HubActivation::Gelu),
        "CLIPModel projects to the top level's projection_dim"
    );
    let siglip = hub_text(r#"{"model_type": "siglip"}"#).expect("SigLIP's defaults");
    assert_eq!(
        (siglip.vocab, siglip.context, siglip.width, siglip.heads),
        (32000, 64, 768, 12)
    );
    assert_eq!((siglip.projection, siglip.eps), (768, 1e-6));
    assert_eq!(siglip.activation, HubActivation::GeluTanh);
    let so400m = hub_text(
        r#"{"model_type": "siglip", "text_config": {"hidden_size": 1152,
            "num_attention_heads": 16, "intermediate_size": 4304, "num_hidden_layers": 27,
            "projection_size": 1152, "vocab_size": 32000}}"#,
    )
    .expect("So400m's text tower");
    assert_eq!(
        (so400m.width, so400m.depth, so400m.mlp, so400m.projection),
        (1152, 27, 4304, 1152)
    );
    let narrow = hub_text(
        r#"{"model_type": "siglip", "text_config": {"hidden_size": 16,
            "num_attention_heads": 2, "projection_size": 32}}"#,
    )
    .expect("a projection wider than the tower");
    assert_eq!((narrow.width, narrow.projection), (16, 32));
}

/// What the text tower cannot run as upstream does is one line.
#[test]
fn text_towers_that_do_not_fit_are_refused_in_one_line() {
    for (config, says) in [
        (r#"{"model_type": "vit"}"#, "vit has no text tower here"),
        (
            r#"{"architecture": "convnext_tiny"}"#,
            "names no model_type",
        ),
        (
            r#"{"model_type": "clip", "text_config": {"eos_token_id": 7}}"#,
            "eos_token_id 7 is not the vocabulary's last id (49407)",
        ),
        (
            r#"{"model_type": "clip", "text_config": {"hidden_size": 100, "num_attention_heads": 8}}"#,
            "hidden_size 100 is not a multiple of num_attention_heads 8",
        ),
        (
            r#"{"model_type": "siglip", "text_config": {"hidden_act": "relu"}}"#,
            "hidden_act relu is not built in",
        ),
        (
            r#"{"model_type": "clip", "text_config": {"vocab_size": 0}}"#,
            "vocab_size is 0, not a positive count",
        ),
        ("not json", "not JSON"),
    ] {
        let error = hub_text(config).expect_err(config);
        assert!(error.contains(says), "{config}: {error}");
        assert!(!error.contains('\n'), "{error}");
    }
    // The end token at the vocabulary's last id, as every CLIP tokenizer
    // puts it, is the highest id the tower pools.
    let small = hub_text(
        r#"{"model_type": "clip", "text_config": {"vocab_size": 2514, "eos_token_id": 2513}}"#,
    )
    .expect("eos at the last id");
    assert_eq!(small.vocab, 2514);
}

/// Vision towers saved alone: a `CLIPVisionModelWithProjection` (its
/// config the vision config, its projection `projection_dim`) and a
/// `SiglipVisionModel`; a `CLIPVisionModel` (no projection) embeds its
/// pooled class token.
#[test]
fn vision_towers_saved_alone() {
    let clip = hub_config(
        r#"{"model_type": "clip_vision_model", "architectures": ["CLIPVisionModelWithProjection"],
            "hidden_size": 1280, "num_hidden_layers": 32, "num_attention_heads": 16,
            "intermediate_size": 5120, "patch_size": 14, "image_size": 224,
            "projection_dim": 1024, "hidden_act": "gelu"}"#,
    )
    .expect("IP-Adapter's image encoder (ViT-H/14)");
    assert_eq!(clip.shape.family, Family::Clip);
    assert_eq!(
        (clip.shape.width, clip.shape.depth, clip.shape.pos_grid),
        (1280, 32, 16)
    );
    assert_eq!(
        (clip.shape.projection, clip.shape.activation),
        (Some(1024), HubActivation::Gelu)
    );
    let siglip = hub_config(
        r#"{"model_type": "siglip_vision_model", "hidden_size": 1152, "image_size": 384,
            "intermediate_size": 4304, "num_attention_heads": 16, "num_hidden_layers": 27,
            "patch_size": 14}"#,
    )
    .expect("So400m's vision tower");
    assert_eq!(siglip.shape.family, Family::Siglip);
    assert_eq!(
        (
            siglip.shape.width,
            siglip.shape.pos_grid,
            siglip.shape.projection
        ),
        (1152, 27, None)
    );
    let bare = hub_config(
        r#"{"model_type": "clip_vision_model", "architectures": ["CLIPVisionModel"],
            "hidden_size": 1024, "num_attention_heads": 16}"#,
    )
    .expect("a CLIPVisionModel");
    assert_eq!(
        (bare.shape.projection, bare.shape.feature_dim()),
        (None, 1024),
        "its pooled class token embeds"
    );
}

/// A CNN checkpoint without its head embeds: transformers' `ConvNextModel`
/// and `ResNetModel` (no `…ForImageClassification` named), and timm's
/// ConvNeXt with `num_classes` 0; its embedding is what a head would read.
#[test]
fn cnns_without_their_heads_embed() {
    let convnext = hub_config(r#"{"model_type": "convnext", "architectures": ["ConvNextModel"]}"#)
        .expect("a ConvNextModel");
    assert_eq!((convnext.shape.classes, convnext.labels.len()), (None, 0));
    assert_eq!(convnext.shape.feature_dim(), 768);
    let resnet = hub_config(r#"{"model_type": "resnet", "architectures": ["ResNetModel"]}"#)
        .expect("a ResNetModel");
    assert_eq!(
        (resnet.shape.classes, resnet.shape.feature_dim()),
        (None, 2048)
    );
    let timm = hub_config(r#"{"architecture": "convnext_small", "num_classes": 0}"#)
        .expect("timm's ConvNeXt without a head");
    assert_eq!((timm.shape.classes, timm.labels.len()), (None, 0));
    assert_eq!(timm.shape.depths, [3, 3, 27, 3]);
}

/// CLIP and SigLIP fine-tuned as classifiers: their labels and scoring,
/// no projection for CLIP's (its head reads the tower), and SigLIP's
/// whatever `vision_use_head` says (its pooling head is not on the path).
#[test]
fn clip_and_siglip_classifiers() {
    let clip = hub_config(
        r#"{"model_type": "clip", "architectures": ["CLIPForImageClassification"],
            "projection_dim": 512, "vision_config": {"hidden_size": 64,
            "num_attention_heads": 4, "image_size": 32, "patch_size": 16},
            "id2label": {"0": "a", "1": "b", "2": "c"}}"#,
    )
    .expect("a CLIP classifier");
    assert_eq!(clip.shape.family, Family::Clip);
    assert_eq!((clip.shape.classes, clip.shape.projection), (Some(3), None));
    assert_eq!(
        clip.shape.feature_dim(),
        64,
        "the head reads the tower's width"
    );
    let siglip = hub_config(
        r#"{"model_type": "siglip", "architectures": ["SiglipForImageClassification"],
            "problem_type": "multi_label_classification",
            "vision_config": {"vision_use_head": false}, "num_labels": 4}"#,
    )
    .expect("a SigLIP classifier");
    assert_eq!(
        (siglip.shape.classes, siglip.labels.len(), siglip.scores),
        (Some(4), 4, Scores::Sigmoid)
    );
}

/// DINOv2 with registers: its register tokens (4 unless said) and
/// `Dinov2WithRegistersConfig`'s own defaults (patch 16); plain DINOv2
/// has none.
#[test]
fn dinov2_with_registers() {
    let base = hub_config(
        r#"{"model_type": "dinov2_with_registers", "hidden_size": 768,
            "image_size": 518, "patch_size": 14}"#,
    )
    .expect("facebook/dinov2-with-registers-base");
    assert_eq!((base.shape.registers, base.shape.pos_grid), (Some(4), 37));
    let defaults =
        hub_config(r#"{"model_type": "dinov2_with_registers", "num_register_tokens": 2}"#)
            .expect("its defaults");
    assert_eq!(
        (defaults.shape.registers, defaults.shape.patch),
        (Some(2), 16)
    );
    let plain = hub_config(r#"{"model_type": "dinov2"}"#).expect("DINOv2");
    assert_eq!(plain.shape.registers, None);
}

/// timm's plain ResNets: torchvision's network at `model_args`' widths
/// (a bottleneck's output four times its `channels`), with or without a
/// head; timm's variants of other stems, shortcuts or groups are refused.
#[test]
fn timm_resnets_are_torchvisions() {
    let r50 = hub_config(
        r#"{"architecture": "resnet50", "num_classes": 1000,
            "pretrained_cfg": {"input_size": [3, 224, 224], "crop_pct": 0.95}}"#,
    )
    .expect("timm/resnet50.a1_in1k");
    assert_eq!(r50.shape.family, Family::Resnet);
    assert_eq!(
        (r50.shape.dims.as_slice(), r50.shape.depths.as_slice()),
        (&[256, 512, 1024, 2048][..], &[3, 4, 6, 3][..])
    );
    assert_eq!(r50.labels.len(), 1000, "ImageNet's names");
    let blocks = r50.shape.resnet.expect("its blocks");
    assert!(blocks.timm && blocks.bottleneck && blocks.stem == 64);
    let small = hub_config(
        r#"{"architecture": "resnet18", "num_classes": 0,
            "model_args": {"channels": [8, 16, 24, 32], "stem_width": 8, "global_pool": "avg"}}"#,
    )
    .expect("a small resnet18 without a head");
    assert_eq!((small.shape.dims[3], small.shape.classes), (32, None));
    let stem = small.shape.resnet.expect("its blocks").stem;
    assert_eq!(stem, 64, "a plain stem is 64 wide whatever stem_width says");
    for (config, says) in [
        (
            r#"{"architecture": "resnet50d"}"#,
            "timm's resnet50d is not built in",
        ),
        (
            r#"{"architecture": "resnet50", "model_args": {"avg_down": true}}"#,
            "model_args.avg_down true is not built in",
        ),
        (
            r#"{"architecture": "resnet50", "model_args": {"cardinality": 32}}"#,
            "model_args.cardinality 32",
        ),
    ] {
        let error = hub_config(config).expect_err(config);
        assert!(error.contains(says), "{config}: {error}");
    }
}
