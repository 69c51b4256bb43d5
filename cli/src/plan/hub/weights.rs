//! A hub repo's weights: `model.safetensors`, or a sharded checkpoint's
//! index (`model.safetensors.index.json`, as transformers saves a model
//! beyond its shard size) with every shard it names, or
//! `pytorch_model.bin`, else open_clip's `open_clip_model.safetensors` or
//! `open_clip_pytorch_model.bin`. A sharded checkpoint is opened by its index
//! (`gpu_worker`'s checkpoint reader reads the shards beside it).

use std::path::PathBuf;

use super::cache::{self, HubEnv, HubId, Wanted};

const INDEX: &str = "model.safetensors.index.json";

const WEIGHTS: Wanted<'static> = Wanted {
    required: &[&[
        "model.safetensors",
        INDEX,
        "pytorch_model.bin",
        "open_clip_model.safetensors",
        "open_clip_pytorch_model.bin",
    ]],
    optional: &[],
};

/// The weight file of `pinned` (a repo at a commit) in the cache, fetched
/// where missing, and whether anything was downloaded.
pub(crate) fn resolve(env: &HubEnv, pinned: &HubId) -> Result<(PathBuf, bool), String> {
    let snapshot = cache::resolve(env, pinned, &WEIGHTS)?;
    let path = WEIGHTS.required[0]
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
