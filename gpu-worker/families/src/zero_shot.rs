//! Zero-shot classification for CLIP and SigLIP (`--task classify
//! --classes FILE`): the image embedding against a matrix of class text
//! embeddings, as upstream scores them.
//!
//! - CLIP (open_clip, `CLIPModel.logits_per_image`): softmax over
//!   `exp(logit_scale) · img · txtᵀ`;
//! - SigLIP (`SiglipModel.logits_per_image`): each class's own sigmoid of
//!   `exp(logit_scale) · img · txtᵀ + logit_bias`.
//!
//! Both sides are L2-normalised (the image side by the model, the text rows
//! here), so a matrix of raw `encode_text` / `get_text_features` outputs and
//! one of normalised rows give the same result. The scale (and bias) come
//! from the checkpoint's `logit_scale` and `logit_bias`. A checkpoint
//! without them (a vision tower alone) gets CLIP's 100, the value trained
//! CLIP models reach and open_clip's zero-shot evaluation uses; SigLIP's are
//! learned per model, so a SigLIP vision tower alone is refused. Seeded
//! random weights use upstream's initial values.
//!
//! The matrix is a `.npy` (float32, float16 or float64; labels one per line
//! in the `.txt` of the same name beside it) or a `.safetensors` file
//! holding one 2-D tensor (or one named `embeddings`), with its labels as a
//! JSON list under the `labels` metadata key or in the `.txt` beside it.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use pipeline_core::{Family, ModelKind};
use safetensors::SafeTensors;

use crate::checkpoint::Checkpoint;
use crate::weights_error::WeightsError;

/// A class file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("class file {path}: {problem}")]
pub struct ClassesError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it, in one line.
    pub problem: String,
}

/// Why a model cannot classify zero-shot against a class matrix.
#[derive(Debug, thiserror::Error)]
pub enum ZeroShotError {
    /// Not a CLIP or SigLIP model.
    #[error("--classes needs a CLIP or SigLIP model; {model} classifies with its own head")]
    NotZeroShot {
        /// The model's name.
        model: String,
    },
    /// The network has no normalised image embedding.
    #[error("{model} has no normalised image embedding to classify zero-shot")]
    NoEmbedding {
        /// The model's name.
        model: String,
    },
    /// The class rows are not as wide as the image embedding.
    #[error("the class rows are {rows} wide, but {model}'s image embedding is {dim}")]
    Width {
        /// The rows' width.
        rows: usize,
        /// The model's name.
        model: String,
        /// The embedding's width.
        dim: usize,
    },
    /// The weight file lacks the scale (and bias) the family needs.
    #[error(
        "weight file {} has no logit_scale and logit_bias, which {model}'s zero-shot \
         scores need: use the full model's checkpoint (SiglipModel), not the vision tower",
        weights.display()
    )]
    NoLogitParams {
        /// The model's name.
        model: String,
        /// The weight file.
        weights: PathBuf,
    },
    /// The weight file cannot be read.
    #[error(transparent)]
    Weights(#[from] WeightsError),
}

/// The class text embeddings, one row per class, and their labels.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassMatrix {
    labels: Vec<String>,
    dim: usize,
    /// Row-major `[labels.len(), dim]`.
    values: Vec<f32>,
}

impl ClassMatrix {
    /// Reads `path` and its labels, checking that every row is a finite,
    /// non-zero vector with a label.
    pub fn open(path: &Path) -> Result<Self, ClassesError> {
        let fail = |problem: String| ClassesError {
            path: path.to_path_buf(),
            problem,
        };
        if !path.is_file() {
            return Err(fail("does not exist".into()));
        }
        let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let (shape, values, labels) = match extension {
            "npy" => {
                let (shape, values) = read_npy(path).map_err(fail)?;
                (shape, values, None)
            }
            "safetensors" => read_safetensors(path).map_err(fail)?,
            _ => {
                return Err(fail(
                    "expected a .npy or .safetensors matrix of class text embeddings".into(),
                ));
            }
        };
        let [rows, dim] = shape[..] else {
            return Err(fail(format!(
                "holds a tensor of shape {shape:?}; expected [classes, embedding dim]"
            )));
        };
        if rows == 0 || dim == 0 {
            return Err(fail(format!("holds an empty matrix {shape:?}")));
        }
        let labels = match labels {
            Some(labels) => labels,
            None => read_labels(&path.with_extension("txt")).map_err(fail)?,
        };
        if labels.len() != rows {
            return Err(fail(format!(
                "has {rows} rows but {} labels; every row needs one",
                labels.len()
            )));
        }
        for (row, values) in values.chunks_exact(dim).enumerate() {
            if values.iter().any(|v| !v.is_finite()) {
                return Err(fail(format!("row {row} ({}) is not finite", labels[row])));
            }
            if values.iter().all(|&v| v == 0.0) {
                return Err(fail(format!("row {row} ({}) is all zeros", labels[row])));
            }
        }
        Ok(Self {
            labels,
            dim,
            values,
        })
    }

    /// A matrix from its parts (tests).
    pub fn new(labels: Vec<String>, dim: usize, values: Vec<f32>) -> Self {
        assert_eq!(labels.len() * dim, values.len(), "one row per label");
        Self {
            labels,
            dim,
            values,
        }
    }

    /// Writes the matrix as a `.safetensors` file [`ClassMatrix::open`]
    /// reads: one f32 tensor `embeddings`, `[classes, dim]`, its labels as
    /// a JSON list under the `labels` metadata key.
    pub fn write_safetensors(&self, path: &Path) -> std::io::Result<()> {
        let bytes: Vec<u8> = self.values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let view = safetensors::tensor::TensorView::new(
            safetensors::Dtype::F32,
            vec![self.rows(), self.dim],
            &bytes,
        )
        .map_err(std::io::Error::other)?;
        let labels = serde_json::to_string(&self.labels).map_err(std::io::Error::other)?;
        let metadata = std::collections::HashMap::from([("labels".to_owned(), labels)]);
        safetensors::serialize_to_file([("embeddings", view)], Some(metadata), path)
            .map_err(std::io::Error::other)
    }

    /// One label per row.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// Classes (rows).
    pub fn rows(&self) -> usize {
        self.labels.len()
    }

    /// The embedding width (columns).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The rows divided by their L2 norm, in `f64` (as `F.normalize`, whose
    /// `eps` never applies to a checked, non-zero row).
    pub fn normalised(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.values.len());
        for row in self.values.chunks_exact(self.dim) {
            let norm = row
                .iter()
                .map(|&v| f64::from(v) * f64::from(v))
                .sum::<f64>()
                .sqrt();
            out.extend(row.iter().map(|&v| (f64::from(v) / norm) as f32));
        }
        out
    }
}

/// How a family turns scores into probabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probabilities {
    /// Softmax over the classes (CLIP).
    Softmax,
    /// Each class's own sigmoid (SigLIP).
    Sigmoid,
}

pub use pipeline_core::LogitParams;

/// A family's zero-shot scoring.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ZeroShotRule {
    /// Softmax or sigmoid.
    pub activation: Probabilities,
    /// For a checkpoint without `logit_scale`: `None` refuses it.
    pub fallback: Option<LogitParams>,
    /// Upstream's initial values, for seeded random weights.
    pub initial: LogitParams,
}

impl ZeroShotRule {
    /// The rule of `family`, if it classifies zero-shot.
    pub fn of(family: Family) -> Option<Self> {
        match family {
            Family::Clip => Some(Self {
                activation: Probabilities::Softmax,
                fallback: Some(LogitParams {
                    log_scale: 100f32.ln(),
                    bias: None,
                }),
                // open_clip and transformers: log(1 / 0.07).
                initial: LogitParams {
                    log_scale: (1.0f32 / 0.07).ln(),
                    bias: None,
                },
            }),
            Family::Siglip => Some(Self {
                activation: Probabilities::Sigmoid,
                fallback: None,
                // transformers' SiglipModel: log 10 and -10.
                initial: LogitParams {
                    log_scale: 10f32.ln(),
                    bias: Some(-10.0),
                },
            }),
            _ => None,
        }
    }
}

/// A zero-shot head as host data: `classes`' rows normalised and scaled by
/// `exp(logit_scale)`, transposed to `[dim, classes]` (a Linear's
/// `[in, out]`), and `logit_bias` for each class where the family has one;
/// or why not, when the rows are not `dim` wide.
pub fn scaled_head(
    classes: &ClassMatrix,
    params: LogitParams,
    model: &str,
    dim: usize,
) -> Result<(Vec<f32>, Option<Vec<f32>>), ZeroShotError> {
    if classes.dim() != dim {
        return Err(ZeroShotError::Width {
            rows: classes.dim(),
            model: model.to_owned(),
            dim,
        });
    }
    let scale = params.log_scale.exp();
    let k = classes.rows();
    let mut weight = vec![0.0f32; dim * k];
    for (class, row) in classes.normalised().chunks_exact(dim).enumerate() {
        for (d, &v) in row.iter().enumerate() {
            weight[d * k + class] = v * scale;
        }
    }
    Ok((weight, params.bias.map(|b| vec![b; k])))
}

/// `logit_scale` and `logit_bias` of `checkpoint`, where it has them (each a
/// single value, `[]` or `[1]`).
pub fn logit_params(checkpoint: &Checkpoint) -> Result<Option<LogitParams>, WeightsError> {
    let scalar = |name: &str| -> Result<Option<f32>, WeightsError> {
        match checkpoint.shape(name) {
            Some(shape) if shape.iter().product::<usize>() == 1 => {
                Ok(Some(checkpoint.read(name)?.values[0]))
            }
            _ => Ok(None),
        }
    };
    Ok(scalar("logit_scale")?.map(|log_scale| LogitParams {
        log_scale,
        bias: scalar("logit_bias").ok().flatten(),
    }))
}

/// The model a class matrix scores against: its family, its name (for
/// errors), the width of its normalised image embedding, its weight file
/// (`None`: seeded random weights) and the logit scale and bias the
/// coordinator read from it (`ResolvedWeights::logit`).
#[derive(Debug, Clone, Copy)]
pub struct ZeroShotModel<'a> {
    /// CLIP or SigLIP; any other family is refused.
    pub family: Family,
    /// The model's name or repo id.
    pub name: &'a str,
    /// Width of its image embedding.
    pub dim: usize,
    /// Its weights.
    pub weights: Option<&'a Path>,
    /// Their `logit_scale` (and `logit_bias`), where they hold one.
    pub logit: Option<LogitParams>,
}

impl<'a> ZeroShotModel<'a> {
    /// A built-in model with `weights`, whose logit parameters are `logit`.
    pub fn builtin(kind: ModelKind, weights: Option<&'a Path>, logit: Option<LogitParams>) -> Self {
        Self {
            family: kind.family(),
            name: kind.name(),
            dim: kind.feature_dim(),
            weights,
            logit,
        }
    }
}

/// Checks, before any worker starts, that `classes` can classify with
/// `model`: a CLIP or SigLIP model, rows as wide as its embedding, and the
/// scale (and bias) the family needs in its weights.
pub fn check(model: &ZeroShotModel<'_>, classes: &ClassMatrix) -> Result<(), ZeroShotError> {
    let Some(rule) = ZeroShotRule::of(model.family) else {
        return Err(ZeroShotError::NotZeroShot {
            model: model.name.to_owned(),
        });
    };
    if classes.dim() != model.dim {
        return Err(ZeroShotError::Width {
            rows: classes.dim(),
            model: model.name.to_owned(),
            dim: model.dim,
        });
    }
    if let Some(weights) = model.weights {
        resolve(model.name, model.logit, &rule, weights)?;
    }
    Ok(())
}

/// The checkpoint's parameters, else the family's fallback, else why not.
pub fn resolve(
    model: &str,
    found: Option<LogitParams>,
    rule: &ZeroShotRule,
    weights: &Path,
) -> Result<LogitParams, ZeroShotError> {
    found
        .or(rule.fallback)
        .ok_or_else(|| ZeroShotError::NoLogitParams {
            model: model.to_owned(),
            weights: weights.to_owned(),
        })
}

fn read_npy(path: &Path) -> Result<(Vec<usize>, Vec<f32>), String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let npy = npyz::NpyFile::new(BufReader::new(file))
        .map_err(|e| format!("not a readable .npy file ({e})"))?;
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let fortran = npy.order() == npyz::Order::Fortran;
    let dtype = npy.dtype().descr();
    let truncated = |e: std::io::Error| format!("cannot read its data ({e})");
    let values: Vec<f32> = match npy.try_data::<f32>() {
        Ok(data) => data.collect::<Result<_, _>>().map_err(truncated)?,
        Err(npy) => match npy.try_data::<f64>() {
            Ok(data) => data
                .collect::<Result<Vec<_>, _>>()
                .map_err(truncated)?
                .into_iter()
                .map(|v| v as f32)
                .collect(),
            Err(npy) => match npy.try_data::<half::f16>() {
                Ok(data) => data
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(truncated)?
                    .into_iter()
                    .map(f32::from)
                    .collect(),
                Err(_) => {
                    return Err(format!(
                        "holds {dtype}; expected float32, float16 or float64"
                    ));
                }
            },
        },
    };
    if fortran && shape.len() == 2 {
        // Column-major on disk: transpose into rows.
        let (rows, cols) = (shape[0], shape[1]);
        let mut out = vec![0.0; values.len()];
        for c in 0..cols {
            for r in 0..rows {
                out[r * cols + c] = values[c * rows + r];
            }
        }
        return Ok((shape, out));
    }
    Ok((shape, values))
}

type Read = (Vec<usize>, Vec<f32>, Option<Vec<String>>);

fn read_safetensors(path: &Path) -> Result<Read, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let (_, metadata) = SafeTensors::read_metadata(&bytes)
        .map_err(|e| format!("not a complete safetensors file ({e:?})"))?;
    let labels =
        match metadata.metadata().as_ref().and_then(|m| m.get("labels")) {
            Some(json) => Some(serde_json::from_str::<Vec<String>>(json).map_err(|e| {
                format!("its `labels` metadata is not a JSON list of strings ({e})")
            })?),
            None => None,
        };
    drop(bytes);
    let checkpoint = Checkpoint::open(path).map_err(|e| match e {
        WeightsError::Unreadable { message, .. } => message,
        other => other.to_string(),
    })?;
    let names: Vec<&str> = checkpoint.names().collect();
    let name = match names[..] {
        [only] => only,
        _ if checkpoint.has("embeddings") => "embeddings",
        _ => {
            return Err(format!(
                "holds {} tensors; expected one, or one named `embeddings`",
                names.len()
            ));
        }
    };
    let tensor = checkpoint.read(name).map_err(|e| match e {
        WeightsError::Unreadable { message, .. } => message,
        other => other.to_string(),
    })?;
    Ok((tensor.shape, tensor.values, labels))
}

fn read_labels(path: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "its labels, one per line, are read from {}, which cannot be read ({e})",
            path.display()
        )
    })?;
    let labels: Vec<String> = text
        .lines()
        .map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned())
        .collect();
    if let Some(line) = labels.iter().position(String::is_empty) {
        return Err(format!(
            "line {} of {} is empty; every class needs a label",
            line + 1,
            path.display()
        ));
    }
    Ok(labels)
}

#[cfg(test)]
mod tests;
