//! What a repo's `config.json` makes of a model: transformers' families
//! and timm's ConvNeXts, their defaults and the one-line refusals.

use super::*;

#[test]
fn a_vit_classifier_with_two_labels() {
    let config = r#"{"model_type": "vit", "architectures": ["ViTForImageClassification"],
        "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 3,
        "intermediate_size": 96, "patch_size": 16, "image_size": 64,
        "id2label": {"0": "normal", "1": "nsfw"}}"#;
    let c = hub_config(config).expect("a ViT");
    assert_eq!(c.shape.family, Family::Vit);
    assert_eq!((c.shape.width, c.shape.depth, c.shape.heads), (48, 2, 3));
    assert_eq!((c.shape.mlp, c.shape.pos_grid, c.shape.eps), (96, 4, 1e-12));
    assert_eq!(c.shape.classes, Some(2));
    assert_eq!(c.labels, ["normal", "nsfw"]);
    assert_eq!(c.scores, Scores::Softmax);
}

/// Configs as transformers 4 saved them, keys at their defaults left
/// out: transformers' defaults fill them.
#[test]
fn keys_left_out_are_transformers_defaults() {
    let dino = hub_config(r#"{"model_type": "dinov2", "image_size": 518}"#).expect("DINOv2");
    assert_eq!((dino.shape.patch, dino.shape.pos_grid), (14, 37));
    let vit = hub_config(
        r#"{"model_type": "vit", "architectures": ["ViTForImageClassification"],
            "hidden_size": 384, "num_attention_heads": 6}"#,
    )
    .expect("a ViT classifier");
    assert_eq!(vit.labels, ["LABEL_0", "LABEL_1"]);
    assert_eq!((vit.shape.mlp, vit.shape.classes), (3072, Some(2)));
    let one = hub_config(
        r#"{"model_type": "vit", "architectures": ["ViTForImageClassification"],
            "num_labels": 1}"#,
    )
    .expect("one logit");
    assert_eq!((one.labels.len(), one.scores), (1, Scores::Sigmoid));
    let clip = hub_config(
        r#"{"model_type": "clip", "vision_config": {"hidden_size": 1024},
            "vision_config_dict": {"hidden_size": 512, "num_attention_heads": 8}}"#,
    )
    .expect("CLIP");
    assert_eq!((clip.shape.width, clip.shape.heads), (512, 8));
    let bare = hub_config(r#"{"model_type": "siglip"}"#).expect("SigLIP's defaults");
    assert_eq!((bare.shape.width, bare.shape.patch), (768, 16));
}

#[test]
fn defaults_and_refusals() {
    let dino = hub_config(
        r#"{"model_type": "dinov2", "hidden_size": 32,
        "num_attention_heads": 2, "patch_size": 14, "image_size": 518,
        "problem_type": "multi_label_classification",
        "architectures": ["Dinov2ForImageClassification"],
        "id2label": {"0": "a", "1": "b", "2": "c"}}"#,
    )
    .expect("a DINOv2");
    assert_eq!((dino.shape.mlp, dino.shape.pos_grid), (128, 37));
    assert_eq!(dino.shape.feature_dim(), 64);
    assert_eq!(dino.scores, Scores::Sigmoid);
    let clip = hub_config(
        r#"{"model_type": "clip", "projection_dim": 24,
        "vision_config": {"hidden_size": 32, "num_attention_heads": 4}}"#,
    )
    .expect("a CLIP");
    assert_eq!(clip.shape.activation, HubActivation::QuickGelu);
    assert_eq!(clip.shape.feature_dim(), 24);
    for (config, says) in [
        (
            r#"{"model_type": "beit"}"#,
            "model_type beit is not built in",
        ),
        (
            r#"{"model_type": "dinov2", "use_swiglu_ffn": true}"#,
            "SwiGLU",
        ),
        (
            r#"{"model_type": "vit", "hidden_act": "relu"}"#,
            "hidden_act relu",
        ),
        (
            r#"{"model_type": "vit", "hidden_size": 50}"#,
            "not a multiple",
        ),
        (
            r#"{"model_type": "vit", "problem_type": "regression",
                "architectures": ["ViTForImageClassification"]}"#,
            "regression",
        ),
        (r#"{"hidden_size": 8}"#, "no model_type"),
    ] {
        let error = hub_config(config).expect_err(config);
        assert!(error.contains(says), "{config}: {error}");
    }
}

/// transformers' ConvNeXt classifier: its stage widths and depths,
/// the defaults it leaves out, and what torchvision's network cannot
/// run refused in one line.
#[test]
fn a_convnext_classifier_with_five_labels() {
    let config = r#"{"model_type": "convnext",
        "architectures": ["ConvNextForImageClassification"],
        "hidden_sizes": [16, 24, 32, 40], "depths": [1, 1, 2, 1],
        "id2label": {"0": "a", "1": "b", "2": "c", "3": "d", "4": "e"}}"#;
    let c = hub_config(config).expect("a ConvNeXt");
    assert_eq!(c.shape.family, Family::Convnext);
    assert_eq!(
        (c.shape.dims.clone(), c.shape.depths.clone()),
        (vec![16, 24, 32, 40], vec![1, 1, 2, 1])
    );
    assert_eq!((c.shape.classes, c.labels.len()), (Some(5), 5));
    assert_eq!((c.shape.eps, c.shape.feature_dim()), (1e-12, 40));
    assert_eq!((c.image_size, c.scores), (224, Scores::Softmax));
    let defaults = hub_config(
        r#"{"model_type": "convnext", "architectures": ["ConvNextForImageClassification"],
            "layer_norm_eps": 1e-6}"#,
    )
    .expect("every size at its default");
    assert_eq!(defaults.shape.dims, [96, 192, 384, 768]);
    assert_eq!(defaults.shape.depths, [3, 3, 9, 3]);
    assert_eq!(
        (defaults.shape.eps, defaults.labels.len()),
        (1e-6, 2),
        "LABEL_0, LABEL_1 as transformers names them"
    );
    let head = r#""architectures": ["ConvNextForImageClassification"]"#;
    for (config, says) in [
        (
            r#"{"model_type": "convnext"}"#.to_owned(),
            "without its classifier head",
        ),
        (
            format!(r#"{{"model_type": "convnext", {head}, "patch_size": 8}}"#),
            "patch_size 8",
        ),
        (
            format!(r#"{{"model_type": "convnext", {head}, "depths": [1, 1, 1]}}"#),
            "not 4 positive counts",
        ),
        (
            format!(r#"{{"model_type": "convnext", {head}, "layer_scale_init_value": 0.0}}"#),
            "without layer scales",
        ),
        (
            format!(r#"{{"model_type": "convnext", {head}, "hidden_act": "relu"}}"#),
            "hidden_act",
        ),
        (
            r#"{"model_type": "convnextv2"}"#.to_owned(),
            "model_type convnextv2 is not built in",
        ),
    ] {
        let error = hub_config(&config).expect_err(&config);
        assert!(error.contains(says), "{config}: {error}");
    }
}

/// timm's repos: the architecture's sizes with `model_args` over them,
/// `num_classes` (ImageNet's names for 1000, `label_names` where
/// given, else numbers), `pretrained_cfg`'s input size; what
/// torchvision's ConvNeXt does not have refused in one line.
#[test]
fn a_timm_convnext_from_its_architecture_and_model_args() {
    let tiny = hub_config(
        r#"{"architecture": "convnext_tiny", "num_classes": 1000,
            "pretrained_cfg": {"input_size": [3, 288, 288], "crop_pct": 1.0}}"#,
    )
    .expect("timm's convnext_tiny");
    assert_eq!(tiny.shape.family, Family::Convnext);
    assert_eq!(
        (tiny.shape.dims.clone(), tiny.shape.depths.clone()),
        (vec![96, 192, 384, 768], vec![3, 3, 9, 3])
    );
    assert_eq!((tiny.image_size, tiny.shape.eps), (288, 1e-6));
    assert_eq!(tiny.labels[0], crate::imagenet_labels()[0]);
    assert_eq!(tiny.labels.len(), 1000);
    let small = hub_config(
        r#"{"architecture": "convnext_base", "num_classes": 3,
            "label_names": ["a", "b", "c"],
            "model_args": {"depths": [1, 1, 2, 1], "dims": [16, 24, 32, 40]}}"#,
    )
    .expect("model_args over convnext_base");
    assert_eq!(small.shape.dims, [16, 24, 32, 40]);
    assert_eq!(small.shape.depths, [1, 1, 2, 1]);
    assert_eq!(
        (small.labels, small.image_size),
        (vec!["a".to_owned(), "b".into(), "c".into()], 224)
    );
    let numbered =
        hub_config(r#"{"architecture": "convnext_small", "num_classes": 2}"#).expect("two classes");
    assert_eq!(numbered.labels, ["0", "1"]);
    for (config, says) in [
        (
            r#"{"architecture": "resnet50"}"#,
            "timm's resnet50 is not built in",
        ),
        (
            r#"{"architecture": "convnext_atto", "model_args": {}}"#,
            "timm's convnext_atto is not built in",
        ),
        (
            r#"{"architecture": "convnext_tiny", "model_args": {"conv_mlp": true}}"#,
            "model_args.conv_mlp",
        ),
        (
            r#"{"architecture": "convnext_tiny", "num_classes": 0}"#,
            "without its classifier head",
        ),
        (
            r#"{"architecture": "convnext_tiny", "num_classes": 2, "label_names": ["a"]}"#,
            "1 label_names for 2 classes",
        ),
    ] {
        let error = hub_config(config).expect_err(config);
        assert!(error.contains(says), "{config}: {error}");
    }
}
