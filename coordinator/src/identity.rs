//! The run's identity (`run.json`): everything the records depend on.

use std::path::Path;

use pipeline_core::{Fnv64, Manifest};
use serde_json::json;

use crate::config::{RunConfig, RunError};

/// A stable description of everything the records depend on, so a resumed
/// run can refuse parts that another configuration made. Devices, batch
/// size and worker counts are not in it: they do not change the records
/// (README: identity holds per device kind).
pub(crate) fn identity(
    config: &RunConfig,
    manifest: &Manifest,
) -> Result<serde_json::Value, RunError> {
    let weights = match &config.worker.weights {
        Some(path) => {
            let (bytes, fnv64) =
                file_fingerprint(path).map_err(|source| RunError::Fingerprint {
                    flag: "--weights",
                    path: path.clone(),
                    source,
                })?;
            json!({"bytes": bytes, "fnv64": fnv64})
        }
        None => json!({"random_seed": config.worker.seed}),
    };
    let mut identity = json!({
        "inputs": {
            "items": manifest.entries.len(),
            "paths_fnv64": format!("{:016x}", manifest.fingerprint()),
        },
        "chunk_size": config.chunk_size,
        "model": config.worker.model.name(),
        "weights": weights,
        "task": config.worker.task,
        "preprocess": config.worker.preprocess,
        "limits": config.worker.limits,
    });
    // Only when chosen, so that earlier runs' identities stay the same.
    if let Some(pooling) = config.worker.pooling {
        identity["pooling"] = json!(pooling);
    }
    if let Some(classes) = &config.worker.classes {
        let (bytes, fnv64) =
            file_fingerprint(&classes.path).map_err(|source| RunError::Fingerprint {
                flag: "--classes",
                path: classes.path.clone(),
                source,
            })?;
        identity["classes"] = json!({"bytes": bytes, "fnv64": fnv64, "labels": classes.labels});
    }
    Ok(identity)
}

/// The size and FNV-64 hash (hex) of the file at `path`.
fn file_fingerprint(path: &Path) -> std::io::Result<(u64, String)> {
    let mut file = std::fs::File::open(path)?;
    let mut hash = Fnv64::default();
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = std::io::Read::read(&mut file, &mut buffer)?;
        if n == 0 {
            break;
        }
        hash.write(&buffer[..n]);
        bytes += n as u64;
    }
    Ok((bytes, format!("{:016x}", hash.finish())))
}
