//! The hub's API, asked with retries and a stall watch: the repo's file
//! list ([`listing`]), each error as the run's one line, and whether an
//! error means the hub could not be reached (the cache then stands in).

use std::time::Duration;

use hf_hub::api::RepoInfo;
use hf_hub::api::sync::{ApiBuilder, ApiError};
use hf_hub::{Cache, Repo, RepoType};

use super::env::{HubEnv, HubId, at};
use super::stall::{self, Beat};

/// Up to this many tries of one request (a connection or server error is
/// tried again after 0.5, 1, 2 s; a 4xx is not).
pub(super) const TRIES: u32 = 4;

/// `call`, tried again on errors that may pass, each try and each pause
/// a heartbeat.
pub(super) fn with_retries<T>(
    beat: &Beat,
    mut call: impl FnMut() -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let mut wait = Duration::from_millis(500);
    let mut tries = 1;
    loop {
        beat.tick();
        match call() {
            Err(e) if tries < TRIES && transient(&e) => {
                beat.pause(wait);
                wait *= 2;
                tries += 1;
            }
            other => return other,
        }
    }
}

pub(super) fn status(e: &ApiError) -> Option<u16> {
    match e {
        ApiError::RequestError(e) => match e.as_ref() {
            ureq::Error::StatusCode(code) => Some(*code),
            _ => None,
        },
        ApiError::TooManyRetries(e) => status(e),
        _ => None,
    }
}

pub(super) fn transient(e: &ApiError) -> bool {
    match status(e) {
        Some(code) => code >= 500 || code == 429,
        None => matches!(e, ApiError::RequestError(_) | ApiError::TooManyRetries(_)),
    }
}

/// One line for a failed request about `what`.
pub(super) fn request_error(env: &HubEnv, id: &HubId, what: &str, e: &ApiError) -> String {
    let token = if env.token.is_some() {
        "the token in HF_TOKEN (or the token file) has no access to it"
    } else {
        "set HF_TOKEN to a token with access (or run `hf auth login`)"
    };
    match status(e) {
        // The hub answers 401 for a repo that does not exist, without a
        // token, as for a private one.
        Some(401) if what == "the repo" && env.token.is_none() => {
            format!("--model {id}: no such repo, or a private one: check the name, or {token}")
        }
        Some(401 | 403) => {
            format!("--model {id}: the hub refused {what} (a gated or private repo): {token}")
        }
        Some(404) if what == "the repo" => format!(
            "--model {id}: no such repo or revision on the hub (a private repo also answers \
             this way without a token)"
        ),
        Some(404) => format!("--model {id}: the repo has no {what}"),
        _ => format!(
            "--model {id}: cannot fetch {what} from the hub{}: {e}; a model in the Hugging \
             Face cache ({}) runs without the network",
            at(env),
            env.cache.display()
        ),
    }
}

/// Why the hub's list of the repo's files did not come.
pub(super) enum Listing {
    /// The hub could not be reached: why, in a few words, and the run's
    /// error line where the cache cannot stand in.
    Unreachable { why: String, line: String },
    /// The hub answered, and not with the list (no such repo, no access):
    /// the run's error line.
    Refused(String),
}

/// The line for a request about `what` that got no answer for `limit`, or
/// whose thread failed.
pub(super) fn unanswered(
    env: &HubEnv,
    id: &HubId,
    limit: Duration,
    what: &str,
    why: stall::Unanswered,
) -> String {
    match why {
        stall::Unanswered::Stalled => format!(
            "--model {id}: the hub{} sent nothing for {} s while fetching {what}; \
             HF_HUB_DOWNLOAD_TIMEOUT sets how long to wait (a download resumes where it stopped)",
            at(env),
            limit.as_secs_f64()
        ),
        stall::Unanswered::Failed(why) => format!("--model {id}: fetching {what}: {why}"),
    }
}

/// Why the hub could not be reached, where `e` means that (as
/// `huggingface_hub` falls back to its cache on a connection error, a
/// timeout or a server's error), not that it answered no.
pub(super) fn unreachable(e: &ApiError) -> Option<String> {
    match e {
        ApiError::TooManyRetries(e) => unreachable(e),
        ApiError::RequestError(e) => match e.as_ref() {
            ureq::Error::StatusCode(code) if *code >= 500 || *code == 429 => {
                Some(format!("HTTP {code}"))
            }
            ureq::Error::Io(_)
            | ureq::Error::Timeout(_)
            | ureq::Error::HostNotFound
            | ureq::Error::ConnectionFailed
            | ureq::Error::Protocol(_) => Some(e.to_string()),
            _ => None,
        },
        _ => None,
    }
}

/// The revision's commit and the repo's files, from the hub's API.
pub(super) fn listing(env: &HubEnv, id: &HubId, limit: Duration) -> Result<RepoInfo, Listing> {
    let mut builder = ApiBuilder::from_cache(Cache::new(env.cache.clone()))
        .with_token(env.token.clone())
        .with_progress(false);
    if let Some(endpoint) = &env.endpoint {
        builder = builder.with_endpoint(endpoint.clone());
    }
    let api = builder
        .build()
        .map_err(|e| Listing::Refused(format!("--model {id}: the hub client: {e}")))?;
    let repo = Repo::with_revision(id.repo.clone(), RepoType::Model, id.revision.clone());
    let asked = stall::watched(limit, false, move |beat| {
        with_retries(&beat, || api.repo(repo.clone()).info())
    });
    let what = "the repo's file list";
    match asked {
        Ok(Ok(info)) => Ok(info),
        Ok(Err(e)) => Err(match unreachable(&e) {
            Some(why) => Listing::Unreachable {
                why,
                line: request_error(env, id, "the repo", &e),
            },
            None => Listing::Refused(request_error(env, id, "the repo", &e)),
        }),
        Err(stall::Unanswered::Stalled) => Err(Listing::Unreachable {
            why: format!("no answer for {} s", limit.as_secs_f64()),
            line: unanswered(env, id, limit, what, stall::Unanswered::Stalled),
        }),
        Err(why) => Err(Listing::Refused(unanswered(env, id, limit, what, why))),
    }
}
