//! One Vision Transformer for every family: torchvision's ViT, OpenAI/OpenCLIP
//! CLIP image towers, SigLIP and DINOv2. A [`VitConfig`] says what differs
//! (patch, width, depth, heads, class token, registers, pre-norm, LayerNorm
//! eps, GELU flavour, layer scale, pooling, projection); the forward pass is
//! the pre-norm transformer they share:
//!
//! ```text
//! tokens = [cls, registers, patches(x)] + pos      (pos interpolated to the input grid)
//! tokens = pre_norm(tokens)                        (CLIP only)
//! per block: t = t + ls1 * attn(norm1(t)); t = t + ls2 * mlp(norm2(t))
//! t = norm(t); pooled = cls | mean of patches | MAP head; out = proj(pooled)
//! ```
//!
//! Weights come in canonical names ([`VitConfig::tensors`]); the checkpoint
//! layouts map them to upstream names (`layout/`).

use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Tensor};
use pipeline_core::EmbedPooling;

use crate::model::layers::{Dense, Norm, last_axis_mean, scaled_dot_product, upload};
use crate::model::network::Network;
pub use crate::model::transformer::Activation;
use crate::model::transformer::{Encoder, Loader, Mlp};
use model_families::checkpoint::HostTensor;
pub use model_families::pos_embed::PosInterpolation;
use model_families::pos_embed::resample_grid;
use model_families::tensors::Tensors;
use model_families::weights_error::WeightsError;

pub use model_families::vit::{Pooling, VitConfig};

/// SigLIP's attention-pooling head: one learned query attends over the
/// tokens, then a residual MLP.
#[derive(Debug)]
struct MapHead {
    probe: Tensor<3>,
    q: Dense,
    kv: Dense,
    out: Dense,
    norm: Norm,
    mlp: Mlp,
}

/// A ViT on a device, inference only.
#[derive(Debug)]
pub(crate) struct Vit {
    config: VitConfig,
    patch_weight: Tensor<4>,
    patch_bias: Option<Tensor<1>>,
    /// `[1, prefix, D]`: class token (with its position) and registers.
    prefix_tokens: Option<Tensor<3>>,
    /// `[1, grid², D]`, already at the input grid.
    patch_pos: Tensor<3>,
    pre_norm: Option<Norm>,
    encoder: Encoder,
    /// The final LayerNorm, where the config has it.
    norm: Option<Norm>,
    map: Option<MapHead>,
    proj: Option<Dense>,
    head: Option<Dense>,
}

impl Network for Vit {
    fn features(&self, x: Tensor<4>) -> Tensor<2> {
        self.embedding(x)
    }

    fn classifier(&self) -> Option<Dense> {
        self.head.clone()
    }

    fn normalised_embedding(&self) -> Option<usize> {
        self.config.normalize.then(|| self.config.feature_dim())
    }

    /// A class-token model's pooling changes; a MAP head's does not.
    fn set_pooling(&mut self, pooling: EmbedPooling) {
        let pooling = match pooling {
            EmbedPooling::Cls => Pooling::Class,
            EmbedPooling::Mean => Pooling::Mean,
            EmbedPooling::ClsMean => Pooling::ClassAndMean,
        };
        if self.config.pooling != Pooling::Map {
            self.config.pooling = pooling;
        }
    }
}

impl Vit {
    /// Builds the model from `tensors` (see [`VitConfig::tensors`]).
    pub(crate) fn new(
        config: VitConfig,
        tensors: &Tensors<'_>,
        device: &Device,
    ) -> Result<Self, WeightsError> {
        let c = &config;
        let d = c.width;
        let get = |name: &str| tensors.take(name);
        let load = Loader {
            tensors,
            device,
            eps: c.eps,
        };

        // Position embeddings: the class token's stays with it, the patch
        // grid is resampled to the input's on the host, once.
        let pos = get("pos")?;
        let cls_pos = usize::from(c.class_token);
        let grid = c.image / c.patch;
        let patch_pos = resample_grid(
            &pos.values[cls_pos * d..],
            c.pos_grid,
            grid,
            d,
            c.interpolation,
        );
        let mut prefix = Vec::new();
        if c.class_token {
            let cls = get("cls")?;
            prefix.extend(cls.values.iter().zip(&pos.values[..d]).map(|(a, b)| a + b));
        }
        if c.registers > 0 {
            prefix.extend(get("reg")?.values);
        }
        let prefix_tokens = (!prefix.is_empty())
            .then(|| upload::<3>(HostTensor::new(vec![1, c.prefix(), d], prefix), device));

        let map = if c.pooling == Pooling::Map {
            let qkv_w = get("map.qkv.weight")?;
            let qkv_b = get("map.qkv.bias")?;
            let split = |t: &HostTensor, rows: std::ops::Range<usize>, cols: usize| {
                let mut shape = t.shape.clone();
                shape[0] = rows.len();
                HostTensor::new(shape, t.values[rows.start * cols..rows.end * cols].to_vec())
            };
            let q_w = split(&qkv_w, 0..d, d);
            let kv_w = split(&qkv_w, d..3 * d, d);
            let q_b = split(&qkv_b, 0..d, 1);
            let kv_b = split(&qkv_b, d..3 * d, 1);
            Some(MapHead {
                probe: upload::<1>(get("map.probe")?, device).reshape([1, 1, d]),
                q: Dense {
                    weight: upload(q_w.transposed(), device),
                    bias: Some(upload(q_b, device)),
                },
                kv: Dense {
                    weight: upload(kv_w.transposed(), device),
                    bias: Some(upload(kv_b, device)),
                },
                out: load.dense("map.out", true)?,
                norm: load.norm("map.norm")?,
                mlp: load.mlp("map")?,
            })
        } else {
            None
        };
        Ok(Self {
            patch_weight: upload(get("patch.weight")?, device),
            patch_bias: c
                .patch_bias
                .then(|| load.vector("patch.bias"))
                .transpose()?,
            prefix_tokens,
            patch_pos: upload::<3>(HostTensor::new(vec![1, grid * grid, d], patch_pos), device),
            pre_norm: c.pre_norm.then(|| load.norm("pre_norm")).transpose()?,
            encoder: Encoder::new(c.encoder(), &load)?,
            norm: c.final_norm.then(|| load.norm("norm")).transpose()?,
            map,
            proj: c
                .projection
                .map(|_| load.dense("proj", false))
                .transpose()?,
            head: c.classes.map(|_| load.dense("head", true)).transpose()?,
            config,
        })
    }

    /// The embedding (`[N, feature_dim]`): pooled, projected, normalised as
    /// the family does.
    fn embedding(&self, x: Tensor<4>) -> Tensor<2> {
        let c = &self.config;
        let [n, _, _, _] = x.dims();
        let d = c.width;
        let patches = conv2d(
            x,
            self.patch_weight.clone(),
            self.patch_bias.clone(),
            ConvOptions::new([c.patch, c.patch], [0, 0], [1, 1], 1),
        );
        let [_, _, gh, gw] = patches.dims();
        let patches = patches.reshape([n, d, gh * gw]).swap_dims(1, 2) + self.patch_pos.clone();
        let mut t = match &self.prefix_tokens {
            Some(prefix) => {
                Tensor::cat(vec![prefix.clone().expand([n, c.prefix(), d]), patches], 1)
            }
            None => patches,
        };
        if let Some(pre) = &self.pre_norm {
            t = pre.run(t);
        }
        if let (Pooling::Class, Some(norm)) = (c.pooling, &self.norm)
            && crate::model::cpu::on_flex_f32(&t)
        {
            // Only the class token is kept: the last block runs for it alone
            // (on the CPU: see `Encoder::run_to_token`).
            let mut pooled = norm.run(self.encoder.run_to_token(t, 0)).reshape([n, d]);
            if let Some(proj) = &self.proj {
                pooled = proj.run(pooled);
            }
            return self.normalised(pooled);
        }
        let t = self.encoder.run(t);
        let t = match &self.norm {
            Some(norm) => norm.run(t),
            None => t,
        };
        let tokens = t.dims()[1];
        let prefix = c.prefix();
        let class = || t.clone().narrow(1, 0, 1).reshape([n, d]);
        let mean = || {
            t.clone()
                .narrow(1, prefix, tokens - prefix)
                .mean_dim(1)
                .reshape([n, d])
        };
        let mut pooled = match c.pooling {
            Pooling::Class => class(),
            Pooling::Mean => mean(),
            Pooling::ClassAndMean => Tensor::cat(vec![class(), mean()], 1),
            Pooling::Map => self.map_pool(t.clone()),
        };
        if let Some(proj) = &self.proj {
            pooled = proj.run(pooled);
        }
        self.normalised(pooled)
    }

    /// `pooled` L2-normalised where the family's embeddings are
    /// (`F.normalize`: x / max(‖x‖, 1e-12); the sum of squares as a mean,
    /// a convolution on lavapipe (see `last_axis_mean`), times the width).
    fn normalised(&self, pooled: Tensor<2>) -> Tensor<2> {
        if !self.config.normalize {
            return pooled;
        }
        let width = pooled.dims()[1] as f64;
        let square_mean = last_axis_mean(pooled.clone() * pooled.clone());
        pooled / (square_mean * width).sqrt().clamp_min(1e-12)
    }

    fn map_pool(&self, t: Tensor<3>) -> Tensor<2> {
        let head = self
            .map
            .as_ref()
            .expect("a MAP-pooled config has a MAP head");
        let d = self.config.width;
        let n = t.dims()[0];
        let e = &self.encoder;
        let q = e.heads(head.q.run(head.probe.clone()).expand([n, 1, d]));
        let kv = head.kv.run(t);
        let k = e.heads(kv.clone().narrow(2, 0, d));
        let v = e.heads(kv.narrow(2, d, d));
        let o = scaled_dot_product(q, k, v, false);
        let h = head.out.run(Encoder::merge_heads(o));
        let h = h.clone() + e.mlp(&head.mlp, head.norm.run(h));
        h.reshape([n, d])
    }
}
