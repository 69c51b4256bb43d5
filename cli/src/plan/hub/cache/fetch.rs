//! One file of a repo at a commit, downloaded into the cache in
//! `huggingface_hub`'s layout by this tool's own code. `hf-hub`'s download
//! names the blob and the snapshot folder after the response's headers
//! as sent, and never checks a body's size; it has no hook between its
//! metadata request and its first write, and a second metadata request
//! of ours could be answered otherwise. So, for each file:
//! 1. a `Range: bytes=0-0` request of `/resolve/<commit>/<file>` (a
//!    relative redirect followed, an absolute one, to the CDN, not: the
//!    headers are the hub's) gives `X-Repo-Commit`, `X-Linked-Etag` else
//!    `ETag`, and the size (`X-Linked-Size`, else the `Content-Range`
//!    total), each checked before anything is written (`headers.rs`): the
//!    commit must be the one asked for, the ETag a hex digest;
//! 2. under the blob's lock in `.locks/` (Python's, so the two take
//!    turns), the body goes into `blobs/<digest>.part`, a `Range` request
//!    resuming what an earlier try left there;
//! 3. the whole `.part` is checked, its size and, where its digest is
//!    one, its checksum (`checksum.rs`), and removed if wrong: no blob a
//!    later run trusts is ever wrong;
//! 4. then renamed to `blobs/<digest>` and linked from
//!    `snapshots/<commit>/<file>`.
//!
//! A request's failure is returned as `hf-hub`'s error type, so that the
//! caller tries again (resuming) and words it as for the API's requests.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use hf_hub::api::Progress;
use hf_hub::api::sync::ApiError;
use ureq::Agent;
use ureq::http::Response;

use super::checksum;
use super::headers::{self, shown};
use super::stall::Beat;

/// Redirects followed: relative ones before the headers are read, any
/// to a body.
const REDIRECTS: usize = 5;

/// The HTTP client of the downloads. It follows redirects itself, so that
/// the token goes to the hub's origin (scheme, host and port) only, as
/// `huggingface_hub` drops it for another host: a redirect names a host
/// the hub (or a mirror) chooses, and ureq's own check ignores the port.
#[derive(Clone)]
pub(super) struct Client {
    agent: Agent,
    token: Option<String>,
    /// `scheme://host[:port]` of the hub, the one origin the token goes to.
    hub: String,
}

impl Client {
    /// A client sending `token` to the origin of `hub` (a URL on it) only.
    pub(super) fn new(token: Option<String>, hub: &str) -> Self {
        Self {
            agent: Agent::config_builder().max_redirects(0).build().into(),
            token,
            hub: origin(hub).to_ascii_lowercase(),
        }
    }

    /// `url`, its redirects followed where `follow` (absolute or relative,
    /// up to [`REDIRECTS`]), each request carrying the token only where
    /// its origin is the hub's.
    fn get(&self, follow: bool, url: &str, range: &str) -> Result<Response<ureq::Body>, ApiError> {
        let mut url = url.to_owned();
        let mut response = self.once(&url, range)?;
        if !follow {
            return Ok(response);
        }
        for _ in 0..REDIRECTS {
            if !response.status().is_redirection() {
                break;
            }
            let Some(next) = header(&response, "location")
                .and_then(text)
                .and_then(|l| redirected(&url, l))
            else {
                break;
            };
            url = next;
            response = self.once(&url, range)?;
        }
        Ok(response)
    }

    fn once(&self, url: &str, range: &str) -> Result<Response<ureq::Body>, ApiError> {
        let mut request = self
            .agent
            .get(url)
            .header("Range", range)
            // Sizes, ranges and checksums are of the file's own bytes, as
            // Python asks for them.
            .header("Accept-Encoding", "identity")
            .header(
                "User-Agent",
                concat!("pipeline/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(token) = &self.token
            && origin(url).eq_ignore_ascii_case(&self.hub)
        {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        request.call().map_err(request_error)
    }
}

/// The URL a redirect from `from` to `location` names: absolute, on the
/// same scheme (`//host/…`) or on the same origin (`/path`); `None` for
/// anything else.
fn redirected(from: &str, location: &str) -> Option<String> {
    if location.contains("://") {
        return Some(location.to_owned());
    }
    if let Some(rest) = location.strip_prefix("//") {
        let scheme = from.split("://").next()?;
        return Some(format!("{scheme}://{rest}"));
    }
    location
        .starts_with('/')
        .then(|| format!("{}{location}", origin(from)))
}

fn request_error(e: ureq::Error) -> ApiError {
    ApiError::RequestError(Box::new(e))
}

/// One file to fetch.
#[derive(Clone)]
pub(super) struct Job {
    pub(super) client: Client,
    /// `…/resolve/<commit>/<file>` on the hub.
    pub(super) url: String,
    /// `models--org--name` in the cache.
    pub(super) repo: PathBuf,
    /// Its folder in the cache's `.locks/`.
    pub(super) locks: PathBuf,
    pub(super) commit: String,
    /// The file's name in the repo.
    pub(super) name: String,
}

/// What the hub's headers say of a file.
struct Meta {
    /// Its ETag's digest: the blob's name, and its checksum where it is one.
    digest: String,
    size: u64,
}

/// The file of `job` in the cache, its snapshot's path. The outer error is
/// a request's (the caller tries again where it may pass, and what reached
/// the `.part` file is resumed); the inner one says in words why the hub's
/// answer is refused, after which nothing is kept that a later run trusts.
pub(super) fn file(job: &Job, beat: &mut Beat) -> Result<Result<PathBuf, String>, ApiError> {
    let meta = match metadata(job)? {
        Ok(meta) => meta,
        Err(why) => return Ok(Err(format!("{}: {why}", job.name))),
    };
    Ok(store(job, &meta, beat)?.map_err(|why| format!("{}: {why}", job.name)))
}

fn header<'r>(response: &'r Response<ureq::Body>, name: &str) -> Option<&'r [u8]> {
    response.headers().get(name).map(|v| v.as_bytes())
}

fn text(value: &[u8]) -> Option<&str> {
    std::str::from_utf8(value).ok()
}

/// `scheme://host[:port]` of `url`.
fn origin(url: &str) -> &str {
    let after = url.find("://").map_or(0, |i| i + 3);
    url[after..].find('/').map_or(url, |i| &url[..after + i])
}

/// The total of a `Content-Range: bytes A-B/TOTAL`.
fn range_total(response: &Response<ureq::Body>) -> Option<u64> {
    let value = text(header(response, "content-range")?)?;
    value.rsplit('/').next()?.trim().parse().ok()
}

/// The first byte of a `Content-Range: bytes A-B/TOTAL`.
fn range_start(response: &Response<ureq::Body>) -> Option<u64> {
    let value = text(header(response, "content-range")?)?;
    let range = value.trim().strip_prefix("bytes ")?;
    range.split('-').next()?.trim().parse().ok()
}

fn metadata(job: &Job) -> Result<Result<Meta, String>, ApiError> {
    let mut url = job.url.clone();
    let mut response = job.client.get(false, &url, "bytes=0-0")?;
    for _ in 0..REDIRECTS {
        let relative = response
            .status()
            .is_redirection()
            .then(|| header(&response, "location").and_then(text))
            .flatten()
            .filter(|l| l.starts_with('/') && !l.starts_with("//"))
            .map(str::to_owned);
        let Some(location) = relative else { break };
        url = format!("{}{location}", origin(&url));
        response = job.client.get(false, &url, "bytes=0-0")?;
    }
    let Some(raw) = header(&response, "x-repo-commit") else {
        return Ok(Err(
            "the hub's answer names no commit (X-Repo-Commit); is HF_ENDPOINT a Hugging Face hub?"
                .to_owned(),
        ));
    };
    let Some(commit) = text(raw).and_then(headers::commit) else {
        return Ok(Err(format!(
            "the hub named its commit {} (X-Repo-Commit), not a commit hash",
            shown(raw)
        )));
    };
    if commit != job.commit {
        return Ok(Err(format!(
            "the hub answered at commit {commit}, asked for {}",
            job.commit
        )));
    }
    let (tag, raw) = match header(&response, "x-linked-etag") {
        Some(raw) => ("X-Linked-Etag", raw),
        None => match header(&response, "etag") {
            Some(raw) => ("ETag", raw),
            None => return Ok(Err("the hub's answer has no ETag".to_owned())),
        },
    };
    let Some(digest) = text(raw).and_then(headers::etag) else {
        return Ok(Err(format!(
            "the hub named its blob {} ({tag}), not a hex digest",
            shown(raw)
        )));
    };
    let digest = digest.to_owned();
    let linked = header(&response, "x-linked-size")
        .and_then(text)
        .and_then(|s| s.trim().parse().ok());
    let size = match (linked, range_total(&response)) {
        (Some(size), _) | (None, Some(size)) => Some(size),
        (None, None) if response.status().is_redirection() => {
            // The CDN's answer holds the size.
            match header(&response, "location").and_then(text) {
                Some(location) => {
                    let location = location.to_owned();
                    range_total(&job.client.get(true, &location, "bytes=0-0")?)
                }
                None => None,
            }
        }
        // A server that ignored the range: the whole body's length.
        (None, None) if response.status().as_u16() == 200 => header(&response, "content-length")
            .and_then(text)
            .and_then(|s| s.trim().parse().ok()),
        (None, None) => None,
    };
    let Some(size) = size else {
        return Ok(Err(
            "the hub's answer gives no size (X-Linked-Size or Content-Range)".to_owned(),
        ));
    };
    Ok(Ok(Meta { digest, size }))
}

/// Waits for the blob's lock (another process, Python's included, may be
/// fetching it), alive all along.
fn lock_blob(job: &Job, digest: &str, beat: &Beat) -> Result<File, String> {
    let path = job.locks.join(format!("{digest}.lock"));
    let lock = File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(lock),
            Err(std::fs::TryLockError::WouldBlock) => {
                beat.pause(Duration::from_millis(250));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(format!("cannot lock {}: {e}", path.display()));
            }
        }
    }
}

/// Whether `path` holds the file `meta` describes.
fn whole(path: &Path, meta: &Meta) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.len() == meta.size)
        && checksum::verify(path, &meta.digest).is_ok()
}

fn store(job: &Job, meta: &Meta, beat: &mut Beat) -> Result<Result<PathBuf, String>, ApiError> {
    let blobs = job.repo.join("blobs");
    let write = |what: &Path, e: std::io::Error| format!("cannot write {}: {e}", what.display());
    for dir in [&blobs, &job.locks] {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return Ok(Err(write(dir, e)));
        }
    }
    let _lock = match lock_blob(job, &meta.digest, beat) {
        Ok(lock) => lock,
        Err(why) => return Ok(Err(why)),
    };
    let blob = blobs.join(&meta.digest);
    // Another commit's file, or another process's download.
    if !whole(&blob, meta) {
        let _ = std::fs::remove_file(&blob);
        let part = blobs.join(format!("{}.part", meta.digest));
        if let Err(why) = body(job, meta, &part, beat)? {
            return Ok(Err(why));
        }
        let got = std::fs::metadata(&part).map_or(0, |m| m.len());
        if got != meta.size {
            let _ = std::fs::remove_file(&part);
            return Ok(Err(format!(
                "the hub sent {got} bytes of a file it said has {}; the download was removed, \
                 run again",
                meta.size
            )));
        }
        if let Err(why) = checksum::verify(&part, &meta.digest) {
            let _ = std::fs::remove_file(&part);
            return Ok(Err(format!("{why}; the download was removed, run again")));
        }
        if let Err(e) = std::fs::rename(&part, &blob) {
            return Ok(Err(write(&blob, e)));
        }
    }
    Ok(link(job, &meta.digest, &blob))
}

/// The body into `part`, resumed from what it holds. An error reading it
/// is the request's (tried again, resuming); a body that ends cleanly
/// short is found by the size check after.
fn body(
    job: &Job,
    meta: &Meta,
    part: &Path,
    beat: &mut Beat,
) -> Result<Result<(), String>, ApiError> {
    let write = |e: std::io::Error| format!("cannot write {}: {e}", part.display());
    let mut file = match OpenOptions::new().create(true).append(true).open(part) {
        Ok(file) => file,
        Err(e) => return Ok(Err(write(e))),
    };
    let mut start = file.metadata().map_or(0, |m| m.len());
    if start > meta.size {
        // Not this file's start: begun afresh.
        if let Err(e) = file.set_len(0) {
            return Ok(Err(write(e)));
        }
        start = 0;
    }
    if start == meta.size {
        return Ok(Ok(()));
    }
    let response = job.client.get(true, &job.url, &format!("bytes={start}-"))?;
    if response.status().as_u16() == 206 {
        if range_start(&response) != Some(start) {
            return Ok(Err(format!(
                "the hub answered a request for bytes from {start} with {}",
                header(&response, "content-range")
                    .map_or_else(|| "no Content-Range".to_owned(), shown)
            )));
        }
    } else if start > 0 {
        // The whole file, the range ignored.
        if let Err(e) = file.set_len(0) {
            return Ok(Err(write(e)));
        }
        start = 0;
    }
    let limit = match read_limit(meta.size, start) {
        Ok(limit) => limit,
        Err(why) => return Ok(Err(why)),
    };
    beat.init(usize::try_from(meta.size).unwrap_or(usize::MAX), &job.name);
    beat.update(usize::try_from(start).unwrap_or(0));
    // One byte past the size is enough to know the body is too long.
    let mut reader = response.into_body().into_reader().take(limit);
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let n = reader
            .read(&mut buffer)
            .map_err(|e| request_error(ureq::Error::from(e)))?;
        if n == 0 {
            break;
        }
        if let Err(e) = file.write_all(&buffer[..n]) {
            return Ok(Err(write(e)));
        }
        beat.update(n);
    }
    if let Err(e) = file.sync_data() {
        return Ok(Err(write(e)));
    }
    beat.finish();
    Ok(Ok(()))
}

/// The bytes to read of a body from `start` of a file of `size`: one past
/// the rest, so that a body too long is seen. A size the hub sent that
/// leaves no room for that byte is refused, not wrapped around.
fn read_limit(size: u64, start: u64) -> Result<u64, String> {
    size.checked_sub(start)
        .and_then(|rest| rest.checked_add(1))
        .ok_or_else(|| format!("the hub gave the size {size}, which no file has"))
}

/// `snapshots/<commit>/<name>` → `blobs/<digest>`, relative as Python
/// links it.
fn link(job: &Job, digest: &str, blob: &Path) -> Result<PathBuf, String> {
    let link = job.repo.join("snapshots").join(&job.commit).join(&job.name);
    let write = |e: std::io::Error| format!("cannot write {}: {e}", link.display());
    if let Some(parent) = link.parent() {
        std::fs::create_dir_all(parent).map_err(write)?;
    }
    if std::fs::symlink_metadata(&link).is_ok() {
        std::fs::remove_file(&link).map_err(write)?;
    }
    #[cfg(unix)]
    {
        let up = "../".repeat(2 + job.name.matches('/').count());
        let _ = blob;
        std::os::unix::fs::symlink(format!("{up}blobs/{digest}"), &link).map_err(write)?;
    }
    #[cfg(not(unix))]
    {
        let _ = digest;
        std::fs::copy(blob, &link).map_err(write)?;
    }
    Ok(link)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_s_origin() {
        assert_eq!(origin("http://127.0.0.1:80/a/b"), "http://127.0.0.1:80");
        assert_eq!(origin("https://hub.example/x"), "https://hub.example");
        assert_eq!(origin("http://h"), "http://h");
    }

    #[test]
    fn a_size_at_the_integer_s_end_is_refused_not_wrapped() {
        assert_eq!(read_limit(10, 0), Ok(11));
        assert_eq!(read_limit(10, 10), Ok(1));
        assert_eq!(read_limit(0, 0), Ok(1));
        assert_eq!(read_limit(u64::MAX - 1, 0), Ok(u64::MAX));
        let refused = read_limit(u64::MAX, 0);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("18446744073709551615") && !e.contains('\n')),
            "{refused:?}"
        );
        assert_eq!(read_limit(u64::MAX, 1), Ok(u64::MAX));
        assert!(read_limit(5, 6).is_err());
    }

    #[test]
    fn redirects_resolve_against_the_url_they_answer() {
        let from = "https://hub.example:8443/o/m/resolve/c/f";
        assert_eq!(
            redirected(from, "https://cdn.example/x").as_deref(),
            Some("https://cdn.example/x")
        );
        assert_eq!(
            redirected(from, "//cdn.example/x").as_deref(),
            Some("https://cdn.example/x")
        );
        assert_eq!(
            redirected(from, "/x?y").as_deref(),
            Some("https://hub.example:8443/x?y")
        );
        assert_eq!(redirected(from, "x"), None);
    }
}
