//! The CLIP and SigLIP text towers' plan: [`TextPlan`].

use std::path::Path;

use super::ops::{
    Block, Gemm, LayerNorm, Shape, blocks_of, gemm, layer_norm, layer_norm_of, linear, run_blocks,
};
use model_families::WeightsError;
use model_families::tensors::Tensors;
use model_families::text::{TextConfig, TextPooling, first_max, with_text_tensors};

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
    with_text_tensors(config, name, path, pack)
}

/// The plan of the seeded tensors the burn engine's tower draws for `name`
/// from `seed` (`TextTower::seeded`).
pub fn text_plan_seeded(config: TextConfig, name: &str, seed: u64) -> TextPlan {
    let tensors = Tensors::seeded(seed, name, config.tensors());
    pack(config, &tensors).expect("seeded tensors have the declared shapes")
}

fn pack(config: TextConfig, tensors: &Tensors<'_>) -> Result<TextPlan, WeightsError> {
    let take = |name: &str| tensors.take(name).map(|t| (t.shape, t.values));
    Ok(TextPlan {
        tokens: take("tok")?.1,
        pos: take("pos")?.1,
        blocks: blocks_of(&take, config.depth, false)?,
        norm: layer_norm_of(&take, "norm")?,
        proj: linear(&take, "proj", config.projection_bias, None)?,
        config,
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
        super::ops::l2_normalize_rows(&mut out, c.projection);
        out
    }
}
