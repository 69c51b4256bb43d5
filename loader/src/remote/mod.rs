//! Objects behind `s3://` and `http(s)://` URLs, through `object_store`.
//!
//! One [`Remote`] per process: a small tokio runtime, one HTTP client shared
//! by every store, and a store per S3 bucket or web origin. Nothing read is
//! lost to the network while `--io-retries` lasts:
//! - requests that got no usable answer (refused, reset or timed out before
//!   the headers, 5xx, 408, 429) are sent again by the HTTP layer
//!   (`connector.rs`), obeying `Retry-After`;
//! - a body that breaks after the headers (a reset, fewer bytes than its
//!   `Content-Length`, a stall past `--io-timeout`) is resumed here
//!   ([`Remote::read`]) with a ranged request for the bytes still missing,
//!   pinned to the first response's ETag, or read again whole where the
//!   server gives no ETag or ignores the range;
//! - every retry of an item draws on one budget (`retry.rs`), is counted
//!   by kind, and is logged with `PIPELINE_LOG=debug`.
//!
//! A body too large to hold (a model's external data) goes to a
//! [`BodySink`] as it arrives ([`Remote::get_into`]), through the same
//! resuming loop. Every message names its URL as `pipeline_core::redact_url`
//! shows it: no signature, token or password reaches an error record or a
//! log.
//!
//! S3 settings come from the standard environment (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL` for MinIO, Ceph and friends; web identity and
//! instance credentials). An `http://` endpoint is allowed as given.

mod connector;
mod retry;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::http::HttpBuilder;
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, GetOptions, GetRange, ObjectStore, RetryConfig};
use pipeline_core::{
    ItemError, ItemErrorKind, RemoteRetries, RemoteSpec, redact_message, redact_text, redact_url,
};
use url::Url;

use connector::{Connector, Shared};
use retry::{BUDGET, Budget, RetryKind, backoff};

/// Remote requests this process sent again, by kind, so far.
pub fn retry_counts() -> RemoteRetries {
    SHARED
        .get()
        .map_or_else(RemoteRetries::default, |r| r.connector.counts.snapshot())
}

static SHARED: OnceLock<Remote> = OnceLock::new();

/// A listed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Its full URL.
    pub url: String,
    /// Bytes.
    pub size: u64,
    /// Its ETag, when the store gives one.
    pub etag: Option<String>,
}

/// A URL that cannot be read at all (bad syntax, a store that cannot be
/// configured): a setup error, unlike an item's failure. Shown without the
/// URL's credentials.
#[derive(Debug, thiserror::Error)]
#[error("{}: {}", redact_url(.url), redact_text(.message))]
pub struct RemoteError {
    /// The URL.
    pub url: String,
    /// What is wrong.
    pub message: String,
    /// The kind an item would get.
    pub kind: ItemErrorKind,
}

/// Where [`Remote::get_into`] puts a body's bytes as they arrive, so that
/// an object too large to hold is never held.
pub trait BodySink {
    /// The next bytes of the body.
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    /// Forgets every byte appended: the read starts again from the
    /// beginning (a body that broke where it cannot be resumed).
    fn restart(&mut self) -> std::io::Result<()>;
    /// The length the first response declares, before its first byte.
    fn expect(&mut self, _declared: u64) {}
}

impl BodySink for BytesMut {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.extend_from_slice(bytes);
        Ok(())
    }

    fn restart(&mut self) -> std::io::Result<()> {
        self.clear();
        Ok(())
    }

    fn expect(&mut self, declared: u64) {
        // What the server declares, but no more than a merged shard read
        // up front: a lying length must not allocate.
        self.reserve(declared.min(64 << 20) as usize);
    }
}

/// The process's client for remote objects.
#[derive(Debug)]
pub struct Remote {
    spec: RemoteSpec,
    runtime: tokio::runtime::Runtime,
    connector: Arc<Connector>,
    stores: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
}

impl Remote {
    /// A client with `spec`'s timeout, retries and concurrency.
    pub fn new(spec: RemoteSpec) -> Result<Self, RemoteError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("remote-io")
            .enable_all()
            .build()
            .map_err(|e| RemoteError {
                url: String::new(),
                message: format!("cannot start the I/O runtime: {e}"),
                kind: ItemErrorKind::Io,
            })?;
        Ok(Self {
            spec,
            runtime,
            connector: Arc::new(Connector::new(spec)),
            stores: Mutex::new(HashMap::new()),
        })
    }

    /// The process-wide client, made on first use with `spec`.
    pub fn shared(spec: RemoteSpec) -> Result<&'static Remote, RemoteError> {
        if let Some(remote) = SHARED.get() {
            return Ok(remote);
        }
        let remote = Remote::new(spec)?;
        Ok(SHARED.get_or_init(|| remote))
    }

    /// Requests sent again after a failure, so far.
    pub fn retries(&self) -> u64 {
        self.connector.counts.snapshot().total()
    }

    /// The whole object, or the item error it ends in.
    pub fn get(&self, url: &str, range: Option<Range<u64>>) -> Result<Bytes, ItemError> {
        self.runtime.block_on(self.fetch(url, range))
    }

    /// The whole object at `url` into `sink` as it arrives (resumed and
    /// retried as [`Remote::get`] is): its length in bytes, or the item
    /// error it ends in. A sink that cannot take the bytes (a full disk)
    /// ends the read at once.
    pub fn get_into(&self, url: &str, sink: &mut dyn BodySink) -> Result<u64, ItemError> {
        self.runtime.block_on(async {
            let (store, path, _) = self.store(url)?;
            let budget = Arc::new(Budget::new(self.spec.retries));
            let read = self.read(url, store.as_ref(), &path, None, &budget, sink);
            BUDGET.scope(Arc::clone(&budget), read).await
        })
    }

    /// Many objects (or ranges), `spec.concurrency` in flight, passed to
    /// `each` in input order with the seconds each request took; `each`
    /// returns false to stop.
    pub fn get_each(
        &self,
        requests: Vec<(String, Option<Range<u64>>)>,
        mut each: impl FnMut(usize, Result<Bytes, ItemError>, f64) -> bool,
    ) {
        self.runtime.block_on(async {
            let mut results = futures::stream::iter(requests)
                .map(|(url, range)| async move {
                    let started = Instant::now();
                    let result = self.fetch(&url, range).await;
                    (result, started.elapsed().as_secs_f64())
                })
                .buffered(self.spec.concurrency.max(1))
                .enumerate();
            while let Some((i, (result, seconds))) = results.next().await {
                if !each(i, result, seconds) {
                    return;
                }
            }
        });
    }

    /// Every object under a prefix (`s3://bucket/prefix/`), sorted by key.
    pub fn list(&self, url: &str) -> Result<Vec<ObjectInfo>, RemoteError> {
        let (store, prefix, base) = self.store(url).map_err(|e| e.into_setup(url))?;
        let prefix = (!prefix.as_ref().is_empty()).then_some(prefix);
        // Each page gets its own retries (the HTTP layer's): a listing of
        // a million keys is a thousand requests.
        let listed: Result<Vec<_>, _> = self
            .runtime
            .block_on(store.list(prefix.as_ref()).try_collect::<Vec<_>>());
        let mut objects: Vec<ObjectInfo> = listed
            .map_err(|e| item_error(url, e).into_setup(url))?
            .into_iter()
            .map(|meta| ObjectInfo {
                url: format!("{base}{}", meta.location),
                size: meta.size,
                etag: meta.e_tag,
            })
            .collect();
        objects.sort_by(|a, b| a.url.cmp(&b.url));
        Ok(objects)
    }

    async fn fetch(&self, url: &str, range: Option<Range<u64>>) -> Result<Bytes, ItemError> {
        let (store, path, _) = self.store(url)?;
        let budget = Arc::new(Budget::new(self.spec.retries));
        let mut got = BytesMut::new();
        let read = self.read(url, store.as_ref(), &path, range.clone(), &budget, &mut got);
        BUDGET.scope(Arc::clone(&budget), read).await?;
        let bytes = got.freeze();
        if let Some(range) = range {
            let want = range.end - range.start;
            if bytes.len() as u64 != want {
                return Err(ItemError::new(
                    ItemErrorKind::Io,
                    format!("{}: {} of {want} bytes", redact_url(url), bytes.len()),
                ));
            }
        }
        Ok(bytes)
    }

    /// Reads `range` of the object (all of it when `None`) into `sink`,
    /// resuming a body that breaks: the bytes that arrived are kept, and
    /// the rest is asked for with a ranged request pinned to the first
    /// response's ETag (`If-Match`). Without an ETag, or where the server
    /// ignores the range or the object changed, the read starts again from
    /// the beginning. Its length in bytes.
    async fn read(
        &self,
        url: &str,
        store: &dyn ObjectStore,
        path: &ObjectPath,
        range: Option<Range<u64>>,
        budget: &Budget,
        sink: &mut dyn BodySink,
    ) -> Result<u64, ItemError> {
        // Bytes in `sink`.
        let mut got = 0u64;
        let sink_failed = |e: std::io::Error| {
            ItemError::new(ItemErrorKind::Io, format!("{}: {e}", redact_url(url)))
        };
        // The object's range the first response covered, and its ETag:
        // known once a body broke with an ETag to resume it by.
        let mut resume: Option<(Range<u64>, String)> = None;
        loop {
            let options = match &resume {
                Some((whole, etag)) => GetOptions {
                    range: Some(GetRange::Bounded(whole.start + got..whole.end)),
                    if_match: Some(etag.clone()),
                    ..GetOptions::default()
                },
                None => GetOptions {
                    range: range.clone().map(GetRange::Bounded),
                    ..GetOptions::default()
                },
            };
            let failure = match store.get_opts(path, options).await {
                Ok(result) => {
                    let (whole, etag) = match &resume {
                        Some(resumed) => resumed.clone(),
                        None => {
                            sink.expect(result.range.end - result.range.start);
                            (
                                result.range.clone(),
                                result.meta.e_tag.clone().unwrap_or_default(),
                            )
                        }
                    };
                    let mut body = result.into_stream();
                    let broke = loop {
                        match body.next().await {
                            Some(Ok(chunk)) => {
                                sink.append(&chunk).map_err(sink_failed)?;
                                got += chunk.len() as u64;
                            }
                            Some(Err(e)) => break Some(e),
                            None => break None,
                        }
                    };
                    // Every byte the first response declared is here: an
                    // error after them loses nothing.
                    let all = got == whole.end - whole.start;
                    let Some(e) = broke.filter(|_| !all) else {
                        return Ok(got);
                    };
                    let kind = RetryKind::of_body(&e);
                    resume = (!etag.is_empty()).then_some((whole, etag));
                    (kind, e)
                }
                // A resume that the server would not serve as asked (the
                // object changed, or ranges are not honoured): from the
                // start, on the same budget.
                Err(e) if resume.is_some() && !final_error(&e) => {
                    resume = None;
                    (RetryKind::Body, e)
                }
                Err(e) => return Err(item_error(url, e)),
            };
            let (kind, error) = failure;
            let Some(n) = budget.take() else {
                let mut e = item_error(url, error);
                e.message = format!(
                    "{} ({got} bytes arrived; {} retries spent)",
                    e.message,
                    budget.used()
                );
                return Err(e);
            };
            if resume.is_none() {
                sink.restart().map_err(sink_failed)?;
                got = 0;
            }
            let wait = backoff(n, None);
            self.connector
                .counts
                .record(kind, url, n, self.spec.retries, wait);
            tokio::time::sleep(wait).await;
        }
    }

    /// The store for `url`, the object's path in it, and the URL prefix
    /// that listed paths are relative to.
    fn store(&self, url: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath, String), ItemError> {
        let bad = |message: String| {
            let message = format!("{url}: {message}");
            ItemError::new(ItemErrorKind::Unsupported, redact_message(&message, url))
        };
        let parsed = Url::parse(url).map_err(|e| bad(e.to_string()))?;
        let scheme = parsed.scheme().to_ascii_lowercase();
        let (key, base) = match scheme.as_str() {
            "s3" => {
                let bucket = parsed.host_str().ok_or_else(|| bad("no bucket".into()))?;
                (format!("s3://{bucket}"), format!("s3://{bucket}/"))
            }
            "http" | "https" if parsed.query().is_some() => (url.to_owned(), url.to_owned()),
            "http" | "https" => {
                let origin = parsed.origin().ascii_serialization();
                (origin.clone(), format!("{origin}/"))
            }
            other => return Err(bad(format!("unsupported scheme `{other}`"))),
        };
        let path = if parsed.query().is_some() && scheme != "s3" {
            ObjectPath::default()
        } else {
            ObjectPath::from_url_path(parsed.path()).map_err(|e| bad(e.to_string()))?
        };
        let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(store) = stores.get(&key) {
            return Ok((Arc::clone(store), path, base));
        }
        let store = self.build(&scheme, &key).map_err(|e| bad(e.to_string()))?;
        stores.insert(key, Arc::clone(&store));
        Ok((store, path, base))
    }

    fn build(&self, scheme: &str, key: &str) -> object_store::Result<Arc<dyn ObjectStore>> {
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: std::time::Duration::from_millis(100),
                max_backoff: std::time::Duration::from_secs(10),
                base: 2.0,
            },
            // Retries are the connector's and `read`'s (see the module doc).
            max_retries: 0,
            retry_timeout: std::time::Duration::ZERO,
        };
        let connector = Arc::clone(&self.connector);
        if scheme == "s3" {
            let mut builder = AmazonS3Builder::from_env()
                .with_url(key)
                .with_retry(retry)
                .with_http_connector(Shared(connector));
            let endpoint = std::env::var("AWS_ENDPOINT_URL_S3")
                .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
                .or_else(|_| std::env::var("AWS_ENDPOINT"))
                .unwrap_or_default();
            if endpoint.starts_with("http://") {
                builder = builder.with_allow_http(true);
            }
            // The CLI's variable, which object_store does not read.
            if let Ok(region) = std::env::var("AWS_DEFAULT_REGION")
                && std::env::var_os("AWS_REGION").is_none()
            {
                builder = builder.with_region(region);
            }
            Ok(Arc::new(builder.build()?))
        } else {
            Ok(Arc::new(
                HttpBuilder::new()
                    .with_url(key)
                    .with_retry(retry)
                    .with_http_connector(Shared(connector))
                    .build()?,
            ))
        }
    }
}

/// An error no new request would mend: the object is missing or denied.
fn final_error(e: &object_store::Error) -> bool {
    matches!(
        e,
        object_store::Error::NotFound { .. }
            | object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
    )
}

/// The error kind a failed request ends in.
fn item_error(url: &str, e: object_store::Error) -> ItemError {
    let kind = match &e {
        object_store::Error::NotFound { .. } => ItemErrorKind::NotFound,
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => ItemErrorKind::Permission,
        _ => ItemErrorKind::Io,
    };
    // object_store's texts are long; the first line says it. It may name
    // the URL again, query and all: the whole line is redacted.
    let text = e.to_string();
    let line = text.lines().next().unwrap_or_default();
    ItemError::new(kind, redact_message(&format!("{url}: {line}"), url))
}

trait IntoSetup {
    fn into_setup(self, url: &str) -> RemoteError;
}

impl IntoSetup for ItemError {
    fn into_setup(self, url: &str) -> RemoteError {
        RemoteError {
            url: url.to_owned(),
            message: self.message,
            kind: self.kind,
        }
    }
}
