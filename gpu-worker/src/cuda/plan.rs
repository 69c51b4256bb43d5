//! The transformer families and ConvNeXt as the CUDA engine will run them:
//! a plan of GEMMs, LayerNorms, attentions and depthwise convolutions over
//! weights packed once, at load time, from the same canonical tensors the
//! burn engine reads, through the same layout detection (one way of
//! loading weights): the ViT image towers ([`VitPlan`]), the CLIP and
//! SigLIP text towers ([`TextPlan`]) and ConvNeXt ([`ConvNextPlan`]).
//! Packing:
//! - the patch convolution (kernel = stride = patch) as a GEMM, its
//!   weight `[3·p·p, D]` in the order an image's patch is read (channel,
//!   row, column);
//! - every Linear weight `[in, out]` (row-major `K × N`), q/k/v fused;
//! - DINOv2's layer scales folded into the GEMM before them (`W·diag(γ)`,
//!   `b·γ`);
//! - the class token's position added to it, the patch grid's positions
//!   resampled to the input grid;
//! - the activation named per MLP, for a GEMM epilogue or a kernel.
//!
//! ConvNeXt's packing is on [`ConvNextPlan`]. `reference` runs a plan on
//! the CPU in plain f32, op by op as the GPU will (`tests/families.rs` and
//! `tests/text.rs` check it against PyTorch's outputs for every layout):
//! what a GPU session compares its kernels with.

use std::path::Path;

use crate::WeightsError;
use crate::model::Architecture;
use crate::model::checkpoint::Checkpoint;
use crate::model::convnext::ConvNextConfig;
use crate::model::families::{check, vit_config_for};
use crate::model::tensors::Tensors;
use crate::model::text::{TextConfig, TextPooling, first_max, with_text_tensors};
use crate::model::transformer::Activation;
use crate::model::vit::{Pooling, VitConfig};

/// The plan of a ViT checkpoint, read as the burn engine reads it: the
/// layout told from the tensor names, the config that layout and a CLIP
/// config beside the weights adjust, the same canonical tensors.
pub fn vit_plan(arch: &Architecture, name: &str, path: &Path) -> Result<VitPlan, WeightsError> {
    let Architecture::Vit(config) = arch else {
        return Err(WeightsError::Mismatch {
            path: path.to_path_buf(),
            model: name.to_owned(),
            problem: "the CUDA engine plans the ViT families only so far (#28)".to_owned(),
        });
    };
    let checkpoint = Checkpoint::open(path)?;
    let (layout, tensors) = check(arch, name, &checkpoint)?;
    let config = vit_config_for(config, Some(layout), Some(path), name)?;
    VitPlan::pack(config, &tensors)
}

/// `y = x·w (+ bias)`, `x: [M, k]`, `w: [k, n]` row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemm {
    /// Inner size.
    pub k: usize,
    /// Output width.
    pub n: usize,
    /// `k × n`, row-major.
    pub weight: Vec<f32>,
    /// `n`, if any.
    pub bias: Option<Vec<f32>>,
}

/// A LayerNorm's weight and bias.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerNorm {
    /// Per channel scale.
    pub weight: Vec<f32>,
    /// Per channel shift.
    pub bias: Vec<f32>,
}

/// One pre-norm block.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// Before attention.
    pub norm1: LayerNorm,
    /// `D → 3D`: q, k, v side by side.
    pub qkv: Gemm,
    /// `D → D` (the layer scale folded in).
    pub out: Gemm,
    /// Before the MLP.
    pub norm2: LayerNorm,
    /// `D → F`, then the activation.
    pub fc1: Gemm,
    /// `F → D` (the layer scale folded in).
    pub fc2: Gemm,
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
    /// The final LayerNorm.
    pub norm: LayerNorm,
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
        let (_, pw) = take("patch.weight")?;
        let k = 3 * c.patch * c.patch;
        let mut patch_weight = vec![0.0; k * d];
        for o in 0..d {
            for i in 0..k {
                patch_weight[i * d + o] = pw[o * k + i];
            }
        }
        let patch = Gemm {
            k,
            n: d,
            weight: patch_weight,
            bias: c.patch_bias.then(|| get("patch.bias")).transpose()?,
        };
        let pos = get("pos")?;
        let cls_pos = usize::from(c.class_token);
        let grid = c.image / c.patch;
        let patch_pos = crate::model::pos_embed::resample_grid(
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
            norm: norm("norm")?,
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
        // Normalise, then read each patch in (channel, row, column) order.
        let mut cols = vec![0.0f32; n * patches * 3 * p * p];
        for img in 0..n {
            for gy in 0..grid {
                for gx in 0..grid {
                    let row = (img * patches + gy * grid + gx) * 3 * p * p;
                    for ch in 0..3 {
                        for ky in 0..p {
                            for kx in 0..p {
                                let (y, x) = (gy * p + ky, gx * p + kx);
                                let v = images[((img * 3 + ch) * side + y) * side + x];
                                cols[row + (ch * p + ky) * p + kx] =
                                    (f32::from(v) - mean[ch]) / std[ch];
                            }
                        }
                    }
                }
            }
        }
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
        let t = layer_norm(&t, &self.norm, c.eps);
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
            for row in features.chunks_exact_mut(dim) {
                let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                row.iter_mut().for_each(|v| *v /= norm);
            }
        }
        (features, logits)
    }
}

/// A CLIP or SigLIP text tower's plan: a token lookup, the encoder's
/// blocks (causal for CLIP), the pooled token's LayerNorm and projection.
#[derive(Debug, Clone, PartialEq)]
pub struct TextPlan {
    /// The tower (the checkpoint's activation applied).
    pub config: TextConfig,
    /// `[vocab, D]`: the lookup table.
    pub tokens: Vec<f32>,
    /// `[context, D]`.
    pub pos: Vec<f32>,
    /// The blocks.
    pub blocks: Vec<Block>,
    /// The final LayerNorm (on the pooled token).
    pub norm: LayerNorm,
    /// `D → projection` (SigLIP's head has a bias).
    pub proj: Gemm,
}

/// The plan of a text tower's checkpoint, read as the burn engine reads it.
pub fn text_plan(config: TextConfig, name: &str, path: &Path) -> Result<TextPlan, WeightsError> {
    with_text_tensors(config, name, path, |config, tensors| {
        let take = |name: &str| tensors.take(name).map(|t| (t.shape, t.values));
        Ok(TextPlan {
            tokens: take("tok")?.1,
            pos: take("pos")?.1,
            blocks: blocks_of(&take, config.depth, false)?,
            norm: layer_norm_of(&take, "norm")?,
            proj: linear(&take, "proj", config.projection_bias, None)?,
            config,
        })
    })
}

impl TextPlan {
    /// L2-normalised embeddings of `ids` (each row `context` ids) on the
    /// CPU in plain f32, over the whole padded context as upstream runs
    /// it: `projection` floats per text.
    pub fn reference(&self, ids: &[Vec<u32>]) -> Vec<f32> {
        let c = &self.config;
        let (d, tokens) = (c.width, c.context);
        let n = ids.len();
        let mut t = vec![0.0f32; n * tokens * d];
        for (row, seq) in ids.iter().enumerate() {
            for (p, &id) in seq.iter().enumerate() {
                let id = id as usize;
                for j in 0..d {
                    t[(row * tokens + p) * d + j] = self.tokens[id * d + j] + self.pos[p * d + j];
                }
            }
        }
        let shape = Shape {
            n,
            tokens,
            d,
            heads: c.heads,
            eps: c.eps,
            activation: c.activation,
            causal: c.causal,
        };
        run_blocks(&mut t, &self.blocks, &shape);
        let mut pooled = Vec::with_capacity(n * d);
        for (row, seq) in ids.iter().enumerate() {
            let at = match c.pooling {
                TextPooling::EndOfText => first_max(seq),
                TextPooling::Last => tokens - 1,
            };
            pooled.extend_from_slice(&t[(row * tokens + at) * d..(row * tokens + at + 1) * d]);
        }
        let mut out = gemm(&layer_norm(&pooled, &self.norm, c.eps), &self.proj);
        for row in out.chunks_exact_mut(c.projection) {
            let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            row.iter_mut().for_each(|v| *v /= norm);
        }
        out
    }
}

/// One ConvNeXt block, channels last.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvNextBlock {
    /// The depthwise 7×7 filter as `[7, 7, C]` (cuDNN's NHWC filter layout
    /// for a grouped convolution, one channel per group).
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
/// non-overlapping patches, the depthwise 7×7 a convolution (cuDNN), the
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
    /// The classifier.
    pub classifier: Gemm,
}

/// The plan of a ConvNeXt checkpoint, read as the burn engine reads it.
pub fn convnext_plan(
    arch: &Architecture,
    name: &str,
    path: &Path,
) -> Result<ConvNextPlan, WeightsError> {
    let Architecture::ConvNext(config) = arch else {
        return Err(WeightsError::Mismatch {
            path: path.to_path_buf(),
            model: name.to_owned(),
            problem: "not a ConvNeXt".to_owned(),
        });
    };
    let checkpoint = Checkpoint::open(path)?;
    let (_, tensors) = check(arch, name, &checkpoint)?;
    let take = |name: &str| tensors.take(name).map(|t| (t.shape, t.values));
    // A convolution over non-overlapping k×k patches as a GEMM, rows in
    // `order`'s sense: `(channel, row, column)` or `(row, column, channel)`.
    let patch_gemm = |name: &str, channels_last: bool| -> Result<Gemm, WeightsError> {
        let (shape, w) = take(&format!("{name}.weight"))?;
        let (co, ci, kk) = (shape[0], shape[1], shape[2]);
        let k = ci * kk * kk;
        let mut weight = vec![0.0; k * co];
        for o in 0..co {
            for c in 0..ci {
                for ky in 0..kk {
                    for kx in 0..kk {
                        let row = if channels_last {
                            (ky * kk + kx) * ci + c
                        } else {
                            (c * kk + ky) * kk + kx
                        };
                        weight[row * co + o] = w[((o * ci + c) * kk + ky) * kk + kx];
                    }
                }
            }
        }
        Ok(Gemm {
            k,
            n: co,
            weight,
            bias: Some(take(&format!("{name}.bias"))?.1),
        })
    };
    let mut stages = Vec::new();
    for (s, &depth) in config.depths.iter().enumerate() {
        let down = if s > 0 {
            let f = 2 * s;
            Some((
                layer_norm_of(&take, &format!("features.{f}.0"))?,
                patch_gemm(&format!("features.{f}.1"), true)?,
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
        stem: patch_gemm("features.0.0", false)?,
        stem_norm: layer_norm_of(&take, "features.0.1")?,
        stages,
        head_norm: layer_norm_of(&take, "classifier.0")?,
        classifier: linear(&take, "classifier.2", true, None)?,
        config: config.clone(),
    })
}

impl ConvNextPlan {
    /// The pre-logits features and the logits of `images` (`u8` NCHW,
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
        let mut cols = vec![0.0f32; n * h * h * 48];
        for img in 0..n {
            for gy in 0..h {
                for gx in 0..h {
                    let row = ((img * h + gy) * h + gx) * 48;
                    for ch in 0..3 {
                        for ky in 0..4 {
                            for kx in 0..4 {
                                let (y, x) = (gy * 4 + ky, gx * 4 + kx);
                                let v = images[((img * 3 + ch) * side + y) * side + x];
                                cols[row + (ch * 4 + ky) * 4 + kx] =
                                    (f32::from(v) - mean[ch]) / std[ch];
                            }
                        }
                    }
                }
            }
        }
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
        let features = layer_norm(&pooled, &self.head_norm, 1e-6);
        let logits = gemm(&features, &self.classifier);
        (features, logits)
    }
}

/// How canonical tensors are read: `(shape, values)` by name.
type Take<'a> = dyn Fn(&str) -> Result<(Vec<usize>, Vec<f32>), WeightsError> + 'a;

/// The Linear layer `name` (PyTorch's `[out, in]`) as a GEMM `[in, out]`,
/// each output column scaled by `scale` (a layer scale folded in).
fn linear(
    take: &Take<'_>,
    name: &str,
    bias: bool,
    scale: Option<&[f32]>,
) -> Result<Gemm, WeightsError> {
    let (shape, w) = take(&format!("{name}.weight"))?;
    let (n, k) = (shape[0], shape[1]);
    let mut weight = vec![0.0; k * n];
    for o in 0..n {
        let s = scale.map_or(1.0, |s| s[o]);
        for i in 0..k {
            weight[i * n + o] = w[o * k + i] * s;
        }
    }
    let bias = if bias {
        let (_, b) = take(&format!("{name}.bias"))?;
        Some(
            b.iter()
                .enumerate()
                .map(|(o, v)| v * scale.map_or(1.0, |s| s[o]))
                .collect(),
        )
    } else {
        None
    };
    Ok(Gemm { k, n, weight, bias })
}

fn layer_norm_of(take: &Take<'_>, name: &str) -> Result<LayerNorm, WeightsError> {
    Ok(LayerNorm {
        weight: take(&format!("{name}.weight"))?.1,
        bias: take(&format!("{name}.bias"))?.1,
    })
}

/// The encoder's blocks `blocks.{i}`, layer scales folded in.
fn blocks_of(take: &Take<'_>, depth: usize, layer_scale: bool) -> Result<Vec<Block>, WeightsError> {
    let mut blocks = Vec::with_capacity(depth);
    for i in 0..depth {
        let b = format!("blocks.{i}");
        let ls = |name: &str| {
            layer_scale
                .then(|| take(&format!("{b}.{name}")).map(|(_, v)| v))
                .transpose()
        };
        let (ls1, ls2) = (ls("ls1")?, ls("ls2")?);
        blocks.push(Block {
            norm1: layer_norm_of(take, &format!("{b}.norm1"))?,
            qkv: linear(take, &format!("{b}.qkv"), true, None)?,
            out: linear(take, &format!("{b}.out"), true, ls1.as_deref())?,
            norm2: layer_norm_of(take, &format!("{b}.norm2"))?,
            fc1: linear(take, &format!("{b}.fc1"), true, None)?,
            fc2: linear(take, &format!("{b}.fc2"), true, ls2.as_deref())?,
        });
    }
    Ok(blocks)
}

/// What the blocks run over.
struct Shape {
    n: usize,
    tokens: usize,
    d: usize,
    heads: usize,
    eps: f64,
    activation: Activation,
    causal: bool,
}

/// `t = t + out(attn(norm1(t))); t = t + fc2(act(fc1(norm2(t))))` per block.
fn run_blocks(t: &mut [f32], blocks: &[Block], s: &Shape) {
    for block in blocks {
        let h = layer_norm(t, &block.norm1, s.eps);
        let qkv = gemm(&h, &block.qkv);
        let o = attention(&qkv, s);
        add(t, &gemm(&o, &block.out));
        let h = layer_norm(t, &block.norm2, s.eps);
        let mut h = gemm(&h, &block.fc1);
        activate(&mut h, s.activation);
        add(t, &gemm(&h, &block.fc2));
    }
}

/// `x·w + b` for `x: [rows, k]`.
fn gemm(x: &[f32], g: &Gemm) -> Vec<f32> {
    let rows = x.len() / g.k;
    let mut y = vec![0.0f32; rows * g.n];
    for r in 0..rows {
        let out = &mut y[r * g.n..(r + 1) * g.n];
        if let Some(b) = &g.bias {
            out.copy_from_slice(b);
        }
        for (i, xv) in x[r * g.k..(r + 1) * g.k].iter().enumerate() {
            let w = &g.weight[i * g.n..(i + 1) * g.n];
            for (o, wv) in out.iter_mut().zip(w) {
                *o += xv * wv;
            }
        }
    }
    y
}

fn layer_norm(x: &[f32], ln: &LayerNorm, eps: f64) -> Vec<f32> {
    let d = ln.weight.len();
    let mut y = vec![0.0f32; x.len()];
    for (row, out) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)) {
        let mean = row.iter().sum::<f32>() / d as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        let rstd = 1.0 / (var + eps as f32).sqrt();
        for (j, (o, v)) in out.iter_mut().zip(row).enumerate() {
            *o = (v - mean) * rstd * ln.weight[j] + ln.bias[j];
        }
    }
    y
}

fn add(t: &mut [f32], h: &[f32]) {
    t.iter_mut().zip(h).for_each(|(a, b)| *a += b);
}

fn activate(x: &mut [f32], act: Activation) {
    for v in x {
        *v = match act {
            Activation::Gelu => 0.5 * *v * (1.0 + libm::erff(*v * std::f32::consts::FRAC_1_SQRT_2)),
            Activation::GeluTanh => {
                let u = 0.797_884_6 * (*v + 0.044_715 * *v * *v * *v);
                0.5 * *v * (1.0 + u.tanh())
            }
            Activation::QuickGelu => *v / (1.0 + (-1.702 * *v).exp()),
        };
    }
}

/// Multi-head attention over `qkv` (`[n·tokens, 3D]`, q, k and v side by
/// side, head `h` at columns `h·D/H..`); where causal, token `i` sees
/// tokens `0..=i`.
fn attention(qkv: &[f32], s: &Shape) -> Vec<f32> {
    let (n, tokens, d, heads) = (s.n, s.tokens, s.d, s.heads);
    let dh = d / heads;
    let scale = 1.0 / (dh as f32).sqrt();
    let mut out = vec![0.0f32; n * tokens * d];
    let mut scores = vec![0.0f32; tokens];
    for img in 0..n {
        let row = |tok: usize| &qkv[(img * tokens + tok) * 3 * d..(img * tokens + tok + 1) * 3 * d];
        for h in 0..heads {
            for i in 0..tokens {
                let q = &row(i)[h * dh..(h + 1) * dh];
                let seen = if s.causal { i + 1 } else { tokens };
                for (j, score) in scores.iter_mut().enumerate() {
                    let k = &row(j)[d + h * dh..d + (h + 1) * dh];
                    *score = if j < seen {
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale
                    } else {
                        f32::NEG_INFINITY
                    };
                }
                softmax(&mut scores);
                let o = &mut out
                    [(img * tokens + i) * d + h * dh..(img * tokens + i) * d + (h + 1) * dh];
                for (j, p) in scores.iter().enumerate() {
                    let v = &row(j)[2 * d + h * dh..2 * d + (h + 1) * dh];
                    o.iter_mut().zip(v).for_each(|(a, b)| *a += p * b);
                }
            }
        }
    }
    out
}

fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    x.iter_mut().for_each(|v| *v /= sum);
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
