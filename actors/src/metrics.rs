//! Prometheus metrics, recorded by the actors themselves (backend, eviction actor, storages).
//!
//! [`Metrics::register`] adds every family to a `prometheus-client` [`Registry`] under the
//! `kvtier_` prefix (a host's own registry, or the one [`crate`]'s runtime keeps); then
//! [`Metrics::adapter`] resolves one adapter's label set once, into an [`AdapterMetrics`] whose
//! handles are atomics the owning actor bumps without any lookup. Every series of an adapter
//! carries `adapter` (its index), `adapter_type` (`s3`, `fs`, …) and `name` (host-chosen;
//! the type when unset).
//!
//! Invariants:
//! * **Off costs nothing.** [`AdapterMetrics::off`] holds no handles; every recording method
//!   is then one branch on `None`. On, a recording is a relaxed atomic add per counter (a
//!   histogram observation per request, not per key).
//! * **Bounded label sets.** Labels come from fixed vocabularies (operation, error kind,
//!   breaker state, Hub route, retry cause) and the configured adapters, except the cache salt:
//!   [`AdapterMetrics::set_salt_usage`] keeps at most 16 salts (the largest by
//!   bytes) and sums the rest into `cache_salt="_other"`; salts that leave the top are removed.
//! * **Names are pinned** by a unit test (`metrics_names` in this file); LMCache MP's
//!   equivalents are listed in docs/metrics.md. A labelled family shows in the exposition once it
//!   has a series (a failure kind that never happened has none).
//! * No secret ever becomes a label: labels are indexes, type names, host-chosen names,
//!   vocabulary words and cache salts (which LMCache puts in object names anyway).

use std::collections::HashMap;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use crate::storage::ErrorKind;

/// Most cache salts given a series of their own in `kvtier_usage_bytes_by_salt`.
pub(crate) const MAX_SALT_SERIES: usize = 16;

/// The label set of one adapter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct AdapterLabels {
    /// Position of the adapter in the configuration.
    pub adapter: String,
    /// Its type (`s3`, `hfbucket`, `fs`, `memory`, `fault_inject`).
    pub adapter_type: String,
    /// The host-chosen name (the type when unset).
    pub name: String,
}

/// An adapter's labels and one more (operation, error kind, route, cause, result or salt).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct WithLabel {
    adapter: AdapterLabels,
    label: (&'static str, String),
}

impl EncodeLabelSet for WithLabel {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelSetEncoder,
    ) -> Result<(), std::fmt::Error> {
        self.adapter.encode(encoder)?;
        [(self.label.0, self.label.1.as_str())].encode(encoder)
    }
}

/// The operations a backend serves, as the `op` label spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Store (put).
    Store,
    /// Lookup and lock (head).
    Lookup,
    /// Load (get).
    Load,
    /// Delete (also eviction's removals).
    Delete,
}

impl Op {
    const ALL: [Op; 4] = [Op::Store, Op::Lookup, Op::Load, Op::Delete];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Store => "store",
            Op::Lookup => "lookup",
            Op::Load => "load",
            Op::Delete => "delete",
        }
    }
}

/// Every family, registered once; clones share the series.
#[derive(Clone, Debug)]
struct Families {
    counters: HashMap<&'static str, Family<AdapterLabels, Counter>>,
    labelled: HashMap<&'static str, Family<WithLabel, Counter>>,
    gauges: HashMap<&'static str, Family<AdapterLabels, Gauge>>,
    labelled_gauges: HashMap<&'static str, Family<WithLabel, Gauge>>,
    duration: Family<WithLabel, Histogram>,
}

/// Counters with the adapter's labels only: (name, help).
const COUNTERS: [(&str, &str); 21] = [
    (
        "store_tasks",
        "Store requests submitted (LMCache: l2_store_tasks)",
    ),
    (
        "store_keys",
        "Keys submitted for store (LMCache: l2_store_keys)",
    ),
    (
        "store_completed",
        "Store requests completed (LMCache: l2_store_completed)",
    ),
    (
        "store_succeeded_keys",
        "Keys stored (LMCache: l2_store_succeeded_keys)",
    ),
    ("stored_bytes", "Bytes stored"),
    (
        "lookup_tasks",
        "Lookup-and-lock requests (LMCache: l2_prefetch_lookups)",
    ),
    (
        "lookup_keys",
        "Keys looked up (LMCache: l2_prefetch_lookup_keys)",
    ),
    (
        "lookup_hit_keys",
        "Keys found and locked (LMCache: l2_prefetch_hit_keys)",
    ),
    (
        "load_tasks",
        "Load requests submitted (LMCache: l2_prefetch_load_tasks)",
    ),
    (
        "load_keys",
        "Keys submitted for load (LMCache: l2_prefetch_load_keys)",
    ),
    (
        "load_completed",
        "Load requests completed (LMCache: l2_load_completed)",
    ),
    (
        "loaded_keys",
        "Keys loaded (LMCache: l2_prefetch_loaded_keys)",
    ),
    (
        "load_missed_keys",
        "Keys a load found absent or of another size",
    ),
    ("loaded_bytes", "Bytes loaded"),
    (
        "delete_tasks",
        "Delete requests (host deletes and eviction rounds)",
    ),
    ("deleted_keys", "Keys removed by deletes and evictions"),
    (
        "eviction_rounds",
        "Eviction rounds that asked the backend to remove keys",
    ),
    (
        "evicted_keys",
        "Keys removed by eviction (LMCache: l2_evicted_objects)",
    ),
    ("evicted_bytes", "Bytes removed by eviction"),
    ("breaker_transitions", "Circuit breaker state changes"),
    (
        "corrupt_objects",
        "Objects whose bytes did not match their stored checksum (loads and scrubs)",
    ),
];

/// Counters with one vocabulary label: (name, label, help).
const LABELLED: [(&str, &str, &str); 8] = [
    (
        "store_failed_keys",
        "kind",
        "Keys whose store failed, by error kind (LMCache: l2_store_failed_keys)",
    ),
    (
        "load_failed_keys",
        "kind",
        "Keys whose load failed, by error kind (LMCache: l2_prefetch_failed_keys)",
    ),
    (
        "lookup_failed_keys",
        "kind",
        "Keys whose lookup probe failed, by error kind",
    ),
    (
        "delete_failed_keys",
        "kind",
        "Keys whose delete failed, by error kind",
    ),
    ("retries", "cause", "Requests retried, by cause"),
    (
        "fleet_write_waits",
        "outcome",
        "[fleet]: writes that waited for room in the full bucket, by outcome (written: room came; over: written past the capacity after fleet.write_wait_ms)",
    ),
    (
        "hub_requests",
        "route",
        "Requests to the Hugging Face Hub, by route",
    ),
    (
        "hf_metadata_cache",
        "result",
        "hfbucket metadata cache lookups, by result (hit, miss)",
    ),
];

/// Gauges with the adapter's labels only: (name, help).
const GAUGES: [(&str, &str); 8] = [
    ("locked_keys", "Keys locked by lookups and not yet unlocked"),
    ("usage_bytes", "Bytes the adapter's ledger accounts"),
    ("usage_keys", "Keys the adapter's ledger accounts"),
    ("capacity_bytes", "Configured capacity (0: unbounded)"),
    (
        "breaker_state",
        "Circuit breaker: 0 closed, 1 open, 2 half-open",
    ),
    ("healthy", "1 when the adapter reports itself healthy"),
    (
        "fleet_joined",
        "[fleet]: 1 joined to the fleet index, 0 serving alone, -1 no fleet",
    ),
    (
        "fleet_usage_bytes",
        "[fleet]: bytes of the whole fleet on the bucket, as the index last said",
    ),
];

/// Gauges with one label: (name, label, help).
const LABELLED_GAUGES: [(&str, &str, &str); 3] = [
    (
        "inflight_requests",
        "op",
        "Requests in flight, by operation",
    ),
    (
        "inflight_bytes",
        "op",
        "Bytes in flight (store and load), by operation",
    ),
    (
        "usage_bytes_by_salt",
        "cache_salt",
        "Ledger bytes per cache salt (largest salts; the rest in _other)",
    ),
];

impl Families {
    fn register(registry: &mut Registry) -> Self {
        let mut f = Families {
            counters: HashMap::new(),
            labelled: HashMap::new(),
            gauges: HashMap::new(),
            labelled_gauges: HashMap::new(),
            duration: Family::new_with_constructor(duration_histogram),
        };
        for (name, help) in COUNTERS {
            let fam = Family::<AdapterLabels, Counter>::default();
            registry.register(name, help, fam.clone());
            f.counters.insert(name, fam);
        }
        for (name, _, help) in LABELLED {
            let fam = Family::<WithLabel, Counter>::default();
            registry.register(name, help, fam.clone());
            f.labelled.insert(name, fam);
        }
        for (name, help) in GAUGES {
            let fam = Family::<AdapterLabels, Gauge>::default();
            registry.register(name, help, fam.clone());
            f.gauges.insert(name, fam);
        }
        for (name, _, help) in LABELLED_GAUGES {
            let fam = Family::<WithLabel, Gauge>::default();
            registry.register(name, help, fam.clone());
            f.labelled_gauges.insert(name, fam);
        }
        registry.register_with_unit(
            "request_duration",
            "Request latency by operation, from the backend receiving it to its reply",
            Unit::Seconds,
            f.duration.clone(),
        );
        f
    }
}

/// 100 µs to ~105 s, ×2 per bucket.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 21))
}

/// `registry` in the Prometheus text format (OpenMetrics), as `/metrics` serves it.
pub fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry)
        .expect("writing to a String does not fail");
    text
}

/// The registered families; [`Metrics::adapter`] hands out per-adapter handles.
#[derive(Clone, Debug)]
pub struct Metrics {
    families: Arc<Families>,
}

impl Metrics {
    /// Registers every kvtier family in `registry` under the prefix `kvtier` (pass a
    /// sub-registry to nest it further).
    pub fn register(registry: &mut Registry) -> Self {
        let sub = registry.sub_registry_with_prefix("kvtier");
        Self {
            families: Arc::new(Families::register(sub)),
        }
    }

    /// The handles of one adapter; `name` defaults to `kind` when `None`.
    pub fn adapter(&self, index: usize, kind: &str, name: Option<&str>) -> AdapterMetrics {
        let labels = AdapterLabels {
            adapter: index.to_string(),
            adapter_type: kind.to_owned(),
            name: name.unwrap_or(kind).to_owned(),
        };
        let f = &self.families;
        let c = |n: &str| f.counters[n].get_or_create_owned(&labels);
        let g = |n: &str| f.gauges[n].get_or_create_owned(&labels);
        let with = |label: &'static str, v: &str| WithLabel {
            adapter: labels.clone(),
            label: (label, v.to_owned()),
        };
        let per_op = |fam: &Family<WithLabel, Gauge>| -> [Gauge; 4] {
            Op::ALL.map(|op| fam.get_or_create_owned(&with("op", op.as_str())))
        };
        let h = Handles {
            store_tasks: c("store_tasks"),
            store_keys: c("store_keys"),
            store_completed: c("store_completed"),
            store_succeeded_keys: c("store_succeeded_keys"),
            stored_bytes: c("stored_bytes"),
            lookup_tasks: c("lookup_tasks"),
            lookup_keys: c("lookup_keys"),
            lookup_hit_keys: c("lookup_hit_keys"),
            load_tasks: c("load_tasks"),
            load_keys: c("load_keys"),
            load_completed: c("load_completed"),
            loaded_keys: c("loaded_keys"),
            load_missed_keys: c("load_missed_keys"),
            loaded_bytes: c("loaded_bytes"),
            delete_tasks: c("delete_tasks"),
            deleted_keys: c("deleted_keys"),
            eviction_rounds: c("eviction_rounds"),
            evicted_keys: c("evicted_keys"),
            evicted_bytes: c("evicted_bytes"),
            breaker_transitions: c("breaker_transitions"),
            corrupt_objects: c("corrupt_objects"),
            locked_keys: g("locked_keys"),
            usage_bytes: g("usage_bytes"),
            usage_keys: g("usage_keys"),
            capacity_bytes: g("capacity_bytes"),
            breaker_state: g("breaker_state"),
            healthy: g("healthy"),
            fleet_joined: g("fleet_joined"),
            fleet_usage_bytes: g("fleet_usage_bytes"),
            inflight_requests: per_op(&f.labelled_gauges["inflight_requests"]),
            inflight_bytes: per_op(&f.labelled_gauges["inflight_bytes"]),
            duration: Op::ALL.map(|op| f.duration.get_or_create_owned(&with("op", op.as_str()))),
            families: f.clone(),
            labels: labels.clone(),
        };
        h.healthy.set(1);
        h.fleet_joined.set(-1);
        AdapterMetrics(Some(Arc::new(h)))
    }
}

/// One adapter's resolved series.
#[derive(Debug)]
struct Handles {
    store_tasks: Counter,
    store_keys: Counter,
    store_completed: Counter,
    store_succeeded_keys: Counter,
    stored_bytes: Counter,
    lookup_tasks: Counter,
    lookup_keys: Counter,
    lookup_hit_keys: Counter,
    load_tasks: Counter,
    load_keys: Counter,
    load_completed: Counter,
    loaded_keys: Counter,
    load_missed_keys: Counter,
    loaded_bytes: Counter,
    delete_tasks: Counter,
    deleted_keys: Counter,
    eviction_rounds: Counter,
    evicted_keys: Counter,
    evicted_bytes: Counter,
    breaker_transitions: Counter,
    corrupt_objects: Counter,
    locked_keys: Gauge,
    usage_bytes: Gauge,
    usage_keys: Gauge,
    capacity_bytes: Gauge,
    breaker_state: Gauge,
    healthy: Gauge,
    fleet_joined: Gauge,
    fleet_usage_bytes: Gauge,
    inflight_requests: [Gauge; 4],
    inflight_bytes: [Gauge; 4],
    duration: [Histogram; 4],
    families: Arc<Families>,
    labels: AdapterLabels,
}

impl Handles {
    fn labelled(&self, family: &str, label: &'static str, value: &str) -> Counter {
        self.families.labelled[family].get_or_create_owned(&WithLabel {
            adapter: self.labels.clone(),
            label: (label, value.to_owned()),
        })
    }
}

/// A request being timed: its operation, start and bytes (see [`AdapterMetrics::start`]),
/// and its `tracing` span, which closes when the request is finished.
#[derive(Debug)]
#[must_use = "finish the request with AdapterMetrics::finish"]
pub struct Started {
    op: Op,
    at: Option<std::time::Instant>,
    bytes: u64,
    span: tracing::Span,
}

impl Started {
    /// Attaches the request's span (see [`Started::outcome`]).
    pub(crate) fn with_span(mut self, span: tracing::Span) -> Self {
        self.span = span;
        self
    }

    /// Records the outcome in the span: keys that succeeded (stored, hit, loaded, removed)
    /// and keys that failed or missed.
    pub(crate) fn outcome(&self, ok: usize, failed: usize) {
        self.span.record("ok", ok);
        self.span.record("failed", failed);
    }
}

/// The series of one adapter, or nothing (metrics off). Cloning shares the series.
#[derive(Clone, Debug, Default)]
pub struct AdapterMetrics(Option<Arc<Handles>>);

impl AdapterMetrics {
    /// Metrics off: every method returns at once.
    pub fn off() -> Self {
        Self(None)
    }

    /// Whether series are recorded.
    pub(crate) fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// A request of `op` with `keys` keys and `bytes` bytes (stores and loads) arrives: counts
    /// it as submitted and in flight.
    pub fn start(&self, op: Op, keys: usize, bytes: u64) -> Started {
        let Some(h) = &self.0 else {
            return Started {
                op,
                at: None,
                bytes,
                span: tracing::Span::none(),
            };
        };
        let keys = keys as u64;
        match op {
            Op::Store => {
                h.store_tasks.inc();
                h.store_keys.inc_by(keys);
            }
            Op::Lookup => {
                h.lookup_tasks.inc();
                h.lookup_keys.inc_by(keys);
            }
            Op::Load => {
                h.load_tasks.inc();
                h.load_keys.inc_by(keys);
            }
            Op::Delete => {
                h.delete_tasks.inc();
            }
        }
        let i = op as usize;
        h.inflight_requests[i].inc();
        h.inflight_bytes[i].inc_by(bytes as i64);
        Started {
            op,
            at: Some(std::time::Instant::now()),
            bytes,
            span: tracing::Span::none(),
        }
    }

    /// The request ended: no longer in flight, its latency observed.
    pub fn finish(&self, started: Started) {
        let (Some(h), Some(at)) = (&self.0, started.at) else {
            return;
        };
        let i = started.op as usize;
        h.inflight_requests[i].dec();
        h.inflight_bytes[i].dec_by(started.bytes as i64);
        h.duration[i].observe(at.elapsed().as_secs_f64());
        match started.op {
            Op::Store => {
                h.store_completed.inc();
            }
            Op::Load => {
                h.load_completed.inc();
            }
            _ => {}
        }
    }

    /// A store's outcome: keys and bytes that landed.
    pub fn stored(&self, keys: usize, bytes: u64) {
        if let Some(h) = &self.0 {
            h.store_succeeded_keys.inc_by(keys as u64);
            h.stored_bytes.inc_by(bytes);
        }
    }

    /// Keys of a request of `op` that failed with `kind`.
    pub fn failed(&self, op: Op, kind: ErrorKind, keys: usize) {
        if let Some(h) = &self.0 {
            let family = match op {
                Op::Store => "store_failed_keys",
                Op::Lookup => "lookup_failed_keys",
                Op::Load => "load_failed_keys",
                Op::Delete => "delete_failed_keys",
            };
            h.labelled(family, "kind", kind.as_str())
                .inc_by(keys as u64);
        }
    }

    /// A lookup's hits.
    pub(crate) fn lookup_hits(&self, keys: usize) {
        if let Some(h) = &self.0 {
            h.lookup_hit_keys.inc_by(keys as u64);
        }
    }

    /// A load's outcome: keys and bytes loaded, keys missed.
    pub(crate) fn loaded(&self, keys: usize, bytes: u64, missed: usize) {
        if let Some(h) = &self.0 {
            h.loaded_keys.inc_by(keys as u64);
            h.loaded_bytes.inc_by(bytes);
            h.load_missed_keys.inc_by(missed as u64);
        }
    }

    /// Keys a delete or an eviction removed.
    pub(crate) fn deleted(&self, keys: usize) {
        if let Some(h) = &self.0 {
            h.deleted_keys.inc_by(keys as u64);
        }
    }

    /// An eviction round removed `keys` keys of `bytes` bytes.
    pub(crate) fn evicted(&self, keys: usize, bytes: u64) {
        if let Some(h) = &self.0 {
            h.eviction_rounds.inc();
            h.evicted_keys.inc_by(keys as u64);
            h.evicted_bytes.inc_by(bytes);
        }
    }

    /// `n` objects were found corrupt (a checksum mismatch on a load or a scrub).
    pub(crate) fn corrupt(&self, n: usize) {
        if let Some(h) = &self.0 {
            h.corrupt_objects.inc_by(n as u64);
        }
    }

    /// The number of locked keys now.
    pub(crate) fn set_locked(&self, keys: usize) {
        if let Some(h) = &self.0 {
            h.locked_keys.set(keys as i64);
        }
    }

    /// The ledger's totals now, and the capacity.
    pub(crate) fn set_usage(&self, bytes: u64, keys: usize, capacity: u64) {
        if let Some(h) = &self.0 {
            h.usage_bytes.set(bytes as i64);
            h.usage_keys.set(keys as i64);
            h.capacity_bytes.set(capacity as i64);
        }
    }

    /// Bytes per cache salt (`""`: no salt), bounded as the module docs say. `shown` is the
    /// caller's record of the salts that have a series (from the previous call): those that
    /// fall out of the top lose theirs.
    pub fn set_salt_usage<'a>(
        &self,
        by_salt: impl Iterator<Item = (&'a str, u64)>,
        shown: &mut Vec<String>,
    ) {
        let Some(h) = &self.0 else {
            return;
        };
        let mut all: Vec<(&str, u64)> = by_salt.collect();
        all.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let other: u64 = all.iter().skip(MAX_SALT_SERIES).map(|(_, b)| b).sum();
        all.truncate(MAX_SALT_SERIES);
        let fam = &h.families.labelled_gauges["usage_bytes_by_salt"];
        let key = |salt: &str| WithLabel {
            adapter: h.labels.clone(),
            label: ("cache_salt", salt.to_owned()),
        };
        let mut now: Vec<String> = all.iter().map(|(s, _)| (*s).to_owned()).collect();
        for (salt, bytes) in &all {
            fam.get_or_create(&key(salt)).set(*bytes as i64);
        }
        if other > 0 {
            fam.get_or_create(&key("_other")).set(other as i64);
            now.push("_other".to_owned());
        }
        for gone in shown.iter().filter(|s| !now.contains(s)) {
            fam.remove(&key(gone));
        }
        *shown = now;
    }

    /// The circuit breaker is in `state` (0 closed, 1 open, 2 half-open) and the adapter is
    /// `healthy` or not (the breaker closed and no known problem, see `crate::breaker`).
    pub fn breaker(&self, state: i64, healthy: bool) {
        if let Some(h) = &self.0 {
            if h.breaker_state.set(state) != state {
                h.breaker_transitions.inc();
            }
            h.healthy.set(i64::from(healthy));
        }
    }

    /// Fleet mode: joined to the index (`true`) or serving alone.
    pub(crate) fn fleet_joined(&self, joined: bool) {
        if let Some(h) = &self.0 {
            h.fleet_joined.set(i64::from(joined));
        }
    }

    /// Fleet mode: the fleet's usage of the bucket, as the index last said.
    pub(crate) fn fleet_usage(&self, bytes: u64) {
        if let Some(h) = &self.0 {
            h.fleet_usage_bytes
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }

    /// Fleet mode: a write that waited for room in the full bucket was made, `over` the
    /// capacity when the wait ran out first.
    pub(crate) fn fleet_write_waited(&self, over: bool) {
        if let Some(h) = &self.0 {
            let outcome = if over { "over" } else { "written" };
            h.labelled("fleet_write_waits", "outcome", outcome).inc();
        }
    }

    /// A request retried because of `cause` (`throttled`, `server_error`, `connection`,
    /// `timeout`, `credentials`, `clock_skew`, …).
    pub fn retry(&self, cause: &str) {
        if let Some(h) = &self.0 {
            h.labelled("retries", "cause", cause).inc();
        }
    }

    /// A request to the Hugging Face Hub on `route`.
    pub fn hub_request(&self, route: &str) {
        if let Some(h) = &self.0 {
            h.labelled("hub_requests", "route", route).inc();
        }
    }

    /// An hfbucket metadata cache lookup that hit (`true`) or missed.
    pub fn metadata_cache(&self, hit: bool) {
        if let Some(h) = &self.0 {
            h.labelled(
                "hf_metadata_cache",
                "result",
                if hit { "hit" } else { "miss" },
            )
            .inc();
        }
    }
}

#[cfg(test)]
mod tests;
