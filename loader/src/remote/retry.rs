//! When a remote read is tried again, how long it waits first, and the
//! counts `--report` shows.
//!
//! One [`Budget`] per item: `--io-retries` retries, shared by everything
//! that can go wrong while reading it (no answer, a 5xx or 429, a body that
//! breaks after the headers), so an item costs at most `retries + 1`
//! requests whatever fails. The budget travels with the item's future as a
//! task-local ([`BUDGET`]), so the HTTP layer under `object_store` draws on
//! the same one as the body loop above it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use object_store::client::{HttpError, HttpErrorKind};
use pipeline_core::RemoteRetries;

/// The first backoff; each retry doubles it, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest backoff between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// The longest `Retry-After` obeyed: a server asking for more gets this.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

tokio::task_local! {
    /// The budget of the item whose read the current task is doing.
    pub(crate) static BUDGET: Arc<Budget>;
}

/// Why a request is sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryKind {
    Connect,
    Timeout,
    Server,
    Throttled,
    Body,
}

impl RetryKind {
    /// The kind of a request that failed before any response.
    pub(crate) fn of_request(error: &HttpError) -> Option<RetryKind> {
        match error.kind() {
            HttpErrorKind::Timeout => Some(RetryKind::Timeout),
            HttpErrorKind::Connect | HttpErrorKind::Request | HttpErrorKind::Interrupted => {
                Some(RetryKind::Connect)
            }
            // A refused redirect, a TLS failure: the same again.
            _ => None,
        }
    }

    /// The kind of a body that broke after the headers: a timeout, or
    /// anything else (a reset, too few bytes, a broken transfer coding).
    pub(crate) fn of_body(error: &(dyn std::error::Error + 'static)) -> RetryKind {
        let mut source = Some(error);
        while let Some(e) = source {
            if let Some(http) = e.downcast_ref::<HttpError>()
                && http.kind() == HttpErrorKind::Timeout
            {
                return RetryKind::Timeout;
            }
            source = e.source();
        }
        RetryKind::Body
    }

    /// The kind of a response status worth another try.
    pub(crate) fn of_status(status: u16) -> Option<RetryKind> {
        match status {
            429 | 503 => Some(RetryKind::Throttled),
            408 | 500..=599 => Some(RetryKind::Server),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            RetryKind::Connect => "no answer",
            RetryKind::Timeout => "a timeout",
            RetryKind::Server => "a server error",
            RetryKind::Throttled => "throttling",
            RetryKind::Body => "a broken body",
        }
    }
}

/// What one item may still spend on retries.
#[derive(Debug)]
pub(crate) struct Budget {
    used: AtomicU32,
    max: u32,
}

impl Budget {
    pub(crate) fn new(max: u32) -> Self {
        Self {
            used: AtomicU32::new(0),
            max,
        }
    }

    /// The budget of the item being read, or a fresh one for a request
    /// outside any item (a listing page).
    pub(crate) fn current(max: u32) -> Arc<Budget> {
        BUDGET
            .try_with(Arc::clone)
            .unwrap_or_else(|_| Arc::new(Budget::new(max)))
    }

    /// Takes one retry: its number (1 for the first), or `None` when the
    /// budget is spent.
    pub(crate) fn take(&self) -> Option<u32> {
        let n = self.used.fetch_add(1, Ordering::Relaxed) + 1;
        (n <= self.max).then_some(n)
    }

    /// Retries taken so far (at most the budget).
    pub(crate) fn used(&self) -> u32 {
        self.used.load(Ordering::Relaxed).min(self.max)
    }
}

/// How long to wait before retry `n` (1-based): exponential backoff with
/// jitter (half fixed, half random, so a burst of failures spreads out),
/// or what the server's `Retry-After` asked for when that is longer.
pub(crate) fn backoff(n: u32, retry_after: Option<Duration>) -> Duration {
    let exp = FIRST_BACKOFF.saturating_mul(1 << (n.saturating_sub(1)).min(16));
    let full = exp.min(MAX_BACKOFF);
    let wait = full / 2 + full.mul_f64(fastrand::f64() / 2.0);
    wait.max(retry_after.unwrap_or_default().min(MAX_RETRY_AFTER))
}

/// A `Retry-After` header's delay: seconds, or an HTTP date.
pub(crate) fn retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(SystemTime::now()).unwrap_or_default())
}

/// The process's retry counts, by kind.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    connect: AtomicU64,
    timeout: AtomicU64,
    server: AtomicU64,
    throttled: AtomicU64,
    body: AtomicU64,
}

impl Counts {
    /// Counts retry `n` of `url` and says so when `PIPELINE_LOG=debug`.
    pub(crate) fn record(&self, kind: RetryKind, url: &str, n: u32, max: u32, wait: Duration) {
        let counter = match kind {
            RetryKind::Connect => &self.connect,
            RetryKind::Timeout => &self.timeout,
            RetryKind::Server => &self.server,
            RetryKind::Throttled => &self.throttled,
            RetryKind::Body => &self.body,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if debug_log() {
            eprintln!(
                "pipeline: debug: {}: retry {n} of {max} in {:.2} s after {}",
                pipeline_core::redact_url(url),
                wait.as_secs_f64(),
                kind.name()
            );
        }
    }

    pub(crate) fn snapshot(&self) -> RemoteRetries {
        RemoteRetries {
            connect: self.connect.load(Ordering::Relaxed),
            timeout: self.timeout.load(Ordering::Relaxed),
            server: self.server.load(Ordering::Relaxed),
            throttled: self.throttled.load(Ordering::Relaxed),
            body: self.body.load(Ordering::Relaxed),
        }
    }
}

/// `PIPELINE_LOG=debug`: one stderr line per retry.
fn debug_log() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("PIPELINE_LOG").is_ok_and(|v| v == "debug"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_gives_exactly_its_retries() {
        let budget = Budget::new(2);
        assert_eq!(budget.take(), Some(1));
        assert_eq!(budget.take(), Some(2));
        assert_eq!(budget.take(), None);
        assert_eq!(budget.used(), 2);
    }

    #[test]
    fn backoff_doubles_with_jitter_and_obeys_retry_after_up_to_a_cap() {
        for n in 1..=8 {
            let full = FIRST_BACKOFF.saturating_mul(1 << (n - 1)).min(MAX_BACKOFF);
            let wait = backoff(n, None);
            assert!(wait >= full / 2 && wait <= full, "{n}: {wait:?}");
        }
        assert_eq!(
            backoff(1, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        assert_eq!(backoff(1, Some(Duration::from_secs(3600))), MAX_RETRY_AFTER);
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(retry_after(" 7 "), Some(Duration::from_secs(7)));
        let soon = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(20));
        let wait = retry_after(&soon).expect("a date");
        assert!(wait > Duration::from_secs(15) && wait <= Duration::from_secs(20));
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon"), None);
    }

    #[test]
    fn statuses_that_are_retried_and_those_that_are_final() {
        assert_eq!(RetryKind::of_status(503), Some(RetryKind::Throttled));
        assert_eq!(RetryKind::of_status(429), Some(RetryKind::Throttled));
        assert_eq!(RetryKind::of_status(500), Some(RetryKind::Server));
        assert_eq!(RetryKind::of_status(502), Some(RetryKind::Server));
        assert_eq!(RetryKind::of_status(408), Some(RetryKind::Server));
        for final_status in [400, 401, 403, 404, 412, 416] {
            assert_eq!(RetryKind::of_status(final_status), None);
        }
    }
}
