//! The CLIP and SigLIP text towers on a GPU (#28): a [`TextPlan`]'s
//! weights in f16 on the device and its forward pass, op for op as the
//! plan's f32 `reference`: the token lookup and positions on the host,
//! the encoder on the GPU (`encoder_run.rs`, causal for CLIP), then the
//! pooled token gathered, its LayerNorm and the projection, and L2
//! normalisation on the host.
//!
//! Behind `embed-text --engine cuda` through [`CudaTextTower`], which
//! checks one text against the plan's f32 reference at every open.
//!
//! Run on an H100 (see `gpu/`): `tests/cuda_gpu.rs` holds it to the
//! reference wherever a GPU is present.

use super::encoder_run::{DeviceBlock, Encoder, activation_kind, upload_blocks};
use super::gpu::{DeviceGemm, DeviceNorm, Gpu, GpuError};
use super::plan::{TextPlan, text_plan, text_plan_seeded};
use model_families::WeightsError;
use model_families::text::{TextConfig, TextPooling, first_max};

/// A text tower's weights on one GPU, and its lookup tables on the host.
pub struct CudaText {
    encoder: Encoder,
    context: usize,
    pooling: TextPooling,
    tokens: Vec<f32>,
    pos: Vec<f32>,
    blocks: Vec<DeviceBlock>,
    norm: DeviceNorm,
    proj: DeviceGemm,
}

impl CudaText {
    /// `plan`'s weights on `gpu`.
    pub fn new(gpu: &Gpu, plan: &TextPlan) -> Result<Self, GpuError> {
        let c = &plan.config;
        Ok(Self {
            encoder: Encoder {
                d: c.width,
                heads: c.heads,
                eps: c.eps,
                activation: activation_kind(c.activation),
                causal: c.causal,
            },
            context: c.context,
            pooling: c.pooling,
            tokens: plan.tokens.clone(),
            pos: plan.pos.clone(),
            blocks: upload_blocks(gpu, &plan.blocks)?,
            norm: gpu.norm_weights(&plan.norm)?,
            proj: gpu.gemm_weights(&plan.proj)?,
        })
    }

    /// L2-normalised embeddings of `ids` (each row `context` ids), as
    /// [`TextPlan::reference`] gives them: `projection` floats per text.
    pub fn embed(&self, gpu: &Gpu, ids: &[Vec<u32>]) -> Result<Vec<f32>, GpuError> {
        let (d, tokens) = (self.encoder.d, self.context);
        let n = ids.len();
        let mut stream = vec![0.0f32; n * tokens * d];
        for (row, seq) in ids.iter().enumerate() {
            assert_eq!(seq.len(), tokens, "ids are padded to the context");
            for (p, &id) in seq.iter().enumerate() {
                let at = (row * tokens + p) * d;
                let (token, pos) = (
                    &self.tokens[id as usize * d..][..d],
                    &self.pos[p * d..][..d],
                );
                for (j, v) in stream[at..at + d].iter_mut().enumerate() {
                    *v = token[j] + pos[j];
                }
            }
        }
        let mut t = gpu.upload(&stream)?;
        drop(stream);
        let mut h = gpu.zeros(n * tokens * d)?;
        self.encoder
            .run(gpu, &self.blocks, &mut t, &mut h, n, tokens)?;
        let index: Vec<usize> = ids
            .iter()
            .enumerate()
            .map(|(row, seq)| {
                row * tokens
                    + match self.pooling {
                        TextPooling::EndOfText => first_max(seq),
                        TextPooling::Last => tokens - 1,
                    }
            })
            .collect();
        let mut pooled = gpu.zeros(n * d)?;
        gpu.gather_rows(&t, &mut pooled, &index, d)?;
        let mut normed = gpu.zeros(n * d)?;
        gpu.layer_norm(&pooled, &mut normed, n, &self.norm, self.encoder.eps)?;
        let mut out = gpu.zeros(n * self.proj.n)?;
        gpu.gemm(&normed, n, &self.proj, &mut out, false)?;
        let mut out = gpu.download(&out, n * self.proj.n)?;
        super::plan::l2_normalize_rows(&mut out, self.proj.n);
        Ok(out)
    }
}

/// A text tower on the run's GPU, as the worker's text encoder drives
/// it: the GPU, the tower's weights on it.
pub struct CudaTextTower {
    gpu: Gpu,
    text: CudaText,
}

/// Why a text tower did not open on a GPU.
#[derive(Debug, thiserror::Error)]
pub enum CudaTextError {
    /// The weights do not hold a text tower that fits.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// The GPU, its libraries or the start-up check.
    #[error("the CUDA engine: {0}")]
    Gpu(#[from] GpuError),
}

/// The lowest cosine between the GPU's and the reference's embedding of
/// the start-up check's text (as the image engine's check).
const SELF_CHECK_COSINE: f32 = 0.999;

impl CudaTextTower {
    /// `config`'s tower from `weights` (or seeded from `seed`, as the burn
    /// engine draws it) on the run's GPU `index` (found by `gpu_address`,
    /// as [`super::engine::Wiring`] says), checked at start on
    /// `probe` (one text's ids) against the plan's f32 reference.
    pub fn open(
        config: TextConfig,
        name: &str,
        weights: Option<&std::path::Path>,
        seed: u64,
        index: usize,
        gpu_address: fn(usize) -> Option<super::engine::GpuAddress>,
        probe: Vec<u32>,
    ) -> Result<Self, CudaTextError> {
        let plan = match weights {
            Some(path) => text_plan(config, name, path)?,
            None => text_plan_seeded(config, name, seed),
        };
        let gpu = super::engine::open_gpu(index, None, gpu_address)?;
        let text = CudaText::new(&gpu, &plan)?;
        let ids = [probe];
        let got = text.embed(&gpu, &ids)?;
        let want = plan.reference(&ids);
        let dot: f32 = got.iter().zip(&want).map(|(a, b)| a * b).sum();
        // Both sides are L2-normalised.
        if dot.is_nan() || dot < SELF_CHECK_COSINE {
            return Err(GpuError(format!(
                "the start-up check of the text tower failed: cosine {dot:.6} to the f32 \
                 reference (needs {SELF_CHECK_COSINE}); use --engine vulkan"
            ))
            .into());
        }
        Ok(Self { gpu, text })
    }

    /// L2-normalised embeddings of `ids`, `projection` floats each.
    pub fn embed(&self, ids: &[Vec<u32>]) -> Result<Vec<f32>, GpuError> {
        self.text.embed(&self.gpu, ids)
    }
}
