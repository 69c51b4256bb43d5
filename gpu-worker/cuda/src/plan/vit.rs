//! The ViT families' plan: [`VitPlan`] and SigLIP's pooling head.

use std::path::Path;

use pipeline_core::ResolvedWeights;

use super::ops::{
    Block, Gemm, LayerNorm, Shape, activate, add, blocks_of, gemm, layer_norm, layer_norm_of,
    linear, nchw_patches, not_this, patch_gemm, resolve, run_blocks, softmax, with_checked_tensors,
};
use model_families::Architecture;
use model_families::WeightsError;
use model_families::architecture::vit_config_for;
use model_families::tensors::Tensors;
use model_families::vit::{Pooling, VitConfig};

/// The plan of a ViT checkpoint, resolved here as the coordinator
/// resolves it ([`vit_plan_resolved`]).
pub fn vit_plan(arch: &Architecture, name: &str, path: &Path) -> Result<VitPlan, WeightsError> {
    vit_plan_resolved(arch, name, path, &resolve(arch, name, path)?)
}

/// The plan of a ViT checkpoint, read as the burn engine reads it: in the
/// layout the coordinator resolved, the config that layout and the
/// activation it read adjust, the same canonical tensors.
pub fn vit_plan_resolved(
    arch: &Architecture,
    name: &str,
    path: &Path,
    resolved: &ResolvedWeights,
) -> Result<VitPlan, WeightsError> {
    let Architecture::Vit(config) = arch else {
        return Err(not_this(path, name, "not a ViT"));
    };
    with_checked_tensors(arch, name, path, resolved, |layout, tensors| {
        let config = vit_config_for(config, Some(layout), resolved.activation);
        VitPlan::pack(config, tensors)
    })
}

/// The plan of `arch` with seeded random weights: the same weights the
/// burn engine draws for that seed (`Tensors::seeded`), so the two engines
/// can be compared, and benchmarked, without a checkpoint.
pub fn vit_plan_seeded(
    arch: &Architecture,
    name: &str,
    seed: u64,
) -> Result<VitPlan, WeightsError> {
    let Architecture::Vit(config) = arch else {
        return Err(not_this(Path::new(""), name, "not a ViT"));
    };
    let tensors = Tensors::seeded(seed, name, arch.tensors(None));
    VitPlan::pack(vit_config_for(config, None, None), &tensors)
}

/// SigLIP's attention-pooling head.
#[derive(Debug, Clone, PartialEq)]
pub struct MapHead {
    /// The query, already projected (`probe·Wq + bq`): the same for every
    /// image, computed once.
    pub query: Vec<f32>,
    /// `D → 2D`: k and v.
    pub kv: Gemm,
    /// `D → D`.
    pub out: Gemm,
    /// Before its MLP.
    pub norm: LayerNorm,
    /// Its MLP.
    pub fc1: Gemm,
    /// Its MLP.
    pub fc2: Gemm,
}

/// A ViT's plan: shapes, ops and packed weights.
#[derive(Debug, Clone, PartialEq)]
pub struct VitPlan {
    /// The architecture (the checkpoint's activation applied).
    pub config: VitConfig,
    /// The patch convolution as a GEMM.
    pub patch: Gemm,
    /// `[prefix, D]`: the class token with its position, then registers.
    pub prefix: Vec<f32>,
    /// `[grid², D]` at the input grid.
    pub patch_pos: Vec<f32>,
    /// CLIP's `ln_pre`.
    pub pre_norm: Option<LayerNorm>,
    /// The blocks.
    pub blocks: Vec<Block>,
    /// The final LayerNorm, where the config has one (see
    /// `VitConfig::final_norm`).
    pub norm: Option<LayerNorm>,
    /// SigLIP's pooling head.
    pub map: Option<MapHead>,
    /// The projection (no bias).
    pub proj: Option<Gemm>,
    /// The classifier head.
    pub head: Option<Gemm>,
}

impl VitPlan {
    /// The plan of `config` from its canonical tensors (as
    /// `VitConfig::tensors` lists them; PyTorch's shapes).
    pub(crate) fn pack(config: VitConfig, tensors: &Tensors<'_>) -> Result<Self, WeightsError> {
        let take = |name: &str| tensors.take(name).map(|t| (t.shape, t.values));
        let c = &config;
        let d = c.width;
        let get = |name: &str| take(name).map(|(_, v)| v);
        let linear =
            |name: &str, bias: bool, scale: Option<&[f32]>| linear(&take, name, bias, scale);
        let norm = |name: &str| layer_norm_of(&take, name);
        // The patch convolution [D, 3, p, p] → [3·p·p, D].
        let (shape, pw) = take("patch.weight")?;
        let bias = c.patch_bias.then(|| get("patch.bias")).transpose()?;
        let patch = patch_gemm(&shape, &pw, bias, false);
        let pos = get("pos")?;
        let cls_pos = usize::from(c.class_token);
        let grid = c.image / c.patch;
        let patch_pos = model_families::pos_embed::resample_grid(
            &pos[cls_pos * d..],
            c.pos_grid,
            grid,
            d,
            c.interpolation,
        );
        let mut prefix = Vec::new();
        if c.class_token {
            prefix.extend(get("cls")?.iter().zip(&pos[..d]).map(|(a, b)| a + b));
        }
        if c.registers > 0 {
            prefix.extend(get("reg")?);
        }
        let blocks = blocks_of(&take, c.depth, c.layer_scale)?;
        let map = if c.pooling == Pooling::Map {
            let qkv = linear("map.qkv", true, None)?;
            let probe = get("map.probe")?;
            // The query's columns of the fused projection, applied once.
            let query: Vec<f32> = (0..d)
                .map(|o| {
                    let bias = qkv.bias.as_ref().map_or(0.0, |b| b[o]);
                    bias + (0..d)
                        .map(|i| probe[i] * qkv.weight[i * 3 * d + o])
                        .sum::<f32>()
                })
                .collect();
            let mut kv_weight = vec![0.0; d * 2 * d];
            for i in 0..d {
                kv_weight[i * 2 * d..(i + 1) * 2 * d]
                    .copy_from_slice(&qkv.weight[i * 3 * d + d..(i + 1) * 3 * d]);
            }
            Some(MapHead {
                query,
                kv: Gemm {
                    k: d,
                    n: 2 * d,
                    weight: kv_weight,
                    bias: qkv.bias.as_ref().map(|b| b[d..].to_vec()),
                },
                out: linear("map.out", true, None)?,
                norm: norm("map.norm")?,
                fc1: linear("map.fc1", true, None)?,
                fc2: linear("map.fc2", true, None)?,
            })
        } else {
            None
        };
        Ok(Self {
            patch,
            prefix,
            patch_pos,
            pre_norm: c.pre_norm.then(|| norm("pre_norm")).transpose()?,
            blocks,
            norm: c.final_norm.then(|| norm("norm")).transpose()?,
            map,
            proj: c
                .projection
                .map(|_| linear("proj", false, None))
                .transpose()?,
            head: c.classes.map(|_| linear("head", true, None)).transpose()?,
            config,
        })
    }

    /// The features of `images` (`u8` NCHW, `side × side`, normalised as
    /// `(x − mean) / std` on 0..255) on the CPU in plain f32, and the
    /// classifier's logits where the model has a head: `feature_dim` (and
    /// `classes`) floats per image.
    pub fn reference(
        &self,
        images: &[u8],
        side: usize,
        mean: [f32; 3],
        std: [f32; 3],
    ) -> (Vec<f32>, Option<Vec<f32>>) {
        let c = &self.config;
        let (d, p) = (c.width, c.patch);
        let n = images.len() / (3 * side * side);
        let grid = side / p;
        let patches = grid * grid;
        let prefix = self.prefix.len() / d;
        let tokens = prefix + patches;
        let cols = nchw_patches(images, side, p, mean, std);
        let embedded = gemm(&cols, &self.patch);
        let mut t = vec![0.0f32; n * tokens * d];
        for img in 0..n {
            let base = img * tokens * d;
            t[base..base + prefix * d].copy_from_slice(&self.prefix);
            for q in 0..patches {
                for j in 0..d {
                    t[base + (prefix + q) * d + j] =
                        embedded[(img * patches + q) * d + j] + self.patch_pos[q * d + j];
                }
            }
        }
        if let Some(pre) = &self.pre_norm {
            t = layer_norm(&t, pre, c.eps);
        }
        let shape = Shape {
            n,
            tokens,
            d,
            heads: c.heads,
            eps: c.eps,
            activation: c.activation,
            causal: false,
        };
        run_blocks(&mut t, &self.blocks, &shape);
        let t = match &self.norm {
            Some(norm) => layer_norm(&t, norm, c.eps),
            None => t,
        };
        let width = match c.pooling {
            Pooling::ClassAndMean => 2 * d,
            _ => d,
        };
        let mut pooled = vec![0.0f32; n * width];
        for img in 0..n {
            let at = |tok: usize| &t[(img * tokens + tok) * d..(img * tokens + tok + 1) * d];
            let out = &mut pooled[img * width..(img + 1) * width];
            let mean_into = |out: &mut [f32]| {
                for tok in prefix..tokens {
                    for (o, v) in out.iter_mut().zip(at(tok)) {
                        *o += v;
                    }
                }
                let count = (tokens - prefix) as f32;
                out.iter_mut().for_each(|o| *o /= count);
            };
            match c.pooling {
                Pooling::Class => out.copy_from_slice(at(0)),
                Pooling::Mean => mean_into(out),
                Pooling::ClassAndMean => {
                    out[..d].copy_from_slice(at(0));
                    mean_into(&mut out[d..]);
                }
                Pooling::Map => {
                    let head = self.map.as_ref().expect("a MAP-pooled plan has its head");
                    let image = &t[img * tokens * d..(img + 1) * tokens * d];
                    out.copy_from_slice(&map_pool(head, image, tokens, d, c));
                }
            }
        }
        let mut features = match &self.proj {
            Some(proj) => gemm(&pooled, proj),
            None => pooled,
        };
        let logits = self.head.as_ref().map(|head| gemm(&features, head));
        if c.normalize {
            let dim = c.feature_dim();
            super::ops::l2_normalize_rows(&mut features, dim);
        }
        (features, logits)
    }
}

/// SigLIP's head on one image's tokens (`[tokens, D]`): its query attends
/// over them, then `h + mlp(norm(h))`.
fn map_pool(head: &MapHead, image: &[f32], tokens: usize, d: usize, c: &VitConfig) -> Vec<f32> {
    let kv = gemm(image, &head.kv);
    let dh = d / c.heads;
    let scale = 1.0 / (dh as f32).sqrt();
    let mut o = vec![0.0f32; d];
    let mut scores = vec![0.0f32; tokens];
    for h in 0..c.heads {
        let q = &head.query[h * dh..(h + 1) * dh];
        for (j, s) in scores.iter_mut().enumerate() {
            let k = &kv[j * 2 * d + h * dh..j * 2 * d + (h + 1) * dh];
            *s = q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale;
        }
        softmax(&mut scores);
        for (j, s) in scores.iter().enumerate() {
            let v = &kv[j * 2 * d + d + h * dh..j * 2 * d + d + (h + 1) * dh];
            o[h * dh..(h + 1) * dh]
                .iter_mut()
                .zip(v)
                .for_each(|(a, b)| *a += s * b);
        }
    }
    let mut h = gemm(&o, &head.out);
    let mut m = gemm(&layer_norm(&h, &head.norm, c.eps), &head.fc1);
    activate(&mut m, c.activation);
    add(&mut h, &gemm(&m, &head.fc2));
    h
}
