//! Configuration shared by every adapter type: capacity, eviction and object-name format.
//!
//! Each backend folder has its own `config.rs` for its specific fields. The root crate parses a
//! user's TOML or LMCache JSON into these structs, strictly (unknown fields and wrong types are
//! errors), and calls `validate` for the ranges.

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

/// A secret string (credential or token): never shown by `Debug`, `Display` or serialization.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    /// The secret itself; only to hand to a client, never to print.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

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

/// Eviction policy names, exactly as LMCache spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum EvictionPolicy {
    /// Evict least-recently-used keys (stores and lookup hits refresh recency).
    #[default]
    #[serde(rename = "LRU")]
    Lru,
    /// Never evict.
    #[serde(rename = "noop")]
    Noop,
}

/// The optional `eviction` table of an adapter.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct EvictionConfig {
    /// `"LRU"` (default) or `"noop"`.
    #[serde(default)]
    pub eviction_policy: EvictionPolicy,
    /// Usage fraction at or above which eviction runs; in (0, 1]. Default 0.8.
    #[serde(default = "default_watermark")]
    pub trigger_watermark: f64,
    /// Share of the adapter's keys evicted per round; in [0, 1]. Default 0.2. Any ratio > 0
    /// evicts at least one key.
    #[serde(default = "default_ratio")]
    pub eviction_ratio: f64,
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
        Ok(())
    }

    /// How many of `n` keys one round evicts: `floor(n × ratio)`, at least 1 when the ratio is > 0.
    pub fn keys_to_evict(&self, n: usize) -> usize {
        if self.eviction_ratio <= 0.0 || n == 0 {
            return 0;
        }
        ((n as f64 * self.eviction_ratio).floor() as usize).clamp(1, n)
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
}
