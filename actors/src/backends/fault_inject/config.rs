//! Configuration of the `fault_inject` adapter: which faults to inject, how often, and the seed.
//!
//! The wrapped adapter (`inner`) is not part of this struct: its type lives in the root crate,
//! which parses it with the same strict rules as a top-level adapter and opens it first.

use serde::{Deserialize, Serialize};

use crate::config::FieldError;

/// Longest latency or timeout accepted, in milliseconds (10 minutes).
pub(crate) const MAX_MS: u64 = 600_000;

/// The operations a storage performs, as named in the configuration and in the counters.
pub(crate) const OPS: [&str; 5] = ["put", "head", "get", "remove", "list"];

/// One number per storage operation (`put`, `head`, `get`, `remove`, `list`), each defaulting to 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PerOp<T> {
    /// Writes (`store`).
    #[serde(default)]
    pub put: T,
    /// Size probes (`lookup_and_lock` of keys the ledger does not know).
    #[serde(default)]
    pub head: T,
    /// Reads (`load`).
    #[serde(default)]
    pub get: T,
    /// Removals (`delete`, eviction).
    #[serde(default)]
    pub remove: T,
    /// Listings (`list keys`, index rebuilds do not go through it).
    #[serde(default)]
    pub list: T,
}

impl<T: Copy> PerOp<T> {
    /// The values with their operation names, in `OPS` order.
    pub(crate) fn named(&self) -> [(&'static str, T); 5] {
        [
            ("put", self.put),
            ("head", self.head),
            ("get", self.get),
            ("remove", self.remove),
            ("list", self.list),
        ]
    }
}

/// Added latency: `all` for every operation, overridden per operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Latency {
    /// Milliseconds added to every operation without its own value (default 0).
    #[serde(default)]
    pub all: u64,
    /// Milliseconds added to writes, instead of `all`.
    #[serde(default)]
    pub put: Option<u64>,
    /// Milliseconds added to size probes, instead of `all`.
    #[serde(default)]
    pub head: Option<u64>,
    /// Milliseconds added to reads, instead of `all`.
    #[serde(default)]
    pub get: Option<u64>,
    /// Milliseconds added to removals, instead of `all`.
    #[serde(default)]
    pub remove: Option<u64>,
    /// Milliseconds added to listings, instead of `all`.
    #[serde(default)]
    pub list: Option<u64>,
}

impl Latency {
    /// The latency of operation `op` (one of `OPS`), in milliseconds.
    pub fn of(&self, op: &str) -> u64 {
        let own = match op {
            "put" => self.put,
            "head" => self.head,
            "get" => self.get,
            "remove" => self.remove,
            "list" => self.list,
            _ => None,
        };
        own.unwrap_or(self.all)
    }
}

/// `type = "fault_inject"`: the faults injected into the wrapped adapter. Every fault is off by
/// default, so `{"type": "fault_inject", "inner": {…}}` behaves exactly like the inner adapter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct FaultInjectConfig {
    /// Probability, per item of a batch (per call for `list`), that the item fails with an
    /// injected I/O error before it reaches the inner store. Each in `[0, 1]`.
    #[serde(default)]
    pub error_rates: PerOp<f64>,
    /// Latency added before the reply (timers on the actor's arbiter, no thread is blocked).
    #[serde(default)]
    pub latency_ms: Latency,
    /// Probability, per call, that the inner store does the work but its reply is lost: the
    /// call then fails, every item with a connection error, once `reply_timeout_ms` has passed.
    /// In `[0, 1]`.
    #[serde(default)]
    pub drop_reply_rate: f64,
    /// How long a call with a lost reply waits before failing (default 1000 ms; 1..=600000).
    #[serde(default = "default_reply_timeout")]
    pub reply_timeout_ms: u64,
    /// Partial batches: when `n > 0`, items at positions `n, 2n, 3n, …` (1-based) of every
    /// `put`, `head`, `get` and `remove` batch fail before they reach the inner store.
    #[serde(default)]
    pub fail_every_nth_item: u32,
    /// Probability, per item, that a size is corrupted: a `head` reports the object's size + 1
    /// and a `get` answers a size mismatch (a miss) without touching the buffer. In `[0, 1]`.
    #[serde(default)]
    pub corrupt_size_rate: f64,
    /// Probability, per `get` item, that the body is changed in flight with its size kept: one
    /// byte (at a seeded offset) has a bit flipped on its way from the inner store, after the
    /// read and before the inner store's own check (the `fs` CRC32C catches it: a miss). A
    /// store with no check of its own serves the changed bytes. In `[0, 1]`.
    #[serde(default)]
    pub corrupt_body_rate: f64,
    /// Seed of the fault generator; the same seed and the same sequence of requests inject the
    /// same faults. Default: drawn at start and reported in `status`.
    #[serde(default)]
    pub seed: Option<u64>,
}

fn default_reply_timeout() -> u64 {
    1000
}

impl Default for FaultInjectConfig {
    /// Every fault off; a reply timeout of 1000 ms.
    fn default() -> Self {
        Self {
            error_rates: PerOp::default(),
            latency_ms: Latency::default(),
            drop_reply_rate: 0.0,
            reply_timeout_ms: default_reply_timeout(),
            fail_every_nth_item: 0,
            corrupt_size_rate: 0.0,
            corrupt_body_rate: 0.0,
            seed: None,
        }
    }
}

fn check_rate(field: &str, r: f64) -> Result<(), FieldError> {
    if r.is_finite() && (0.0..=1.0).contains(&r) {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("must be in [0, 1], got {r}"),
        ))
    }
}

fn check_ms(field: &str, ms: u64) -> Result<(), FieldError> {
    if ms <= MAX_MS {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("must be at most {MAX_MS} ms, got {ms}"),
        ))
    }
}

impl FaultInjectConfig {
    /// Checks every rate and duration.
    pub fn validate(&self) -> Result<(), FieldError> {
        for (op, r) in self.error_rates.named() {
            check_rate(&format!("error_rates.{op}"), r)?;
        }
        check_rate("drop_reply_rate", self.drop_reply_rate)?;
        check_rate("corrupt_size_rate", self.corrupt_size_rate)?;
        check_rate("corrupt_body_rate", self.corrupt_body_rate)?;
        check_ms("latency_ms.all", self.latency_ms.all)?;
        for op in OPS {
            check_ms(&format!("latency_ms.{op}"), self.latency_ms.of(op))?;
        }
        if self.reply_timeout_ms == 0 {
            return Err(FieldError::new("reply_timeout_ms", "must be at least 1 ms"));
        }
        check_ms("reply_timeout_ms", self.reply_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_name_the_field() {
        let mut c = FaultInjectConfig::default();
        assert!(c.validate().is_ok());
        c.error_rates.get = 1.5;
        let e = c.validate().unwrap_err();
        assert_eq!(e.field, "error_rates.get");
        assert_eq!(e.message, "must be in [0, 1], got 1.5");
        c.error_rates.get = 0.5;
        c.drop_reply_rate = f64::NAN;
        assert_eq!(c.validate().unwrap_err().field, "drop_reply_rate");
        c.drop_reply_rate = 0.0;
        c.latency_ms.remove = Some(MAX_MS + 1);
        assert_eq!(c.validate().unwrap_err().field, "latency_ms.remove");
        c.latency_ms.remove = None;
        c.reply_timeout_ms = 0;
        assert_eq!(c.validate().unwrap_err().field, "reply_timeout_ms");
    }

    #[test]
    fn latency_overrides() {
        let l = Latency {
            all: 5,
            get: Some(20),
            ..Default::default()
        };
        assert_eq!((l.of("get"), l.of("put"), l.of("list")), (20, 5, 5));
    }
}
