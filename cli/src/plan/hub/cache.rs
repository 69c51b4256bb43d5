//! A Hugging Face repo's files, from the cache `huggingface_hub` writes
//! (`models--ORG--NAME/{blobs,refs,snapshots}`), else downloaded into it
//! with the `hf-hub` crate, so that Python and this tool share one cache.
//!
//! - The cache is `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
//!   `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`;
//!   the token `$HF_TOKEN`, else the token file (`$HF_TOKEN_PATH`, else
//!   `token` in `$HF_HOME`); `HF_ENDPOINT` names another hub and
//!   `HF_HUB_OFFLINE=1` (or `TRANSFORMERS_OFFLINE=1`) reads the cache
//!   only. These are Python's rules (`huggingface_hub/constants.py`, with
//!   its older names); `hf-hub` reads only some of them.
//! - A branch whose files are cached runs as the cache's `refs/` name it,
//!   without asking the hub whether it moved (the notice names the
//!   commit); `@COMMIT` pins one.
//! - A model whose files are cached needs no network: a branch resolves
//!   through `refs/<branch>`, a commit names its snapshot. Where the cache
//!   cannot tell whether the repo has a file (an optional one, or an
//!   earlier alternative of a required one: `huggingface-cli download`,
//!   `snapshot_download`, timm and open_clip record no 404s in
//!   `.no_exist/`), the hub is asked; where it cannot be reached (no
//!   connection, no name, no answer in time, a server error), the cache
//!   is used as it stands, as `huggingface_hub` does, with one warning
//!   line, and only a required file it lacks is an error. The rest of the
//!   run then asks the hub nothing.
//! - Otherwise one request to the hub's API resolves the revision to its
//!   commit and lists the files (so only those the model needs are
//!   fetched, and a missing repo, revision or token is told apart); each
//!   file then downloads into `blobs/` through a `.part` file that a later
//!   run resumes, renamed into place, and linked from the commit's
//!   snapshot (`fetch.rs`: this tool's code, since `hf-hub` would make
//!   paths of the response's headers unchecked). Downloads of one repo
//!   take turns under a lock in the cache's `.locks/` (shards on nodes
//!   sharing a cache), and re-check the cache once they hold it.
//! - A header that would name a path (ETag, X-Repo-Commit) and is no hex
//!   digest, or another commit than the one asked for, is refused before
//!   anything is written (`headers.rs`).
//! - What was downloaded is checked, before it is named as a blob, against
//!   the size the hub gave and its ETag where that is the hub's checksum
//!   (git's blob SHA-1 for small files, SHA-256 for LFS files); a file
//!   that does not match is removed and is an error.
//! - A request that gets no byte for `HF_HUB_DOWNLOAD_TIMEOUT` seconds
//!   (Python's name and default, 10) ends the run in one line, exit 2
//!   (`stall.rs`: the client sets no timeouts of its own).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use hf_hub::api::RepoInfo;
use hf_hub::api::sync::ApiBuilder;
use hf_hub::{Cache, Repo, RepoType};

mod checksum;
mod env;
mod fetch;
mod headers;
mod request;
mod stall;

use env::at;
pub(crate) use env::{HubEnv, HubId};
use request::{Listing, listing, request_error, unanswered, with_retries};

/// The files a model needs: every name of `required` (a list of
/// alternatives, the first present taken), and `optional` where the repo
/// has it.
pub(crate) struct Wanted<'a> {
    pub(crate) required: &'a [&'a [&'a str]],
    pub(crate) optional: &'a [&'a str],
}

/// A repo's files at one commit, in the cache.
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub(crate) commit: String,
    /// The files found, by the name asked for.
    pub(crate) files: Vec<(String, PathBuf)>,
    /// Whether anything was downloaded.
    pub(crate) downloaded: bool,
}

impl Snapshot {
    /// The path of `name`, if the snapshot has it.
    pub(crate) fn file(&self, name: &str) -> Option<&Path> {
        self.files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.as_path())
    }
}

fn is_commit(revision: &str) -> bool {
    revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `models--org--name` under the cache.
fn repo_dir(env: &HubEnv, id: &HubId) -> PathBuf {
    env.cache
        .join(format!("models--{}", id.repo.replace('/', "--")))
}

/// The files of `id` that `wanted` names, from the cache, else from the
/// hub (unless offline); one line naming what is missing otherwise.
pub(crate) fn resolve(env: &HubEnv, id: &HubId, wanted: &Wanted<'_>) -> Result<Snapshot, String> {
    let unreachable = UNREACHABLE.get();
    if let Some(found) = cached(env, id, wanted, env.offline || unreachable.is_some()) {
        return Ok(found);
    }
    if env.offline {
        return Err(format!(
            "--model {id}: {} is not in the Hugging Face cache ({}) and HF_HUB_OFFLINE is set",
            missing_names(env, id, wanted),
            env.cache.display()
        ));
    }
    if let Some(why) = unreachable {
        return Err(format!(
            "--model {id}: {} is not in the Hugging Face cache ({}) and the hub{} cannot be \
             reached ({why})",
            missing_names(env, id, wanted),
            env.cache.display(),
            at(env)
        ));
    }
    // The hub is asked before anything is written: a cache that holds
    // what is needed (a shared, read-only one included) runs without a
    // write, the hub up or not; the lock is taken only to download.
    let limit = env
        .limit
        .clone()
        .map_err(|e| format!("--model {id}: {e}"))?;
    let info = match listing(env, id, limit) {
        Ok(info) => info,
        Err(Listing::Refused(line)) => return Err(line),
        Err(Listing::Unreachable { why, line }) => {
            // As `huggingface_hub` does: what the cache holds, a file it
            // lacks taken as one the repo lacks; a required one it lacks
            // is the error.
            let Some(found) = cached(env, id, wanted, true) else {
                return Err(line);
            };
            let _ = UNREACHABLE.set(why.clone());
            let _ = WARNING.set(format!(
                "pipeline: warning: the hub{} cannot be reached ({why}); --model {id} runs from \
                 the Hugging Face cache ({}) as it stands, as with HF_HUB_OFFLINE=1",
                at(env),
                env.cache.display()
            ));
            return Ok(found);
        }
    };
    download(env, id, wanted, limit, &info)
}

/// Why the hub could not be reached, once a resolve found so: the rest of
/// the run reads the cache alone, as offline.
static UNREACHABLE: OnceLock<String> = OnceLock::new();

/// The warning line saying so.
static WARNING: OnceLock<String> = OnceLock::new();

/// The one-line warning that the hub could not be reached and the cache
/// was used as it stands, where that happened in this process.
pub(crate) fn offline_warning() -> Option<&'static str> {
    WARNING.get().map(String::as_str)
}

/// The commit a revision names in the cache: itself, or `refs/<branch>`.
fn cached_commit(env: &HubEnv, id: &HubId) -> Option<String> {
    if is_commit(&id.revision) {
        return Some(id.revision.to_ascii_lowercase());
    }
    let text = std::fs::read_to_string(repo_dir(env, id).join("refs").join(&id.revision)).ok()?;
    Some(text.trim().to_owned()).filter(|c| is_commit(c))
}

/// `wanted` from the snapshot, where every required file is there and
/// each optional one is there or known absent (`.no_exist/`, as Python
/// records a 404; offline, any optional file not there is absent);
/// `None` otherwise. Of a required file's alternatives, a later one
/// counts only where each earlier one is known absent (or offline), so
/// that the cache gives the file a download would: a repo holding
/// transformers' `config.json` and open_clip's, of which Python's
/// open_clip cached only its own, is not run as open_clip's.
fn cached(env: &HubEnv, id: &HubId, wanted: &Wanted<'_>, offline: bool) -> Option<Snapshot> {
    let commit = cached_commit(env, id)?;
    let dir = repo_dir(env, id).join("snapshots").join(&commit);
    let no_exist = repo_dir(env, id).join(".no_exist").join(&commit);
    let mut files = Vec::new();
    for names in wanted.required {
        let mut found = None;
        for name in *names {
            if dir.join(name).is_file() {
                found = Some(name);
                break;
            }
            if !offline && !no_exist.join(name).exists() {
                return None;
            }
        }
        let name = found?;
        files.push(((*name).to_owned(), dir.join(name)));
    }
    for name in wanted.optional {
        if dir.join(name).is_file() {
            files.push(((*name).to_owned(), dir.join(name)));
        } else if !offline && !no_exist.join(name).exists() {
            return None;
        }
    }
    Some(Snapshot {
        commit,
        files,
        downloaded: false,
    })
}

/// For the offline error: the first file the cache lacks.
fn missing_names(env: &HubEnv, id: &HubId, wanted: &Wanted<'_>) -> String {
    let Some(commit) = cached_commit(env, id) else {
        return wanted
            .required
            .first()
            .map_or_else(String::new, |n| n.join(" or "));
    };
    let dir = repo_dir(env, id).join("snapshots").join(commit);
    for names in wanted.required {
        if !names.iter().any(|n| dir.join(n).is_file()) {
            return names.join(" or ");
        }
    }
    wanted
        .optional
        .iter()
        .find(|n| !dir.join(n).is_file())
        .map_or_else(|| "a file".to_owned(), |n| (*n).to_owned())
}

/// Downloads what `wanted` names at the commit `info` gives the revision.
fn download(
    env: &HubEnv,
    id: &HubId,
    wanted: &Wanted<'_>,
    limit: Duration,
    info: &RepoInfo,
) -> Result<Snapshot, String> {
    let commit = info.sha.to_ascii_lowercase();
    if !is_commit(&commit) {
        return Err(format!(
            "--model {id}: the hub named the revision's commit {}, not a commit hash",
            headers::shown(info.sha.as_bytes())
        ));
    }
    let listed = |name: &str| info.siblings.iter().any(|s| s.rfilename == name);
    let repo = repo_dir(env, id);
    // Python's record of a file the repo lacks.
    let absent = |name: &str| {
        let marker = repo.join(".no_exist").join(&commit).join(name);
        if let Some(parent) = marker.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::fs::write(marker, b"");
    };
    let mut names: Vec<&str> = Vec::new();
    for alternatives in wanted.required {
        let name = alternatives.iter().find(|n| listed(n)).ok_or_else(|| {
            format!(
                "--model {id}: the repo has no {} (at commit {commit})",
                alternatives.join(" or ")
            )
        })?;
        // The alternatives before it are absent: the cache says so, and
        // the next run takes this one from it.
        alternatives
            .iter()
            .take_while(|n| *n != name)
            .for_each(|n| absent(n));
        names.push(name);
    }
    for name in wanted.optional {
        if listed(name) {
            names.push(name);
        } else {
            absent(name);
        }
    }
    let dir = repo.join("snapshots").join(&commit);
    let lacking = names.iter().any(|name| !dir.join(name).is_file());
    // Another process downloading this repo finishes first; what it
    // fetched is then skipped.
    let _lock = if lacking {
        Some(lock_repo(env, id)?)
    } else {
        None
    };
    // The URLs as `hf-hub` builds them, from its endpoint (`HF_ENDPOINT`,
    // else the public hub's).
    let mut builder = ApiBuilder::from_cache(Cache::new(env.cache.clone())).with_progress(false);
    if let Some(endpoint) = &env.endpoint {
        builder = builder.with_endpoint(endpoint.clone());
    }
    let api = builder
        .build()
        .map_err(|e| format!("--model {id}: the hub client: {e}"))?
        .repo(Repo::with_revision(
            id.repo.clone(),
            RepoType::Model,
            commit.clone(),
        ));
    // The token goes to the hub's origin only.
    let client = fetch::Client::new(env.token.clone(), &api.url(""));
    let locks = env
        .cache
        .join(".locks")
        .join(repo.file_name().unwrap_or_default());
    let bar = std::io::stderr().is_terminal();
    let mut files = Vec::new();
    for name in names {
        let path = dir.join(name);
        if !path.is_file() {
            let job = fetch::Job {
                client: client.clone(),
                url: api.url(&url_path(name)),
                repo: repo.clone(),
                locks: locks.clone(),
                commit: commit.clone(),
                name: name.to_owned(),
            };
            stall::watched(limit, bar, move |beat| {
                with_retries(&beat, || fetch::file(&job, &mut beat.clone()))
            })
            .map_err(|why| unanswered(env, id, limit, name, why))?
            .map_err(|e| request_error(env, id, name, &e))?
            .map_err(|why| format!("--model {id}: {why}"))?;
        }
        files.push((name.to_owned(), path));
    }
    // The branch's name, as Python reads it; where nothing was
    // downloaded, a cache that cannot be written runs as it stands.
    if !is_commit(&id.revision) && cached_commit(env, id).as_deref() != Some(commit.as_str()) {
        let written = write_ref(&repo, &id.revision, &commit);
        if lacking {
            written.map_err(|e| format!("--model {id}: {e}"))?;
        }
    }
    Ok(Snapshot {
        commit,
        files,
        downloaded: lacking,
    })
}

/// The repo's lock in the cache's `.locks/`, held while its files are
/// downloaded: another process downloading it finishes first.
fn lock_repo(env: &HubEnv, id: &HubId) -> Result<std::fs::File, String> {
    let locks = env
        .cache
        .join(".locks")
        .join(repo_dir(env, id).file_name().unwrap_or_default());
    std::fs::create_dir_all(&locks).map_err(|e| {
        format!(
            "--model {id}: cannot write the cache {}: {e}",
            locks.display()
        )
    })?;
    let lock = std::fs::File::create(locks.join("pipeline.lock"))
        .map_err(|e| format!("--model {id}: {e}"))?;
    let mut said = false;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(lock),
            Err(std::fs::TryLockError::WouldBlock) => {
                if !said {
                    eprintln!("pipeline: waiting for another process downloading {id}");
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(format!("--model {id}: cannot lock the cache: {e}"));
            }
        }
    }
}

/// A file's name as a URL's path: each byte but unreserved ones and `/`
/// percent-encoded.
fn url_path(name: &str) -> String {
    name.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `refs/<revision>` holds `commit`, written whole (a temporary file
/// renamed into place).
fn write_ref(repo: &Path, revision: &str, commit: &str) -> std::io::Result<()> {
    let file = repo.join("refs").join(revision);
    let parent = file.parent().unwrap_or(repo);
    std::fs::create_dir_all(parent)?;
    let mut tmp = tempfile::NamedTempFile::new_in(parent)?;
    std::io::Write::write_all(&mut tmp, commit.as_bytes())?;
    tmp.persist(&file).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mirror_s_login_is_not_shown() {
        let env = |endpoint: &str| HubEnv {
            cache: PathBuf::from("/c"),
            endpoint: Some(endpoint.to_owned()),
            token: None,
            offline: false,
            limit: Ok(Duration::from_secs(1)),
        };
        assert_eq!(
            at(&env("https://user:SECRET@mirror.example:8080")),
            " at https://mirror.example:8080"
        );
        assert_eq!(at(&env("http://127.0.0.1:1")), " at http://127.0.0.1:1");
    }

    #[test]
    fn repo_ids_and_revisions() {
        let id = HubId::parse("facebook/dinov2-base").expect("an id");
        assert_eq!(
            (id.repo.as_str(), id.revision.as_str()),
            ("facebook/dinov2-base", "main")
        );
        let id = HubId::parse("timm/convnext_tiny.fb_in22k_ft_in1k@refs/pr/3").expect("an id");
        assert_eq!(id.revision, "refs/pr/3");
        for not in [
            "resnet50",
            "model.onnx",
            "a/b/c",
            "/abs/path",
            "./x/y",
            "../x",
            "org/",
            "org/name@",
            "https://x/y",
            "org/na me",
            "org/..",
            "org/name@../x",
            "org/name@/etc/passwd",
            "org/name@a//b",
            "org/name@a/./b",
            "org/name@a/",
        ] {
            assert_eq!(HubId::parse(not), None, "{not}");
        }
    }
}
