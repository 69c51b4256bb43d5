//! A hub repo's weights: `model.safetensors`, or a sharded checkpoint's
//! index (`model.safetensors.index.json`, as transformers saves a model
//! beyond its shard size) with every shard it names, or
//! `pytorch_model.bin`; an open_clip repo's (no transformers `config.json`)
//! `open_clip_model.safetensors`, else `open_clip_pytorch_model.bin`. A sharded checkpoint is opened by its index
//! (`gpu_worker`'s checkpoint reader reads the shards beside it).

use std::path::PathBuf;

use super::cache::{self, HubEnv, HubId, Wanted};

const INDEX: &str = "model.safetensors.index.json";

const WEIGHTS: Wanted<'static> = Wanted {
    required: &[&["model.safetensors", INDEX, "pytorch_model.bin"]],
    optional: &[],
};

const OPEN_CLIP_WEIGHTS: Wanted<'static> = Wanted {
    required: &[&["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]],
    optional: &[],
};

/// The weight file of `pinned` (a repo at a commit; open_clip's files
/// where `open_clip`) in the cache, fetched where missing, and whether
/// anything was downloaded.
pub(crate) fn resolve(
    env: &HubEnv,
    pinned: &HubId,
    open_clip: bool,
) -> Result<(PathBuf, bool), String> {
    let wanted = if open_clip {
        &OPEN_CLIP_WEIGHTS
    } else {
        &WEIGHTS
    };
    let snapshot = cache::resolve(env, pinned, wanted)?;
    let path = wanted.required[0]
        .iter()
        .find_map(|n| snapshot.file(n))
        .ok_or("the weights resolved")?
        .to_path_buf();
    if path.file_name().and_then(|n| n.to_str()) != Some(INDEX) {
        return Ok((path, snapshot.downloaded));
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("--model {pinned}: {}: {e}", path.display()))?;
    let index: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("--model {pinned}: {INDEX} is not JSON ({e})"))?;
    let mut shards: Vec<&str> = index
        .get("weight_map")
        .and_then(serde_json::Value::as_object)
        .ok_or_else(|| format!("--model {pinned}: {INDEX} has no weight_map"))?
        .values()
        .map(|v| v.as_str().unwrap_or_default())
        .collect();
    shards.sort_unstable();
    shards.dedup();
    if let Some(bad) = shards.iter().find(|s| {
        s.is_empty() || s.contains(['/', '\\']) || s.starts_with('.') || s.ends_with(".index.json")
    }) {
        return Err(format!(
            "--model {pinned}: {INDEX} names a shard {bad:?}, not a file of the repo"
        ));
    }
    let each: Vec<[&str; 1]> = shards.iter().map(|s| [*s]).collect();
    let required: Vec<&[&str]> = each.iter().map(|s| s.as_slice()).collect();
    let files = cache::resolve(
        env,
        pinned,
        &Wanted {
            required: &required,
            optional: &[],
        },
    )?;
    Ok((path, snapshot.downloaded || files.downloaded))
}
