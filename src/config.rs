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

pub mod lmcache;

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

/// Parses `[fleet]` strictly (as an adapter: [`strict`]), naming the field that is wrong; the
/// index URL may hold a password, so no error quotes it.
fn parse_fleet(v: Value) -> Result<FleetConfig, ConfigError> {
    let err = |field: &str, message: String| ConfigError::Field {
        field: format!("fleet.{field}"),
        message,
    };
    if !v.is_object() {
        return Err(err(
            "",
            format!("must be a table ([fleet]), got {}", type_name(&v)),
        ));
    }
    let fleet: FleetConfig = strict(v).map_err(|(field, message)| err(&field, message))?;
    let url = fleet.index.expose();
    if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
        return Err(err(
            "index",
            "must be a redis:// or rediss:// URL (Redis or Valkey)".into(),
        ));
    }
    if fleet
        .node_id
        .as_ref()
        .is_some_and(|id| id.trim().is_empty())
    {
        return Err(err("node_id", "must not be empty".into()));
    }
    if let Some(m) = fleet.landing_mark {
        if !(m > 0.0 && m <= 1.0) {
            return Err(err("landing_mark", format!("must be in (0, 1], got {m}")));
        }
    }
    Ok(fleet)
}

/// Splits `fleet` off one adapter's JSON text: the LMCache plugin's `adapter_params.fleet`
/// (`{"index": "redis://…", "node_id": "…"}`), which is the process's fleet, not an adapter
/// field. Returns the adapter's text without it, and the fleet.
pub fn split_fleet_json(
    index: usize,
    text: &str,
) -> Result<(String, Option<FleetConfig>), ConfigError> {
    let mut v = serde_json::from_str::<Value>(text).map_err(|e| ConfigError::Json {
        index,
        message: e.to_string(),
    })?;
    let fleet = match v.as_object_mut().and_then(|m| m.remove("fleet")) {
        None => None,
        Some(f) => Some(parse_fleet(f)?),
    };
    Ok((v.to_string(), fleet))
}

/// Parses one adapter given as LMCache JSON text (as `--l2-adapter` takes it).
pub fn parse_adapter_json(index: usize, text: &str) -> Result<AdapterConfig, ConfigError> {
    let v = serde_json::from_str::<Value>(text).map_err(|e| ConfigError::Json {
        index,
        message: e.to_string(),
    })?;
    parse_adapter(index, v)
}

/// Parses one adapter object: its `type`, the common fields, then the type's own, strictly.
pub fn parse_adapter(index: usize, value: Value) -> Result<AdapterConfig, ConfigError> {
    let Value::Object(mut obj) = value else {
        return Err(ConfigError::Json {
            index,
            message: format!("expected an object, got {}", type_name(&value)),
        });
    };
    let err = |kind: &str, field: &str, message: String| ConfigError::Adapter {
        index,
        kind: kind.to_owned(),
        field: field.to_owned(),
        message,
    };
    let kind = match obj.remove("type") {
        Some(Value::String(t)) => t,
        Some(other) => {
            return Err(err(
                "?",
                "type",
                format!("must be a string, got {}", type_name(&other)),
            ))
        }
        None => {
            return Err(err(
                "?",
                "type",
                format!("missing; expected one of {}", ADAPTER_TYPES.join(", ")),
            ))
        }
    };
    let mut common_obj = Map::new();
    for f in CommonConfig::FIELDS {
        if let Some(v) = obj.remove(f) {
            common_obj.insert(f.to_owned(), v);
        }
    }
    let field_err = |e: FieldError| err(&kind, &e.field, e.message);
    let inner = if kind == "fault_inject" {
        obj.remove("inner")
    } else {
        None
    };
    let common: CommonConfig =
        strict(Value::Object(common_obj)).map_err(|(f, m)| err(&kind, &f, m))?;
    common.validate().map_err(field_err)?;
    let rest = Value::Object(obj);
    let spec = match kind.as_str() {
        "memory" => AdapterSpec::Memory(strict(rest).map_err(|(f, m)| err(&kind, &f, m))?),
        "fs" => {
            let c: FsConfig = strict(rest).map_err(|(f, m)| err(&kind, &f, m))?;
            c.validate().map_err(field_err)?;
            AdapterSpec::Fs(c)
        }
        #[cfg(feature = "s3")]
        "s3" => {
            let c: S3Config = strict(rest).map_err(|(f, m)| err(&kind, &f, m))?;
            c.validate().map_err(field_err)?;
            AdapterSpec::S3(c)
        }
        #[cfg(feature = "hfbucket")]
        "hfbucket" => {
            let c: HfBucketConfig = strict(rest).map_err(|(f, m)| err(&kind, &f, m))?;
            c.validate().map_err(field_err)?;
            AdapterSpec::HfBucket(c)
        }
        #[cfg(not(feature = "s3"))]
        "s3" => return Err(err(&kind, "type", missing_feature("s3"))),
        #[cfg(not(feature = "hfbucket"))]
        "hfbucket" => return Err(err(&kind, "type", missing_feature("hfbucket"))),
        "fault_inject" => {
            let c: FaultInjectConfig = strict(rest).map_err(|(f, m)| err(&kind, &f, m))?;
            c.validate().map_err(field_err)?;
            AdapterSpec::FaultInject(FaultInjectSpec {
                faults: c,
                inner: Box::new(parse_inner(index, inner)?),
            })
        }
        other => {
            return Err(err(
                other,
                "type",
                format!(
                    "unknown adapter type {other:?}; expected one of {}",
                    ADAPTER_TYPES.join(", ")
                ),
            ))
        }
    };
    Ok(AdapterConfig { common, spec })
}

/// The error message for an adapter type whose crate feature this build lacks: `kind` is both
/// the adapter type and the feature's name (`s3`, `hfbucket`).
pub fn missing_feature(kind: &str) -> String {
    format!(
        "adapter type {kind:?} is not in this build: kvtier was built without its cargo feature \
         `{kind}`; rebuild with `--features {kind}` (a default feature)"
    )
}

/// Parses the `inner` adapter of a `fault_inject` adapter: strictly, like a top-level adapter,
/// with errors naming `inner.<field>`.
fn parse_inner(index: usize, inner: Option<Value>) -> Result<AdapterConfig, ConfigError> {
    let err = |field: String, message: String| ConfigError::Adapter {
        index,
        kind: "fault_inject".into(),
        field,
        message,
    };
    let Some(inner) = inner else {
        return Err(err(
            "inner".into(),
            "missing field `inner` (the wrapped adapter's config object)".into(),
        ));
    };
    let Value::Object(obj) = &inner else {
        return Err(err(
            "inner".into(),
            format!(
                "must be an adapter object like {{\"type\": \"memory\"}}, got {}",
                type_name(&inner)
            ),
        ));
    };
    if let Some(f) = CommonConfig::FIELDS.iter().find(|f| obj.contains_key(**f)) {
        return Err(err(
            format!("inner.{f}"),
            "set it on the fault_inject adapter itself, whose name, capacity, eviction and \
             object_name_format apply to the wrapped store"
                .into(),
        ));
    }
    parse_adapter(index, inner).map_err(|e| match e {
        ConfigError::Adapter { field, message, .. } => err(format!("inner.{field}"), message),
        other => other,
    })
}

/// Deserializes strictly, returning `(field path, message)` on error, with secret values hidden.
fn strict<T: DeserializeOwned>(v: Value) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        let field = if path == "." || path.is_empty() {
            quoted_field(&message).unwrap_or_else(|| "?".into())
        } else {
            path
        };
        // A missing secret has no value to hide.
        let missing = message.starts_with("missing field");
        let message = if !missing && SECRET_FIELDS.iter().any(|s| field.ends_with(s)) {
            "invalid value (not shown: secret)".to_owned()
        } else {
            message
        };
        (field, message)
    })
}

/// The field named in a serde message like "missing field `x`".
fn quoted_field(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_owned())
}

pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Replaces the values of secret fields, at any depth.
pub fn redact(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, val) in m.iter_mut() {
                if SECRET_FIELDS.contains(&k.as_str()) && !val.is_null() {
                    *val = Value::String(REDACTED.into());
                } else {
                    redact(val);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(redact),
        _ => {}
    }
}

/// Drops the source excerpt a TOML parse error quotes (`3 | token = "…"` and the `|` lines
/// around it): the quoted line may hold a secret. The line and column numbers stay.
fn without_source_lines(message: &str) -> String {
    message
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            let after_digits = t.trim_start_matches(|c: char| c.is_ascii_digit());
            !(t.starts_with('|')
                || (after_digits.len() < t.len() && after_digits.starts_with(" |")))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Merges defaults, the file and the top-level environment variables with the `config` crate.
fn merge_layers(file: Option<&Path>, env: &HashMap<String, String>) -> Result<Value, ConfigError> {
    use config::{Config, Environment, File, FileFormat};
    let file_err = |path: &Path, e: config::ConfigError| ConfigError::File {
        path: path.display().to_string(),
        message: without_source_lines(&e.to_string()),
    };
    // Only the known top-level variables: other KVTIER_* names (KVTIER_LOG, test tooling) are
    // not configuration. Per-adapter overrides are applied by `apply_adapter_env`, after JSON
    // strings are parsed.
    let top_env: HashMap<String, String> = env
        .iter()
        .filter(|(k, _)| ENV_VARS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut builder = Config::builder();
    if let Some(path) = file {
        if !path.is_file() {
            return Err(ConfigError::File {
                path: path.display().to_string(),
                message: "no such file".into(),
            });
        }
        builder = builder.add_source(File::from(path).format(FileFormat::Toml).required(true));
    }
    builder = builder.add_source(
        Environment::with_prefix(ENV_PREFIX)
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .source(Some(top_env.into_iter().collect())),
    );
    let cfg = builder.build().map_err(|e| match file {
        Some(p) => file_err(p, e),
        None => ConfigError::Field {
            field: "?".into(),
            message: e.to_string(),
        },
    })?;
    cfg.try_deserialize::<Value>()
        .map_err(|e| ConfigError::Field {
            field: "?".into(),
            message: e.to_string(),
        })
}

/// Applies `KVTIER_ADAPTERS__<i>__<FIELD>[__<SUBFIELD>]` overrides. Values are read as JSON
/// scalars when they parse as such (`5`, `0.5`, `true`), else as strings; quote a string that
/// looks like a number (`'"5"'`).
fn apply_adapter_env(
    objects: &mut [Value],
    env: &HashMap<String, String>,
) -> Result<(), ConfigError> {
    let mut vars: Vec<(&String, &String)> = env
        .iter()
        .filter(|(k, _)| k.starts_with("KVTIER_ADAPTERS__"))
        .collect();
    vars.sort();
    for (var, raw) in vars {
        let env_err = |message: String| ConfigError::Env {
            var: var.clone(),
            message,
        };
        let path: Vec<String> = var["KVTIER_ADAPTERS__".len()..]
            .split("__")
            .map(str::to_lowercase)
            .collect();
        let index: usize = path[0]
            .parse()
            .map_err(|_| env_err(format!("{:?} is not an adapter index", path[0])))?;
        if path.len() < 2 || path[1..].iter().any(String::is_empty) {
            return Err(env_err("expected KVTIER_ADAPTERS__<index>__<field>".into()));
        }
        let Some(target) = objects.get_mut(index) else {
            return Err(env_err(format!(
                "there is no adapter #{index} (there are {})",
                objects.len()
            )));
        };
        let value = match serde_json::from_str::<Value>(raw) {
            Ok(v @ (Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Null)) => v,
            _ => Value::String(raw.clone()),
        };
        let mut node = target;
        for (depth, seg) in path[1..].iter().enumerate() {
            let Value::Object(m) = node else {
                return Err(env_err(format!("adapter #{index} is not a table")));
            };
            if depth == path.len() - 2 {
                m.insert(seg.clone(), value);
                break;
            }
            node = m
                .entry(seg.clone())
                .or_insert_with(|| Value::Object(Map::new()));
        }
    }
    Ok(())
}
