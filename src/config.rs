//! Layered, strict configuration.
//!
//! Layers, lowest first: built-in defaults < a TOML file (`--config F`, else `kvtier.toml` in
//! the working directory when present) < environment variables (`KVTIER_…`) < `--l2-adapter`
//! arguments. Adapters are written either as `[[adapters]]` tables with a `type` and the seeds'
//! exact field names, or as LMCache JSON strings (`l2_adapter = ['{"type": "s3", …}']` in the
//! file, `KVTIER_L2_ADAPTER`, or `--l2-adapter` on the command line), so the examples of the
//! LMCache documentation can be pasted verbatim.
//!
//! Parsing is strict: an unknown field, a value of the wrong type (the string `"true"` for a
//! bool), a missing required field, an out-of-range number or an unknown adapter type is an
//! error naming the adapter (index and type) and the field. Secrets are never printed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kvtier_actors::backends::fault_inject::FaultInjectConfig;
use kvtier_actors::backends::fs::FsConfig;
#[cfg(feature = "hfbucket")]
use kvtier_actors::backends::hfbucket::HfBucketConfig;
use kvtier_actors::backends::memory::MemoryConfig;
#[cfg(feature = "s3")]
use kvtier_actors::backends::s3::S3Config;
use kvtier_actors::config::{CommonConfig, EvictionConfig, FieldError, FleetConfig};
use kvtier_actors::NameFormat;
use serde::de::DeserializeOwned;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

mod layers;
pub mod lmcache;
mod parse;

use layers::*;
pub(crate) use parse::type_name;
use parse::*;
pub use parse::{missing_feature, parse_adapter, parse_adapter_json, redact, split_fleet_json};

/// Name of the file read from the working directory when `--config` is not given.
pub const DEFAULT_FILE: &str = "kvtier.toml";
/// Prefix of the environment variables read.
pub const ENV_PREFIX: &str = "KVTIER";
/// Default period of the eviction actor's timer, in milliseconds.
pub const DEFAULT_EVICTION_INTERVAL_MS: u64 = 1000;
/// Adapter types kvtier knows. `s3` and `hfbucket` need the crate features of the same names
/// (see [`missing_feature`]); the others are always built.
pub const ADAPTER_TYPES: &[&str] = &["memory", "fs", "s3", "hfbucket", "fault_inject"];
/// Fields whose values are never printed.
pub const SECRET_FIELDS: &[&str] = &[
    "aws_secret_access_key",
    "aws_access_key_id",
    "token",
    "index",
];
/// What a secret is printed as.
pub const REDACTED: &str = "<redacted>";

/// Top-level environment variables read (besides `KVTIER_ADAPTERS__<i>__<FIELD>`).
pub const ENV_VARS: &[&str] = &[
    "KVTIER_EVICTION_INTERVAL_MS",
    "KVTIER_FLEET__INDEX",
    "KVTIER_FLEET__NODE_ID",
    "KVTIER_FLEET__LISTING_INTERVAL_SECS",
    "KVTIER_FLEET__LANDING_MARK",
    "KVTIER_FLEET__WRITE_WAIT_MS",
    "KVTIER_FLEET__SHARDS",
    "KVTIER_L2_ADAPTER",
    "KVTIER_METRICS",
];

const TOP_LEVEL_FIELDS: &[&str] = &[
    "adapters",
    "l2_adapter",
    "eviction_interval_ms",
    "metrics",
    "fleet",
];

/// A configuration error. Every variant names where the bad value came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read or is not valid TOML.
    #[error("config file {path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A top-level field is unknown or has a bad value.
    #[error("config: field `{field}`: {message}")]
    Field {
        /// The field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// An environment variable could not be applied.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable.
        var: String,
        /// What is wrong.
        message: String,
    },
    /// An adapter's JSON text does not parse.
    #[error("adapter #{index}: not a JSON object: {message}")]
    Json {
        /// The adapter's position.
        index: usize,
        /// The parser's message.
        message: String,
    },
    /// An adapter field is unknown, missing, of the wrong type or out of range.
    #[error("adapter #{index} ({kind}): field `{field}`: {message}")]
    Adapter {
        /// The adapter's position (0-based, in configuration order).
        index: usize,
        /// Its `type` (or `?` when missing).
        kind: String,
        /// The field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// An LMCache YAML configuration (`--lmcache-config`) has a field kvtier cannot use.
    #[error("LMCache config {path}: field `{field}`: {message}")]
    Lmcache {
        /// The file.
        path: String,
        /// The field (`extra_config.<key>` for the connector's keys; `-` for the whole file).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// There is nothing to run on.
    #[error(
        "no adapters configured: add [[adapters]] to the config file or pass --l2-adapter '<json>'"
    )]
    NoAdapters,
}

/// Type-specific settings of an adapter.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum AdapterSpec {
    /// `type = "memory"`.
    Memory(MemoryConfig),
    /// `type = "fs"`.
    Fs(FsConfig),
    /// `type = "s3"` (feature `s3`).
    #[cfg(feature = "s3")]
    S3(S3Config),
    /// `type = "hfbucket"` (feature `hfbucket`).
    #[cfg(feature = "hfbucket")]
    #[serde(rename = "hfbucket")]
    HfBucket(HfBucketConfig),
    /// `type = "fault_inject"`: another adapter with injected faults.
    #[serde(rename = "fault_inject")]
    FaultInject(FaultInjectSpec),
}

/// A `fault_inject` adapter: the faults, and the adapter they are injected into.
///
/// The wrapped adapter (`inner`) is parsed with the same strict rules as a top-level adapter
/// (errors name `inner.<field>`), and may itself be a `fault_inject`. It must not set the
/// common fields (`name`, `max_capacity_gb`, `eviction`, `object_name_format`): the
/// `fault_inject` adapter's own apply, to its identity, the accounting and the wrapped store's
/// object names.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FaultInjectSpec {
    /// Which faults to inject, how often, and the seed.
    pub faults: FaultInjectConfig,
    /// The wrapped adapter (its `common` fields are always the defaults).
    pub inner: Box<AdapterConfig>,
}

impl FaultInjectSpec {
    /// Wraps `inner` with `faults`.
    pub fn new(inner: AdapterSpec, faults: FaultInjectConfig) -> Self {
        Self {
            faults,
            inner: Box::new(AdapterConfig {
                common: CommonConfig::default(),
                spec: inner,
            }),
        }
    }
}

impl Serialize for FaultInjectSpec {
    /// The fault fields, plus `inner` as the wrapped adapter's redacted JSON (without the common
    /// fields, so the output parses back).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut v = serde_json::to_value(&self.faults).map_err(serde::ser::Error::custom)?;
        if let Value::Object(m) = &mut v {
            let mut inner = self.inner.to_redacted_json();
            // The common fields belong to the wrapper; the inner adapter must not repeat them.
            if let Value::Object(i) = &mut inner {
                for f in CommonConfig::FIELDS {
                    i.remove(f);
                }
            }
            m.insert("inner".into(), inner);
        }
        v.serialize(s)
    }
}

impl AdapterSpec {
    /// The adapter type name.
    pub fn kind(&self) -> &'static str {
        match self {
            AdapterSpec::Memory(_) => "memory",
            AdapterSpec::Fs(_) => "fs",
            #[cfg(feature = "s3")]
            AdapterSpec::S3(_) => "s3",
            #[cfg(feature = "hfbucket")]
            AdapterSpec::HfBucket(_) => "hfbucket",
            AdapterSpec::FaultInject(_) => "fault_inject",
        }
    }

    /// The bucket this adapter's objects live in, as fleet mode names it: nodes whose adapters
    /// have the same identity share one fleet capacity, locks and recency. `None` for `memory`
    /// (a process's own memory is no shared bucket). An `fs` path is made absolute.
    pub fn fleet_identity(&self) -> Option<String> {
        match self {
            AdapterSpec::Memory(_) => None,
            AdapterSpec::Fs(c) => {
                let p = std::path::absolute(&c.base_path).unwrap_or_else(|_| c.base_path.clone());
                Some(format!("fs:{}", p.display()))
            }
            #[cfg(feature = "s3")]
            AdapterSpec::S3(c) => Some(format!(
                "s3:{}|{}|{}",
                c.s3_endpoint,
                c.s3_bucket.as_deref().unwrap_or(""),
                c.s3_key_prefix.as_deref().unwrap_or("")
            )),
            #[cfg(feature = "hfbucket")]
            AdapterSpec::HfBucket(c) => Some(format!(
                "hf:{}|{}",
                c.hf_endpoint.as_deref().unwrap_or(""),
                c.bucket_handle
            )),
            AdapterSpec::FaultInject(f) => f.inner.spec.fleet_identity(),
        }
    }
}

/// One configured adapter: common fields plus its type's own.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AdapterConfig {
    /// Capacity, eviction and name format.
    pub common: CommonConfig,
    /// The type and its fields.
    pub spec: AdapterSpec,
}

impl Default for AdapterConfig {
    /// A `memory` adapter with defaults.
    fn default() -> Self {
        Self::memory()
    }
}

impl AdapterConfig {
    /// An adapter of this type, with the common fields at their defaults.
    pub fn new(spec: AdapterSpec) -> Self {
        Self {
            common: CommonConfig::default(),
            spec,
        }
    }

    /// A `memory` adapter with defaults.
    pub fn memory() -> Self {
        Self {
            common: CommonConfig::default(),
            spec: AdapterSpec::Memory(MemoryConfig::default()),
        }
    }

    /// An `fs` adapter on `base_path` with defaults.
    pub fn fs(base_path: impl Into<PathBuf>) -> Self {
        Self {
            common: CommonConfig::default(),
            spec: AdapterSpec::Fs(FsConfig::new(base_path)),
        }
    }

    /// A `fault_inject` adapter wrapping `inner` (with default common fields).
    pub fn fault_inject(inner: AdapterSpec, faults: FaultInjectConfig) -> Self {
        Self {
            common: CommonConfig::default(),
            spec: AdapterSpec::FaultInject(FaultInjectSpec::new(inner, faults)),
        }
    }

    /// An `s3` adapter (see [`S3Config::new`](kvtier_actors::backends::s3::S3Config::new)).
    #[cfg(feature = "s3")]
    pub fn s3(config: S3Config) -> Self {
        Self::new(AdapterSpec::S3(config))
    }

    /// An `hfbucket` adapter (see
    /// [`HfBucketConfig::new`](kvtier_actors::backends::hfbucket::HfBucketConfig::new)).
    #[cfg(feature = "hfbucket")]
    pub fn hfbucket(config: HfBucketConfig) -> Self {
        Self::new(AdapterSpec::HfBucket(config))
    }

    /// Sets `max_capacity_gb`: the capacity usage and eviction count against, in GiB (0: no
    /// eviction).
    #[must_use]
    pub fn capacity_gb(mut self, gib: f64) -> Self {
        self.common = self.common.capacity_gb(gib);
        self
    }

    /// Sets the eviction policy (it acts once the adapter has a capacity).
    #[must_use]
    pub fn eviction(mut self, eviction: EvictionConfig) -> Self {
        self.common = self.common.eviction(eviction);
        self
    }

    /// Sets the adapter's `name` (the `name` label of its metrics).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.common = self.common.name(name);
        self
    }

    /// Sets `object_name_format`.
    #[must_use]
    pub fn name_format(mut self, format: NameFormat) -> Self {
        self.common = self.common.name_format(format);
        self
    }

    /// The resolved adapter as JSON, secrets redacted.
    pub fn to_redacted_json(&self) -> Value {
        let mut v = serde_json::to_value(&self.spec).unwrap_or(Value::Null);
        if let (Value::Object(m), Ok(Value::Object(c))) =
            (&mut v, serde_json::to_value(&self.common))
        {
            m.extend(c);
        }
        redact(&mut v);
        v
    }
}

/// The whole runtime configuration.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TierConfig {
    /// Adapters in order: lookups prefer earlier ones.
    pub adapters: Vec<AdapterConfig>,
    /// Period of the eviction actor's timer check (default 1000 ms).
    pub eviction_interval_ms: u64,
    /// Whether the actors record Prometheus metrics (default true; see `kvtier_actors::metrics`).
    pub metrics: bool,
    /// `[fleet]`: share each adapter's bucket with the other nodes on the same index (see
    /// [`FleetConfig`]); `None` (the default): this process is alone.
    pub fleet: Option<FleetConfig>,
}

impl TierConfig {
    /// A configuration of these adapters, every other field at its default.
    pub fn with_adapters(adapters: Vec<AdapterConfig>) -> Self {
        Self {
            adapters,
            ..Self::default()
        }
    }
}

impl TierConfig {
    /// Appends an adapter (lookups prefer earlier ones).
    #[must_use]
    pub fn adapter(mut self, adapter: AdapterConfig) -> Self {
        self.adapters.push(adapter);
        self
    }

    /// Sets the period of the eviction actor's timer check (default 1 s).
    #[must_use]
    pub fn eviction_interval(mut self, interval: std::time::Duration) -> Self {
        self.eviction_interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Sets whether the actors record Prometheus metrics (default true).
    #[must_use]
    pub fn metrics(mut self, on: bool) -> Self {
        self.metrics = on;
        self
    }

    /// Joins the fleet on `fleet`'s index (see [`FleetConfig`]).
    #[must_use]
    pub fn fleet(mut self, fleet: FleetConfig) -> Self {
        self.fleet = Some(fleet);
        self
    }
}

impl Default for TierConfig {
    fn default() -> Self {
        Self {
            adapters: Vec::new(),
            eviction_interval_ms: DEFAULT_EVICTION_INTERVAL_MS,
            metrics: true,
            fleet: None,
        }
    }
}

/// Where to read the configuration from.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ConfigSources {
    /// `--config F`: this TOML file (must exist).
    pub file: Option<PathBuf>,
    /// When `file` is `None`, read `kvtier.toml` from this directory if present (the CLI passes
    /// the working directory; `None` skips it).
    pub search_dir: Option<PathBuf>,
    /// Environment variables to read (`None`: the process environment).
    pub env: Option<HashMap<String, String>>,
    /// `--l2-adapter` JSON strings; when any are given they replace the adapters of lower layers.
    pub cli_adapters: Vec<String>,
    /// `--lmcache-config F`: an LMCache YAML configuration (`remote_url: "s3://…"` and
    /// `extra_config`), read as one `s3` adapter after the file's adapters (see [`lmcache`]).
    pub lmcache_config: Option<PathBuf>,
}

impl ConfigSources {
    /// Reads this TOML file (it must exist), then the process environment.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self {
            file: Some(path.into()),
            ..Self::default()
        }
    }

    /// Reads `kvtier.toml` from `dir` if it is there (as the CLI does with its working
    /// directory).
    #[must_use]
    pub fn search_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.search_dir = Some(dir.into());
        self
    }

    /// Reads these variables instead of the process environment.
    #[must_use]
    pub fn env(mut self, vars: HashMap<String, String>) -> Self {
        self.env = Some(vars);
        self
    }

    /// Adds an adapter as an LMCache JSON string (`--l2-adapter`); any given replace the
    /// adapters of lower layers.
    #[must_use]
    pub fn l2_adapter(mut self, json: impl Into<String>) -> Self {
        self.cli_adapters.push(json.into());
        self
    }

    /// Reads an LMCache YAML configuration as one more `s3` adapter (`--lmcache-config`).
    #[must_use]
    pub fn lmcache_config(mut self, path: impl Into<PathBuf>) -> Self {
        self.lmcache_config = Some(path.into());
        self
    }
}

impl TierConfig {
    /// Loads and validates the layered configuration.
    pub fn load(src: &ConfigSources) -> Result<Self, ConfigError> {
        Self::load_with_notes(src).map(|(config, _)| config)
    }

    /// Loads and validates the layered configuration, and says what it accepted without using
    /// (one line each: the LMCache engine fields of an `--lmcache-config` file).
    pub fn load_with_notes(src: &ConfigSources) -> Result<(Self, Vec<String>), ConfigError> {
        let mut notes = Vec::new();
        let env: HashMap<String, String> = match &src.env {
            Some(e) => e.clone(),
            None => std::env::vars().collect(),
        };
        let file = match (&src.file, &src.search_dir) {
            (Some(f), _) => Some(f.clone()),
            (None, Some(dir)) => Some(dir.join(DEFAULT_FILE)).filter(|p| p.is_file()),
            (None, None) => None,
        };
        let merged = merge_layers(file.as_deref(), &env)?;
        let mut top = match merged {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        if let Some(unknown) = top.keys().find(|k| !TOP_LEVEL_FIELDS.contains(&k.as_str())) {
            return Err(ConfigError::Field {
                field: unknown.clone(),
                message: format!(
                    "unknown field; expected one of {}",
                    TOP_LEVEL_FIELDS.join(", ")
                ),
            });
        }
        let eviction_interval_ms = match top.remove("eviction_interval_ms") {
            None => DEFAULT_EVICTION_INTERVAL_MS,
            Some(v) => match v.as_u64() {
                Some(ms) if ms > 0 => ms,
                _ => {
                    return Err(ConfigError::Field {
                        field: "eviction_interval_ms".into(),
                        message: format!("must be a whole number of milliseconds > 0, got {v}"),
                    })
                }
            },
        };
        let metrics = match top.remove("metrics") {
            None => true,
            Some(Value::Bool(b)) => b,
            Some(v) => {
                return Err(ConfigError::Field {
                    field: "metrics".into(),
                    message: format!("must be true or false, got {v}"),
                })
            }
        };

        let fleet = match top.remove("fleet") {
            None => None,
            Some(v) => Some(parse_fleet(v)?),
        };

        let mut raw: Vec<Value> = match top.remove("adapters") {
            None => Vec::new(),
            Some(Value::Array(a)) => a,
            Some(other) => {
                return Err(ConfigError::Field {
                    field: "adapters".into(),
                    message: format!(
                        "must be an array of tables ([[adapters]]), got {}",
                        type_name(&other)
                    ),
                })
            }
        };
        match top.remove("l2_adapter") {
            None => {}
            Some(Value::String(s)) => raw.push(Value::String(s)),
            Some(Value::Array(a)) => raw.extend(a),
            Some(other) => {
                return Err(ConfigError::Field {
                    field: "l2_adapter".into(),
                    message: format!(
                        "must be a JSON string or an array of them, got {}",
                        type_name(&other)
                    ),
                })
            }
        }
        if let Some(path) = &src.lmcache_config {
            let mapped = lmcache::read(path)?;
            raw.push(mapped.adapter);
            notes = mapped.notes;
        }
        if !src.cli_adapters.is_empty() {
            raw = src
                .cli_adapters
                .iter()
                .cloned()
                .map(Value::String)
                .collect();
        }
        // JSON strings become objects, so environment overrides can reach their fields.
        let mut objects = Vec::with_capacity(raw.len());
        for (index, v) in raw.into_iter().enumerate() {
            objects.push(match v {
                Value::String(text) => {
                    serde_json::from_str::<Value>(&text).map_err(|e| ConfigError::Json {
                        index,
                        message: e.to_string(),
                    })?
                }
                other => other,
            });
        }
        apply_adapter_env(&mut objects, &env)?;
        let adapters = objects
            .into_iter()
            .enumerate()
            .map(|(i, v)| parse_adapter(i, v))
            .collect::<Result<Vec<_>, _>>()?;
        let config = TierConfig {
            adapters,
            eviction_interval_ms,
            metrics,
            fleet,
        };
        Ok((config, notes))
    }

    /// The resolved configuration as JSON, secrets redacted.
    pub fn to_redacted_json(&self) -> Value {
        serde_json::json!({
            "eviction_interval_ms": self.eviction_interval_ms,
            "metrics": self.metrics,
            "fleet": self.fleet,
            "adapters": self.adapters.iter().map(AdapterConfig::to_redacted_json).collect::<Vec<_>>(),
        })
    }
}
