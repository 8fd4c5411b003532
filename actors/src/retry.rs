//! One retry policy for every remote store client: the S3 direct data path
//! (`backends::s3::direct`) and the Hugging Face Hub client (`backends::hfbucket::hub`).
//!
//! A [`RetryPolicy`] holds the numbers (attempts, backoff, the cap on `Retry-After`, how many
//! timed-out attempts may be retried); [`Attempts`] follows one request through them and
//! decides, after each failed attempt, whether to try again and how long to wait first. What
//! is retryable is decided here and nowhere else:
//!
//! - a transport failure (refused, reset, DNS, TLS) before any answer: retried;
//! - an answer of 408, 429 or 5xx: retried, after the server's `Retry-After` when it sent one
//!   (capped at [`RetryPolicy::max_retry_after`]), else after the backoff;
//! - an attempt that timed out: retried at most [`RetryPolicy::timeout_retries`] times, and
//!   only for idempotent requests (GET, HEAD, the Hub's reads). A PUT that timed out may still
//!   be landing, and sending its body again doubles the wait on a frozen store before the
//!   breaker hears of it; it is reported at once (the caller may store again);
//! - any other answer: final.
//!
//! Every retry counts against [`RetryPolicy::max_attempts`], and every request against one total
//! deadline, [`RetryPolicy::retry_timeout`] (as `object_store`'s `RetryConfig::retry_timeout`),
//! measured from its first attempt: no retry is started whose wait would end past it, and the
//! clients cap each attempt's own timeout at what is left ([`Attempts::attempt_timeout`]), so
//! no request outlives its deadline, whatever the attempt count, the backoff and `Retry-After`
//! say. A request given up for its deadline says so ([`Attempts::deadline_passed`],
//! [`Attempts::give_up`]). The backoff is exponential with
//! full jitter (a random wait in `[0, min(initial × 2ⁿ⁻¹, max_backoff)]`), as AWS's standard
//! retry strategy and `object_store` do, so clients that failed together do not retry together.
//!
//! The loops that send the attempts stay with their clients (one is async on tokio, the other
//! blocking on a worker thread); they only ask [`Attempts::next`].

use std::time::{Duration, Instant, SystemTime};

/// The numbers of a retry policy. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetryPolicy {
    /// Attempts per request, the first included.
    pub max_attempts: u32,
    /// The cap of the first retry's backoff (doubled for every further retry).
    pub initial_backoff: Duration,
    /// The largest backoff cap.
    pub max_backoff: Duration,
    /// The longest wait a server's `Retry-After` can ask for.
    pub max_retry_after: Duration,
    /// Retries after a timed-out attempt (idempotent requests only).
    pub timeout_retries: u32,
    /// The total time one request may take, every attempt and wait included (configured per
    /// adapter as `retry_timeout_secs`; default [`DEFAULT_RETRY_TIMEOUT`]).
    pub retry_timeout: Duration,
}

/// The default of `retry_timeout_secs` (s3 and hfbucket): 120 s, two of S3's 60 s attempts,
/// and below `object_store`'s 180 s.
pub(crate) const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(120);

/// [`DEFAULT_RETRY_TIMEOUT`] in seconds (the serde default of `retry_timeout_secs`).
pub(crate) fn default_retry_timeout_secs() -> f64 {
    DEFAULT_RETRY_TIMEOUT.as_secs_f64()
}

impl RetryPolicy {
    /// S3: 3 attempts, backoff up to 1 s × 2ⁿ⁻¹ (at most 20 s) as the AWS SDK's standard
    /// strategy, `Retry-After` up to 20 s, one retry after a timeout.
    pub(crate) const S3: RetryPolicy = RetryPolicy {
        max_attempts: 3,
        initial_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(20),
        max_retry_after: Duration::from_secs(20),
        timeout_retries: 1,
        retry_timeout: DEFAULT_RETRY_TIMEOUT,
    };

    /// The Hub: 5 attempts, backoff up to 200 ms × 2ⁿ⁻¹ (at most 10 s), `Retry-After` up to
    /// 10 s, one retry after a timeout.
    pub(crate) const HUB: RetryPolicy = RetryPolicy {
        max_attempts: 5,
        initial_backoff: Duration::from_millis(200),
        max_backoff: Duration::from_secs(10),
        max_retry_after: Duration::from_secs(10),
        timeout_retries: 1,
        retry_timeout: DEFAULT_RETRY_TIMEOUT,
    };

    /// This policy with the total deadline `retry_timeout`.
    pub(crate) const fn with_retry_timeout(mut self, retry_timeout: Duration) -> Self {
        self.retry_timeout = retry_timeout;
        self
    }

    /// The backoff before retry `n` (1-based): full jitter under the cap.
    pub(crate) fn backoff(&self, n: u32) -> Duration {
        self.backoff_cap(n).mul_f64(rand::random::<f64>())
    }

    /// The cap of retry `n`'s backoff.
    pub(crate) fn backoff_cap(&self, n: u32) -> Duration {
        self.initial_backoff
            .saturating_mul(1u32 << n.saturating_sub(1).min(16))
            .min(self.max_backoff)
    }
}

/// How one attempt failed, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// No answer: the connection failed (refused, reset, DNS, TLS, a body cut off).
    Connection,
    /// No complete answer within the attempt timeout.
    TimedOut,
    /// An answer with this HTTP status.
    Status(u16),
}

impl Outcome {
    /// Its label in the retry metric (`kvtier_retries_total{cause}`).
    pub(crate) fn label(self) -> &'static str {
        match self {
            Outcome::Connection => "connection",
            Outcome::TimedOut => "timeout",
            Outcome::Status(408) => "timeout",
            Outcome::Status(429) | Outcome::Status(503) => "throttled",
            Outcome::Status(_) => "server_error",
        }
    }
}

/// Whether an answer with `status` is worth another attempt: 408, 429 and 5xx.
pub(crate) fn retryable_status(status: u16) -> bool {
    status == 408 || status == 429 || (500..=599).contains(&status)
}

/// One request's attempts under a policy.
#[derive(Debug)]
pub(crate) struct Attempts {
    policy: RetryPolicy,
    idempotent: bool,
    /// Attempts made so far.
    made: u32,
    timeouts_retried: u32,
    /// When the first attempt started.
    started: Instant,
    /// The last failure was final because the deadline passed.
    deadline_passed: bool,
}

impl Attempts {
    /// The first attempt of a request; `idempotent` requests may be retried after a timeout.
    pub(crate) fn new(policy: RetryPolicy, idempotent: bool) -> Self {
        Self {
            policy,
            idempotent,
            made: 1,
            timeouts_retried: 0,
            started: Instant::now(),
            deadline_passed: false,
        }
    }

    /// What is left of the request's deadline.
    pub(crate) fn remaining(&self) -> Duration {
        self.policy
            .retry_timeout
            .saturating_sub(self.started.elapsed())
    }

    /// The timeout of the next attempt: `per_attempt`, or what is left of the deadline when
    /// that is less.
    pub(crate) fn attempt_timeout(&self, per_attempt: Duration) -> Duration {
        per_attempt.min(self.remaining())
    }

    /// Whether the request was given up because its deadline passed (an attempt cut short by
    /// it, or a retry that would have started after it).
    pub(crate) fn deadline_passed(&self) -> bool {
        self.deadline_passed || self.remaining().is_zero()
    }

    /// The final error's message, with the deadline named when it is why the request ended.
    pub(crate) fn give_up(&self, error: String) -> String {
        if self.deadline_passed() {
            format!(
                "{error}; gave up after {} attempt(s): the request's deadline passed (retry_timeout_secs = {}s)",
                self.made,
                self.policy.retry_timeout.as_secs_f64()
            )
        } else {
            error
        }
    }

    /// The attempt under way (1-based).
    pub(crate) fn number(&self) -> u32 {
        self.made
    }

    /// After attempt [`Attempts::number`] failed with `outcome`: the wait before the next
    /// attempt, or `None` when the failure is final (not retryable, or no attempts left).
    /// `retry_after` is the server's `Retry-After`, if it sent one.
    pub(crate) fn next(
        &mut self,
        outcome: Outcome,
        retry_after: Option<Duration>,
    ) -> Option<Duration> {
        let retryable = match outcome {
            Outcome::Connection => true,
            Outcome::TimedOut => {
                self.idempotent && self.timeouts_retried < self.policy.timeout_retries
            }
            Outcome::Status(s) => retryable_status(s),
        };
        if !retryable || self.made >= self.policy.max_attempts {
            return None;
        }
        let wait = match retry_after {
            Some(d) => d.min(self.policy.max_retry_after),
            None => self.policy.backoff(self.made),
        };
        if wait >= self.remaining() {
            // The retry could not even start before the deadline.
            self.deadline_passed = true;
            return None;
        }
        if outcome == Outcome::TimedOut {
            self.timeouts_retried += 1;
        }
        self.made += 1;
        Some(wait)
    }
}

/// A `Retry-After` value: delay seconds (`120`, also `1.5`) or an HTTP date (the wait until
/// then, zero when it has passed). `None` when it parses as neither.
pub(crate) fn parse_retry_after(value: &str) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(1e9)));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(150),
            max_retry_after: Duration::from_secs(2),
            timeout_retries: 1,
            retry_timeout: Duration::from_secs(3600),
        }
    }

    /// A retry whose wait would end past the deadline is not made, and the error says why;
    /// attempts are cut to what is left.
    #[test]
    fn the_deadline_bounds_retries_and_attempts() {
        let p = policy().with_retry_timeout(Duration::from_secs(5));
        let mut a = Attempts::new(p, true);
        assert!(a.attempt_timeout(Duration::from_secs(60)) <= Duration::from_secs(5));
        assert_eq!(
            a.attempt_timeout(Duration::from_millis(10)),
            Duration::from_millis(10)
        );
        assert!(!a.deadline_passed());
        assert_eq!(a.give_up("boom".into()), "boom", "not the deadline's doing");
        // Retry-After (capped at 2 s) fits within 5 s: retried.
        assert_eq!(
            a.next(Outcome::Status(503), Some(Duration::from_secs(2))),
            Some(Duration::from_secs(2))
        );
        // With a 1 s deadline, a 2 s wait cannot fit: final, and said so.
        let mut a = Attempts::new(p.with_retry_timeout(Duration::from_secs(1)), true);
        assert_eq!(
            a.next(Outcome::Status(503), Some(Duration::from_secs(2))),
            None
        );
        assert!(a.deadline_passed());
        let msg = a.give_up("HTTP 503".into());
        assert!(
            msg.contains("deadline passed") && msg.contains("retry_timeout_secs = 1s"),
            "{msg}"
        );
        // A deadline already passed: nothing is retried, attempts get no time.
        let a = Attempts::new(p.with_retry_timeout(Duration::ZERO), true);
        assert_eq!(a.attempt_timeout(Duration::from_secs(1)), Duration::ZERO);
        assert!(a.deadline_passed());
    }

    #[test]
    fn what_is_retried() {
        for (outcome, retried) in [
            (Outcome::Connection, true),
            (Outcome::Status(500), true),
            (Outcome::Status(503), true),
            (Outcome::Status(429), true),
            (Outcome::Status(408), true),
            (Outcome::Status(403), false),
            (Outcome::Status(404), false),
            (Outcome::Status(400), false),
        ] {
            let mut a = Attempts::new(policy(), false);
            assert_eq!(a.next(outcome, None).is_some(), retried, "{outcome:?}");
        }
    }

    #[test]
    fn attempts_are_bounded_and_backoff_capped() {
        let mut a = Attempts::new(policy(), true);
        let w1 = a.next(Outcome::Status(500), None).unwrap();
        assert!(w1 <= Duration::from_millis(100));
        assert_eq!(a.number(), 2);
        let w2 = a.next(Outcome::Connection, None).unwrap();
        assert!(w2 <= Duration::from_millis(150), "capped at max_backoff");
        assert_eq!(a.next(Outcome::Connection, None), None, "3 attempts in all");
    }

    #[test]
    fn timeouts_are_retried_once_and_only_when_idempotent() {
        let mut put = Attempts::new(policy(), false);
        assert_eq!(put.next(Outcome::TimedOut, None), None);
        let mut get = Attempts::new(policy(), true);
        assert!(get.next(Outcome::TimedOut, None).is_some());
        assert_eq!(get.next(Outcome::TimedOut, None), None, "only once");
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let mut a = Attempts::new(policy(), true);
        assert_eq!(
            a.next(Outcome::Status(429), Some(Duration::from_millis(700))),
            Some(Duration::from_millis(700))
        );
        assert_eq!(
            a.next(Outcome::Status(503), Some(Duration::from_secs(3600))),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(parse_retry_after(" 3 "), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("soon"), None);
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO),
            "a date in the past: no wait"
        );
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
        let wait = parse_retry_after(&later).unwrap();
        assert!(wait > Duration::from_secs(25) && wait <= Duration::from_secs(30));
    }

    #[test]
    fn backoff_caps_double_up_to_the_limit() {
        let p = RetryPolicy::S3;
        assert_eq!(p.backoff_cap(1), Duration::from_secs(1));
        assert_eq!(p.backoff_cap(3), Duration::from_secs(4));
        assert_eq!(p.backoff_cap(40), Duration::from_secs(20));
        for n in 1..=8 {
            assert!(p.backoff(n) <= p.backoff_cap(n));
        }
    }
}
