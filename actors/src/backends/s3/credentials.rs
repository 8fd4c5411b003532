//! Credentials of the direct data path: the signer requests take, and its refresh.
//!
//! [`DirectPath`] is owned by the storage, so only the backend actor touches it. What it
//! shares with request futures, exactly:
//! - each request holds an `Arc` of the signer ([`Direct`]) it started with; a refresh builds a
//!   new signer, never changes one in use;
//! - a flume channel: a request whose credentials the store refused fetches fresh ones itself
//!   ([`super::Refresher`]) and sends them here; the storage takes the newest at its next batch;
//! - the refresh task, on the S3 runtime, whose `JoinHandle` the storage polls without waiting.
//!
//! No lock. A refresh task that panics counts as a failed refresh; one that hangs past
//! [`REFRESH_DEADLINE`] is aborted; either way another is tried after [`REFRESH_RETRY`].
//! Within [`SDK_FALLBACK_WITHIN`] of expiry with no fresh credentials, requests take the SDK
//! plane, whose identity cache refreshes on its own.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::provider::SharedCredentialsProvider;
use futures_util::FutureExt;

use super::client::current_credentials;
use super::direct::{Direct, Refresher};

/// Refresh temporary credentials this long before they expire.
pub(crate) const REFRESH_AHEAD: Duration = Duration::from_secs(300);
/// Closer than this to expiry (no fresh credentials yet), data requests take the SDK path,
/// whose identity cache refreshes on its own.
pub(crate) const SDK_FALLBACK_WITHIN: Duration = Duration::from_secs(60);
/// After a failed refresh, wait this long before the next try.
pub(super) const REFRESH_RETRY: Duration = Duration::from_secs(10);

/// A refresh that has not answered in this long is abandoned and tried again later.
pub(super) const REFRESH_DEADLINE: Duration = Duration::from_secs(60);

pub(super) type Refreshed = Result<aws_credential_types::Credentials, String>;

/// The direct data path and its credentials, owned by the storage (see the module docs). A
/// refresh runs as a task on the S3 runtime; the storage keeps its handle and looks at it
/// (without waiting) at its next data request.
pub(super) struct DirectPath {
    /// The signer for new requests; requests in flight keep the one they started with.
    pub(super) direct: Arc<Direct>,
    provider: SharedCredentialsProvider,
    /// When the current credentials expire (`None`: long-lived).
    expiry: Option<SystemTime>,
    /// The refresh in flight, and when it started.
    refreshing: Option<(tokio::task::JoinHandle<Refreshed>, Instant)>,
    retry_at: Option<Instant>,
    refreshes: u64,
    /// Credentials fetched by requests whose own were refused ([`Refresher`]).
    fresh: flume::Receiver<aws_credential_types::Credentials>,
    /// [`REFRESH_RETRY`] and [`REFRESH_DEADLINE`] (shorter in tests).
    pub(super) refresh_retry: Duration,
    pub(super) refresh_deadline: Duration,
    /// Refreshes that failed, panicked or were abandoned.
    refresh_failures: u64,
}

impl DirectPath {
    /// The path signing with `direct`'s credentials, which expire at `expiry`; requests whose
    /// credentials are refused fetch fresh ones from `provider` themselves.
    pub(super) fn new(
        direct: Direct,
        provider: SharedCredentialsProvider,
        expiry: Option<SystemTime>,
    ) -> Self {
        let (tx, fresh) = flume::unbounded();
        let direct = direct.with_refresher(Refresher {
            provider: provider.clone(),
            fresh: tx,
        });
        Self {
            direct: Arc::new(direct),
            provider,
            expiry,
            refreshing: None,
            retry_at: None,
            refreshes: 0,
            fresh,
            refresh_retry: REFRESH_RETRY,
            refresh_deadline: REFRESH_DEADLINE,
            refresh_failures: 0,
        }
    }

    /// The signer for the next requests, or `None` when they should take the SDK path (the
    /// credentials are about to expire). Applies a finished refresh and starts one when due.
    pub(super) fn signer(&mut self, runtime: &tokio::runtime::Handle) -> Option<Arc<Direct>> {
        // Newest last: credentials a refused request fetched.
        if let Some(creds) = self.fresh.try_iter().last() {
            self.apply(Ok(creds));
        }
        if let Some((task, started)) = self.refreshing.as_mut() {
            let res = match task.now_or_never() {
                Some(Ok(res)) => Some(res),
                Some(Err(e)) => Some(Err(format!("the refresh task failed: {e}"))),
                None if started.elapsed() >= self.refresh_deadline => {
                    task.abort();
                    Some(Err(format!(
                        "no answer from the credential source within {:.1}s",
                        self.refresh_deadline.as_secs_f64()
                    )))
                }
                None => None,
            };
            if let Some(res) = res {
                self.refreshing = None;
                self.apply(res);
            }
        }
        let Some(expiry) = self.expiry else {
            return Some(self.direct.clone());
        };
        let left = expiry
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        if left <= REFRESH_AHEAD
            && self.refreshing.is_none()
            && self.retry_at.is_none_or(|t| Instant::now() >= t)
        {
            let provider = self.provider.clone();
            let task = runtime.spawn(async move { current_credentials(&provider).await });
            self.refreshing = Some((task, Instant::now()));
        }
        (left > SDK_FALLBACK_WITHIN).then(|| self.direct.clone())
    }

    /// Takes a refresh's result: fresh credentials for the signer, or a time to try again.
    /// Credentials that themselves expire within [`REFRESH_AHEAD`] (a source handing out
    /// short-lived ones) are refreshed again only after [`REFRESH_RETRY`], not at every request.
    fn apply(&mut self, res: Refreshed) {
        match res {
            Ok(creds) => {
                self.expiry = creds.expiry();
                self.direct = Arc::new(self.direct.with_credentials(creds));
                self.refreshes += 1;
                let short = self.expiry.is_some_and(|t| {
                    t.duration_since(SystemTime::now())
                        .unwrap_or(Duration::ZERO)
                        <= REFRESH_AHEAD
                });
                self.retry_at = short.then(|| Instant::now() + self.refresh_retry);
                tracing::debug!("s3: direct data path has fresh credentials");
            }
            Err(e) => {
                tracing::warn!(error = %e, "s3: refreshing credentials failed; will retry");
                self.refresh_failures += 1;
                self.retry_at = Some(Instant::now() + self.refresh_retry);
            }
        }
    }

    pub(super) fn status(&self) -> serde_json::Value {
        serde_json::json!({
            "expires_in_secs": self.expiry.map(|t| t
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO)
                .as_secs()),
            "refreshes": self.refreshes,
            "refresh_failures": self.refresh_failures,
            "refreshing": self.refreshing.is_some(),
            "clock_offset_ms": self.direct.clock_offset_ms(),
        })
    }
}
