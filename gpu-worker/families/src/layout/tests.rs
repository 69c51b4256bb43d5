//! Layout detection, crop rounding, and where each layout keeps a
//! canonical tensor.

use pipeline_core::CropRounding;

use super::*;

#[test]
fn hugging_face_layouts_crop_as_hf_processors_and_the_others_as_torchvision() {
    let vectors =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors/families");
    for (file, layout, rounding) in [
        (
            "hf_clip/model.safetensors",
            Layout::HfClip,
            CropRounding::Floor,
        ),
        (
            "hf_siglip/model.safetensors",
            Layout::HfSiglip,
            CropRounding::Floor,
        ),
        (
            "hf_dinov2/model.safetensors",
            Layout::HfDinov2,
            CropRounding::Floor,
        ),
        (
            "open_clip_model.safetensors",
            Layout::OpenClip,
            CropRounding::HalfEven,
        ),
        (
            "dinov2_hub_tiny.pth",
            Layout::HubDinov2,
            CropRounding::HalfEven,
        ),
        (
            "vit_b_tiny.pth",
            Layout::TorchvisionVit,
            CropRounding::HalfEven,
        ),
    ] {
        let checkpoint = Checkpoint::open(&vectors.join(file)).expect("a committed file");
        assert_eq!(Layout::detect(&checkpoint), Some(layout), "{file}");
        assert_eq!(layout.crop_rounding(), rounding, "{file}");
    }
}

#[test]
fn hf_blocks_stack_q_k_v() {
    assert_eq!(
        place(Layout::HfClip, "blocks.3.qkv.bias"),
        Place::Stacked(vec![
            "vision_model.encoder.layers.3.self_attn.q_proj.bias".into(),
            "vision_model.encoder.layers.3.self_attn.k_proj.bias".into(),
            "vision_model.encoder.layers.3.self_attn.v_proj.bias".into(),
        ])
    );
    assert_eq!(
        file_shapes(&place(Layout::HfClip, "blocks.3.qkv.weight"), &[96, 32])[2].1,
        vec![32, 32]
    );
}

#[test]
fn torchvision_and_open_clip_names() {
    assert_eq!(
        place(Layout::TorchvisionVit, "blocks.11.fc2.weight"),
        Place::Key("encoder.layers.encoder_layer_11.mlp.3.weight".into())
    );
    assert_eq!(
        place(Layout::TorchvisionVit, "blocks.0.qkv.weight"),
        Place::Key("encoder.layers.encoder_layer_0.self_attention.in_proj_weight".into())
    );
    assert_eq!(
        place(Layout::OpenClip, "proj.weight"),
        Place::Transposed("visual.proj".into())
    );
    assert_eq!(
        place(Layout::HubDinov2, "blocks.2.ls1"),
        Place::Key("blocks.2.ls1.gamma".into())
    );
    assert_eq!(
        place(Layout::TorchvisionConvNext, "features.1.0.block.0.weight"),
        Place::Key("features.1.0.block.0.weight".into())
    );
}

/// torchvision's ConvNeXt names in transformers' and timm's ConvNeXt:
/// the stem,
/// a stage's blocks at `features.{2s+1}`, its downsampling at
/// `features.{2s}`, the head; the layer scales flat.
#[test]
fn hf_convnext_names_torchvisions_tensors() {
    for (ours, theirs) in [
        (
            "features.0.0.weight",
            "convnext.embeddings.patch_embeddings.weight",
        ),
        ("features.0.1.bias", "convnext.embeddings.layernorm.bias"),
        (
            "features.1.0.block.0.weight",
            "convnext.encoder.stages.0.layers.0.dwconv.weight",
        ),
        (
            "features.5.8.block.2.bias",
            "convnext.encoder.stages.2.layers.8.layernorm.bias",
        ),
        (
            "features.7.2.block.3.weight",
            "convnext.encoder.stages.3.layers.2.pwconv1.weight",
        ),
        (
            "features.3.1.block.5.bias",
            "convnext.encoder.stages.1.layers.1.pwconv2.bias",
        ),
        (
            "features.2.0.weight",
            "convnext.encoder.stages.1.downsampling_layer.0.weight",
        ),
        (
            "features.6.1.bias",
            "convnext.encoder.stages.3.downsampling_layer.1.bias",
        ),
        ("classifier.0.weight", "convnext.layernorm.weight"),
        ("classifier.2.bias", "classifier.bias"),
    ] {
        assert_eq!(
            place(Layout::HfConvNext, ours),
            Place::Key(theirs.into()),
            "{ours}"
        );
    }
    for (ours, theirs) in [
        ("features.0.1.weight", "stem.1.weight"),
        (
            "features.5.2.block.0.bias",
            "stages.2.blocks.2.conv_dw.bias",
        ),
        (
            "features.1.0.block.5.weight",
            "stages.0.blocks.0.mlp.fc2.weight",
        ),
        ("features.4.1.weight", "stages.2.downsample.1.weight"),
        ("classifier.0.bias", "head.norm.bias"),
        ("classifier.2.weight", "head.fc.weight"),
    ] {
        assert_eq!(
            place(Layout::TimmConvNext, ours),
            Place::Key(theirs.into()),
            "{ours}"
        );
    }
    assert_eq!(
        place(Layout::TimmConvNext, "features.7.0.layer_scale"),
        Place::Flat("stages.3.blocks.0.gamma".into())
    );
    let scale = place(Layout::HfConvNext, "features.3.1.layer_scale");
    assert_eq!(
        scale,
        Place::Flat("convnext.encoder.stages.1.layers.1.layer_scale_parameter".into())
    );
    assert_eq!(file_shapes(&scale, &[24, 1, 1])[0].1, vec![24]);
}

/// timm's plain ViT names the canonical tensors as DINOv2's torch-hub file
/// does, with its head beside them.
#[test]
fn timm_vit_names() {
    for (ours, theirs) in [
        ("patch.weight", "patch_embed.proj.weight"),
        ("blocks.3.qkv.weight", "blocks.3.attn.qkv.weight"),
        ("blocks.0.out.bias", "blocks.0.attn.proj.bias"),
        ("blocks.11.norm2.weight", "blocks.11.norm2.weight"),
        ("blocks.1.fc1.weight", "blocks.1.mlp.fc1.weight"),
        ("blocks.1.fc2.bias", "blocks.1.mlp.fc2.bias"),
        ("norm.bias", "norm.bias"),
        ("head.weight", "head.weight"),
    ] {
        assert_eq!(
            place(Layout::TimmVit, ours),
            Place::Key(theirs.into()),
            "{ours}"
        );
    }
    assert_eq!(
        place(Layout::TimmVit, "cls"),
        Place::Unsqueezed("cls_token".into(), 2)
    );
    assert_eq!(
        place(Layout::TimmVit, "pos"),
        Place::Unsqueezed("pos_embed".into(), 1)
    );
}

#[test]
fn a_dinov2_mlp_is_read_plain_or_gated_whichever_the_file_holds() {
    let fc1 = place(Layout::HfDinov2Classifier, "blocks.1.fc1.weight");
    let plain = "dinov2.encoder.layer.1.mlp.fc1.weight";
    let gated = "dinov2.encoder.layer.1.mlp.weights_in.weight";
    for (held, want) in [(plain, plain), (gated, gated)] {
        assert_eq!(
            chosen(fc1.clone(), &|k| k == held),
            Place::Key(want.into()),
            "{held}"
        );
    }
    // Neither: the first, so that the error names the plain MLP's key.
    assert_eq!(chosen(fc1.clone(), &|_| false), Place::Key(plain.into()));
    assert_eq!(
        chosen(place(Layout::HfDinov2, "blocks.0.fc2.bias"), &|k| k
            .contains("weights_out")),
        Place::Key("encoder.layer.0.mlp.weights_out.bias".into())
    );
    assert_eq!(file_shapes(&fc1, &[224, 40])[0].0, plain);
}
