//! Text towers: CLIP's text transformer and SigLIP's text model, loaded
//! from the same checkpoints as the image towers (`layout/`'s text
//! places), computing what upstream's `encode_text` /
//! `get_text_features` compute, L2-normalised like the image embeddings:
//!
//! ```text
//! t = token_embedding[ids] + pos                  (on the host: a lookup)
//! t = encoder(t)                                  (causal for CLIP)
//! pooled = t[end-of-text] (CLIP) | t[last] (SigLIP)
//! out = normalise(proj(norm(pooled)))             (CLIP: no bias; SigLIP: its head)
//! ```
//!
//! CLIP pools the end-of-text token, found as upstream's `argmax` of the
//! ids (the end token has the highest id, so the first maximum is it; HF's
//! `CLIPTextTransformer` looks for the `eos_token_id`, the same position for
//! real vocabularies). The final LayerNorm acts on each token alone, so it
//! runs on the pooled one only; and CLIP's causal attention lets nothing
//! after the end token reach it, so each text runs only up to that token
//! ([`TextTower::embed`]).

use std::collections::BTreeMap;
use std::path::Path;

use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::model::cpu::min_gemm_rows;
use crate::model::layers::{Dense, Norm, last_axis_mean, upload};
use crate::model::transformer::{Encoder, Loader};
use model_families::checkpoint::HostTensor;
use model_families::tensors::Tensors;
use model_families::weights_error::WeightsError;

pub use model_families::text::{
    TextConfig, TextPooling, TokenizerFamily, checkpoint_is_hugging_face, first_max,
    with_text_tensors,
};

/// A text tower on a device, inference only.
#[derive(Debug)]
pub struct TextTower {
    config: TextConfig,
    device: Device,
    /// `[vocab, D]` on the host: the lookup is a copy per token.
    tokens: HostTensor,
    /// `[context, D]` on the host, added during the lookup.
    pos: HostTensor,
    encoder: Encoder,
    norm: Norm,
    proj: Dense,
}

impl TextTower {
    /// The tower of `config` from the checkpoint at `path` (OpenCLIP,
    /// OpenAI, HF `CLIPModel` or `SiglipModel`); `name` is the model's, for
    /// errors. A checkpoint without a text tower is one line that says so.
    pub fn load(
        config: TextConfig,
        name: &str,
        path: &Path,
        device: &Device,
    ) -> Result<Self, WeightsError> {
        with_text_tensors(config, name, path, |config, tensors| {
            Self::new(config, tensors, device)
        })
    }

    /// The tower from seeded random tensors (benchmarks).
    pub fn seeded(config: TextConfig, name: &str, seed: u64, device: &Device) -> Self {
        let tensors = Tensors::seeded(seed, name, config.tensors());
        Self::new(config, &tensors, device).expect("seeded tensors have the declared shapes")
    }

    fn new(
        config: TextConfig,
        tensors: &Tensors<'_>,
        device: &Device,
    ) -> Result<Self, WeightsError> {
        let load = Loader {
            tensors,
            device,
            eps: config.eps,
        };
        Ok(Self {
            tokens: tensors.take("tok")?,
            pos: tensors.take("pos")?,
            encoder: Encoder::new(config.encoder(), &load)?,
            norm: load.norm("norm")?,
            proj: load.dense("proj", config.projection_bias)?,
            device: device.clone(),
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &TextConfig {
        &self.config
    }

    /// Normalised embeddings (`[N, projection]`, row-major) of `ids`, each
    /// row exactly `context` ids below `vocab` (the tokenizer pads and cuts).
    ///
    /// A causal tower that pools the end-of-text token computes each text
    /// only up to that token: nothing after it reaches it, so the padding
    /// (most of CLIP's 77 tokens, for a prompt) is skipped. Texts run in
    /// groups of one length, each group with enough texts (repeated) that
    /// its GEMMs have [`min_gemm_rows`] rows, so a text's embedding is the
    /// same bits whatever texts are batched with it.
    pub fn embed(&self, ids: &[Vec<u32>]) -> Vec<f32> {
        let c = &self.config;
        let trims = c.causal && c.pooling == TextPooling::EndOfText;
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, seq) in ids.iter().enumerate() {
            assert_eq!(
                seq.len(),
                c.context,
                "the tokenizer pads every row to the context"
            );
            assert!(
                seq.iter().all(|&id| (id as usize) < c.vocab),
                "the tokenizer's ids fit the vocabulary"
            );
            let length = if trims { first_max(seq) + 1 } else { c.context };
            groups.entry(length).or_default().push(i);
        }
        let dim = c.projection;
        let mut out = vec![0.0f32; ids.len() * dim];
        for (length, members) in groups {
            let least = min_gemm_rows(c.width).div_ceil(length);
            let rows: Vec<&[u32]> = members
                .iter()
                .chain(std::iter::repeat_n(
                    &members[0],
                    least.saturating_sub(members.len()),
                ))
                .map(|&i| &ids[i][..length])
                .collect();
            let embeddings = self.forward(&rows, length);
            for (k, &i) in members.iter().enumerate() {
                out[i * dim..(i + 1) * dim].copy_from_slice(&embeddings[k * dim..(k + 1) * dim]);
            }
        }
        out
    }

    /// The tower on `rows` of `t` ids each.
    fn forward(&self, rows: &[&[u32]], t: usize) -> Vec<f32> {
        let c = &self.config;
        let device = &self.device;
        let (n, d) = (rows.len(), c.width);
        let mut x = Vec::with_capacity(n * t * d);
        let mut pooled_rows = Vec::with_capacity(n);
        for (row, seq) in rows.iter().enumerate() {
            for (p, &id) in seq.iter().enumerate() {
                let id = id as usize;
                let token = &self.tokens.values[id * d..(id + 1) * d];
                let pos = &self.pos.values[p * d..(p + 1) * d];
                x.extend(token.iter().zip(pos).map(|(a, b)| a + b));
            }
            let at = match c.pooling {
                TextPooling::Last => t - 1,
                TextPooling::EndOfText => first_max(seq),
            };
            pooled_rows.push((row * t + at) as i64);
        }
        let x = upload::<3>(HostTensor::new(vec![n, t, d], x), device);
        let last = (pools_last_tokens(&pooled_rows, t) && crate::model::cpu::on_flex_f32(&x))
            .then_some(t - 1);
        let pooled = match last {
            // Every row pools its last token (SigLIP; CLIP cut at its end
            // token): the last block runs for that token alone (on the CPU:
            // see `Encoder::run_to_token`).
            Some(position) => self.encoder.run_to_token(x, position).reshape([n, d]),
            None => {
                let x = self.encoder.run(x).reshape([n * t, d]);
                let index = Tensor::<1, Int>::from_data(TensorData::new(pooled_rows, [n]), device);
                x.select(0, index)
            }
        };
        let pooled = self.norm.run(pooled);
        let out = self.proj.run(pooled);
        // F.normalize, as the image towers do it (see `Vit::embedding`).
        let width = out.dims()[1] as f64;
        let square_mean = last_axis_mean(out.clone() * out.clone());
        let out = out / (square_mean * width).sqrt().clamp_min(1e-12);
        out.into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .expect("f32 after convert")
    }
}

/// Whether every row's pooled index (`row·t + at`) is its last token.
fn pools_last_tokens(pooled_rows: &[i64], t: usize) -> bool {
    pooled_rows
        .iter()
        .enumerate()
        .all(|(row, &at)| at == (row * t + t - 1) as i64)
}
