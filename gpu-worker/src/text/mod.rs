//! The text side of CLIP and SigLIP: a checkpoint's text tower and its
//! upstream tokenizer, behind [`TextEncoder`]: texts in,
//! L2-normalised embeddings out, comparable with the image embeddings of
//! the same checkpoint. `pipeline embed-text` and zero-shot classification
//! from plain labels run on it.
//!
//! The tokenizer comes from the checkpoint's upstream (`text-tokenizers`):
//! open_clip's BPE, built in, for an OpenCLIP/OpenAI file; the
//! `tokenizer.json` beside a Hugging Face CLIP file; SigLIP's
//! `spiece.model` or `tokenizer.json` beside a
//! `SiglipModel` file; or `--tokenizer FILE`.

pub use text_tokenizers::prompts;

use std::path::{Path, PathBuf};

use pipeline_core::{DeviceSpec, EngineKind, ModelKind};
use rayon::prelude::*;

use engine_burn::model::text::TextTower;
use engine_seam::DeviceError;
use model_families::WeightsError;
use model_families::text::checkpoint_is_hugging_face;
pub use model_families::text::{TextConfig, TokenizerFamily};
pub use text_tokenizers::{TextTokenizer, TokenizerError, clip_clean};

/// Why a text encoder could not open, in one line.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// The device did not open.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The weights do not hold a text tower that fits.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// The tokenizer file cannot be used.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// A Hugging Face checkpoint with no tokenizer beside it.
    #[error(
        "{} is a Hugging Face checkpoint and its tokenizer is not beside it: \
         put its {} at {} or pass --tokenizer FILE",
        weights.display(),
        names,
        wanted.display()
    )]
    MissingTokenizer {
        /// The weights.
        weights: PathBuf,
        /// The files that would do, in words.
        names: &'static str,
        /// Where the tokenizer was looked for.
        wanted: PathBuf,
    },
    /// SigLIP with seeded weights and no tokenizer named.
    #[error(
        "SigLIP's tokenizer is not built in: pass --tokenizer with its spiece.model \
         (or tokenizer.json)"
    )]
    NoSiglipTokenizer,
    /// The CUDA engine did not open the tower, or failed in a pass.
    #[error(transparent)]
    Cuda(#[from] engine_cuda::text_run::CudaTextError),
}

/// A model's text tower on a device, with its tokenizer.
#[derive(Debug)]
pub struct TextEncoder {
    tower: Tower,
    config: TextConfig,
    tokenizer: TextTokenizer,
}

/// The engine a text tower runs on.
enum Tower {
    /// burn's, on the CPU or a Vulkan GPU.
    Burn(Box<TextTower>),
    /// The CUDA engine's (`cuda::text_run`).
    Cuda(Box<engine_cuda::text_run::CudaTextTower>),
}

impl std::fmt::Debug for Tower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Burn(tower) => tower.fmt(f),
            Self::Cuda(_) => f.write_str("CudaTextTower"),
        }
    }
}

/// The text tower of a named model, if this tool has one for it.
pub fn text_config(kind: ModelKind) -> Option<TextConfig> {
    TextConfig::of(kind)
}

/// The text tower a hub CLIP or SigLIP repo's config describes.
pub fn hub_text_config(text: &pipeline_core::HubText) -> TextConfig {
    TextConfig::of_hub(text)
}

/// The tokenizer `weights` is used with, for `config`'s tower: `tokenizer`
/// if given; for CLIP, the `tokenizer.json` beside a Hugging Face
/// checkpoint, else open_clip's built-in one (OpenCLIP/OpenAI checkpoints
/// and seeded weights); for SigLIP, the `spiece.model` beside the weights,
/// else a `tokenizer.json` there. Reads the checkpoint's names only.
pub fn tokenizer_for(
    weights: Option<&Path>,
    tokenizer: Option<&Path>,
    config: &TextConfig,
) -> Result<TextTokenizer, TextError> {
    let family = config.tokenizer;
    if let Some(file) = tokenizer {
        return Ok(TextTokenizer::from_file(file, family, config.context)?);
    }
    let (weights, names, beside): (_, _, &[&str]) = match family {
        TokenizerFamily::Clip => {
            let Some(weights) = weights else {
                return Ok(TextTokenizer::OpenClip);
            };
            if !checkpoint_is_hugging_face(weights)? {
                return Ok(TextTokenizer::OpenClip);
            }
            (weights, "tokenizer.json", &["tokenizer.json"])
        }
        TokenizerFamily::Siglip => {
            let weights = weights.ok_or(TextError::NoSiglipTokenizer)?;
            (
                weights,
                "spiece.model (or tokenizer.json)",
                &["spiece.model", "tokenizer.json"],
            )
        }
    };
    let folder = weights.parent().unwrap_or(Path::new("."));
    match beside.iter().map(|n| folder.join(n)).find(|f| f.is_file()) {
        Some(file) => Ok(TextTokenizer::from_file(&file, family, config.context)?),
        None => Err(TextError::MissingTokenizer {
            weights: weights.to_path_buf(),
            names,
            wanted: folder.join(beside[0]),
        }),
    }
}

impl TextEncoder {
    /// The text tower of `config` (a named model's, [`text_config`], or a
    /// hub repo's, [`hub_text_config`]; `name` is the model's, for errors)
    /// on `device` with `engine`: from `weights` (seeded random ones when
    /// `None`, for benchmarks), with `tokenizer` (see [`tokenizer_for`]).
    /// The CUDA engine takes a GPU and checks one text against its f32
    /// reference at open.
    pub fn open(
        config: TextConfig,
        name: &str,
        weights: Option<&Path>,
        tokenizer: TextTokenizer,
        seed: u64,
        (device, engine): (&DeviceSpec, EngineKind),
    ) -> Result<Self, TextError> {
        let tower = match (engine, device) {
            (EngineKind::Cuda, DeviceSpec::Gpu(index)) => {
                let probe = tokenizer.encode("a photo of a cat.", config.context);
                Tower::Cuda(Box::new(engine_cuda::text_run::CudaTextTower::open(
                    config.clone(),
                    name,
                    weights,
                    seed,
                    *index,
                    crate::factory::cuda_wiring().gpu_address,
                    probe,
                )?))
            }
            _ => {
                let device = engine_burn::open(device)?;
                Tower::Burn(Box::new(match weights {
                    Some(path) => TextTower::load(config.clone(), name, path, &device)?,
                    None => TextTower::seeded(config.clone(), name, seed, &device),
                }))
            }
        };
        Ok(Self {
            tower,
            config,
            tokenizer,
        })
    }

    /// A text tower built elsewhere (tests of small configurations).
    pub fn of(tower: TextTower, tokenizer: TextTokenizer) -> Self {
        Self {
            config: tower.config().clone(),
            tower: Tower::Burn(Box::new(tower)),
            tokenizer,
        }
    }

    /// Width of the embeddings.
    pub fn dim(&self) -> usize {
        self.config.projection
    }

    /// Tokens in a context.
    pub fn context(&self) -> usize {
        self.config.context
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// The token ids of `text`, as the tower takes them.
    pub fn tokens(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(text, self.context())
    }

    /// L2-normalised embeddings of `texts`, `dim()` floats each, in order.
    /// The texts are tokenized on rayon's threads (ftfy and BPE cost about
    /// as much as a small text tower's pass).
    /// A failed GPU pass is an error.
    pub fn embed<S: AsRef<str> + Sync>(&self, texts: &[S]) -> Result<Vec<f32>, TextError> {
        let ids: Vec<Vec<u32>> = texts.par_iter().map(|t| self.tokens(t.as_ref())).collect();
        match &self.tower {
            Tower::Burn(tower) => Ok(tower.embed(&ids)),
            Tower::Cuda(tower) => tower
                .embed(&ids)
                .map_err(|e| engine_cuda::text_run::CudaTextError::Gpu(e).into()),
        }
    }
}
