//! torchvision ConvNeXt's plan: [`ConvNextPlan`].

use std::path::Path;

use super::ops::{
    Gemm, LayerNorm, activate, add, gemm, layer_norm, layer_norm_of, linear, nchw_patches,
    not_this, patch_gemm, with_checked_tensors,
};
use model_families::Architecture;
use model_families::WeightsError;
use model_families::convnext::ConvNextConfig;
use model_families::tensors::Tensors;
use model_families::transformer::Activation;

/// One ConvNeXt block, channels last.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvNextBlock {
    /// The depthwise 7×7 filter as `[7, 7, C]`: a tap's channels side by
    /// side, as the engine's `depthwise7_nhwc_f16` kernel reads them.
    pub dw_taps: Vec<f32>,
    /// Its bias.
    pub dw_bias: Vec<f32>,
    /// The LayerNorm over channels.
    pub norm: LayerNorm,
    /// `C → 4C`, then GELU.
    pub fc1: Gemm,
    /// `4C → C`, the layer scale γ folded in.
    pub fc2: Gemm,
}

/// One stage: its downsampling (LayerNorm over channels, then the 2×2
/// stride-2 convolution as a GEMM over `(row, column, channel)` patches)
/// and its blocks.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvNextStage {
    /// Before the downsampling convolution (stages after the first).
    pub down: Option<(LayerNorm, Gemm)>,
    /// The blocks.
    pub blocks: Vec<ConvNextBlock>,
}

/// torchvision's ConvNeXt as the CUDA engine will run it, channels last:
/// the 4×4 stride-4 stem and the 2×2 downsamplings are GEMMs over
/// non-overlapping patches, the depthwise 7×7 the engine's own kernel, the
/// MLPs GEMMs with the layer scale folded into the second.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvNextPlan {
    /// The architecture.
    pub config: ConvNextConfig,
    /// `[3·4·4, C₀]` over `(channel, row, column)` of the NCHW input.
    pub stem: Gemm,
    /// After the stem.
    pub stem_norm: LayerNorm,
    /// The stages.
    pub stages: Vec<ConvNextStage>,
    /// After the global mean.
    pub head_norm: LayerNorm,
    /// The classifier; `None` for a checkpoint without its head.
    pub classifier: Option<Gemm>,
}

/// The plan of a ConvNeXt checkpoint, resolved here as the coordinator
/// resolves it ([`convnext_plan_resolved`]).
pub fn convnext_plan(
    arch: &Architecture,
    name: &str,
    path: &Path,
) -> Result<ConvNextPlan, WeightsError> {
    convnext_plan_resolved(arch, name, path, &super::ops::resolve(arch, name, path)?)
}

/// The plan of a ConvNeXt checkpoint in the layout the coordinator
/// resolved, read as the burn engine reads it.
pub fn convnext_plan_resolved(
    arch: &Architecture,
    name: &str,
    path: &Path,
    resolved: &pipeline_core::ResolvedWeights,
) -> Result<ConvNextPlan, WeightsError> {
    let Architecture::ConvNext(config) = arch else {
        return Err(not_this(path, name, "not a ConvNeXt"));
    };
    with_checked_tensors(arch, name, path, resolved, |_, tensors| {
        pack(config, tensors)
    })
}

/// The plan of the seeded weights the burn engine draws for `name` from
/// `seed` (benchmarks, and runs without `--weights`).
pub fn convnext_plan_seeded(
    arch: &Architecture,
    name: &str,
    seed: u64,
) -> Result<ConvNextPlan, WeightsError> {
    let Architecture::ConvNext(config) = arch else {
        return Err(not_this(Path::new(""), name, "not a ConvNeXt"));
    };
    let tensors = model_families::tensors::Tensors::seeded(seed, name, arch.tensors(None));
    pack(config, &tensors)
}

/// The plan of `config` from its canonical tensors (torchvision's names).
fn pack(config: &ConvNextConfig, tensors: &Tensors<'_>) -> Result<ConvNextPlan, WeightsError> {
    let take = |name: &str| tensors.take(name).map(|t| (t.shape, t.values));
    let patches = |name: &str, channels_last: bool| -> Result<Gemm, WeightsError> {
        let (shape, w) = take(&format!("{name}.weight"))?;
        let bias = take(&format!("{name}.bias"))?.1;
        Ok(patch_gemm(&shape, &w, Some(bias), channels_last))
    };
    let mut stages = Vec::new();
    for (s, &depth) in config.depths.iter().enumerate() {
        let down = if s > 0 {
            let f = 2 * s;
            Some((
                layer_norm_of(&take, &format!("features.{f}.0"))?,
                patches(&format!("features.{f}.1"), true)?,
            ))
        } else {
            None
        };
        let mut blocks = Vec::new();
        for j in 0..depth {
            let b = format!("features.{}.{j}", 2 * s + 1);
            let (shape, dw) = take(&format!("{b}.block.0.weight"))?;
            let c = shape[0];
            let mut dw_taps = vec![0.0; 49 * c];
            for ch in 0..c {
                for tap in 0..49 {
                    dw_taps[tap * c + ch] = dw[ch * 49 + tap];
                }
            }
            let gamma = take(&format!("{b}.layer_scale"))?.1;
            blocks.push(ConvNextBlock {
                dw_taps,
                dw_bias: take(&format!("{b}.block.0.bias"))?.1,
                norm: layer_norm_of(&take, &format!("{b}.block.2"))?,
                fc1: linear(&take, &format!("{b}.block.3"), true, None)?,
                fc2: linear(&take, &format!("{b}.block.5"), true, Some(&gamma))?,
            });
        }
        stages.push(ConvNextStage { down, blocks });
    }
    Ok(ConvNextPlan {
        stem: patches("features.0.0", false)?,
        stem_norm: layer_norm_of(&take, "features.0.1")?,
        stages,
        head_norm: layer_norm_of(&take, "classifier.0")?,
        classifier: (config.classes > 0)
            .then(|| linear(&take, "classifier.2", true, None))
            .transpose()?,
        config: config.clone(),
    })
}

impl ConvNextPlan {
    /// The pre-logits features and the logits (none without a head) of
    /// `images` (`u8` NCHW,
    /// normalised as `(x − mean) / std` on 0..255) on the CPU in plain f32,
    /// channels last throughout.
    pub fn reference(
        &self,
        images: &[u8],
        side: usize,
        mean: [f32; 3],
        std: [f32; 3],
    ) -> (Vec<f32>, Vec<f32>) {
        let n = images.len() / (3 * side * side);
        // The stem over the NCHW input, patches in (channel, row, column).
        let mut h = side / 4;
        let cols = nchw_patches(images, side, 4, mean, std);
        let mut x = layer_norm(&gemm(&cols, &self.stem), &self.stem_norm, 1e-6);
        for stage in &self.stages {
            if let Some((norm, conv)) = &stage.down {
                let c = norm.weight.len();
                let x_norm = layer_norm(&x, norm, 1e-6);
                let half = h / 2;
                let mut patches = vec![0.0f32; n * half * half * 4 * c];
                for img in 0..n {
                    for gy in 0..half {
                        for gx in 0..half {
                            let row = ((img * half + gy) * half + gx) * 4 * c;
                            for ky in 0..2 {
                                for kx in 0..2 {
                                    let at = ((img * h + gy * 2 + ky) * h + gx * 2 + kx) * c;
                                    patches[row + (ky * 2 + kx) * c..row + (ky * 2 + kx + 1) * c]
                                        .copy_from_slice(&x_norm[at..at + c]);
                                }
                            }
                        }
                    }
                }
                x = gemm(&patches, conv);
                h = half;
            }
            for block in &stage.blocks {
                let c = block.dw_bias.len();
                let mut y = vec![0.0f32; x.len()];
                for img in 0..n {
                    for py in 0..h {
                        for px in 0..h {
                            let out = &mut y[((img * h + py) * h + px) * c..][..c];
                            out.copy_from_slice(&block.dw_bias);
                            for ky in 0..7 {
                                for kx in 0..7 {
                                    let (sy, sx) = (py + ky, px + kx);
                                    if sy < 3 || sx < 3 || sy - 3 >= h || sx - 3 >= h {
                                        continue;
                                    }
                                    let at = ((img * h + sy - 3) * h + sx - 3) * c;
                                    let taps = &block.dw_taps[(ky * 7 + kx) * c..][..c];
                                    for ch in 0..c {
                                        out[ch] += x[at + ch] * taps[ch];
                                    }
                                }
                            }
                        }
                    }
                }
                let mut m = gemm(&layer_norm(&y, &block.norm, 1e-6), &block.fc1);
                activate(&mut m, Activation::Gelu);
                add(&mut x, &gemm(&m, &block.fc2));
            }
        }
        let c = self.head_norm.weight.len();
        let mut pooled = vec![0.0f32; n * c];
        for img in 0..n {
            for p in 0..h * h {
                for ch in 0..c {
                    pooled[img * c + ch] += x[(img * h * h + p) * c + ch];
                }
            }
        }
        pooled.iter_mut().for_each(|v| *v /= (h * h) as f32);
        let features = layer_norm(&pooled, &self.head_norm, self.config.head_eps);
        let logits = self
            .classifier
            .as_ref()
            .map_or_else(Vec::new, |head| gemm(&features, head));
        (features, logits)
    }
}
