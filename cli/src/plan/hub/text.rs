//! The text tower of a hub CLIP or SigLIP repo (#42 item 5), for
//! `--classes` labels and `embed-text --model ORG/NAME`: its sizes from
//! the repo's `config.json` (`pipeline_core::hub_text`), its weights (the
//! full model's checkpoint, which holds both towers) and its tokenizer
//! file, all from one commit, fetched only when text is asked for:
//! - CLIP: `tokenizer.json` (transformers' fast tokenizer, which every
//!   CLIP repo saved by transformers has);
//! - SigLIP: `spiece.model` (what google's SigLIP repos ship), else a
//!   `tokenizer.json`;
//! - an open_clip repo (`open_clip_config.json`, no transformers
//!   `config.json`): OpenAI's text transformer at its `text_cfg`'s sizes
//!   (`pipeline_core::open_clip_text`), open_clip's built-in tokenizer
//!   (its vocabulary has no file in such a repo).

use std::path::{Path, PathBuf};

use pipeline_core::{Family, HubText};

use super::cache::{self, HubEnv, HubId, Wanted};

/// The files a text tower needs beside its config.
const CLIP_FILES: Wanted<'static> = Wanted {
    required: &[&["tokenizer.json"]],
    optional: &[],
};

const SIGLIP_FILES: Wanted<'static> = Wanted {
    required: &[&["spiece.model", "tokenizer.json"]],
    optional: &[],
};

const CONFIG: Wanted<'static> = Wanted {
    required: &[&["config.json", "open_clip_config.json"]],
    optional: &[],
};

/// A hub repo's text tower, resolved.
#[derive(Debug)]
pub(crate) struct HubTextTower {
    /// Its sizes.
    pub(crate) text: HubText,
    /// The checkpoint holding it.
    pub(crate) weights: PathBuf,
    /// Its tokenizer file (`tokenizer.json` or `spiece.model`); `None`:
    /// open_clip's built-in one.
    pub(crate) tokenizer: Option<PathBuf>,
    /// The repo at the commit its files are from, as `--model` names it
    /// again (`org/name@commit`).
    pub(crate) pinned: String,
}

/// `model` as a repo id, where it is one and no local path has its name.
pub(crate) fn hub_id(model: &str) -> Option<HubId> {
    if Path::new(model).exists() {
        return None;
    }
    HubId::parse(model)
}

/// The text tower of the repo `id`, or why not in one line.
pub(crate) fn tower(id: &HubId) -> Result<HubTextTower, String> {
    let env = HubEnv::from_env();
    let snapshot = cache::resolve(&env, id, &CONFIG)?;
    let (config, open_clip) = match snapshot.file("config.json") {
        Some(config) => (config, false),
        None => (
            snapshot
                .file("open_clip_config.json")
                .ok_or("open_clip_config.json resolved")?,
            true,
        ),
    };
    let text = std::fs::read_to_string(config)
        .map_err(|e| format!("--model {id}: {}: {e}", config.display()))?;
    let text = if open_clip {
        pipeline_core::open_clip_text(&text)
    } else {
        pipeline_core::hub_text(&text)
    }
    .map_err(|e| format!("--model {id}: {e}"))?;
    let pinned = HubId {
        repo: id.repo.clone(),
        revision: snapshot.commit.clone(),
    };
    if open_clip {
        let (weights, _) = super::weights::resolve(&env, &pinned, true)?;
        return Ok(HubTextTower {
            weights,
            tokenizer: None,
            text,
            pinned: format!("{}@{}", pinned.repo, pinned.revision),
        });
    }
    let wanted = if text.family == Family::Clip {
        &CLIP_FILES
    } else {
        &SIGLIP_FILES
    };
    let files = cache::resolve(&env, &pinned, wanted)?;
    let first = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| files.file(n))
            .map(Path::to_path_buf)
            .ok_or_else(|| format!("--model {id}: {} resolved", names[0]))
    };
    let (weights, _) = super::weights::resolve(&env, &pinned, false)?;
    Ok(HubTextTower {
        weights,
        tokenizer: Some(first(wanted.required[0])?),
        text,
        pinned: format!("{}@{}", pinned.repo, pinned.revision),
    })
}
