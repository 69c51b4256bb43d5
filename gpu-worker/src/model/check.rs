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
    /// describes (#42), by names and shapes only (a ResNet, a burn module,
    /// by loading it on the host), before any worker starts.
    pub fn check_hub_file(
        shape: &pipeline_core::HubShape,
        repo: &str,
        path: &Path,
    ) -> Result<(), WeightsError> {
        let arch = Architecture::of_hub(shape);
        if let Architecture::ResNet(_) = arch {
            // A burn-module CNN: its names and shapes are checked by
            // loading it on the host, as a worker will.
            super::lowered_cnn(&arch, repo, Some(path), 0)?;
            return Ok(());
        }
        let checkpoint = Checkpoint::open_shapes(path)?;
        families::check(&arch, repo, &checkpoint)?;
        Ok(())
    }
}
