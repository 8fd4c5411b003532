//! The half-open circuit breaker of the remote adapters (`s3`, `hfbucket`).
//!
//! A [`Breaker`] is owned by its adapter's storage, and so by the backend actor: it is only
//! touched on the actor's thread (no lock, no atomics). The storage asks [`Breaker::admit`]
//! before it sends an operation's requests and hands the operation's results to
//! [`Breaker::observe`] when they are in.
//!
//! - **Closed**: requests go through. Failures that say something about the store's health
//!   ([`BackendError::counts_against_store`]: no connection, a timeout, 5xx or throttling after
//!   the retries) are counted; [`BREAKER_THRESHOLD`] in a row open it. A missing bucket
//!   ([`ErrorKind::BucketMissing`]) opens it at once: no request can succeed until someone
//!   creates the bucket. Any request that reaches the store and is answered (a "not found"
//!   too) resets the count.
//! - **Open**: every request fails at once with [`ErrorKind::Unavailable`], without network
//!   traffic, until the cooldown has passed.
//! - **Half-open**: one operation is let through as a probe; the others are refused while it
//!   runs. Its outcome alone decides: an answer closes the breaker, a counted failure opens it
//!   again. Refused operations change nothing (before this rule, the first request refused
//!   while the probe ran closed the breaker).
//!
//! # Health
//! The adapter is healthy when the breaker is closed **and** nothing says the store cannot
//! serve: a [`Breaker::probed`] health check (run by the storage when status is asked for)
//! that failed, or an operation whose every item was refused for permission (credentials
//! refused, access denied), leaves a *problem*, named in status and in [`Breaker::unhealthy`];
//! the next operation or health check answered without error clears it. Problems do not count
//! toward opening the breaker (a status request must not cut off traffic), except a missing
//! bucket, which opens it as on the data path. `kvtier_healthy` follows
//! [`Breaker::is_healthy`].

use std::time::{Duration, Instant};

use crate::storage::{BackendError, ErrorKind};

/// Consecutive counted failures that open the breaker.
pub(crate) const BREAKER_THRESHOLD: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Closed,
    Open { since: Instant },
    HalfOpen,
}

/// A circuit breaker. See the module docs.
#[derive(Debug)]
pub(crate) struct Breaker {
    /// The adapter type, for the log.
    adapter: &'static str,
    state: State,
    failures: u32,
    cooldown: Duration,
    opened: u64,
    fast_failures: u64,
    /// The failure that opened it last (for status).
    last_failure: Option<String>,
    /// Why the store cannot serve although the breaker is closed (see the module docs).
    problem: Option<String>,
    /// Health checks run, and how many failed.
    probes: u64,
    probe_failures: u64,
    /// Its state and transitions as metrics.
    metrics: crate::metrics::AdapterMetrics,
}

impl Breaker {
    /// A closed breaker of adapter type `adapter` that waits `cooldown` before a probe.
    pub(crate) fn new(adapter: &'static str, cooldown: Duration) -> Self {
        Self {
            adapter,
            state: State::Closed,
            failures: 0,
            cooldown,
            opened: 0,
            fast_failures: 0,
            last_failure: None,
            problem: None,
            probes: 0,
            probe_failures: 0,
            metrics: crate::metrics::AdapterMetrics::off(),
        }
    }

    /// Publishes its state and transitions to `metrics` from now on.
    pub(crate) fn attach_metrics(&mut self, metrics: crate::metrics::AdapterMetrics) {
        self.metrics = metrics;
        self.publish();
    }

    /// Publishes the state (a transition when it changed) and the health.
    fn publish(&self) {
        self.metrics.breaker(
            match self.state {
                State::Closed => 0,
                State::Open { .. } => 1,
                State::HalfOpen => 2,
            },
            self.is_healthy(),
        );
    }

    /// Whether the store can serve: the breaker is closed and no problem is known.
    pub(crate) fn is_healthy(&self) -> bool {
        self.unhealthy().is_none()
    }

    /// Why the adapter is unhealthy (`None` when it is healthy).
    pub(crate) fn unhealthy(&self) -> Option<String> {
        match self.state {
            State::Open { .. } => Some(format!(
                "{} circuit breaker open: {}",
                self.adapter,
                self.last_failure.as_deref().unwrap_or("no detail")
            )),
            State::HalfOpen => Some(format!(
                "{} circuit breaker half-open (a probe is deciding): {}",
                self.adapter,
                self.last_failure.as_deref().unwrap_or("no detail")
            )),
            State::Closed => self.problem.clone(),
        }
    }

    /// Whether a health check is worth running now: only while the breaker is closed (open or
    /// half-open, the breaker already says what is wrong, and no request may pass).
    pub(crate) fn wants_probe(&self) -> bool {
        self.state == State::Closed
    }

    /// Follows the outcome of a health check (a cheap request the storage sends when status is
    /// asked for): an answer clears the problem; a missing bucket opens the breaker; any other
    /// failure (unreachable, credentials refused, …) is the problem until an answer clears it.
    pub(crate) fn probed(&mut self, result: &Result<(), BackendError>) {
        self.probes += 1;
        match result {
            Ok(()) => self.problem = None,
            Err(e) if e.kind() == ErrorKind::BucketMissing => {
                self.probe_failures += 1;
                self.problem = Some(e.to_string());
                self.trip(&e.to_string());
            }
            Err(e) => {
                self.probe_failures += 1;
                self.problem = Some(format!("{} health check failed: {e}", self.adapter));
            }
        }
        self.publish();
    }

    /// Whether requests go through unhindered.
    pub(crate) fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// Lets an operation through, or refuses it (open, or half-open with the probe in flight).
    pub(crate) fn admit(&mut self) -> Result<(), BackendError> {
        match self.state {
            State::Closed => Ok(()),
            State::Open { since } if since.elapsed() >= self.cooldown => {
                self.state = State::HalfOpen;
                self.publish();
                tracing::info!(
                    adapter = self.adapter,
                    "circuit breaker half-open: sending a probe"
                );
                Ok(())
            }
            State::Open { since } => {
                self.fast_failures += 1;
                Err(BackendError::unavailable(format!(
                    "{} circuit breaker open after {} consecutive failures ({}); next probe in {:.1}s",
                    self.adapter,
                    self.failures,
                    self.last_failure.as_deref().unwrap_or("no detail"),
                    self.cooldown.saturating_sub(since.elapsed()).as_secs_f64()
                )))
            }
            State::HalfOpen => {
                self.fast_failures += 1;
                Err(BackendError::unavailable(format!(
                    "{} circuit breaker half-open: waiting for the probe",
                    self.adapter
                )))
            }
        }
    }

    /// Follows the outcome of one operation's results: a request that reached the store and
    /// was answered counts as ok (a "not found" or a refused permission too), a failure that
    /// [counts against the store](BackendError::counts_against_store) as a failure, one the
    /// breaker refused as refused.
    pub(crate) fn observe<'a, T: 'a>(
        &mut self,
        results: impl IntoIterator<Item = &'a Result<T, BackendError>>,
    ) {
        let (mut ok, mut failed, mut refused) = (0, 0, 0);
        let mut fatal = None;
        let mut denied = None;
        for r in results {
            match r {
                Ok(_) => ok += 1,
                Err(e) if e.kind() == ErrorKind::Unavailable => refused += 1,
                Err(e) if e.kind() == ErrorKind::Permission => denied = Some(e.to_string()),
                Err(e) if e.counts_against_store() => {
                    failed += 1;
                    self.last_failure = Some(e.to_string());
                    if e.kind() == ErrorKind::BucketMissing {
                        fatal = Some(e);
                    }
                }
                Err(_) => {}
            }
        }
        if ok > 0 {
            self.problem = None;
        } else if let Some(why) = denied {
            self.problem = Some(format!("requests refused: {why}"));
        }
        if let Some(e) = fatal {
            self.trip(&e.to_string());
            self.publish();
            return;
        }
        self.record(ok, failed, refused);
    }

    /// Follows the per-item results of one request (a batch that succeeds or fails as a
    /// whole): it counts once, by its best outcome (an answer, else a counted failure, else
    /// whatever else it was).
    pub(crate) fn observe_request<'a, T: 'a>(
        &mut self,
        results: impl IntoIterator<Item = &'a Result<T, BackendError>>,
    ) {
        let rank = |r: &Result<T, BackendError>| match r {
            Ok(_) => 0,
            Err(e) if e.counts_against_store() => 1,
            Err(_) => 2,
        };
        if let Some(best) = results.into_iter().min_by_key(|r| rank(r)) {
            self.observe(std::iter::once(best));
        }
    }

    /// Opens the breaker now.
    fn trip(&mut self, why: &str) {
        tracing::warn!(
            adapter = self.adapter,
            failures = self.failures,
            reason = why,
            "circuit breaker open"
        );
        self.failures = self.failures.max(1);
        self.last_failure = Some(why.to_owned());
        self.state = State::Open {
            since: Instant::now(),
        };
        self.opened += 1;
    }

    /// Follows one operation's outcome in counts. `refused` items were turned away by
    /// [`Breaker::admit`] itself and never reached the network: they must not close a
    /// half-open breaker (only the probe's own outcome may), nor count as failures.
    pub(crate) fn record(&mut self, ok: usize, failures: usize, refused: usize) {
        if ok > 0 {
            if self.state != State::Closed {
                tracing::info!(
                    adapter = self.adapter,
                    "circuit breaker closed: the store answers again"
                );
            }
            self.state = State::Closed;
            self.failures = 0;
            self.last_failure = None;
            self.problem = None;
        } else if failures > 0 {
            self.failures = self.failures.saturating_add(failures as u32);
            let reopen = self.state == State::HalfOpen;
            if reopen || (self.state == State::Closed && self.failures >= BREAKER_THRESHOLD) {
                let why = self.last_failure.clone().unwrap_or_default();
                self.trip(&why);
            }
        } else if refused > 0 {
            // Turned away by the breaker: nothing was learnt about the store.
        } else if self.state == State::HalfOpen {
            // The probe reached the store, even if the request itself was refused.
            self.state = State::Closed;
            self.failures = 0;
            self.last_failure = None;
        }
        self.publish();
    }

    /// `closed`, `open` or `half-open`.
    pub(crate) fn name(&self) -> &'static str {
        match self.state {
            State::Closed => "closed",
            State::Open { .. } => "open",
            State::HalfOpen => "half-open",
        }
    }

    /// Its state for an adapter's status details.
    pub(crate) fn status(&self) -> serde_json::Value {
        serde_json::json!({
            "state": self.name(),
            "consecutive_failures": self.failures,
            "times_opened": self.opened,
            "fast_failures": self.fast_failures,
            "cooldown_secs": self.cooldown.as_secs_f64(),
            "last_failure": self.last_failure,
            "health_checks": self.probes,
            "health_check_failures": self.probe_failures,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(cooldown: Duration) -> Breaker {
        Breaker::new("test", cooldown)
    }

    #[test]
    fn opens_after_three_failures() {
        let mut b = breaker(Duration::from_secs(60));
        b.record(0, 2, 0);
        assert_eq!(b.name(), "closed");
        b.record(0, 1, 0);
        assert_eq!(b.name(), "open");
        assert!(b.admit().is_err());
        assert_eq!(b.fast_failures, 1);
    }

    /// 5xx and throttling after the retries count as failures; a 403 or 404 is an answer.
    #[test]
    fn server_errors_count_and_answers_do_not() {
        let mut b = breaker(Duration::from_secs(60));
        let err = |k| Err::<(), _>(BackendError::new(k, "get", "x"));
        b.observe(&[err(ErrorKind::Server), err(ErrorKind::Throttled)]);
        assert_eq!(b.failures, 2);
        b.observe(&[err(ErrorKind::Permission)]);
        assert_eq!(
            b.failures, 2,
            "an answer that is not a failure of the store"
        );
        b.observe(&[err(ErrorKind::Timeout)]);
        assert_eq!(b.name(), "open");
    }

    /// One batch request whose every item failed counts once, not once per item.
    #[test]
    fn a_failed_batch_request_counts_once() {
        let mut b = breaker(Duration::from_secs(60));
        let failed: Vec<Result<(), _>> = (0..6)
            .map(|_| Err(BackendError::new(ErrorKind::Server, "put", "x")))
            .collect();
        b.observe_request(&failed);
        assert_eq!((b.name(), b.failures), ("closed", 1));
        b.observe_request(&[Ok(()), failed[0].clone()]);
        assert_eq!(b.failures, 0, "an item that landed: the store answered");
    }

    /// A missing bucket opens the breaker at once and is named in its status and refusals.
    #[test]
    fn a_missing_bucket_opens_at_once() {
        let mut b = breaker(Duration::from_secs(60));
        b.observe(&[Err::<(), _>(BackendError::new(
            ErrorKind::BucketMissing,
            "get",
            "bucket \"kv\" does not exist",
        ))]);
        assert_eq!(b.name(), "open");
        let refused = b.admit().unwrap_err();
        assert!(refused.to_string().contains("bucket \"kv\""), "{refused}");
        assert!(b.status()["last_failure"]
            .as_str()
            .unwrap()
            .contains("does not exist"));
    }

    /// Requests refused while the probe is in flight must not close the breaker: only the
    /// probe's outcome decides (before this was fixed, the first refused request closed it, and
    /// requests went to the dead store again, slowly, until three more failures).
    #[test]
    fn refused_requests_do_not_close_a_half_open_breaker() {
        let mut b = breaker(Duration::ZERO);
        b.record(0, 3, 0);
        assert_eq!(b.name(), "open");
        assert!(
            b.admit().is_ok(),
            "the probe goes through after the cooldown"
        );
        assert_eq!(b.name(), "half-open");
        assert!(b.admit().is_err(), "others wait for the probe");
        b.record(0, 0, 1);
        assert_eq!(b.name(), "half-open");
        // The probe fails: open again.
        b.record(0, 1, 0);
        assert_eq!(b.name(), "open");
        // Next probe reaches the store (a 404 or a 403 counts): closed.
        assert!(b.admit().is_ok());
        b.record(0, 0, 0);
        assert_eq!(b.name(), "closed");
        assert_eq!(b.failures, 0);
    }

    /// The breaker's state and transitions reach its metrics.
    #[test]
    fn breaker_state_and_transitions_are_metrics() {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = crate::metrics::Metrics::register(&mut registry);
        let mut b = breaker(Duration::ZERO);
        b.attach_metrics(metrics.adapter(0, "s3", None));
        let read = |registry: &prometheus_client::registry::Registry, name: &str| -> String {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
            text.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.rsplit_once(' '))
                .map(|(_, v)| v.to_owned())
                .unwrap_or_default()
        };
        b.record(0, 3, 0);
        assert_eq!(read(&registry, "kvtier_breaker_state{"), "1");
        assert_eq!(read(&registry, "kvtier_healthy{"), "0");
        assert!(b.admit().is_ok());
        assert_eq!(read(&registry, "kvtier_breaker_state{"), "2");
        b.record(1, 0, 0);
        assert_eq!(read(&registry, "kvtier_breaker_state{"), "0");
        assert_eq!(read(&registry, "kvtier_breaker_transitions_total{"), "3");
        assert_eq!(read(&registry, "kvtier_healthy{"), "1");
    }
}
