//! Which repo and where: a repo id and revision as `--model` names it
//! ([`HubId`]), and the environment `huggingface_hub` reads ([`HubEnv`]:
//! the cache, the endpoint, the token, offline mode, the download
//! timeout).

use std::path::PathBuf;
use std::time::Duration;

use super::stall;

/// A repo id and revision (`org/name[@revision]`; `main` by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HubId {
    pub(crate) repo: String,
    pub(crate) revision: String,
}

impl HubId {
    /// `model` as a repo id: `org/name` (letters, digits, `-`, `_`, `.`)
    /// with an optional `@revision`; `None` for anything else.
    pub(crate) fn parse(model: &str) -> Option<Self> {
        let (repo, revision) = match model.split_once('@') {
            Some((repo, rev)) if !rev.is_empty() => (repo, rev),
            Some(_) => return None,
            None => (model, "main"),
        };
        let (org, name) = repo.split_once('/')?;
        let part = |s: &str| {
            !s.is_empty()
                && !s.starts_with(['.', '-'])
                && !s.contains("..")
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        // A branch may hold '/' (`refs/pr/3`); every segment is a name, so
        // that `refs/<revision>` stays inside the cache.
        let revision_ok = revision.split('/').all(|segment| {
            !segment.is_empty()
                && segment != "."
                && segment != ".."
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        });
        (part(org) && part(name) && revision_ok).then(|| Self {
            repo: repo.to_owned(),
            revision: revision.to_owned(),
        })
    }
}

impl std::fmt::Display for HubId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.revision == "main" {
            f.write_str(&self.repo)
        } else {
            write!(f, "{}@{}", self.repo, self.revision)
        }
    }
}

/// Where the hub and its cache are, as Python's `huggingface_hub` reads
/// its environment.
#[derive(Debug, Clone)]
pub(crate) struct HubEnv {
    pub(crate) cache: PathBuf,
    /// `HF_ENDPOINT`; `None`: `hf-hub`'s default, the public hub.
    pub(crate) endpoint: Option<String>,
    pub(crate) token: Option<String>,
    pub(crate) offline: bool,
    /// How long a request may go without a byte
    /// (`HF_HUB_DOWNLOAD_TIMEOUT`), or why the variable is no such time.
    pub(crate) limit: Result<Duration, String>,
}

impl HubEnv {
    pub(crate) fn from_env() -> Self {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let home = var("HF_HOME").or_else(|| {
            var("XDG_CACHE_HOME")
                .or_else(|| std::env::home_dir().map(|h| h.join(".cache")))
                .map(|c| c.join("huggingface"))
        });
        let cache = var("HF_HUB_CACHE")
            .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
            .or_else(|| home.as_ref().map(|h| h.join("hub")))
            .unwrap_or_else(|| PathBuf::from(".cache/huggingface/hub"));
        let token = ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"]
            .iter()
            .find_map(|k| std::env::var(k).ok().filter(|t| !t.trim().is_empty()))
            .or_else(|| {
                let file = var("HF_TOKEN_PATH").or_else(|| home.map(|h| h.join("token")))?;
                std::fs::read_to_string(file).ok()
            })
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty());
        let offline = ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"].iter().any(|k| {
            std::env::var(k).is_ok_and(|v| {
                matches!(
                    v.trim().to_ascii_uppercase().as_str(),
                    "1" | "ON" | "YES" | "TRUE"
                )
            })
        });
        Self {
            cache,
            endpoint: std::env::var("HF_ENDPOINT")
                .ok()
                .map(|e| e.trim().trim_end_matches('/').to_owned())
                .filter(|e| !e.is_empty()),
            token,
            offline,
            limit: stall::limit_from(std::env::var("HF_HUB_DOWNLOAD_TIMEOUT").ok().as_deref()),
        }
    }
}

/// ` at ENDPOINT`, where `HF_ENDPOINT` names one, without its
/// `user:password@` (a mirror's login).
pub(super) fn at(env: &HubEnv) -> String {
    env.endpoint
        .as_deref()
        .map(|e| format!(" at {}", pipeline_core::redact_url(e)))
        .unwrap_or_default()
}
