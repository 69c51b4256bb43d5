//! A weight file read once, before any worker starts (#42 item 7), names
//! and shapes only (no device, no tensor data): checked, for a clear
//! one-line error, and resolved into what every engine builds the network
//! from ([`ResolvedWeights`]: the layout its names are in, the activation
//! a CLIP config beside it names, its zero-shot logit scale and bias). A
//! built-in model's `--weights` and a hub model's snapshot alike.

use std::path::Path;

use pipeline_core::{ModelKind, ResolvedWeights};

use super::Model;
use model_families::Architecture;
use model_families::architecture as families;
use model_families::checkpoint::Checkpoint;
use model_families::clip_config::Tower;
use model_families::weights_error::WeightsError;

impl Model {
    /// Checks that `path` is a checkpoint of `kind` in a layout it accepts,
    /// and resolves it: for the coordinator, before any worker starts. A
    /// CLIP config beside it must read for both towers (the text tower's
    /// is read when text is asked for).
    pub fn resolve_file(kind: ModelKind, path: &Path) -> Result<ResolvedWeights, WeightsError> {
        families::resolve(
            &Architecture::of(kind),
            kind.name(),
            path,
            &[Tower::Image, Tower::Text],
        )
    }

    /// Checks that `path` holds the weights of the hub model `shape`
    /// describes (#42), and resolves it, before any worker starts.
    pub fn resolve_hub_file(
        shape: &pipeline_core::HubShape,
        repo: &str,
        path: &Path,
    ) -> Result<ResolvedWeights, WeightsError> {
        let arch = Architecture::of_hub(shape);
        let Architecture::ResNet(config) = &arch else {
            return families::resolve(&arch, repo, path, &[Tower::Image]);
        };
        if model_families::checkpoint::is_index(path) {
            // burn's module stores read one file.
            return Err(WeightsError::Mismatch {
                path: path.to_path_buf(),
                model: repo.to_owned(),
                problem: "a ResNet's sharded checkpoint is not read here (one \
                          model.safetensors or pytorch_model.bin is)"
                    .to_owned(),
            });
        }
        // A burn-module CNN has no layout: its file's names and shapes
        // against those transformers (or timm) saves for its config.
        let checkpoint = Checkpoint::open_shapes(path)?;
        resnet_file(&config.file_tensors(), repo, &checkpoint)?;
        Ok(ResolvedWeights::default())
    }
}

/// `checkpoint` against the tensors a transformers (or timm) ResNet of its
/// config saves: each there with its shape, nothing else but BatchNorms'
/// `num_batches_tracked`; the problems in one line, as a load reports them.
fn resnet_file(
    want: &[(String, Vec<usize>)],
    repo: &str,
    checkpoint: &Checkpoint,
) -> Result<(), WeightsError> {
    let mut problems = Vec::new();
    for (name, shape) in want {
        match checkpoint.shape(name) {
            None => problems.push(format!("{name} is missing")),
            Some(got) if got != shape.as_slice() => {
                problems.push(format!("{name} is {got:?}, not {shape:?}"));
            }
            Some(_) => {}
        }
    }
    let known: std::collections::HashSet<&str> = want.iter().map(|(n, _)| n.as_str()).collect();
    problems.extend(
        checkpoint
            .names()
            .filter(|n| !known.contains(n) && !n.ends_with("num_batches_tracked"))
            .map(|n| format!("{n} is not in the model")),
    );
    if problems.is_empty() {
        return Ok(());
    }
    Err(WeightsError::Mismatch {
        path: checkpoint.path().to_path_buf(),
        model: repo.to_owned(),
        problem: model_families::weights_error::summarise(
            &format!("{} tensors do not match", problems.len()),
            &problems,
        ),
    })
}
