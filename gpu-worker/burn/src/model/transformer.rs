//! The pre-norm transformer encoder that the image towers (`vit.rs`) and
//! the text towers (`text.rs`) share: per block
//! `t = t + ls1 · attn(norm1(t)); t = t + ls2 · mlp(norm2(t))`, with
//! bidirectional attention (images, SigLIP's text) or causal attention
//! (CLIP's text). Its tensors have canonical names under a prefix
//! (`blocks.3.qkv.weight`); the checkpoint layouts map them (`layout/`).

use burn::tensor::{Device, Tensor};

use crate::model::activation::{gelu, gelu_tanh, quick_gelu};
use crate::model::layers::{Dense, Norm, scaled_dot_product, upload};
use model_families::tensors::Tensors;
use model_families::weights_error::WeightsError;

pub use model_families::transformer::Activation;
pub(crate) use model_families::transformer::EncoderShape;

/// An MLP: `fc2(act(fc1(x)))`.
#[derive(Debug)]
pub(crate) struct Mlp {
    fc1: Dense,
    fc2: Dense,
}

#[derive(Debug)]
struct Block {
    norm1: Norm,
    qkv: Dense,
    out: Dense,
    ls1: Option<Tensor<3>>,
    norm2: Norm,
    mlp: Mlp,
    ls2: Option<Tensor<3>>,
}

/// Builds layers from canonical tensors on one device.
pub(crate) struct Loader<'a, 't> {
    pub(crate) tensors: &'a Tensors<'t>,
    pub(crate) device: &'a Device,
    pub(crate) eps: f64,
}

impl Loader<'_, '_> {
    /// A 1-D tensor on the device.
    pub(crate) fn vector(&self, name: &str) -> Result<Tensor<1>, WeightsError> {
        Ok(upload(self.tensors.take(name)?, self.device))
    }

    /// The LayerNorm `prefix`.
    pub(crate) fn norm(&self, prefix: &str) -> Result<Norm, WeightsError> {
        Ok(Norm {
            gamma: self.vector(&format!("{prefix}.weight"))?,
            beta: self.vector(&format!("{prefix}.bias"))?,
            eps: self.eps,
        })
    }

    /// The Linear layer `prefix` (PyTorch's `[out, in]` weight, stored
    /// transposed).
    pub(crate) fn dense(&self, prefix: &str, bias: bool) -> Result<Dense, WeightsError> {
        Ok(Dense {
            weight: upload(
                self.tensors.take(&format!("{prefix}.weight"))?.transposed(),
                self.device,
            ),
            bias: if bias {
                Some(self.vector(&format!("{prefix}.bias"))?)
            } else {
                None
            },
        })
    }

    /// The MLP `prefix.fc1`, `prefix.fc2`.
    pub(crate) fn mlp(&self, prefix: &str) -> Result<Mlp, WeightsError> {
        Ok(Mlp {
            fc1: self.dense(&format!("{prefix}.fc1"), true)?,
            fc2: self.dense(&format!("{prefix}.fc2"), true)?,
        })
    }

    /// A per-channel scale as `[1, 1, D]`.
    fn scale(&self, name: &str, d: usize) -> Result<Tensor<3>, WeightsError> {
        Ok(self.vector(name)?.reshape([1, 1, d]))
    }
}

/// The blocks of a transformer on a device, inference only.
#[derive(Debug)]
pub(crate) struct Encoder {
    shape: EncoderShape,
    blocks: Vec<Block>,
}

impl Encoder {
    /// The blocks `blocks.{i}` of `shape` from `loader`'s tensors.
    pub(crate) fn new(shape: EncoderShape, loader: &Loader<'_, '_>) -> Result<Self, WeightsError> {
        let d = shape.width;
        let mut blocks = Vec::with_capacity(shape.depth);
        for i in 0..shape.depth {
            let b = format!("blocks.{i}");
            let scale = |name: &str| {
                shape
                    .layer_scale
                    .then(|| loader.scale(&format!("{b}.{name}"), d))
                    .transpose()
            };
            blocks.push(Block {
                norm1: loader.norm(&format!("{b}.norm1"))?,
                qkv: loader.dense(&format!("{b}.qkv"), true)?,
                out: loader.dense(&format!("{b}.out"), true)?,
                ls1: scale("ls1")?,
                norm2: loader.norm(&format!("{b}.norm2"))?,
                mlp: loader.mlp(&b)?,
                ls2: scale("ls2")?,
            });
        }
        Ok(Self { shape, blocks })
    }

    /// Every block over `t` (`[N, T, D]`).
    pub(crate) fn run(&self, mut t: Tensor<3>) -> Tensor<3> {
        for block in &self.blocks {
            t = self.block(block, t);
        }
        t
    }

    /// Every block over `t` (`[N, T, D]`), for a model that keeps only the
    /// token at `position` (`[N, 1, D]` out): the last block computes k and
    /// v for every token but attention, its output projection and its MLP
    /// for that token alone (a quarter of the last block's work instead of
    /// all of it: a twelfth less for a 12-block model). The token sees every
    /// token, so this holds for a bidirectional encoder, and for a causal
    /// one where `position` is the last token.
    ///
    /// Callers take it on the CPU only (`cpu::on_flex_f32`): on Mesa's
    /// lavapipe a LayerNorm over the kept token's view gave wrong
    /// embeddings (burn-wgpu; the parity tests caught it), so Vulkan runs
    /// every block whole until this is checked on a real GPU.
    pub(crate) fn run_to_token(&self, mut t: Tensor<3>, position: usize) -> Tensor<3> {
        let [n, tokens, d] = t.dims();
        assert!(
            !self.shape.causal || position + 1 == tokens,
            "a causal token sees only what comes before it"
        );
        let Some((last, rest)) = self.blocks.split_last() else {
            return t.narrow(1, position, 1);
        };
        for block in rest {
            t = self.block(block, t);
        }
        let qkv = last.qkv.run(last.norm1.run(t.clone()));
        let q = self.heads(qkv.clone().narrow(1, position, 1).narrow(2, 0, d));
        let k = self.heads(qkv.clone().narrow(2, d, d));
        let v = self.heads(qkv.narrow(2, 2 * d, d));
        let o = scaled_dot_product(q, k, v, false);
        let h = last.out.run(Self::merge_heads(o));
        let h = match &last.ls1 {
            Some(ls) => h * ls.clone(),
            None => h,
        };
        let t = t.narrow(1, position, 1) + h;
        let h = self.mlp(&last.mlp, last.norm2.run(t.clone()));
        let h = match &last.ls2 {
            Some(ls) => h * ls.clone(),
            None => h,
        };
        debug_assert_eq!(t.dims(), [n, 1, d]);
        t + h
    }

    fn block(&self, b: &Block, t: Tensor<3>) -> Tensor<3> {
        let h = self.attend(&b.qkv, &b.out, b.norm1.run(t.clone()));
        let h = match &b.ls1 {
            Some(ls) => h * ls.clone(),
            None => h,
        };
        let t = t + h;
        let h = self.mlp(&b.mlp, b.norm2.run(t.clone()));
        let h = match &b.ls2 {
            Some(ls) => h * ls.clone(),
            None => h,
        };
        t + h
    }

    /// `fc2(act(fc1(x)))` with this encoder's activation.
    pub(crate) fn mlp(&self, mlp: &Mlp, x: Tensor<3>) -> Tensor<3> {
        let h = mlp.fc1.run(x);
        let h = match self.shape.activation {
            Activation::Gelu => gelu(h),
            Activation::GeluTanh => gelu_tanh(h),
            Activation::QuickGelu => quick_gelu(h),
            Activation::SwiGlu => {
                let f = self.shape.mlp;
                let gate = h.clone().narrow(2, 0, f);
                burn::tensor::activation::silu(gate) * h.narrow(2, f, f)
            }
        };
        mlp.fc2.run(h)
    }

    /// `[N, T, D]` → per-head `[N, H, T, Dh]`.
    pub(crate) fn heads(&self, x: Tensor<3>) -> Tensor<4> {
        let [n, t, d] = x.dims();
        let h = self.shape.heads;
        x.reshape([n, t, h, d / h]).swap_dims(1, 2)
    }

    /// Per-head `[N, H, T, Dh]` → `[N, T, D]`.
    pub(crate) fn merge_heads(x: Tensor<4>) -> Tensor<3> {
        let [n, h, t, dh] = x.dims();
        x.swap_dims(1, 2).reshape([n, t, h * dh])
    }

    fn attend(&self, qkv: &Dense, out: &Dense, x: Tensor<3>) -> Tensor<3> {
        let d = self.shape.width;
        let qkv = qkv.run(x);
        let q = self.heads(qkv.clone().narrow(2, 0, d));
        let k = self.heads(qkv.clone().narrow(2, d, d));
        let v = self.heads(qkv.narrow(2, 2 * d, d));
        let o = scaled_dot_product(q, k, v, self.shape.causal);
        out.run(Self::merge_heads(o))
    }
}
