//! The CUDA engine's zero-shot head (`--classes`), on the host.

use pipeline_core::{WorkerConfig, ZeroShotClasses};

use super::plan::Gemm;
use engine_seam::OpenError;
use model_families::zero_shot::Probabilities;

/// CLIP's or SigLIP's zero-shot head, on the host: the class rows
/// normalised and scaled by `exp(logit_scale)` as a `[dim, classes]` GEMM
/// with `logit_bias`, over the GPU's L2-normalised image embeddings, then
/// softmax (CLIP) or each class's sigmoid (SigLIP), as the burn engine's
/// `Model::with_zero_shot` scores them.
pub struct ZeroShotHead {
    head: Gemm,
    activation: Probabilities,
}

impl ZeroShotHead {
    /// The head of `classes` for `config`'s model, over `dim`-wide
    /// embeddings, with its checkpoint's scale (and bias).
    pub fn open(
        config: &WorkerConfig,
        classes: &ZeroShotClasses,
        dim: usize,
    ) -> Result<Self, OpenError> {
        let (family, name, weights) = engine_seam::zero_shot_model(config)?;
        let name = name.as_str();
        let (rule, matrix) = engine_seam::open_classes((family, name), classes)?;
        // The checkpoint's, as the coordinator read them.
        let params = match weights {
            Some(path) => {
                model_families::zero_shot::resolve(name, config.resolved.logit, &rule, path)?
            }
            None => rule.initial,
        };
        let (weight, bias) = model_families::zero_shot::scaled_head(&matrix, params, name, dim)?;
        Ok(Self {
            head: Gemm {
                k: dim,
                n: matrix.rows(),
                weight,
                bias,
            },
            activation: rule.activation,
        })
    }

    /// The number of classes.
    pub fn classes(&self) -> usize {
        self.head.n
    }

    /// Each row's class probabilities from its normalised embedding.
    pub fn probabilities(&self, embeddings: &[f32]) -> Vec<f32> {
        let mut scores = super::plan::gemm(embeddings, &self.head);
        match self.activation {
            Probabilities::Softmax => scores
                .chunks_exact_mut(self.head.n)
                .for_each(super::plan::softmax),
            Probabilities::Sigmoid => scores
                .iter_mut()
                .for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
        }
        scores
    }
}
