//! LMCache's own YAML configuration (the non-MP form that `s3.rst` opens with), read as one
//! `s3` adapter: `--lmcache-config FILE.yaml`, [`ConfigSources::lmcache_config`](super::ConfigSources).
//!
//! ```yaml
//! chunk_size: 256
//! local_cpu: False
//! save_unfull_chunk: False
//! remote_url: "s3://your-bucket-name"
//! remote_serde: "naive"
//! blocking_timeout_secs: 10
//! extra_config:
//!   s3_region: "us-east-1"
//!   s3_num_io_threads: 64
//!   save_chunk_meta: False
//! ```
//!
//! Every field of the file falls in one of three groups ([`MAPPED`], [`RULES`], and LMCache's
//! engine fields in [`LMCACHE_ENGINE_FIELDS`]):
//! - **mapped**: `remote_url` becomes `s3_endpoint` as it is (LMCache's S3 connector and its MP
//!   adapter read the same two forms, `s3://bucket` and `s3://bucket.host`), and the S3 keys
//!   of `extra_config` keep their names;
//! - **rules**: `save_unfull_chunk` and `extra_config.save_chunk_meta` must be false (the seed
//!   says so for S3; LMCache asserts the second), `remote_serde` must be `naive` (kvtier stores
//!   raw chunk bytes; `cachegen` or any other codec is an error naming it);
//! - **engine fields** (`chunk_size`, `local_cpu`, `max_local_cpu_size`, …: every other name
//!   LMCache 0.5.6 and 0.5.7 define) belong to LMCache's engine, not to an L2 tier: they are
//!   accepted and ignored, and the loader returns their names as notes (`kvtier check-config`
//!   prints them).
//!
//! A name LMCache does not define, and an `extra_config` key its S3 connector does not read,
//! is an error: a misspelt field would otherwise be silently dropped.
//!
//! Types are strict, as everywhere in kvtier. LMCache passes these values through Python's
//! `bool()` and `int()`, so its YAML string `"false"` counts as true there; kvtier refuses a
//! string where a bool belongs rather than guess. YAML's `True`/`False` (the seed's spelling)
//! are bools. Secrets (`aws_access_key_id`, `aws_secret_access_key`) never appear in errors.
//!
//! Objects are named as kvtier and LMCache's MP adapters name them, not with the non-MP
//! `CacheEngineKey` names: a bucket written by non-MP LMCache is not readable by kvtier or by
//! MP LMCache (the seed says so too).

use std::path::Path;

use serde_json::{Map, Value};

use super::{type_name, ConfigError, SECRET_FIELDS};

/// Fields kvtier maps onto the `s3` adapter: (field in the YAML file, `s3` adapter field).
pub const MAPPED: &[(&str, &str)] = &[
    ("remote_url", "s3_endpoint"),
    ("extra_config.s3_region", "s3_region"),
    ("extra_config.s3_num_io_threads", "s3_num_io_threads"),
    ("extra_config.s3_prefer_http2", "s3_prefer_http2"),
    ("extra_config.s3_enable_s3express", "s3_enable_s3express"),
    ("extra_config.disable_tls", "disable_tls"),
    ("extra_config.aws_access_key_id", "aws_access_key_id"),
    (
        "extra_config.aws_secret_access_key",
        "aws_secret_access_key",
    ),
];

/// Fields with a rule and no adapter field of their own: (field, what it must be).
pub const RULES: &[(&str, &str)] = &[
    ("save_unfull_chunk", "false (S3 stores full chunks only)"),
    (
        "extra_config.save_chunk_meta",
        "false (kvtier stores raw chunk bytes, no metadata)",
    ),
    ("remote_serde", "\"naive\" (kvtier stores raw chunk bytes)"),
];

/// The fields of LMCache's engine configuration (`_CONFIG_DEFINITIONS` in
/// `lmcache/v1/config.py`; the same 108 names in 0.5.6 and 0.5.7rc2). Those that are neither
/// [`MAPPED`] nor in [`RULES`] are accepted and ignored.
pub const LMCACHE_ENGINE_FIELDS: &[&str] = &[
    "chunk_size",
    "local_cpu",
    "max_local_cpu_size",
    "local_cpu_use_hugepages",
    "reserve_local_cpu_size",
    "local_disk",
    "local_disk_path_sharding",
    "max_local_disk_size",
    "remote_url",
    "remote_serde",
    "use_layerwise",
    "save_decode_cache",
    "pre_caching_hash_algorithm",
    "enable_blending",
    "blend_recompute_ratios",
    "blend_thresholds",
    "blend_check_layers",
    "blend_min_tokens",
    "blend_special_str",
    "retrieve_locations",
    "store_location",
    "mp_host",
    "mp_port",
    "enable_controller",
    "lmcache_instance_id",
    "controller_pull_url",
    "controller_reply_url",
    "lmcache_worker_ports",
    "lmcache_worker_ids",
    "lmcache_worker_heartbeat_delay_time",
    "lmcache_worker_heartbeat_time",
    "enable_pd",
    "pd_role",
    "pd_buffer_size",
    "pd_buffer_device",
    "pd_peer_host",
    "pd_peer_init_port",
    "pd_peer_alloc_port",
    "pd_peer_query_port",
    "pd_proxy_host",
    "pd_proxy_port",
    "pd_allocation_timeout_sec",
    "pd_shutdown_timeout_sec",
    "pd_condition_poll_interval_sec",
    "pd_max_prefill_len",
    "pd_backend_mode",
    "pd_skip_proxy_notification",
    "pd_bidirectional",
    "transfer_channel",
    "nixl_backends",
    "nixl_buffer_size",
    "nixl_buffer_device",
    "gds_path",
    "gds_path_sharding",
    "gds_buffer_size",
    "maru_path",
    "maru_pool_size",
    "use_gds",
    "gds_backend",
    "audit_actual_remote_url",
    "internal_api_server_host",
    "extra_config",
    "save_unfull_chunk",
    "blocking_timeout_secs",
    "external_lookup_client",
    "py_enable_gc",
    "cache_policy",
    "numa_mode",
    "enable_async_loading",
    "internal_api_server_enabled",
    "internal_api_server_port_start",
    "priority_limit",
    "internal_api_server_include_index_list",
    "internal_api_server_socket_path_prefix",
    "runtime_plugin_locations",
    "storage_plugins",
    "remote_storage_plugins",
    "lookup_timeout_ms",
    "min_retrieve_tokens",
    "hit_miss_ratio",
    "lookup_server_worker_ids",
    "enable_scheduler_bypass_lookup",
    "script_allowed_imports",
    "run_script_api_enabled",
    "enable_lazy_memory_allocator",
    "lazy_memory_initial_ratio",
    "lazy_memory_expand_trigger_ratio",
    "lazy_memory_step_ratio",
    "lazy_memory_safe_size",
    "enable_chunk_statistics",
    "chunk_statistics_auto_start_statistics",
    "chunk_statistics_auto_exit_timeout_hours",
    "chunk_statistics_auto_exit_target_unique_chunks",
    "chunk_statistics_strategy",
    "enable_kv_events",
    "pin_timeout_sec",
    "pin_check_interval_sec",
    "remote_config_url",
    "app_id",
    "enable_hidden_state_cache",
    "max_hidden_state_cpu_size",
    "hidden_state_layers",
    "hidden_states_retrieve_mode",
];

/// Engine fields whose type kvtier still checks (the ones the seed's examples set), so that a
/// file LMCache would misread is refused here too: (field, expected kind).
const TYPED_ENGINE_FIELDS: &[(&str, Kind)] = &[
    ("chunk_size", Kind::Int),
    ("local_cpu", Kind::Bool),
    ("max_local_cpu_size", Kind::Number),
    ("blocking_timeout_secs", Kind::Number),
    ("enable_async_loading", Kind::Bool),
];

#[derive(Clone, Copy)]
enum Kind {
    Bool,
    Int,
    Number,
    String,
}

impl Kind {
    fn of(field: &str) -> Kind {
        match field {
            "s3_num_io_threads" => Kind::Int,
            "s3_prefer_http2" | "s3_enable_s3express" | "disable_tls" | "save_chunk_meta" => {
                Kind::Bool
            }
            _ => Kind::String,
        }
    }

    fn accepts(self, v: &Value) -> bool {
        match self {
            Kind::Bool => v.is_boolean(),
            Kind::Int => v.is_u64(),
            Kind::Number => v.is_number(),
            Kind::String => v.is_string(),
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Kind::Bool => "true or false",
            Kind::Int => "a whole number",
            Kind::Number => "a number",
            Kind::String => "a string",
        }
    }
}

/// An LMCache YAML file read as an `s3` adapter.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mapped {
    /// The `s3` adapter object, for the strict adapter parser.
    pub(crate) adapter: Value,
    /// One line per LMCache engine field accepted and ignored.
    pub(crate) notes: Vec<String>,
}

/// Reads `path` and maps it.
pub(crate) fn read(path: &Path) -> Result<Mapped, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Lmcache {
        path: shown.clone(),
        field: "-".into(),
        message: format!("cannot read the file: {e}"),
    })?;
    map(&shown, &text)
}

/// Maps the YAML `text` (read from `path`, which errors name).
pub(crate) fn map(path: &str, text: &str) -> Result<Mapped, ConfigError> {
    let err = |field: &str, message: String| ConfigError::Lmcache {
        path: path.to_owned(),
        field: field.to_owned(),
        message,
    };
    // The parser's message names a line and column, never the text there (a secret may be on
    // that line).
    let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!(" at line {} column {}", l.line(), l.column()))
            .unwrap_or_default();
        err("-", format!("not a YAML mapping of LMCache fields{at}"))
    })?;
    let Value::Object(mut top) = doc else {
        return Err(err(
            "-",
            format!(
                "expected a mapping of LMCache fields, got {}",
                type_name(&doc)
            ),
        ));
    };
    let mut adapter = Map::new();
    adapter.insert("type".into(), "s3".into());

    // remote_url: required, an s3:// URL.
    match top.remove("remote_url") {
        Some(Value::String(url)) if url.starts_with("s3://") => {
            adapter.insert("s3_endpoint".into(), Value::String(url));
        }
        Some(Value::String(url)) => {
            let scheme = url.split("://").next().unwrap_or_default();
            return Err(err(
                "remote_url",
                format!(
                    "kvtier reads only s3:// remote URLs from an LMCache config (got a \
                     {scheme:?} URL); configure other stores as kvtier adapters (--l2-adapter)"
                ),
            ));
        }
        None | Some(Value::Null) => {
            return Err(err(
                "remote_url",
                "missing; expected the bucket URL, e.g. \"s3://my-bucket\"".into(),
            ))
        }
        Some(other) => {
            return Err(err(
                "remote_url",
                format!("must be a string, got {}", type_name(&other)),
            ))
        }
    }

    // The rules.
    if let Some(v) = top.remove("save_unfull_chunk") {
        must_be_false(&err, "save_unfull_chunk", &v, "S3 stores full chunks only")?;
    }
    match top.remove("remote_serde") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "naive" => {}
        Some(Value::String(s)) => {
            return Err(err(
                "remote_serde",
                format!(
                    "{s:?} is not supported: kvtier stores raw chunk bytes, which is LMCache's \
                     \"naive\" serde; use remote_serde: \"naive\""
                ),
            ))
        }
        Some(other) => {
            return Err(err(
                "remote_serde",
                format!("must be the string \"naive\", got {}", type_name(&other)),
            ))
        }
    }

    // extra_config: the S3 connector's keys.
    match top.remove("extra_config") {
        None | Some(Value::Null) => {}
        Some(Value::Object(extra)) => {
            for (k, v) in extra {
                let field = format!("extra_config.{k}");
                if k == "save_chunk_meta" {
                    must_be_false(
                        &err,
                        &field,
                        &v,
                        "LMCache's S3 connector asserts it; kvtier stores raw chunk bytes",
                    )?;
                    continue;
                }
                let Some((_, target)) = MAPPED.iter().find(|(from, _)| *from == field) else {
                    let known: Vec<&str> = MAPPED
                        .iter()
                        .filter_map(|(f, _)| f.strip_prefix("extra_config."))
                        .chain(["save_chunk_meta"])
                        .collect();
                    return Err(err(
                        &field,
                        format!(
                            "not a key of LMCache's S3 connector; expected one of {}",
                            known.join(", ")
                        ),
                    ));
                };
                if v.is_null() {
                    continue;
                }
                check_kind(&err, &field, &v, Kind::of(target))?;
                adapter.insert((*target).to_owned(), v);
            }
        }
        Some(other) => {
            return Err(err(
                "extra_config",
                format!("must be a mapping, got {}", type_name(&other)),
            ))
        }
    }
    if !adapter.contains_key("s3_region") {
        return Err(err(
            "extra_config.s3_region",
            "missing; LMCache's S3 connector requires it (e.g. s3_region: \"us-east-1\")".into(),
        ));
    }

    // Everything left: LMCache's engine fields, accepted and ignored.
    let mut notes = Vec::new();
    for (k, v) in top {
        if !LMCACHE_ENGINE_FIELDS.contains(&k.as_str()) {
            return Err(err(
                &k,
                "not an LMCache configuration field (kvtier knows the fields of LMCache 0.5.6 \
                 and 0.5.7's lmcache/v1/config.py)"
                    .into(),
            ));
        }
        if let Some((_, kind)) = TYPED_ENGINE_FIELDS.iter().find(|(f, _)| *f == k) {
            if !v.is_null() {
                check_kind(&err, &k, &v, *kind)?;
            }
        }
        notes.push(format!(
            "{path}: `{k}` belongs to LMCache's engine, not to an L2 tier: accepted and ignored"
        ));
    }
    Ok(Mapped {
        adapter: Value::Object(adapter),
        notes,
    })
}

fn check_kind(
    err: &impl Fn(&str, String) -> ConfigError,
    field: &str,
    v: &Value,
    kind: Kind,
) -> Result<(), ConfigError> {
    if kind.accepts(v) {
        return Ok(());
    }
    let secret = SECRET_FIELDS.iter().any(|s| field.ends_with(s));
    let got = match v {
        _ if secret => type_name(v).to_owned(),
        Value::String(s) => format!("the string {s:?}"),
        other => format!("{} ({other})", type_name(other)),
    };
    let why = if matches!(kind, Kind::Bool) && v.is_string() {
        " (LMCache reads it with Python's bool(), where every non-empty string, \"false\" \
         included, is true; write True or False without quotes)"
    } else {
        ""
    };
    Err(err(
        field,
        format!("must be {}, got {got}{why}", kind.expected()),
    ))
}

fn must_be_false(
    err: &impl Fn(&str, String) -> ConfigError,
    field: &str,
    v: &Value,
    why: &str,
) -> Result<(), ConfigError> {
    match v {
        Value::Null | Value::Bool(false) => Ok(()),
        Value::Bool(true) => Err(err(field, format!("must be false: {why}"))),
        other => check_kind(err, field, other, Kind::Bool),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Mapped {
        map("t.yaml", text).unwrap()
    }

    fn fails(text: &str) -> (String, String) {
        match map("t.yaml", text).unwrap_err() {
            ConfigError::Lmcache { field, message, .. } => (field, message),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn maps_remote_url_and_extra_config() {
        let m = ok(
            "remote_url: \"s3://b\"\nchunk_size: 256\nextra_config:\n  s3_region: r\n  \
                    s3_num_io_threads: 8\n  disable_tls: True\n  save_chunk_meta: False\n",
        );
        assert_eq!(
            m.adapter,
            serde_json::json!({"type": "s3", "s3_endpoint": "s3://b", "s3_region": "r",
                               "s3_num_io_threads": 8, "disable_tls": true})
        );
        assert_eq!(m.notes.len(), 1);
        assert!(m.notes[0].contains("`chunk_size`"), "{:?}", m.notes);
    }

    #[test]
    fn a_quoted_false_is_refused_with_the_reason() {
        let (f, m) =
            fails("remote_url: s3://b\nextra_config:\n  s3_region: r\n  disable_tls: \"false\"\n");
        assert_eq!(f, "extra_config.disable_tls");
        assert!(
            m.contains("the string \"false\"") && m.contains("bool()"),
            "{m}"
        );
    }

    #[test]
    fn rules_and_unknown_names() {
        let base = "remote_url: s3://b\nextra_config:\n  s3_region: r\n";
        let (f, m) = fails(&format!("{base}save_unfull_chunk: True\n"));
        assert_eq!(f, "save_unfull_chunk");
        assert!(m.starts_with("must be false"), "{m}");
        let (f, m) = fails(&format!("{base}remote_serde: cachegen\n"));
        assert_eq!(f, "remote_serde");
        assert!(m.contains("\"cachegen\""), "{m}");
        let (f, _) = fails(&format!("{base}  save_chunk_meta: true\n"));
        assert_eq!(f, "extra_config.save_chunk_meta");
        let (f, m) = fails(&format!("{base}  s3_regoin: x\n"));
        assert_eq!(f, "extra_config.s3_regoin");
        assert!(m.contains("s3_region"), "{m}");
        let (f, _) = fails(&format!("{base}chunk_sise: 256\n"));
        assert_eq!(f, "chunk_sise");
        let (f, _) = fails(&format!("{base}chunk_size: \"256\"\n"));
        assert_eq!(f, "chunk_size");
        let (f, m) = fails("remote_url: lm://host:1\nextra_config:\n  s3_region: r\n");
        assert_eq!(f, "remote_url");
        assert!(m.contains("\"lm\""), "{m}");
        let (f, _) = fails("remote_url: s3://b\n");
        assert_eq!(f, "extra_config.s3_region");
        let (f, _) = fails("chunk_size: 256\n");
        assert_eq!(f, "remote_url");
    }

    #[test]
    fn secrets_stay_out_of_errors() {
        let e = map(
            "t.yaml",
            "remote_url: s3://b\nextra_config:\n  s3_region: r\n  aws_secret_access_key: 12345678\n",
        )
        .unwrap_err()
        .to_string();
        assert!(!e.contains("12345678"), "{e}");
        let e = map(
            "t.yaml",
            "remote_url: s3://b\naws_secret_access_key: \"hunter2\n",
        )
        .unwrap_err()
        .to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }
}
