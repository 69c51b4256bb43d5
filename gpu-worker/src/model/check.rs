//! A weight file checked before any worker starts, names and shapes only
//! (no device, no tensor data), for a clear one-line error: a built-in
//! model's `--weights` and a hub model's snapshot.

use std::path::Path;

use pipeline_core::{CropRounding, ModelKind};

use super::checkpoint::Checkpoint;
use super::{Architecture, Model, clip_config, families};
use crate::weights_error::WeightsError;

impl Model {
    /// Checks that `path` is a checkpoint of `kind` in a layout it accepts,
    /// reading names and shapes only (and a CLIP config beside it): no
    /// device, no tensor data. For a clear
    /// error before any worker starts. Gives how the layout's upstream
    /// rounds its centre crop (torchvision's half to even for the CNNs,
    /// which load torchvision's own layout).
    pub fn check_file(kind: ModelKind, path: &Path) -> Result<CropRounding, WeightsError> {
        match Architecture::of(kind) {
            Architecture::Tiny | Architecture::ResNet(_) | Architecture::EfficientNetLite0 => {
                Ok(CropRounding::HalfEven)
            }
            arch @ (Architecture::Vit(_) | Architecture::ConvNext(_)) => {
                let checkpoint = Checkpoint::open_shapes(path)?;
                let (layout, _) = families::check(&arch, kind.name(), &checkpoint)?;
                // A CLIP config beside the weights that cannot be used.
                for tower in [clip_config::Tower::Image, clip_config::Tower::Text] {
                    clip_config::activation(path, layout, tower, kind.name())?;
                }
                Ok(layout.crop_rounding())
            }
        }
    }

    /// Checks that `path` holds the weights of the hub model `shape`
    /// describes (#42), by names and shapes only, before any worker starts.
    pub fn check_hub_file(
        shape: &pipeline_core::HubShape,
        repo: &str,
        path: &Path,
    ) -> Result<(), WeightsError> {
        let arch = Architecture::of_hub(shape);
        let checkpoint = Checkpoint::open_shapes(path)?;
        if let Architecture::ResNet(config) = &arch {
            if super::checkpoint::is_index(path) {
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
            return resnet_file(&config.file_tensors(), repo, &checkpoint);
        }
        families::check(&arch, repo, &checkpoint)?;
        Ok(())
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
        problem: crate::weights_error::summarise(
            &format!("{} tensors do not match", problems.len()),
            &problems,
        ),
    })
}
