//! Objects behind `s3://` and `http(s)://` URLs, through `object_store`.
//!
//! One [`Remote`] per process: a small tokio runtime, one HTTP client shared
//! by every store, and a store per S3 bucket or web origin. Timeouts and
//! retries (exponential backoff with jitter, on timeouts, resets, 5xx and
//! 429) are `object_store`'s; what is left here is mapping a final failure
//! to an item's error kind and counting the retries.
//!
//! S3 settings come from the standard environment (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL` for MinIO, Ceph and friends; web identity and
//! instance credentials). An `http://` endpoint is allowed as given.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use std::time::Instant;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::http::HttpBuilder;
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig};
use pipeline_core::{ItemError, ItemErrorKind, RemoteSpec};
use url::Url;

/// Remote requests this process sent again, so far (0 before any).
pub fn retries() -> u64 {
    SHARED.get().map_or(0, Remote::retries)
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
/// configured): a setup error, unlike an item's failure.
#[derive(Debug, thiserror::Error)]
#[error("{url}: {message}")]
pub struct RemoteError {
    /// The URL.
    pub url: String,
    /// What is wrong.
    pub message: String,
    /// The kind an item would get.
    pub kind: ItemErrorKind,
}

/// The process's client for remote objects.
#[derive(Debug)]
pub struct Remote {
    spec: RemoteSpec,
    runtime: tokio::runtime::Runtime,
    connector: Arc<CountingConnector>,
    stores: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
    /// Logical requests made (each `get`, `get_range`, list page counts one
    /// when it needs no retry).
    logical: AtomicU64,
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
            connector: Arc::new(CountingConnector {
                client: OnceLock::new(),
                requests: Arc::default(),
                spec,
            }),
            stores: Mutex::new(HashMap::new()),
            logical: AtomicU64::new(0),
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
        let sent = self.connector.requests.load(Ordering::Relaxed);
        sent.saturating_sub(self.logical.load(Ordering::Relaxed))
    }

    /// The whole object, or the item error it ends in.
    pub fn get(&self, url: &str, range: Option<Range<u64>>) -> Result<Bytes, ItemError> {
        self.runtime.block_on(self.fetch(url, range))
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
        let listed: Result<Vec<_>, _> = self.runtime.block_on(async {
            self.logical.fetch_add(1, Ordering::Relaxed);
            store.list(prefix.as_ref()).try_collect::<Vec<_>>().await
        });
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
        self.logical.fetch_add(1, Ordering::Relaxed);
        let bytes = match range {
            Some(range) => {
                let want = range.end - range.start;
                let bytes = store
                    .get_range(&path, range)
                    .await
                    .map_err(|e| item_error(url, e))?;
                if bytes.len() as u64 != want {
                    return Err(ItemError::new(
                        ItemErrorKind::Io,
                        format!("{url}: {} of {want} bytes", bytes.len()),
                    ));
                }
                bytes
            }
            None => {
                let got = store.get(&path).await.map_err(|e| item_error(url, e))?;
                got.bytes().await.map_err(|e| item_error(url, e))?
            }
        };
        Ok(bytes)
    }

    /// The store for `url`, the object's path in it, and the URL prefix
    /// that listed paths are relative to.
    fn store(&self, url: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath, String), ItemError> {
        let bad = |message: String| {
            ItemError::new(ItemErrorKind::Unsupported, format!("{url}: {message}"))
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
            max_retries: self.spec.retries as usize,
            // Bounded by the retries, not by a clock of its own.
            retry_timeout: self.spec.timeout() * (self.spec.retries + 1)
                + std::time::Duration::from_secs(60),
        };
        let connector = Arc::clone(&self.connector) as Arc<dyn HttpConnector>;
        if scheme == "s3" {
            let mut builder = AmazonS3Builder::from_env()
                .with_url(key)
                .with_retry(retry)
                .with_http_connector(ArcConnector(connector));
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
                    .with_http_connector(ArcConnector(connector))
                    .build()?,
            ))
        }
    }

    /// The options of the one HTTP client every store shares.
    fn client_options(spec: &RemoteSpec) -> ClientOptions {
        ClientOptions::new()
            .with_timeout(spec.timeout())
            .with_connect_timeout(spec.timeout().min(std::time::Duration::from_secs(10)))
            .with_allow_http(true)
    }
}

/// The error kind a failed request ends in.
fn item_error(url: &str, e: object_store::Error) -> ItemError {
    let kind = match &e {
        object_store::Error::NotFound { .. } => ItemErrorKind::NotFound,
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => ItemErrorKind::Permission,
        _ => ItemErrorKind::Io,
    };
    // object_store's texts are long; the first line says it.
    let text = e.to_string();
    let line = text.lines().next().unwrap_or_default();
    ItemError::new(kind, format!("{url}: {line}"))
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

/// Builds the HTTP client once and counts the requests it sends, retries
/// included (`object_store` retries inside; this is where they are seen).
#[derive(Debug)]
struct CountingConnector {
    client: OnceLock<HttpClient>,
    requests: Arc<AtomicU64>,
    spec: RemoteSpec,
}

impl HttpConnector for CountingConnector {
    fn connect(&self, _: &ClientOptions) -> object_store::Result<HttpClient> {
        if let Some(client) = self.client.get() {
            return Ok(client.clone());
        }
        let inner = ReqwestConnector::default().connect(&Remote::client_options(&self.spec))?;
        let client = HttpClient::new(Counting {
            inner,
            requests: Arc::clone(&self.requests),
        });
        Ok(self.client.get_or_init(|| client).clone())
    }
}

/// An `Arc`'d connector handed to each builder.
#[derive(Debug)]
struct ArcConnector(Arc<dyn HttpConnector>);

impl HttpConnector for ArcConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        self.0.connect(options)
    }
}

#[derive(Debug)]
struct Counting {
    inner: HttpClient,
    requests: Arc<AtomicU64>,
}

#[async_trait::async_trait]
impl HttpService for Counting {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.inner.execute(req).await
    }
}
