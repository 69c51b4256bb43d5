//! What a repo's `config.json` makes of a model: transformers' families
//! and timm's ConvNeXts, their defaults and the one-line refusals.

use super::*;
use crate::model::Scores;

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
            r#"{"architecture": "efficientnet_b0"}"#,
            "timm's efficientnet_b0 is not built in",
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
            r#"{"architecture": "convnext_tiny", "num_classes": 2, "label_names": ["a"]}"#,
            "1 label_names for 2 classes",
        ),
    ] {
        let error = hub_config(config).expect_err(config);
        assert!(error.contains(says), "{config}: {error}");
    }
}

/// transformers' `ResNetConfig`: microsoft/resnet-50's config (each key
/// left out at transformers' default), other widths and the v1 switches,
/// and what torchvision's ResNet does not have refused in one line.
#[test]
fn a_resnet_classifier_from_its_config() {
    // microsoft/resnet-50's config.json, its 1000 labels cut to two.
    let r50 = hub_config(
        r#"{"architectures": ["ResNetForImageClassification"], "model_type": "resnet",
            "depths": [3, 4, 6, 3], "downsample_in_first_stage": false,
            "embedding_size": 64, "hidden_act": "relu",
            "hidden_sizes": [256, 512, 1024, 2048], "layer_type": "bottleneck",
            "num_channels": 3, "id2label": {"0": "tench", "1": "goldfish"}}"#,
    )
    .expect("microsoft/resnet-50");
    assert_eq!(r50.shape.family, Family::Resnet);
    assert_eq!(r50.shape.dims, [256, 512, 1024, 2048]);
    assert_eq!(r50.shape.depths, [3, 4, 6, 3]);
    assert_eq!(
        r50.shape.resnet,
        Some(HubResNet {
            stem: 64,
            bottleneck: true,
            downsample_in_first_stage: false,
            downsample_in_bottleneck: false,
            timm: false,
        })
    );
    assert_eq!(
        (r50.shape.feature_dim(), r50.shape.classes),
        (2048, Some(2))
    );
    assert_eq!(r50.labels, ["tench", "goldfish"]);
    assert_eq!(r50.scores, Scores::Softmax);
    // Every key left out: transformers' defaults, its two default labels.
    let bare = hub_config(
        r#"{"model_type": "resnet", "architectures": ["ResNetForImageClassification"]}"#,
    )
    .expect("defaults");
    assert_eq!(bare.shape, r50.shape);
    assert_eq!(bare.labels, ["LABEL_0", "LABEL_1"]);
    let v1 = hub_config(
        r#"{"model_type": "resnet", "architectures": ["ResNetForImageClassification"],
            "layer_type": "basic", "embedding_size": 8, "hidden_sizes": [8, 16, 24, 30],
            "depths": [2, 1, 1, 1], "downsample_in_first_stage": true,
            "downsample_in_bottleneck": true, "num_labels": 3,
            "problem_type": "multi_label_classification"}"#,
    )
    .expect("basic blocks, other widths");
    let blocks = v1.shape.resnet.expect("a ResNet's blocks");
    assert!(!blocks.bottleneck && blocks.downsample_in_first_stage);
    assert!(blocks.downsample_in_bottleneck);
    assert_eq!((blocks.stem, v1.shape.width), (8, 30));
    assert_eq!((v1.labels.len(), v1.scores), (3, Scores::Sigmoid));
    let head = r#""architectures": ["ResNetForImageClassification"]"#;
    for (config, says) in [
        (
            format!(r#"{{"model_type": "resnet", {head}, "layer_type": "preactivation"}}"#),
            "layer_type \"preactivation\" is not built in",
        ),
        (
            format!(r#"{{"model_type": "resnet", {head}, "hidden_act": "gelu"}}"#),
            "hidden_act \"gelu\" is not built in",
        ),
        (
            format!(r#"{{"model_type": "resnet", {head}, "hidden_sizes": [8, 16, 24, 30]}}"#),
            "hidden_sizes 30 is not a multiple of 4",
        ),
        (
            format!(r#"{{"model_type": "resnet", {head}, "depths": [2, 2, 2]}}"#),
            "not 4 positive counts",
        ),
        (
            format!(r#"{{"model_type": "resnet", {head}, "embedding_size": 0}}"#),
            "embedding_size is 0",
        ),
        (
            format!(r#"{{"model_type": "resnet", {head}, "num_channels": 1}}"#),
            "num_channels 1 is not 3",
        ),
        (
            format!(r#"{{"model_type": "resnet", {head}, "downsample_in_bottleneck": 1}}"#),
            "downsample_in_bottleneck is 1, not true or false",
        ),
    ] {
        let error = hub_config(&config).expect_err(&config);
        assert!(error.contains(says), "{config}: {error}");
    }
}

/// timm's plain ViTs: the sizes of the architecture's name, `model_args`
/// over them, `pretrained_cfg`'s input size, a head or (num_classes 0)
/// the embedding; what torchvision's ViT does not have refused.
#[test]
fn a_timm_vit_from_its_architecture_and_model_args() {
    let base = hub_config(
        r#"{"architecture": "vit_base_patch16_224", "num_classes": 1000,
            "global_pool": "token",
            "model_args": {"global_pool": "token", "in_chans": 3, "num_classes": 1000},
            "pretrained_cfg": {"input_size": [3, 224, 224], "crop_pct": 0.9,
                               "interpolation": "bicubic", "mean": [0.5, 0.5, 0.5],
                               "std": [0.5, 0.5, 0.5]}}"#,
    )
    .expect("timm's vit_base_patch16_224");
    assert_eq!(base.shape.family, Family::Vit);
    assert_eq!(
        (
            base.shape.width,
            base.shape.depth,
            base.shape.heads,
            base.shape.mlp
        ),
        (768, 12, 12, 3072)
    );
    assert_eq!(
        (base.shape.patch, base.shape.pos_grid, base.image_size),
        (16, 14, 224)
    );
    assert_eq!(
        (base.shape.eps, base.shape.activation),
        (1e-6, HubActivation::Gelu)
    );
    assert_eq!(base.labels.len(), 1000);
    assert_eq!(base.shape.classes, Some(1000));
    let small = hub_config(
        r#"{"architecture": "vit_small_patch32_384", "num_classes": 2,
            "label_names": ["no", "yes"],
            "model_args": {"embed_dim": 48, "depth": 2, "num_heads": 3, "mlp_ratio": 2.5,
                           "img_size": [64, 64], "patch_size": 16},
            "pretrained_cfg": {"input_size": [3, 64, 64]}}"#,
    )
    .expect("model_args over vit_small_patch32_384");
    assert_eq!(
        (
            small.shape.width,
            small.shape.depth,
            small.shape.heads,
            small.shape.mlp
        ),
        (48, 2, 3, 120)
    );
    assert_eq!(
        (small.shape.patch, small.shape.pos_grid, small.image_size),
        (16, 4, 64)
    );
    assert_eq!(small.labels, ["no", "yes"]);
    let bare = hub_config(r#"{"architecture": "vit_large_patch14_224", "num_classes": 0}"#)
        .expect("no head");
    assert_eq!((bare.shape.classes, bare.labels.len()), (None, 0));
    assert_eq!(
        (bare.shape.width, bare.shape.patch, bare.shape.pos_grid),
        (1024, 14, 16)
    );
    for (config, says) in [
        (
            r#"{"architecture": "vit_base_patch16_clip_224"}"#,
            "timm's vit_base_patch16_clip_224 is not built in",
        ),
        (
            r#"{"architecture": "vit_giant_patch14_224"}"#,
            "timm's vit_giant_patch14_224 is not built in",
        ),
        (
            r#"{"architecture": "vit_base_patch16_224", "model_args": {"global_pool": "avg"}}"#,
            "model_args.global_pool \"avg\" is not built in",
        ),
        (
            r#"{"architecture": "vit_base_patch16_224", "model_args": {"reg_tokens": 4}}"#,
            "model_args.reg_tokens 4",
        ),
        (
            r#"{"architecture": "vit_base_patch16_224", "model_args": {"init_values": 1e-5}}"#,
            "model_args.init_values",
        ),
        (
            r#"{"architecture": "vit_base_patch16_224", "model_args": {"class_token": false}}"#,
            "model_args.class_token false",
        ),
        (
            r#"{"architecture": "vit_base_patch16_224", "model_args": {"num_heads": 5}}"#,
            "embed_dim 768 is not a multiple of num_heads 5",
        ),
        (
            r#"{"architecture": "vit_base_patch16_224", "model_args": {"img_size": 100}}"#,
            "img_size 100 is not a multiple of patch_size 16",
        ),
        (
            r#"{"architecture": "vit_base_patch16_224", "model_args": {"img_size": [64, 96]}}"#,
            "img_size [64,96] is not a square size",
        ),
    ] {
        let error = hub_config(config).expect_err(config);
        assert!(error.contains(says), "{config}: {error}");
    }
}

mod towers;

#[test]
fn dinov2_giant_s_gated_mlp_is_two_thirds_wide_rounded_to_8() {
    // facebook/dinov2-giant's config: 1536 wide, mlp_ratio 4, SwiGLU.
    let giant = hub_config(
        r#"{"model_type": "dinov2", "hidden_size": 1536, "num_hidden_layers": 40,
            "num_attention_heads": 24, "mlp_ratio": 4, "use_swiglu_ffn": true,
            "hidden_act": "gelu", "image_size": 518, "patch_size": 14}"#,
    )
    .expect("the giant");
    assert_eq!(giant.shape.family, Family::Dinov2);
    assert_eq!(giant.shape.activation, HubActivation::SwiGlu);
    assert_eq!((giant.shape.width, giant.shape.mlp), (1536, 4096));
    // Widths whose two thirds are no multiple of 8 round up, as
    // transformers' `(int(h * 2 / 3) + 7) // 8 * 8`.
    for (width, ratio, mlp) in [(40, 4, 112), (48, 2, 64), (36, 3, 72), (20, 4, 56)] {
        let config = hub_config(&format!(
            r#"{{"model_type": "dinov2", "hidden_size": {width}, "num_attention_heads": 4,
                "mlp_ratio": {ratio}, "use_swiglu_ffn": true}}"#
        ))
        .expect("a small gated DINOv2");
        assert_eq!(config.shape.mlp, mlp, "{width} x {ratio}");
    }
    // Without the flag, the plain MLP and hidden_act.
    let plain =
        hub_config(r#"{"model_type": "dinov2", "use_swiglu_ffn": false}"#).expect("a plain DINOv2");
    assert_eq!(
        (plain.shape.mlp, plain.shape.activation),
        (3072, HubActivation::Gelu)
    );
}

#[test]
fn an_open_clip_config_gives_its_vit_and_its_transform() {
    let (config, spec) = crate::open_clip_config(
        r#"{"model_cfg": {"embed_dim": 1024, "quick_gelu": true,
              "vision_cfg": {"image_size": 378, "layers": 32, "width": 1280,
                             "head_width": 80, "patch_size": 14}},
            "preprocess_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25],
                               "interpolation": "bilinear", "resize_mode": "shortest"}}"#,
    )
    .expect("DFN5B's ViT-H-14-378");
    let s = &config.shape;
    assert_eq!(s.family, Family::Clip);
    assert_eq!(
        (
            s.width, s.depth, s.heads, s.mlp, s.patch, s.image, s.pos_grid
        ),
        (1280, 32, 16, 5120, 14, 378, 27)
    );
    assert_eq!(
        (s.projection, s.activation),
        (Some(1024), HubActivation::QuickGelu)
    );
    assert_eq!((s.eps, s.classes, config.image_size), (1e-5, None, 378));
    assert_eq!((spec.resize_shorter, spec.crop), (378, 378));
    assert_eq!(spec.filter, crate::ResizeFilter::Bilinear);
    // open_clip's defaults: OpenAI's ViT-B/16 at 224 px, GELU, bicubic,
    // OpenAI's statistics.
    let (config, spec) = crate::open_clip_config(
        r#"{"model_cfg": {"embed_dim": 512,
        "vision_cfg": {}}}"#,
    )
    .expect("the defaults");
    assert_eq!(
        (
            config.shape.width,
            config.shape.heads,
            config.shape.patch,
            config.shape.image
        ),
        (768, 12, 16, 224)
    );
    assert_eq!(config.shape.activation, HubActivation::Gelu);
    assert_eq!(spec.filter, crate::ResizeFilter::Bicubic);
    assert!(
        (spec.normalize.mean[0] - 0.481_454_66 * 255.0).abs() < 1e-3,
        "{:?}",
        spec.normalize
    );
}

#[test]
fn what_open_clip_s_vit_options_add_is_refused_in_one_line() {
    for (vision, says) in [
        (
            r#""timm_model_name": "vit_base_patch16_siglip_224""#,
            "timm image towers",
        ),
        (
            r#""layers": [3, 4, 6, 3], "width": 64"#,
            "ResNet image towers",
        ),
        (
            r#""ls_init_value": 0.1"#,
            "ls_init_value 0.1 is not built in",
        ),
        (r#""attentional_pool": true"#, "attentional_pool true"),
        (r#""pool_type": "avg""#, "pool_type \"avg\""),
        (r#""no_ln_pre": true"#, "no_ln_pre true"),
        (r#""global_average_pool": true"#, "global_average_pool true"),
        (r#""input_patchnorm": true"#, "input_patchnorm true"),
        (r#""image_size": [224, 448]"#, "not a square"),
        (r#""width": 100"#, "not a multiple of its head_width 64"),
    ] {
        let text = format!(r#"{{"model_cfg": {{"embed_dim": 8, "vision_cfg": {{{vision}}}}}}}"#);
        let err = crate::open_clip_config(&text).expect_err(vision);
        assert!(err.contains(says), "{vision}: {err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }
    let squash = r#"{"model_cfg": {"embed_dim": 8, "vision_cfg": {}},
        "preprocess_cfg": {"resize_mode": "squash"}}"#;
    let err = crate::open_clip_config(squash).expect_err("squash");
    assert!(err.contains("resize_mode squash is not built in"), "{err}");
    let err = crate::open_clip_config(r#"{"vision_cfg": {}}"#).expect_err("no model_cfg");
    assert!(err.contains("no model_cfg"), "{err}");
}

/// open_clip's and timm's sizes and statistics are held to the flags'
/// limits, each refusal naming the file and the field; what open_clip
/// broadcasts (one number for the three channels) is taken.
#[test]
fn open_clip_and_timm_values_past_the_flags_limits_are_refused() {
    for (vision, preprocess, says) in [
        (
            r#""image_size": 30000, "patch_size": 16"#,
            "{}",
            "open_clip_config.json: vision_cfg.image_size 30000: expected 1..=8192 pixels",
        ),
        (
            "",
            r#"{"std": [0.5, 0, 0.5]}"#,
            "open_clip_config.json: preprocess_cfg: std [0.5,0,0.5]: 0 is not a positive number",
        ),
        (
            "",
            r#"{"mean": [0.5, "x", 0.5]}"#,
            "open_clip_config.json: preprocess_cfg: mean [0.5,\"x\",0.5]: expected three numbers",
        ),
        (
            "",
            r#"{"std": 0}"#,
            "open_clip_config.json: preprocess_cfg: std 0: the upstream reads it as not given",
        ),
    ] {
        let text = format!(
            r#"{{"model_cfg": {{"embed_dim": 8, "vision_cfg": {{{vision}}}}},
                "preprocess_cfg": {preprocess}}}"#
        );
        let err = crate::open_clip_config(&text).expect_err(&text);
        assert!(err.contains(says), "{text}: {err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }
    let (_, spec) = crate::open_clip_config(
        r#"{"model_cfg": {"embed_dim": 8, "vision_cfg": {}},
            "preprocess_cfg": {"mean": 0.5, "std": [0.25]}}"#,
    )
    .expect("open_clip broadcasts a number, and Normalize a one-element list");
    assert_eq!(spec.normalize.mean, [0.5 * 255.0; 3]);
    assert_eq!(spec.normalize.std, [0.25 * 255.0; 3]);
    let err = hub_config(
        r#"{"architecture": "convnext_tiny", "num_classes": 3,
            "pretrained_cfg": {"input_size": [3, 30000, 30000]}}"#,
    )
    .expect_err("a timm input past the limit");
    assert!(
        err.contains("config.json: pretrained_cfg.input_size 30000: expected 1..=8192 pixels"),
        "{err}"
    );
}

#[test]
fn an_open_clip_config_gives_its_text_tower() {
    let text = crate::open_clip_text(
        r#"{"model_cfg": {"embed_dim": 1024, "quick_gelu": true,
              "vision_cfg": {"width": 1280},
              "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 1024,
                           "heads": 16, "layers": 24}}}"#,
    )
    .expect("ViT-H-14's text tower");
    assert_eq!(text.family, Family::Clip);
    assert_eq!(
        (
            text.vocab,
            text.context,
            text.width,
            text.depth,
            text.heads,
            text.mlp
        ),
        (49408, 77, 1024, 24, 16, 4096)
    );
    assert_eq!(
        (text.projection, text.activation, text.eps),
        (1024, HubActivation::QuickGelu, 1e-5)
    );
    // open_clip's defaults: ViT-B's 512-wide, 12-layer tower, GELU.
    let text = crate::open_clip_text(r#"{"model_cfg": {"embed_dim": 512}}"#).expect("defaults");
    assert_eq!((text.width, text.depth, text.heads), (512, 12, 8));
    assert_eq!(text.activation, HubActivation::Gelu);
    for (cfg, says) in [
        (
            r#""hf_model_name": "roberta-base""#,
            "Hugging Face text towers",
        ),
        (
            r#""hf_tokenizer_name": "timm/ViT-B-16-SigLIP""#,
            "Hugging Face text towers",
        ),
        (
            r#""pool_type": "last""#,
            "pool_type \"last\" is not built in",
        ),
        (r#""no_causal_mask": true"#, "no_causal_mask true"),
        (r#""proj_bias": true"#, "proj_bias true"),
        (
            r#""width": 100, "heads": 8"#,
            "not a multiple of its heads 8",
        ),
    ] {
        let json = format!(r#"{{"model_cfg": {{"embed_dim": 8, "text_cfg": {{{cfg}}}}}}}"#);
        let err = crate::open_clip_text(&json).expect_err(cfg);
        assert!(err.contains(says), "{cfg}: {err}");
    }
    let custom = r#"{"model_cfg": {"embed_dim": 8, "custom_text": true}}"#;
    let err = crate::open_clip_text(custom).expect_err("custom_text");
    assert!(err.contains("custom text towers"), "{err}");
    let odd = r#"{"model_cfg": {"embed_dim": 8, "quick_gelu": "yes"}}"#;
    let err = crate::open_clip_text(odd).expect_err("quick_gelu");
    assert!(err.contains("quick_gelu is \"yes\""), "{err}");
}
