//! The HTTP layer under every store: one `reqwest` client for the process,
//! and the retries of requests that got no usable answer.
//!
//! `object_store`'s own retries are off (it cannot count them by kind,
//! ignores `Retry-After`, and resumes a broken body only when the response
//! had an ETag). Here a request is sent again after no answer (refused,
//! reset before the headers, a timeout) or a 5xx, 408 or 429, waiting as
//! [`backoff`] says, on the item's [`Budget`].
//!
//! A body is read here, whole, when no item's body loop sits above
//! (listing pages), or when the response declares no length (chunked or
//! close-delimited: `object_store` refuses those); a body that breaks is
//! then sent for again. Otherwise it streams up to `Remote::read`, which
//! resumes it.

use std::sync::{Arc, OnceLock};

use http::header::{CONTENT_LENGTH, RETRY_AFTER, TRANSFER_ENCODING};
use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService,
};
use pipeline_core::RemoteSpec;

use super::retry::{BUDGET, Budget, Counts, RetryKind, backoff, retry_after};

/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 10;

/// Builds the process's client once; every store shares it.
#[derive(Debug)]
pub(crate) struct Connector {
    client: OnceLock<HttpClient>,
    pub(crate) counts: Arc<Counts>,
    spec: RemoteSpec,
}

impl Connector {
    pub(crate) fn new(spec: RemoteSpec) -> Self {
        Self {
            client: OnceLock::new(),
            counts: Arc::default(),
            spec,
        }
    }
}

impl HttpConnector for Connector {
    fn connect(&self, _: &ClientOptions) -> object_store::Result<HttpClient> {
        if let Some(client) = self.client.get() {
            return Ok(client.clone());
        }
        let timeout = self.spec.timeout();
        let builder = reqwest::Client::builder();
        let builder = if self.spec.idle_only {
            builder.read_timeout(timeout)
        } else {
            builder.timeout(timeout)
        };
        let inner = builder
            .connect_timeout(timeout.min(std::time::Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::custom(|attempt| {
                let from = attempt.previous().last().map_or("", |u| u.scheme());
                match redirect_refusal(from, attempt.url().scheme(), attempt.previous().len()) {
                    Some(why) => attempt.error(why),
                    None => attempt.follow(),
                }
            }))
            .build()
            .map_err(|e| object_store::Error::Generic {
                store: "HTTP",
                source: Box::new(e),
            })?;
        let client = HttpClient::new(Retrying {
            inner: HttpClient::new(inner),
            counts: Arc::clone(&self.counts),
            retries: self.spec.retries,
        });
        Ok(self.client.get_or_init(|| client).clone())
    }
}

/// Why a redirect from a `from` URL to a `to` URL, after `hops` others, is
/// not followed: `None` when it is. Within a scheme, and from `http` up to
/// `https`, redirects are followed; any other change of scheme (an `https`
/// URL sent to plain `http`, or to `file:`) is refused.
pub(crate) fn redirect_refusal(from: &str, to: &str, hops: usize) -> Option<String> {
    if hops >= MAX_REDIRECTS {
        return Some(format!("more than {MAX_REDIRECTS} redirects"));
    }
    match (from, to) {
        (a, b) if a == b => None,
        ("http", "https") => None,
        _ => Some(format!("a redirect from {from}:// to {to}:// is refused")),
    }
}

/// The one connector, handed to each store's builder.
#[derive(Debug)]
pub(crate) struct Shared(pub(crate) Arc<Connector>);

impl HttpConnector for Shared {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        self.0.connect(options)
    }
}

#[derive(Debug)]
struct Retrying {
    inner: HttpClient,
    counts: Arc<Counts>,
    retries: u32,
}

#[async_trait::async_trait]
impl HttpService for Retrying {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let budget = Budget::current(self.retries);
        // An item's body loop above resumes its body; anything else is
        // read whole here.
        let read_whole = BUDGET.try_with(|_| ()).is_err();
        let (parts, body) = req.into_parts();
        loop {
            let mut request = HttpRequest::new(body.clone());
            *request.method_mut() = parts.method.clone();
            *request.uri_mut() = parts.uri.clone();
            *request.version_mut() = parts.version;
            *request.headers_mut() = parts.headers.clone();
            let (kind, wait_at_least, outcome) = match self.inner.execute(request).await {
                Err(e) => match RetryKind::of_request(&e) {
                    Some(kind) => (kind, None, Err(e)),
                    None => return Err(e),
                },
                Ok(response) => {
                    let status = response.status();
                    if let Some(kind) = RetryKind::of_status(status.as_u16()) {
                        let after = response
                            .headers()
                            .get(RETRY_AFTER)
                            .and_then(|v| v.to_str().ok())
                            .and_then(retry_after);
                        (kind, after, Ok(response))
                    } else if status.is_success()
                        && (read_whole || !response.headers().contains_key(CONTENT_LENGTH))
                    {
                        let (mut head, body) = response.into_parts();
                        match body.bytes().await {
                            Ok(bytes) => {
                                // What arrived is all there is: a body
                                // without a declared length cannot be
                                // told short here (the decoder can).
                                head.headers.remove(TRANSFER_ENCODING);
                                head.headers.insert(CONTENT_LENGTH, bytes.len().into());
                                return Ok(HttpResponse::from_parts(head, bytes.into()));
                            }
                            Err(e) => (RetryKind::of_body(&e), None, Err(e)),
                        }
                    } else {
                        return Ok(response);
                    }
                }
            };
            let Some(n) = budget.take() else {
                return outcome;
            };
            let wait = backoff(n, wait_at_least);
            // The URL as text only when a retry is logged, not per request.
            self.counts
                .record(kind, &parts.uri.to_string(), n, self.retries, wait);
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_within_a_scheme_or_up_to_https_are_followed_others_refused() {
        assert_eq!(redirect_refusal("http", "http", 0), None);
        assert_eq!(redirect_refusal("https", "https", 3), None);
        assert_eq!(redirect_refusal("http", "https", 0), None);
        let down = redirect_refusal("https", "http", 0).expect("a downgrade is refused");
        assert!(down.contains("https:// to http://"), "{down}");
        assert!(redirect_refusal("http", "file", 0).is_some());
        assert!(redirect_refusal("http", "http", MAX_REDIRECTS).is_some());
    }
}
