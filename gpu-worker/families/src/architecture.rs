//! Every model's architecture, by name ([`Architecture::of`]), and the
//! checkpoint layouts each accepts. Adding a model of an existing family is
//! a registry row (`pipeline_core::ModelSpec`) and its arm here; a new
//! family is a type implementing `network::Network` in a file of its own,
//! a variant here, and its layouts in `layout/`.

use std::path::Path;

use pipeline_core::{
    Family, HubActivation, HubShape, ModelKind, ModelRef, ResolvedWeights, Scores, WorkerConfig,
};

use crate::checkpoint::Checkpoint;
use crate::clip_config::Tower;
use crate::convnext::ConvNextConfig;
use crate::layout::{Layout, LayoutRules};
use crate::resnet::ResNetConfig;
use crate::tensors::Tensors;
use crate::vit::{Activation, Pooling, PosInterpolation, VitConfig};
use crate::weights_error::{WeightsError, summarise};

/// The widths of pipeline's own test CNN's four stages (the last is its
/// feature width).
pub const TINY_WIDTHS: [usize; 4] = [16, 32, 64, 128];

/// The width of EfficientNet-Lite0's pooled features.
pub const EFFICIENTNET_LITE_FEATURES: usize = 1280;

/// A model architecture: a family and its configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum Architecture {
    /// The test CNN (a burn module).
    Tiny,
    /// A ResNet, torchvision's or a Hugging Face one (a burn module).
    ResNet(ResNetConfig),
    /// EfficientNet-Lite0 (a burn module).
    EfficientNetLite0,
    /// A Vision Transformer (torchvision ViT, CLIP, SigLIP, DINOv2).
    Vit(VitConfig),
    /// torchvision's ConvNeXt.
    ConvNext(ConvNextConfig),
}

/// torchvision's ViTs: class token, LayerNorm eps 1e-6, exact GELU.
fn torchvision_vit(patch: usize, width: usize, depth: usize, heads: usize) -> VitConfig {
    VitConfig {
        final_norm: true,
        patch,
        width,
        depth,
        heads,
        mlp: 4 * width,
        class_token: true,
        registers: 0,
        pos_grid: 224 / patch,
        image: 224,
        patch_bias: true,
        pre_norm: false,
        eps: 1e-6,
        activation: Activation::Gelu,
        layer_scale: false,
        pooling: Pooling::Class,
        interpolation: PosInterpolation::Size,
        projection: None,
        classes: Some(1000),
        normalize: false,
        hub: false,
    }
}

/// OpenAI's CLIP image towers: pre-norm, eps 1e-5, QuickGELU (unless the
/// checkpoint's config says GELU: `clip_config.rs`), no patch
/// bias, a projection, normalised output.
fn clip(patch: usize, width: usize, depth: usize, heads: usize, embed: usize) -> VitConfig {
    VitConfig {
        patch_bias: false,
        pre_norm: true,
        eps: 1e-5,
        activation: Activation::QuickGelu,
        projection: Some(embed),
        classes: None,
        normalize: true,
        ..torchvision_vit(patch, width, depth, heads)
    }
}

/// DINOv2 (no registers), trained at 518 px: its 37×37 position grid is
/// resampled to the input's 16×16.
fn dinov2(width: usize, depth: usize, heads: usize) -> VitConfig {
    VitConfig {
        pos_grid: 37,
        layer_scale: true,
        classes: None,
        ..torchvision_vit(14, width, depth, heads)
    }
}

impl Architecture {
    /// The architecture of a named model.
    pub fn of(kind: ModelKind) -> Self {
        match kind {
            ModelKind::Tiny => Self::Tiny,
            ModelKind::Resnet18 => Self::ResNet(ResNetConfig::R18),
            ModelKind::Resnet34 => Self::ResNet(ResNetConfig::R34),
            ModelKind::Resnet50 => Self::ResNet(ResNetConfig::R50),
            ModelKind::Resnet101 => Self::ResNet(ResNetConfig::R101),
            ModelKind::Resnet152 => Self::ResNet(ResNetConfig::R152),
            ModelKind::EfficientnetLite0 => Self::EfficientNetLite0,
            ModelKind::VitB16 => Self::Vit(torchvision_vit(16, 768, 12, 12)),
            ModelKind::VitB32 => Self::Vit(torchvision_vit(32, 768, 12, 12)),
            ModelKind::VitL16 => Self::Vit(torchvision_vit(16, 1024, 24, 16)),
            ModelKind::ConvnextTiny => Self::ConvNext(ConvNextConfig::tiny()),
            ModelKind::ConvnextSmall => Self::ConvNext(ConvNextConfig::small()),
            ModelKind::ConvnextBase => Self::ConvNext(ConvNextConfig::base()),
            ModelKind::ClipVitB32 => Self::Vit(clip(32, 768, 12, 12, 512)),
            ModelKind::ClipVitB16 => Self::Vit(clip(16, 768, 12, 12, 512)),
            ModelKind::ClipVitL14 => Self::Vit(clip(14, 1024, 24, 16, 768)),
            ModelKind::SiglipBasePatch16_224 => Self::Vit(VitConfig {
                class_token: false,
                activation: Activation::GeluTanh,
                pooling: Pooling::Map,
                classes: None,
                normalize: true,
                ..torchvision_vit(16, 768, 12, 12)
            }),
            ModelKind::Dinov2Vits14 => Self::Vit(dinov2(384, 12, 6)),
            ModelKind::Dinov2Vitb14 => Self::Vit(dinov2(768, 12, 12)),
            ModelKind::Dinov2Vitl14 => Self::Vit(dinov2(1024, 24, 16)),
        }
    }

    /// The architecture a Hugging Face repo's config describes (#42): the
    /// transformers family's network at the config's sizes, fed `image`
    /// pixels square (position embeddings resampled to that grid as
    /// transformers does for DINOv2; a ViT, CLIP or SigLIP is fed its own
    /// size, which the coordinator checks).
    pub fn of_hub(shape: &HubShape) -> Self {
        if shape.family == Family::Resnet {
            return Self::ResNet(ResNetConfig::hub(shape));
        }
        if shape.family == Family::Convnext {
            return Self::ConvNext(ConvNextConfig {
                dims: shape.dims.clone(),
                depths: shape.depths.clone(),
                classes: shape.classes.unwrap_or(0),
                head_eps: shape.eps,
            });
        }
        let base = VitConfig {
            mlp: shape.mlp,
            pos_grid: shape.pos_grid,
            image: shape.image,
            eps: shape.eps,
            activation: shape.activation.into(),
            classes: shape.classes,
            hub: true,
            ..torchvision_vit(shape.patch, shape.width, shape.depth, shape.heads)
        };
        Self::Vit(match shape.family {
            Family::Dinov2 => VitConfig {
                layer_scale: true,
                // transformers' Dinov2WithRegisters resamples its position
                // embeddings antialiased; Dinov2 does not.
                registers: shape.registers.unwrap_or(0),
                interpolation: if shape.registers.is_some() {
                    PosInterpolation::SizeAntialias
                } else {
                    PosInterpolation::Size
                },
                // Dinov2ForImageClassification's head reads both.
                pooling: if shape.classes.is_some() {
                    Pooling::ClassAndMean
                } else {
                    Pooling::Class
                },
                ..base
            },
            // CLIPForImageClassification: the mean of the patch tokens as
            // the encoder leaves them (post_layernorm is not on its path).
            Family::Clip if shape.classes.is_some() => VitConfig {
                patch_bias: false,
                pre_norm: true,
                pooling: Pooling::Mean,
                final_norm: false,
                ..base
            },
            // SiglipForImageClassification: the mean of the normed tokens.
            Family::Siglip if shape.classes.is_some() => VitConfig {
                class_token: false,
                pooling: Pooling::Mean,
                ..base
            },
            // A CLIPVisionModel (no projection) embeds its pooled class
            // token as transformers' pooler_output: not CLIP's unit-length
            // embedding space.
            Family::Clip => VitConfig {
                patch_bias: false,
                pre_norm: true,
                projection: shape.projection,
                normalize: shape.projection.is_some(),
                ..base
            },
            Family::Siglip => VitConfig {
                class_token: false,
                pooling: Pooling::Map,
                normalize: true,
                ..base
            },
            _ => base,
        })
    }

    /// The checkpoint layouts this architecture loads by canonical tensor
    /// names. The burn-module CNNs have none: they load through
    /// `burn::store` by their own field names (the burn engine's
    /// `model/weights.rs`).
    pub fn layouts(&self) -> &'static [Layout] {
        match self {
            Self::Tiny | Self::ResNet(_) | Self::EfficientNetLite0 => &[],
            Self::ConvNext(_) => &[
                Layout::TorchvisionConvNext,
                Layout::HfConvNext,
                Layout::HfConvNextBare,
                Layout::TimmConvNext,
            ],
            Self::Vit(c) if c.pooling == Pooling::Map => &[Layout::HfSiglip, Layout::HfSiglipBare],
            Self::Vit(c) if c.projection.is_some() => &[Layout::OpenClip, Layout::HfClip],
            Self::Vit(c) if !c.final_norm => &[Layout::HfClip],
            // A CLIPVisionModel (no projection): CLIP's pre-norm tower.
            Self::Vit(c) if c.pre_norm => &[Layout::HfClip, Layout::HfClipBare],
            Self::Vit(c) if c.hub && !c.class_token => &[Layout::HfSiglip],
            Self::Vit(c) if c.layer_scale && c.classes.is_some() && c.registers > 0 => {
                &[Layout::HfDinov2RegistersClassifier]
            }
            Self::Vit(c) if c.layer_scale && c.classes.is_some() => &[Layout::HfDinov2Classifier],
            Self::Vit(c) if c.layer_scale => &[Layout::HfDinov2, Layout::HubDinov2],
            Self::Vit(c) if c.hub && c.classes.is_some() => &[Layout::HfVit, Layout::TimmVit],
            Self::Vit(c) if c.hub => &[Layout::HfVitBare, Layout::TimmVit],
            Self::Vit(_) => &[Layout::TorchvisionVit],
        }
    }

    /// Canonical tensors and shapes, as `layout` holds them (none for the
    /// burn-module CNNs, see [`Architecture::layouts`]).
    pub fn tensors(&self, layout: Option<Layout>) -> Vec<(String, Vec<usize>)> {
        match self {
            Self::Tiny | Self::ResNet(_) | Self::EfficientNetLite0 => Vec::new(),
            Self::Vit(config) => for_layout(config, layout).tensors(),
            Self::ConvNext(config) => config.tensors(),
        }
    }

    /// Length of the model's embedding.
    pub fn feature_dim(&self) -> usize {
        match self {
            Self::Tiny => TINY_WIDTHS[TINY_WIDTHS.len() - 1],
            Self::ResNet(depth) => depth.feature_dim(),
            Self::EfficientNetLite0 => EFFICIENTNET_LITE_FEATURES,
            Self::Vit(c) => c.feature_dim(),
            Self::ConvNext(c) => c.feature_dim(),
        }
    }
}

/// The network a worker runs, as the coordinator resolved it: a built-in
/// name's and a hub repo's alike. What the burn and CUDA engines build
/// from, deciding nothing again.
#[derive(Debug)]
pub struct NetworkSpec<'a> {
    /// The family at its sizes.
    pub arch: Architecture,
    /// The model's name or repo id, for errors.
    pub name: &'a str,
    /// Its family (zero-shot scoring's rule).
    pub family: Family,
    /// Its weight file; `None`: seeded random weights.
    pub weights: Option<&'a Path>,
    /// What the coordinator read from that file.
    pub resolved: &'a ResolvedWeights,
    /// How its own head's logits become scores.
    pub scores: Scores,
}

/// The network `config` runs (see [`NetworkSpec`]); or, for a model the
/// engines that build networks do not run, why not.
pub fn network(config: &WorkerConfig) -> Result<NetworkSpec<'_>, String> {
    match &config.model {
        ModelRef::Builtin(kind) => Ok(NetworkSpec {
            arch: Architecture::of(*kind),
            name: kind.name(),
            family: kind.family(),
            weights: config.weights.as_deref(),
            resolved: &config.resolved,
            scores: Scores::Softmax,
        }),
        ModelRef::Hub(hub) => Ok(NetworkSpec {
            arch: Architecture::of_hub(&hub.shape),
            name: &hub.repo,
            family: hub.shape.family,
            weights: Some(&hub.weights),
            resolved: &config.resolved,
            scores: hub.scores,
        }),
        ModelRef::Onnx(_) => Err(format!(
            "the {} engine runs the built-in and hub models, not {}",
            config.engine.name(),
            config.model
        )),
    }
}

/// The checkpoint layouts `kind` loads, in words, for `pipeline models`.
pub fn checkpoint_layouts(kind: ModelKind) -> Vec<&'static str> {
    let arch = match Architecture::of(kind) {
        Architecture::Tiny => return vec!["pipeline's own test CNN (.pth, .safetensors)"],
        Architecture::ResNet(_) => return vec!["torchvision state_dict (.pth, .safetensors)"],
        Architecture::EfficientNetLite0 => {
            return vec!["efficientnet-lite-pytorch state_dict (.pth)"];
        }
        arch @ (Architecture::Vit(_) | Architecture::ConvNext(_)) => arch,
    };
    arch.layouts()
        .iter()
        .map(|layout| match layout {
            Layout::TorchvisionVit | Layout::TorchvisionConvNext => {
                "torchvision state_dict (.pth, .safetensors)"
            }
            Layout::OpenClip => {
                "OpenCLIP / OpenAI state_dict (open_clip_pytorch_model.bin, open_clip_model.safetensors)"
            }
            Layout::HfClip => {
                "Hugging Face CLIPModel or CLIPVisionModel(WithProjection) (model.safetensors, pytorch_model.bin)"
            }
            Layout::HfClipBare => "CLIPVisionModel saved by transformers 5 (no vision_model. prefix)",
            Layout::HfSiglip => {
                "Hugging Face SiglipModel or SiglipVisionModel (model.safetensors, pytorch_model.bin)"
            }
            Layout::HfSiglipBare => "SiglipVisionModel saved by transformers 5 (no vision_model. prefix)",
            Layout::HfDinov2 => "Hugging Face Dinov2Model (model.safetensors, pytorch_model.bin)",
            Layout::HubDinov2 => "DINOv2 torch-hub state_dict (dinov2_vit*14_pretrain.pth)",
            Layout::HfVit => "Hugging Face ViTForImageClassification (model.safetensors)",
            Layout::HfVitBare => "Hugging Face ViTModel (model.safetensors)",
            Layout::HfDinov2RegistersClassifier => {
                "Hugging Face Dinov2WithRegistersForImageClassification (model.safetensors)"
            }
            Layout::HfDinov2Classifier => {
                "Hugging Face Dinov2ForImageClassification (model.safetensors)"
            }
            Layout::HfConvNext => {
                "Hugging Face ConvNextForImageClassification (model.safetensors, pytorch_model.bin)"
            }
            Layout::HfConvNextBare => "Hugging Face ConvNextModel (model.safetensors)",
            Layout::TimmConvNext => "timm ConvNeXt (model.safetensors, pytorch_model.bin)",
            Layout::TimmVit => "timm VisionTransformer (model.safetensors, pytorch_model.bin)",
        })
        .collect()
}

/// What a layout changes in a config: DINOv2's torch-hub code resamples
/// position embeddings with a 0.1 offset in the scale factor, Hugging Face
/// to the exact size.
pub fn for_layout(config: &VitConfig, layout: Option<Layout>) -> VitConfig {
    let mut config = config.clone();
    if layout == Some(Layout::HubDinov2) {
        config.interpolation = PosInterpolation::HubOffset;
    }
    config
}

/// `config` as a checkpoint in `layout` runs it: the layout's position
/// resampling, and the activation a CLIP config beside the weights names,
/// as the coordinator read them (`pipeline_core::ResolvedWeights`). Every
/// engine's ViT starts here.
pub fn vit_config_for(
    config: &VitConfig,
    layout: Option<Layout>,
    activation: Option<HubActivation>,
) -> VitConfig {
    let mut config = for_layout(config, layout);
    if let Some(activation) = activation {
        config.activation = activation.into();
    }
    config
}

/// The weights at `path` for `arch`, as every engine builds from them:
/// the layout told from the tensor names (checked against the shapes
/// `arch` needs), the activation a CLIP config beside the file names for
/// the image tower (each of `towers`' configs must read), and the
/// checkpoint's zero-shot logit scale and bias. The CNNs that load by
/// their own field names have none of these.
pub fn resolve(
    arch: &Architecture,
    name: &str,
    path: &Path,
    towers: &[Tower],
) -> Result<ResolvedWeights, WeightsError> {
    match arch {
        Architecture::Tiny | Architecture::ResNet(_) | Architecture::EfficientNetLite0 => {
            Ok(ResolvedWeights::default())
        }
        Architecture::Vit(_) | Architecture::ConvNext(_) => {
            let checkpoint = Checkpoint::open_shapes(path)?;
            let (layout, _) = check(arch, name, &checkpoint)?;
            let mut activation = None;
            for &tower in towers {
                let named = super::clip_config::activation(path, layout, tower, name)?;
                if tower == Tower::Image {
                    activation = named.map(Into::into);
                }
            }
            Ok(ResolvedWeights {
                layout: Some(layout),
                activation,
                logit: crate::zero_shot::logit_params(&checkpoint)?,
            })
        }
    }
}

/// Detects `checkpoint`'s layout, checks that `arch` accepts it and that
/// every tensor is there with the right shape.
pub fn check<'a>(
    arch: &Architecture,
    name: &str,
    checkpoint: &'a Checkpoint,
) -> Result<(Layout, Tensors<'a>), WeightsError> {
    let mismatch = |problem: String| WeightsError::Mismatch {
        path: checkpoint.path().to_path_buf(),
        model: name.to_owned(),
        problem,
    };
    let accepted = arch.layouts();
    let expected = accepted
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" or ");
    let Some(layout) = Layout::detect(checkpoint) else {
        let looks = Layout::describe_unknown(checkpoint);
        let first: Vec<String> = checkpoint.names().take(3).map(str::to_owned).collect();
        return Err(mismatch(summarise(
            &format!("it holds {looks}, not {expected} checkpoint; its first tensors"),
            &first,
        )));
    };
    if !accepted.contains(&layout) {
        return Err(mismatch(format!(
            "it looks like {layout} checkpoint, not {expected} checkpoint"
        )));
    }
    Ok((layout, check_as(arch, name, checkpoint, layout)?))
}

/// Checks that every tensor of `arch` is in `checkpoint` in `layout`, the
/// layout the coordinator detected ([`check`]), with the right shape: a
/// mismatch here is a file that changed since.
pub fn check_as<'a>(
    arch: &Architecture,
    name: &str,
    checkpoint: &'a Checkpoint,
    layout: Layout,
) -> Result<Tensors<'a>, WeightsError> {
    Tensors::check(checkpoint, layout, name, arch.tensors(Some(layout)))
}

/// The layout the coordinator resolved for a checkpoint that loads by
/// canonical names; none is a coordinator that skipped resolving it, an
/// error rather than a guess.
pub fn resolved_layout(
    resolved: &ResolvedWeights,
    name: &str,
    path: &Path,
) -> Result<Layout, WeightsError> {
    resolved.layout.ok_or_else(|| WeightsError::Mismatch {
        path: path.to_path_buf(),
        model: name.to_owned(),
        problem: "its layout was not resolved before the worker started".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Model → layout → tensor name → shape.
    type Shapes = BTreeMap<String, BTreeMap<String, BTreeMap<String, Vec<usize>>>>;

    /// `named_shapes.json`: what upstream code builds for every named model.
    fn named_shapes() -> Shapes {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/vectors/families/named_shapes.json"
        );
        let text = std::fs::read_to_string(path).expect("named_shapes.json is committed");
        serde_json::from_str(&text).expect("named_shapes.json parses")
    }

    /// Names and shapes of the real, full-size upstream models in every
    /// layout (`scripts/make_family_vectors.py`, from torchvision, open_clip
    /// and transformers): each named model accepts exactly those.
    #[test]
    fn named_models_fit_their_upstream_checkpoints_at_full_size() {
        let all = named_shapes();
        let mut checked = 0;
        for (name, layouts) in &all {
            let kind: ModelKind = name.parse().expect("a model name");
            let arch = Architecture::of(kind);
            for (layout, shapes) in layouts {
                let checkpoint = Checkpoint::from_shapes(layout, shapes.clone());
                if let Err(e) = check(&arch, name, &checkpoint) {
                    panic!("{name} in the {layout} layout: {e}");
                }
                checked += 1;
            }
            // And the model's embedding size is the one the CLI announces.
            assert_eq!(arch.feature_dim(), kind.feature_dim(), "{name}");
        }
        assert_eq!(checked, 23, "every named model in every layout");
    }

    #[test]
    fn openai_state_dicts_with_their_int_tensors_load() {
        let all = named_shapes();
        let mut shapes = all["clip_vit_b_32"]["open_clip"].clone();
        for extra in ["input_resolution", "context_length", "vocab_size"] {
            shapes.insert(extra.to_owned(), Vec::new());
        }
        let arch = Architecture::of(ModelKind::ClipVitB32);
        let openai = Checkpoint::from_shapes("ViT-B-32.pth", shapes.clone());
        if let Err(e) = check(&arch, "clip_vit_b_32", &openai) {
            panic!("{e}");
        }
        // Any other stray tensor is still a mismatch.
        shapes.insert("visual.extra".to_owned(), vec![3]);
        let stray = Checkpoint::from_shapes("stray.pth", shapes);
        assert!(check(&arch, "clip_vit_b_32", &stray).is_err());
    }

    #[test]
    fn a_b16_checkpoint_is_refused_for_b32_naming_the_shapes() {
        let all = named_shapes();
        let b16 = Checkpoint::from_shapes("b16.bin", all["clip_vit_b_16"]["open_clip"].clone());
        let arch = Architecture::of(ModelKind::ClipVitB32);
        let error = match check(&arch, "clip_vit_b_32", &b16) {
            Ok(_) => panic!("B/16 weights fit B/32"),
            Err(e) => e.to_string(),
        };
        assert!(
            error.contains("looks like an OpenCLIP/OpenAI CLIP checkpoint"),
            "{error}"
        );
        assert!(
            error.contains("visual.conv1.weight is [768, 3, 16, 16], expected [768, 3, 32, 32]"),
            "{error}"
        );
        assert!(!error.contains('\n') && error.len() < 600, "{error}");
    }
}
