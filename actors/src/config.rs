//! Configuration shared by every adapter type: capacity, eviction and object-name format.
//!
//! Each backend folder has its own `config.rs` for its specific fields. The root crate parses a
//! user's TOML or LMCache JSON into these structs, strictly (unknown fields and wrong types are
//! errors), and calls `validate` for the ranges.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::key::NameFormat;

/// Bytes in one "GB" of `max_capacity_gb` (LMCache counts GiB).
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A field that failed validation, named as the user wrote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {message}")]
#[non_exhaustive]
pub struct FieldError {
    /// The field's name (dotted for nested fields, e.g. `eviction.trigger_watermark`).
    pub field: String,
    /// What is wrong with its value.
    pub message: String,
}

impl FieldError {
    /// A new field error.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A secret string (credential or token): never shown by `Debug`, `Display` or serialization,
/// and zeroed in memory when dropped. It wraps secrecy's [`secrecy::SecretString`] (the common
/// crate for this), adding what our configs need: `PartialEq`, and serialization as
/// `"<redacted>"` so a resolved configuration can be printed whole.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct Secret(secrecy::SecretString);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: impl Into<String>) -> Self {
        Self(secrecy::SecretString::from(s.into()))
    }
    /// The secret itself; only to hand to a client, never to print.
    pub fn expose(&self) -> &str {
        secrecy::ExposeSecret::expose_secret(&self.0)
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Secret {}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

/// Eviction policy names: LMCache's, spelled as LMCache spells them, plus kvtier's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum EvictionPolicy {
    /// Evict least-recently-used keys (stores and lookup hits refresh recency).
    #[default]
    #[serde(rename = "LRU")]
    Lru,
    /// LMCache's Adaptive Replacement Cache: a recent list and a frequent list whose balance
    /// adapts to ghost hits.
    #[serde(rename = "ARC")]
    Arc,
    /// LMCache's per-cache-salt LRU driven by byte quotas (`quotas`); see docs/configuration.md.
    #[serde(rename = "IsolatedLRU")]
    IsolatedLru,
    /// kvtier's frequency-boosted LRU with a use history that outlives eviction, and a fuller
    /// tier (not an LMCache name).
    #[serde(rename = "FLRU")]
    Flru,
    /// Never evict.
    #[serde(rename = "noop")]
    Noop,
}

impl EvictionPolicy {
    /// Every policy, in the order reports list them.
    pub const ALL: [EvictionPolicy; 5] = [
        EvictionPolicy::Lru,
        EvictionPolicy::Arc,
        EvictionPolicy::IsolatedLru,
        EvictionPolicy::Flru,
        EvictionPolicy::Noop,
    ];

    /// The configured name (`"LRU"`, `"ARC"`, `"IsolatedLRU"`, `"FLRU"`, `"noop"`).
    pub fn as_str(self) -> &'static str {
        match self {
            EvictionPolicy::Lru => "LRU",
            EvictionPolicy::Arc => "ARC",
            EvictionPolicy::IsolatedLru => "IsolatedLRU",
            EvictionPolicy::Flru => "FLRU",
            EvictionPolicy::Noop => "noop",
        }
    }
}

/// What `eviction_ratio` is a share of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvictionUnit {
    /// A round removes `floor(keys × ratio)` keys (at least 1): LMCache's rule, the default.
    /// With equal-sized chunks it is the same as `bytes`.
    #[default]
    Keys,
    /// A round removes keys, in the policy's order, until `ceil(used bytes × ratio)` bytes are
    /// freed, so a tier with mixed chunk sizes frees what the ratio says.
    Bytes,
}

/// Per-cache-salt byte quotas of `IsolatedLRU`: salt → limit in bytes (`""` is the unsalted
/// keys).
///
/// Written as a TOML table (`[adapters.eviction.quotas]`, `"user-a" = 1073741824`), a JSON object
/// of the same shape, or LMCache's JSON list of quota entries
/// (`[{"cache_salt": "user-a", "limit_bytes": 1073741824}]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(transparent)]
pub struct Quotas(pub BTreeMap<String, u64>);

impl Quotas {
    /// The limit of `salt`, if it has one.
    pub fn get(&self, salt: &str) -> Option<u64> {
        self.0.get(salt).copied()
    }
}

/// One entry of LMCache's quota list.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaEntry {
    cache_salt: String,
    limit_bytes: u64,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum QuotasRepr {
    Map(BTreeMap<String, u64>),
    List(Vec<QuotaEntry>),
}

impl<'de> Deserialize<'de> for Quotas {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let repr = QuotasRepr::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "expected a table of cache salt = limit in bytes, or a list of \
                 {\"cache_salt\", \"limit_bytes\"} entries",
            )
        })?;
        Ok(Quotas(match repr {
            QuotasRepr::Map(m) => m,
            QuotasRepr::List(v) => v
                .into_iter()
                .map(|e| (e.cache_salt, e.limit_bytes))
                .collect(),
        }))
    }
}

/// `[fleet]`: the index that many kvtier processes on one bucket share (Redis or Valkey), so that
/// together they behave as one adapter: one usage and capacity, locks no node's eviction
/// breaks, fleet-wide recency and one evicting node at a time. Absent: each process is alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct FleetConfig {
    /// `redis://[:PASSWORD@]HOST:PORT/DB` or `rediss://…` (TLS) of the index. It may hold a
    /// password, so it is kept secret (never logged or printed).
    pub index: Secret,
    /// This node's id, unique in the fleet (default: the host name and the process id). A
    /// process that restarts with the same id drops the locks its earlier self held.
    #[serde(default)]
    pub node_id: Option<String>,
    /// Period of the listing of the bucket that corrects the index (objects written by other
    /// writers, objects gone behind its back, an index that lost its data), run by one node
    /// per period (the holder of the listing lease); default 300 s, 0 turns it off. Also run
    /// when a node finds the index empty while it holds objects.
    #[serde(default = "default_listing_interval")]
    pub listing_interval_secs: u64,
    /// The share of each adapter's capacity under which eviction rounds keep the bytes
    /// *landing* (the objects stored plus the bytes being written); in (0, 1]. Default: 1 when
    /// writes wait for room (`write_wait_ms` > 0, the default), since a write that would take
    /// the bucket past its capacity then waits for the deletes; else halfway between the
    /// adapter's `trigger_watermark` and 1 (0.9 for 0.8), the gap being room for deletions in
    /// flight, which the bucket still holds. Lower keeps the bucket's peak lower and costs hits
    /// (docs/fleet.md, "Eviction rounds").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landing_mark: Option<f64>,
    /// The longest a write waits for room in a full bucket, in milliseconds; 0 turns the wait
    /// off. A node announces each write to the index before it makes it; when the bucket's
    /// footprint (the objects stored, those being deleted, the writes of every node in flight)
    /// would pass the capacity with it, the write waits for an eviction round's deletes, so
    /// the bucket stays within its capacity. When the wait runs out the write is made anyway
    /// (nothing is lost; the bucket goes over) and `kvtier_fleet_write_waits{outcome="over"}`
    /// counts it. Default 2000. Applies to adapters that evict by capacity (not
    /// `IsolatedLRU`, whose limits are per salt).
    #[serde(default = "default_write_wait")]
    pub write_wait_ms: u64,
    /// Hash tags a bucket's index is split over, 1 to 1,024 (default 1: one tag, exact). With
    /// more, each object's index entry lives on the tag its name hashes to, so a Redis or
    /// Valkey cluster spreads one bucket over its masters; each tag then holds its own slice
    /// of the capacity (capacity / shards), its own recency order and eviction lease. Every
    /// node on one bucket must give the same count: the index records it at the first join
    /// and refuses a node that gives another (docs/fleet.md, "One bucket over many shards").
    #[serde(default = "default_shards")]
    pub shards: u32,
}

fn default_shards() -> u32 {
    1
}

fn default_listing_interval() -> u64 {
    300
}

fn default_write_wait() -> u64 {
    2000
}

impl FleetConfig {
    /// A fleet on the index at `url`, the node id at its default.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            index: Secret::new(url),
            node_id: None,
            listing_interval_secs: default_listing_interval(),
            landing_mark: None,
            write_wait_ms: default_write_wait(),
            shards: default_shards(),
        }
    }

    /// Sets the hash tags the bucket's index is split over (see [`FleetConfig::shards`]).
    #[must_use]
    pub fn shards(mut self, shards: u32) -> Self {
        self.shards = shards;
        self
    }

    /// Sets the longest a write waits for room in a full bucket (see
    /// [`FleetConfig::write_wait_ms`]; zero turns the wait off).
    #[must_use]
    pub fn write_wait(mut self, wait: std::time::Duration) -> Self {
        self.write_wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Sets the share of the capacity under which rounds keep the bytes landing (see
    /// [`FleetConfig::landing_mark`]).
    #[must_use]
    pub fn landing_mark(mut self, share: f64) -> Self {
        self.landing_mark = Some(share);
        self
    }

    /// Sets the period of the bucket listing that corrects the index (0: off).
    #[must_use]
    pub fn listing_interval(mut self, period: std::time::Duration) -> Self {
        self.listing_interval_secs = period.as_secs();
        self
    }

    /// Sets the node id.
    #[must_use]
    pub fn node_id(mut self, id: impl Into<String>) -> Self {
        self.node_id = Some(id.into());
        self
    }

    /// The node id: the one set, else `HOSTNAME-PID`.
    pub fn resolved_node_id(&self) -> String {
        self.node_id.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
                .or_else(|| std::env::var("HOSTNAME").ok())
                .unwrap_or_else(|| "kvtier".into());
            format!("{host}-{}", std::process::id())
        })
    }
}

/// The optional `eviction` table of an adapter.
///
/// Defaults depend on the policy: the LMCache policies default to watermark 0.8, ratio 0.2,
/// unit `keys` (LMCache's defaults); `FLRU` defaults to watermark 0.995, ratio 0.005 and
/// unit `bytes` (a fuller tier, see docs/configuration.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawEvictionConfig")]
#[non_exhaustive]
pub struct EvictionConfig {
    /// `"LRU"` (default), `"ARC"`, `"IsolatedLRU"`, `"FLRU"` or `"noop"`.
    pub eviction_policy: EvictionPolicy,
    /// Usage fraction at or above which eviction runs; in (0, 1]. Default 0.8 (`FLRU`:
    /// 0.995). For `IsolatedLRU`, the fraction of each
    /// salt's quota.
    pub trigger_watermark: f64,
    /// Share of the adapter's keys (or bytes, see `eviction_unit`) evicted per round; in
    /// [0, 1]. Default 0.2 (`FLRU`: 0.005). Any ratio > 0 evicts
    /// at least one key.
    pub eviction_ratio: f64,
    /// `"keys"` (LMCache's rule, the default) or `"bytes"` (the default of `FLRU`): what
    /// `eviction_ratio` is a share of.
    pub eviction_unit: EvictionUnit,
    /// `IsolatedLRU` only: byte quota per cache salt. Salts without an entry have a limit of 0
    /// (LMCache's allowlist rule: their keys are evicted at the next cycle). Default: none.
    #[serde(skip_serializing_if = "Quotas::is_empty")]
    pub quotas: Quotas,
    /// `FLRU` only: the bonus of one use beyond the first, in capacities of clock (see
    /// docs/configuration.md). `None`: 0.4; 0 makes
    /// `FLRU` an LRU that runs the tier nearly full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flru_bonus_per_use: Option<f64>,
    /// `FLRU` only: which modes its shadows choose from (the FLRU section of
    /// docs/configuration.md). `None`: [`FlruAdmission::Adaptive`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flru_admission: Option<FlruAdmission>,
}

/// `eviction.flru_admission`: how `FLRU` chooses its mode: what orders the tier and where a key
/// stored for the first time goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlruAdmission {
    /// Sampled shadow tiers choose, from recent hits, between placing new keys as LRU does,
    /// one capacity earlier, or last (admission on the second use), and ordering the tier by
    /// estimated request rates. The default.
    #[default]
    Adaptive,
    /// No shadows: the tier is always ordered by estimated request rates with the low credit
    /// for new keys. For workloads where new chunks seldom return and the shadows' margin keeps
    /// the adaptive mode in LRU placement (Mooncake's synthetic trace at 5 %); far below LRU
    /// where every chunk comes back once (docs/benchmarks.md, "Eviction policies").
    Rates,
}

/// The largest `flru_bonus_per_use`: beyond it a key used a few times would outlive the tier's
/// whole history many times over.
pub(crate) const MAX_FLRU_BONUS: f64 = 16.0;

/// `FLRU`'s default `trigger_watermark`: the tier runs full (docs/benchmarks.md,
/// "Eviction policies", says where the sweep is).
pub(crate) const FLRU_WATERMARK: f64 = 0.995;
/// `FLRU`'s default `eviction_ratio` (of the used bytes): rounds of 0.5 %.
pub(crate) const FLRU_RATIO: f64 = 0.005;

/// The `eviction` table as written; missing fields take the policy's defaults.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvictionConfig {
    #[serde(default)]
    eviction_policy: EvictionPolicy,
    trigger_watermark: Option<f64>,
    eviction_ratio: Option<f64>,
    eviction_unit: Option<EvictionUnit>,
    #[serde(default)]
    quotas: Quotas,
    flru_bonus_per_use: Option<f64>,
    flru_admission: Option<FlruAdmission>,
}

impl From<RawEvictionConfig> for EvictionConfig {
    fn from(raw: RawEvictionConfig) -> Self {
        let d = EvictionConfig::with_policy(raw.eviction_policy);
        Self {
            eviction_policy: raw.eviction_policy,
            trigger_watermark: raw.trigger_watermark.unwrap_or(d.trigger_watermark),
            eviction_ratio: raw.eviction_ratio.unwrap_or(d.eviction_ratio),
            eviction_unit: raw.eviction_unit.unwrap_or(d.eviction_unit),
            quotas: raw.quotas,
            flru_bonus_per_use: raw.flru_bonus_per_use,
            flru_admission: raw.flru_admission,
        }
    }
}

impl Quotas {
    /// True when no salt has a quota.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn default_watermark() -> f64 {
    0.8
}
fn default_ratio() -> f64 {
    0.2
}

impl Default for EvictionConfig {
    fn default() -> Self {
        Self {
            eviction_policy: EvictionPolicy::Lru,
            trigger_watermark: default_watermark(),
            eviction_ratio: default_ratio(),
            eviction_unit: EvictionUnit::Keys,
            quotas: Quotas::default(),
            flru_bonus_per_use: None,
            flru_admission: None,
        }
    }
}

impl EvictionConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), FieldError> {
        let w = self.trigger_watermark;
        if !(w.is_finite() && w > 0.0 && w <= 1.0) {
            return Err(FieldError::new(
                "eviction.trigger_watermark",
                format!("must be in (0, 1], got {w}"),
            ));
        }
        let r = self.eviction_ratio;
        if !(r.is_finite() && (0.0..=1.0).contains(&r)) {
            return Err(FieldError::new(
                "eviction.eviction_ratio",
                format!("must be in [0, 1], got {r}"),
            ));
        }
        if !self.quotas.is_empty() && self.eviction_policy != EvictionPolicy::IsolatedLru {
            return Err(FieldError::new(
                "eviction.quotas",
                format!(
                    "only the IsolatedLRU policy uses quotas (the policy is {})",
                    self.eviction_policy.as_str()
                ),
            ));
        }
        let flru_only = |field: &str, set: bool| {
            if set && self.eviction_policy != EvictionPolicy::Flru {
                return Err(FieldError::new(
                    field,
                    format!(
                        "only the FLRU policy uses it (the policy is {})",
                        self.eviction_policy.as_str()
                    ),
                ));
            }
            Ok(())
        };
        flru_only(
            "eviction.flru_bonus_per_use",
            self.flru_bonus_per_use.is_some(),
        )?;
        flru_only("eviction.flru_admission", self.flru_admission.is_some())?;
        if let Some(b) = self.flru_bonus_per_use {
            if !(b.is_finite() && (0.0..=MAX_FLRU_BONUS).contains(&b)) {
                return Err(FieldError::new(
                    "eviction.flru_bonus_per_use",
                    format!("must be in [0, {MAX_FLRU_BONUS}], got {b}"),
                ));
            }
        }
        for salt in self.quotas.0.keys() {
            if !salt.is_empty() {
                if let Err(e) = crate::key::validate_salt(salt) {
                    return Err(FieldError::new(
                        "eviction.quotas",
                        format!("cache salt {salt:?}: {e}"),
                    ));
                }
            }
        }
        Ok(())
    }

    #[cfg(test)]
    /// How many of `n` keys one round evicts: `floor(n × ratio)`, at least 1 when the ratio is > 0.
    pub(crate) fn keys_to_evict(&self, n: usize) -> usize {
        keys_for_ratio(self.eviction_ratio, n)
    }
}

/// `floor(n × ratio)`, at least 1 when the ratio is > 0 and `n` > 0 (LMCache's rule).
pub(crate) fn keys_for_ratio(ratio: f64, n: usize) -> usize {
    if ratio <= 0.0 || n == 0 {
        return 0;
    }
    ((n as f64 * ratio).floor() as usize).clamp(1, n)
}

/// `ceil(bytes × ratio)`, at least 1 when the ratio is > 0 and `bytes` > 0.
pub(crate) fn bytes_for_ratio(ratio: f64, bytes: u64) -> u64 {
    if ratio <= 0.0 || bytes == 0 {
        return 0;
    }
    ((bytes as f64 * ratio).ceil() as u64).clamp(1, bytes)
}

impl EvictionConfig {
    /// `FLRU`'s bonus per use: `flru_bonus_per_use`, else its default.
    pub(crate) fn flru_bonus(&self) -> f64 {
        self.flru_bonus_per_use
            .unwrap_or(crate::eviction::FLRU_BONUS_PER_USE)
    }

    /// A configuration of this policy with the other fields at the policy's defaults.
    pub fn with_policy(policy: EvictionPolicy) -> Self {
        match policy {
            EvictionPolicy::Flru => Self {
                eviction_policy: policy,
                trigger_watermark: FLRU_WATERMARK,
                eviction_ratio: FLRU_RATIO,
                eviction_unit: EvictionUnit::Bytes,
                ..Self::default()
            },
            _ => Self {
                eviction_policy: policy,
                ..Self::default()
            },
        }
    }

    /// LMCache's default policy: `LRU` at watermark 0.8, ratio 0.2 of the keys.
    pub fn lru() -> Self {
        Self::with_policy(EvictionPolicy::Lru)
    }

    /// Sets `trigger_watermark`, the usage fraction at or above which eviction runs.
    #[must_use]
    pub fn trigger_watermark(mut self, watermark: f64) -> Self {
        self.trigger_watermark = watermark;
        self
    }

    /// Sets `eviction_ratio`, the share of keys (or bytes) evicted per round.
    #[must_use]
    pub fn eviction_ratio(mut self, ratio: f64) -> Self {
        self.eviction_ratio = ratio;
        self
    }

    /// Sets `eviction_unit`, what `eviction_ratio` is a share of.
    #[must_use]
    pub fn eviction_unit(mut self, unit: EvictionUnit) -> Self {
        self.eviction_unit = unit;
        self
    }

    /// Adds (or replaces) the `IsolatedLRU` byte quota of one cache salt.
    #[must_use]
    pub fn quota(mut self, salt: impl Into<String>, bytes: u64) -> Self {
        self.quotas.0.insert(salt.into(), bytes);
        self
    }
}

/// Fields every adapter type accepts.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct CommonConfig {
    /// Capacity for usage accounting and eviction, in GiB; 0 (default) disables eviction.
    #[serde(default)]
    pub max_capacity_gb: f64,
    /// Optional eviction policy.
    #[serde(default)]
    pub eviction: Option<EvictionConfig>,
    /// Object-name spelling: `"seed"` (default) or `"grouped"`.
    #[serde(default)]
    pub object_name_format: NameFormat,
    /// A name for the adapter in metrics (the `name` label); default: its type.
    #[serde(default)]
    pub name: Option<String>,
}

impl CommonConfig {
    /// The field names this struct takes from an adapter object.
    pub const FIELDS: [&'static str; 4] =
        ["max_capacity_gb", "eviction", "object_name_format", "name"];

    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), FieldError> {
        let c = self.max_capacity_gb;
        if !(c.is_finite() && c >= 0.0) {
            return Err(FieldError::new(
                "max_capacity_gb",
                format!("must be a finite number >= 0, got {c}"),
            ));
        }
        if let Some(e) = &self.eviction {
            e.validate()?;
        }
        if let Some(n) = &self.name {
            let ok = !n.is_empty()
                && n.len() <= 64
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !ok {
                return Err(FieldError::new(
                    "name",
                    format!("must be 1 to 64 ASCII letters, digits, '-', '_' or '.', got {n:?}"),
                ));
            }
        }
        Ok(())
    }

    /// Capacity in bytes (`max_capacity_gb × 1024³`).
    pub fn capacity_bytes(&self) -> u64 {
        (self.max_capacity_gb * GIB) as u64
    }

    /// Sets `max_capacity_gb`, in GiB (0: no eviction).
    #[must_use]
    pub fn capacity_gb(mut self, gib: f64) -> Self {
        self.max_capacity_gb = gib;
        self
    }

    /// Sets the eviction policy (it acts once there is a capacity).
    #[must_use]
    pub fn eviction(mut self, eviction: EvictionConfig) -> Self {
        self.eviction = Some(eviction);
        self
    }

    /// Sets `name`, the `name` label of the adapter's metrics.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets `object_name_format`.
    #[must_use]
    pub fn name_format(mut self, format: NameFormat) -> Self {
        self.object_name_format = format;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_edge_cases() {
        let cfg = |r| EvictionConfig {
            eviction_ratio: r,
            ..Default::default()
        };
        assert_eq!(cfg(0.0).keys_to_evict(10), 0);
        assert_eq!(cfg(1.0).keys_to_evict(10), 10);
        assert_eq!(cfg(0.5).keys_to_evict(9), 4);
        assert_eq!(cfg(0.001).keys_to_evict(10), 1);
        assert_eq!(cfg(0.5).keys_to_evict(0), 0);
    }

    #[test]
    fn ranges() {
        let mut e = EvictionConfig::default();
        assert!(e.validate().is_ok());
        e.trigger_watermark = 0.0;
        assert_eq!(
            e.validate().unwrap_err().field,
            "eviction.trigger_watermark"
        );
        e.trigger_watermark = 1.0;
        e.eviction_ratio = 1.5;
        assert_eq!(e.validate().unwrap_err().field, "eviction.eviction_ratio");
        let c = CommonConfig {
            max_capacity_gb: -1.0,
            ..Default::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "max_capacity_gb");
    }

    #[test]
    fn quotas_in_both_forms_and_policy_defaults() {
        let a: EvictionConfig = serde_json::from_str(
            r#"{"eviction_policy": "IsolatedLRU", "quotas": {"user-a": 1024, "": 5}}"#,
        )
        .unwrap();
        let b: EvictionConfig = serde_json::from_str(
            r#"{"eviction_policy": "IsolatedLRU",
                "quotas": [{"cache_salt": "user-a", "limit_bytes": 1024},
                           {"cache_salt": "", "limit_bytes": 5}]}"#,
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.quotas.get("user-a"), Some(1024));
        assert!(a.validate().is_ok());
        assert_eq!((a.trigger_watermark, a.eviction_ratio), (0.8, 0.2));
        let l: EvictionConfig =
            serde_json::from_str(r#"{"eviction_policy": "LRU", "quotas": {"a": 1}}"#).unwrap();
        assert_eq!(l.validate().unwrap_err().field, "eviction.quotas");
        let bad: EvictionConfig =
            serde_json::from_str(r#"{"eviction_policy": "IsolatedLRU", "quotas": {"a@b": 1}}"#)
                .unwrap();
        assert_eq!(bad.validate().unwrap_err().field, "eviction.quotas");
        assert!(serde_json::from_str::<EvictionConfig>(r#"{"quota": {}}"#).is_err());
        assert!(serde_json::from_str::<EvictionConfig>(r#"{"quotas": {"a": -1}}"#).is_err());
    }

    #[test]
    fn the_flru_bonus_is_for_flru_and_in_range() {
        let parse = |s: &str| serde_json::from_str::<EvictionConfig>(s).unwrap();
        let f = parse(r#"{"eviction_policy": "FLRU", "flru_bonus_per_use": 0.25}"#);
        assert_eq!(f.flru_bonus_per_use, Some(0.25));
        f.validate().unwrap();
        assert_eq!(
            parse(r#"{"eviction_policy": "FLRU"}"#).flru_bonus_per_use,
            None
        );
        for bad in ["-0.1", "16.5"] {
            let e = parse(&format!(
                r#"{{"eviction_policy": "FLRU", "flru_bonus_per_use": {bad}}}"#
            ))
            .validate()
            .unwrap_err();
            assert_eq!(e.field, "eviction.flru_bonus_per_use");
            assert!(e.to_string().contains(bad), "{e}");
        }
        let lru = parse(r#"{"eviction_policy": "LRU", "flru_bonus_per_use": 0.5}"#);
        let e = lru.validate().unwrap_err();
        assert_eq!(e.field, "eviction.flru_bonus_per_use");
        assert!(e.to_string().contains("only the FLRU policy"), "{e}");
    }

    #[test]
    fn the_flru_admission_is_for_flru_with_adaptive_the_default() {
        let parse = |s: &str| serde_json::from_str::<EvictionConfig>(s);
        let f = parse(r#"{"eviction_policy": "FLRU"}"#).unwrap();
        assert_eq!(f.flru_admission, None);
        assert_eq!(
            (f.trigger_watermark, f.eviction_ratio, f.eviction_unit),
            (FLRU_WATERMARK, FLRU_RATIO, EvictionUnit::Bytes)
        );
        for (text, want) in [
            ("adaptive", FlruAdmission::Adaptive),
            ("rates", FlruAdmission::Rates),
        ] {
            let c = parse(&format!(
                r#"{{"eviction_policy": "FLRU", "flru_admission": "{text}"}}"#
            ))
            .unwrap();
            assert_eq!(c.flru_admission, Some(want));
            c.validate().unwrap();
        }
        for gone in ["all", "lru", "placements"] {
            let text = format!(r#"{{"eviction_policy": "FLRU", "flru_admission": "{gone}"}}"#);
            assert!(parse(&text).is_err(), "{gone}");
        }
        let e = parse(r#"{"eviction_policy": "ARC", "flru_admission": "rates"}"#)
            .unwrap()
            .validate()
            .unwrap_err();
        assert_eq!(e.field, "eviction.flru_admission");
        assert!(e.to_string().contains("only the FLRU policy"), "{e}");
    }
}
