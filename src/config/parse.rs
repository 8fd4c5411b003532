//! Parsing one section strictly: an adapter (a `[[adapters]]` table or an LMCache JSON string,
//! with its `inner` adapter), `[fleet]`, and the redaction of what they print.
//!
//! Invariants: every error names the adapter (index and type) and the field; a field that may
//! hold a secret is never quoted in an error or printed unredacted; an unknown field, a wrong
//! type or a missing required field is an error, never a default.

use super::*;

/// Parses `[fleet]` strictly (as an adapter: [`strict`]), naming the field that is wrong; the
/// index URL may hold a password, so no error quotes it.
pub(super) fn parse_fleet(v: Value) -> Result<FleetConfig, ConfigError> {
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
    if !(1..=MAX_SHARDS).contains(&fleet.shards) {
        return Err(err(
            "shards",
            format!("must be 1 to {MAX_SHARDS}, got {}", fleet.shards),
        ));
    }
    Ok(fleet)
}

/// The most hash tags one bucket's index may be split over.
const MAX_SHARDS: u32 = 1024;

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
pub(super) fn parse_inner(
    index: usize,
    inner: Option<Value>,
) -> Result<AdapterConfig, ConfigError> {
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
pub(super) fn strict<T: DeserializeOwned>(v: Value) -> Result<T, (String, String)> {
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
pub(super) fn quoted_field(message: &str) -> Option<String> {
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
pub(super) fn without_source_lines(message: &str) -> String {
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
