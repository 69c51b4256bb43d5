//! The run's identity (`run.json`): everything the records depend on, as a
//! typed struct. A resumed run, a shard joining a shared part folder, and
//! `pipeline merge` read it back; "what changed" comes from comparing its
//! fields. Devices, batch size and worker counts are not in it: they do not
//! change the records (identity holds per device kind).

use std::path::Path;

use pipeline_core::{
    ClassLabels, DecodeLimits, EmbedPooling, EngineKind, Fnv64, Manifest, ModelKind, ModelRef,
    Precision, PreprocessSpec, Prompts, Task,
};
use serde::{Deserialize, Serialize};

use crate::config::RunConfig;

/// Version of the part-folder layout and of what its records mean: parts
/// from another version are refused, never mixed in. 2: JPEGs decoded and
/// resized as Pillow does (exact preprocessing). 3: the CNNs' BatchNorms
/// folded into their convolutions (the same values up to rounding, so not
/// the same bytes). 4: GELU on the CPU with ATen's vectorised erf (ViTs and
/// ConvNeXts: again the same values up to rounding). 5: on the CPU, GELU's
/// and attention's kernels vectorised with their own `exp`, and ResNets
/// channels-last (the same again). 6: on the CUDA engine, attention in one
/// kernel and 1×1 convolutions as cuBLASLt GEMMs (the same again).
pub const PARTS_LAYOUT: u64 = 6;

/// Everything the records of a run depend on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunIdentity {
    /// The input list.
    pub inputs: Inputs,
    /// Items per chunk (part files are per chunk).
    pub chunk_size: u64,
    /// The model: a built-in one by its `--model` name, an ONNX file as
    /// resolved (its fingerprint, output and scores).
    pub model: ModelRef,
    /// The weight file's fingerprint, or the seed of random weights.
    pub weights: Weights,
    /// What the records hold.
    pub task: Task,
    /// Resize, crop and normalisation.
    pub preprocess: PreprocessSpec,
    /// Decompression-bomb guards.
    pub limits: DecodeLimits,
    /// DINOv2's pooling, when chosen (absent otherwise, so that earlier
    /// runs' identities stay the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooling: Option<EmbedPooling>,
    /// A zero-shot run's class file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<ClassFile>,
    /// `--precision` as given (`auto` resolves per device, as the backend
    /// does: resume may change devices, not the flag).
    #[serde(default)]
    pub precision: Precision,
    /// The engine that computes the records (engines do not give the same
    /// bytes); absent for burn's, so that earlier runs' identities stay
    /// the same.
    #[serde(default, skip_serializing_if = "EngineKind::is_burn")]
    pub engine: EngineKind,
    /// `--keep-columns`, as the source resolved them (absent when none,
    /// so that earlier runs' identities stay the same).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept_columns: Vec<String>,
    /// [`PARTS_LAYOUT`] of the build that wrote it.
    pub layout: u64,
}

/// The input list: how many items, and a hash of their paths in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inputs {
    /// Items in the manifest.
    pub items: u64,
    /// FNV-64 of the relative paths, in order (hex).
    pub paths_fnv64: String,
}

impl Inputs {
    /// `manifest`'s item count and fingerprint.
    pub fn of(manifest: &Manifest) -> Self {
        Self {
            items: manifest.entries.len() as u64,
            paths_fnv64: format!("{:016x}", manifest.fingerprint()),
        }
    }
}

/// Where the weights came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Weights {
    /// A weight file's size and hash: xxh3-64, or FNV-64 in a run begun
    /// by a pipeline before 2026-11-24 (its byte-at-a-time loop took
    /// 0.8 s of a 605 MB CLIP checkpoint's start; xxh3 runs at memory
    /// speed). Such a run resumes: its weights are hashed its way.
    File {
        /// Size in bytes.
        bytes: u64,
        /// xxh3-64 of the contents (hex).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        xxh3: Option<String>,
        /// FNV-64 of the contents (hex), in runs begun before xxh3.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fnv64: Option<String>,
    },
    /// Seeded random weights.
    Seeded {
        /// The seed.
        random_seed: u64,
    },
}

/// A zero-shot run's classes: the class file's fingerprint, or for
/// classes made from plain labels the templates and tokenizer that made
/// them; and the labels (which `merge` uses to name classes in re-encoded
/// formats).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassFile {
    /// Size in bytes (0 for classes made from labels).
    #[serde(default)]
    pub bytes: u64,
    /// FNV-64 of the contents (hex; empty for classes made from labels).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fnv64: String,
    /// One label per class.
    pub labels: Vec<String>,
    /// Classes made from labels: the prompt templates and the tokenizer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<Prompts>,
}

/// The weight or class file could not be read for the run's fingerprint.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {}: {source}", path.display())]
pub struct FingerprintError {
    /// `--weights` or `--classes`.
    flag: &'static str,
    /// The file.
    path: std::path::PathBuf,
    /// Why.
    source: std::io::Error,
}

impl RunIdentity {
    /// The identity of `config` over `manifest`; reads the weight and class
    /// files to fingerprint them.
    pub(crate) fn of(config: &RunConfig, manifest: &Manifest) -> Result<Self, FingerprintError> {
        let worker = &config.worker;
        let weights = match &worker.weights {
            Some(path) => {
                let (bytes, xxh3) = fingerprint("--weights", path, FileHash::Xxh3)?;
                Weights::File {
                    bytes,
                    xxh3: Some(xxh3),
                    fnv64: None,
                }
            }
            None => Weights::Seeded {
                random_seed: worker.seed,
            },
        };
        let classes = match &worker.classes {
            Some(classes) if classes.prompts.is_some() => Some(ClassFile {
                bytes: 0,
                fnv64: String::new(),
                labels: classes.labels.clone(),
                prompts: classes.prompts.clone(),
            }),
            Some(classes) => {
                let (bytes, fnv64) = fingerprint("--classes", &classes.path, FileHash::Fnv64)?;
                Some(ClassFile {
                    bytes,
                    fnv64,
                    labels: classes.labels.clone(),
                    prompts: None,
                })
            }
            None => None,
        };
        Ok(Self {
            inputs: Inputs::of(manifest),
            chunk_size: config.chunk_size,
            model: worker.model.clone(),
            weights,
            task: worker.task,
            preprocess: worker.preprocess.clone(),
            limits: worker.limits,
            pooling: worker.pooling,
            classes,
            precision: worker.precision,
            engine: worker.engine,
            kept_columns: manifest.kept.columns.clone(),
            layout: PARTS_LAYOUT,
        })
    }

    /// An identity with `model`'s defaults, seed 0 and top-5
    /// classification, over `items` inputs: for tests and benchmarks of the
    /// part store.
    pub fn example(model: ModelKind, items: u64, chunk_size: u64) -> Self {
        Self {
            inputs: Inputs {
                items,
                paths_fnv64: format!("{:016x}", Fnv64::default().finish()),
            },
            chunk_size,
            model: model.into(),
            weights: Weights::Seeded { random_seed: 0 },
            task: Task::Classify { top_k: 5 },
            preprocess: model.default_preprocess(),
            limits: DecodeLimits::default(),
            pooling: None,
            classes: None,
            precision: Precision::Auto,
            engine: EngineKind::Burn,
            kept_columns: Vec::new(),
            layout: PARTS_LAYOUT,
        }
    }

    /// The class names its records use.
    pub(crate) fn labels(&self) -> ClassLabels {
        match (&self.classes, &self.model) {
            (Some(c), _) => ClassLabels::Named(c.labels.iter().cloned().collect()),
            (None, model) => ClassLabels::for_model(None, model),
        }
    }

    /// `None` when `now` describes the same run, else what a person would
    /// call each difference, with the old and new values.
    pub(crate) fn difference(&self, now: &Self) -> Option<String> {
        let mut changes = Vec::new();
        let mut field = |what: &str, old: Option<String>, new: Option<String>| {
            if old != new {
                changes.push(format!("{what} (was {}, now {})", shown(old), shown(new)));
            }
        };
        field("other input files", json(&self.inputs), json(&now.inputs));
        field(
            "another --chunk-size",
            json(&self.chunk_size),
            json(&now.chunk_size),
        );
        field(
            "another --model",
            model_json(&self.model),
            model_json(&now.model),
        );
        field("other weights", json(&self.weights), json(&now.weights));
        field(
            "another --task or --top-k",
            json(&self.task),
            json(&now.task),
        );
        field(
            "other preprocessing",
            json(&self.preprocess),
            json(&now.preprocess),
        );
        field("other decode limits", json(&self.limits), json(&now.limits));
        field(
            "another --pooling",
            self.pooling.as_ref().and_then(json),
            now.pooling.as_ref().and_then(json),
        );
        field(
            "other --classes (file, labels, --prompt or tokenizer)",
            self.classes.as_ref().and_then(json),
            now.classes.as_ref().and_then(json),
        );
        field(
            "another --precision",
            json(&self.precision),
            json(&now.precision),
        );
        field("another engine", json(&self.engine), json(&now.engine));
        field(
            "other --keep-columns",
            json(&self.kept_columns),
            json(&now.kept_columns),
        );
        field(
            "an older version of pipeline",
            json(&self.layout),
            json(&now.layout),
        );
        (!changes.is_empty()).then(|| changes.join("; "))
    }
}

fn json<T: Serialize>(value: &T) -> Option<String> {
    serde_json::to_string(value).ok()
}

/// The model as resume compares it: a hub model's weight file by its name
/// in the snapshot, not the cache's path (its repo and commit say which
/// file it is), so that a run resumes where the cache is mounted
/// elsewhere.
fn model_json(model: &ModelRef) -> Option<String> {
    match model {
        ModelRef::Hub(hub) => {
            let mut hub = hub.clone();
            hub.weights = hub.weights.file_name().map(Into::into).unwrap_or_default();
            json(&ModelRef::Hub(hub))
        }
        other => json(other),
    }
}

/// A value for the message: `nothing` when absent, and cut to one short
/// line (a zero-shot run's labels can be thousands).
fn shown(value: Option<String>) -> String {
    let Some(text) = value else {
        return "nothing".to_owned();
    };
    match text.char_indices().nth(120) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// `--model` names in `run.json`, as the user types them.
impl RunIdentity {
    /// This run's identity with its weights hashed as `stored`'s were: a
    /// run begun by an earlier pipeline recorded FNV-64, not xxh3.
    pub(crate) fn fingerprinted_like(
        mut self,
        stored: Option<&RunIdentity>,
        weights: Option<&Path>,
    ) -> Result<Self, FingerprintError> {
        let legacy = matches!(
            stored.map(|s| &s.weights),
            Some(Weights::File {
                xxh3: None,
                fnv64: Some(_),
                ..
            })
        );
        if let (true, Some(path)) = (legacy, weights) {
            let (bytes, fnv64) = fingerprint("--weights", path, FileHash::Fnv64)?;
            self.weights = Weights::File {
                bytes,
                xxh3: None,
                fnv64: Some(fnv64),
            };
        }
        Ok(self)
    }
}

/// How a file's contents are hashed for the identity: xxh3-64 for weight
/// files (hundreds of MB), FNV-64 for class files and for the weights of
/// runs begun before xxh3.
#[derive(Debug, Clone, Copy)]
enum FileHash {
    Xxh3,
    Fnv64,
}

/// The size and hash (hex) of the file at `path`, the flag that named it
/// in the error.
fn fingerprint(
    flag: &'static str,
    path: &Path,
    kind: FileHash,
) -> Result<(u64, String), FingerprintError> {
    hash_file(path, kind).map_err(|source| FingerprintError {
        flag,
        path: path.to_owned(),
        source,
    })
}

fn hash_file(path: &Path, kind: FileHash) -> std::io::Result<(u64, String)> {
    let mut file = std::fs::File::open(path)?;
    let mut xxh3 = xxhash_rust::xxh3::Xxh3::new();
    let mut fnv = Fnv64::default();
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = std::io::Read::read(&mut file, &mut buffer)?;
        if n == 0 {
            break;
        }
        match kind {
            FileHash::Xxh3 => xxh3.update(&buffer[..n]),
            FileHash::Fnv64 => fnv.write(&buffer[..n]),
        }
        bytes += n as u64;
    }
    let digest = match kind {
        FileHash::Xxh3 => xxh3.digest(),
        FileHash::Fnv64 => fnv.finish(),
    };
    Ok((bytes, format!("{digest:016x}")))
}

#[cfg(test)]
mod tests;
