//! Every bad configuration input gets its named error; good inputs resolve as documented.

use std::collections::HashMap;
use std::io::Write;

use kvtier::config::{ConfigError, ConfigSources, REDACTED};
use kvtier::{AdapterSpec, TierConfig};

fn load(toml: Option<&str>, env: &[(&str, &str)], cli: &[&str]) -> Result<TierConfig, ConfigError> {
    let file = toml.map(|t| {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(t.as_bytes()).unwrap();
        f
    });
    let res = TierConfig::load(&{
        let mut built = ConfigSources::default();
        built.file = file.as_ref().map(|f| f.path().to_owned());
        built.search_dir = None;
        built.env = Some(
            env.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>(),
        );
        built.cli_adapters = cli.iter().map(|s| s.to_string()).collect();
        built
    });
    drop(file);
    res
}

fn adapter_err(res: Result<TierConfig, ConfigError>) -> (usize, String, String, String) {
    match res {
        Err(ConfigError::Adapter {
            index,
            kind,
            field,
            message,
        }) => (index, kind, field, message),
        other => panic!("expected an adapter error, got {other:?}"),
    }
}

#[test]
fn defaults_and_toml_tables() {
    let c = load(None, &[], &[]).unwrap();
    assert!(c.adapters.is_empty());
    assert_eq!(c.eviction_interval_ms, 1000);
    let c = load(
        Some(
            r#"
eviction_interval_ms = 250
[[adapters]]
type = "fs"
base_path = "/tmp/kv"
max_capacity_gb = 2
[adapters.eviction]
eviction_policy = "LRU"
trigger_watermark = 0.85
[[adapters]]
type = "memory"
object_name_format = "grouped"
"#,
        ),
        &[],
        &[],
    )
    .unwrap();
    assert_eq!(c.eviction_interval_ms, 250);
    assert_eq!(c.adapters.len(), 2);
    let fs = &c.adapters[0];
    assert_eq!(fs.common.max_capacity_gb, 2.0);
    let ev = fs.common.eviction.clone().unwrap();
    assert_eq!((ev.trigger_watermark, ev.eviction_ratio), (0.85, 0.2));
    match &fs.spec {
        AdapterSpec::Fs(f) => {
            assert_eq!(f.base_path.to_str(), Some("/tmp/kv"));
            assert_eq!(f.num_workers, 4);
            assert!(f.recover_on_start);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        c.adapters[1].common.object_name_format,
        kvtier::NameFormat::Grouped
    );
}

#[test]
fn json_strings_in_file_env_and_cli() {
    let c = load(
        Some(r#"l2_adapter = ['{"type": "memory", "max_capacity_gb": 1}']"#),
        &[],
        &[],
    )
    .unwrap();
    assert_eq!(c.adapters.len(), 1);
    let c = load(None, &[("KVTIER_L2_ADAPTER", r#"{"type": "memory"}"#)], &[]).unwrap();
    assert_eq!(c.adapters[0].spec.kind(), "memory");
    // CLI adapters replace lower layers.
    let c = load(
        Some(r#"l2_adapter = ['{"type": "memory"}', '{"type": "memory"}']"#),
        &[],
        &[r#"{"type": "fs", "base_path": "/x"}"#],
    )
    .unwrap();
    assert_eq!(c.adapters.len(), 1);
    assert_eq!(c.adapters[0].spec.kind(), "fs");
}

#[test]
fn env_overrides() {
    let toml = "[[adapters]]\ntype = \"fs\"\nbase_path = \"/a\"\n";
    let c = load(
        Some(toml),
        &[
            ("KVTIER_EVICTION_INTERVAL_MS", "20"),
            ("KVTIER_ADAPTERS__0__MAX_CAPACITY_GB", "3.5"),
            ("KVTIER_ADAPTERS__0__EVICTION__EVICTION_RATIO", "0.5"),
            ("KVTIER_ADAPTERS__0__FSYNC", "true"),
            ("KVTIER_LOG", "debug"),
            ("KVTIER_SOMETHING_ELSE", "ignored"),
        ],
        &[],
    )
    .unwrap();
    assert_eq!(c.eviction_interval_ms, 20);
    assert_eq!(c.adapters[0].common.max_capacity_gb, 3.5);
    assert_eq!(
        c.adapters[0]
            .common
            .eviction
            .as_ref()
            .unwrap()
            .eviction_ratio,
        0.5
    );
    match &c.adapters[0].spec {
        AdapterSpec::Fs(f) => assert!(f.fsync),
        other => panic!("{other:?}"),
    }
    let err = load(Some(toml), &[("KVTIER_ADAPTERS__3__FSYNC", "true")], &[]).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Env { var, .. } if var == "KVTIER_ADAPTERS__3__FSYNC"),
        "{err}"
    );
    let err = load(Some(toml), &[("KVTIER_EVICTION_INTERVAL_MS", "soon")], &[]).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Field { field, .. } if field == "eviction_interval_ms"),
        "{err}"
    );
}

#[test]
fn bad_adapter_inputs_name_adapter_and_field() {
    let cases: &[(&str, usize, &str, &str, &str)] = &[
        // (json, index, kind, field, message fragment)
        (
            r#"{"type": "fs", "base_path": "/x", "bogus": 1}"#,
            0,
            "fs",
            "bogus",
            "unknown field",
        ),
        (
            r#"{"type": "fs", "base_path": "/x", "fsync": "true"}"#,
            0,
            "fs",
            "fsync",
            "expected a boolean",
        ),
        (r#"{"type": "fs"}"#, 0, "fs", "base_path", "missing field"),
        (
            r#"{"type": "fs", "base_path": "/x", "num_workers": 0}"#,
            0,
            "fs",
            "num_workers",
            "between 1 and 1024",
        ),
        (
            r#"{"type": "fs", "base_path": "/x", "num_workers": -1}"#,
            0,
            "fs",
            "num_workers",
            "invalid value",
        ),
        (
            r#"{"type": "fs", "base_path": "/x", "relative_tmp_dir": "../up"}"#,
            0,
            "fs",
            "relative_tmp_dir",
            "relative path",
        ),
        (
            r#"{"type": "memory", "max_capacity_gb": -1}"#,
            0,
            "memory",
            "max_capacity_gb",
            ">= 0",
        ),
        (
            r#"{"type": "memory", "max_capacity_gb": "10"}"#,
            0,
            "memory",
            "max_capacity_gb",
            "expected f64",
        ),
        (
            r#"{"type": "memory", "eviction": {"eviction_policy": "FIFO"}}"#,
            0,
            "memory",
            "eviction.eviction_policy",
            "unknown variant",
        ),
        (
            r#"{"type": "memory", "eviction": {"eviction_policy": "lru"}}"#,
            0,
            "memory",
            "eviction.eviction_policy",
            "unknown variant",
        ),
        (
            r#"{"type": "memory", "eviction": {"trigger_watermark": 1.5}}"#,
            0,
            "memory",
            "eviction.trigger_watermark",
            "(0, 1]",
        ),
        (
            r#"{"type": "memory", "eviction": {"eviction_ratio": -0.1}}"#,
            0,
            "memory",
            "eviction.eviction_ratio",
            "[0, 1]",
        ),
        (
            r#"{"type": "memory", "eviction": {"ratio": 0.1}}"#,
            0,
            "memory",
            "eviction.ratio",
            "unknown field",
        ),
        (
            r#"{"type": "memory", "object_name_format": "v2"}"#,
            0,
            "memory",
            "object_name_format",
            "unknown variant",
        ),
        (
            r#"{"type": "memory", "extra": true}"#,
            0,
            "memory",
            "extra",
            "unknown field",
        ),
        (
            r#"{"type": "nfs"}"#,
            0,
            "nfs",
            "type",
            "unknown adapter type",
        ),
        (r#"{"type": 3}"#, 0, "?", "type", "must be a string"),
        (r#"{"base_path": "/x"}"#, 0, "?", "type", "missing"),
    ];
    for (json, index, kind, field, frag) in cases {
        let (i, k, f, m) = adapter_err(load(None, &[], &[json]));
        assert_eq!(
            (i, k.as_str(), f.as_str()),
            (*index, *kind, *field),
            "{json}: {m}"
        );
        assert!(m.contains(frag), "{json}: message {m:?} lacks {frag:?}");
    }
    // The index counts across the list.
    let (i, _, f, _) = adapter_err(load(
        None,
        &[],
        &[r#"{"type": "memory"}"#, r#"{"type": "memory", "x": 1}"#],
    ));
    assert_eq!((i, f.as_str()), (1, "x"));
}

#[test]
fn toml_string_for_bool_is_an_error() {
    let (i, k, f, m) = adapter_err(load(
        Some("[[adapters]]\ntype = \"fs\"\nbase_path = \"/x\"\nfsync = \"true\"\n"),
        &[],
        &[],
    ));
    assert_eq!((i, k.as_str(), f.as_str()), (0, "fs", "fsync"));
    assert!(m.contains("expected a boolean"), "{m}");
}

#[test]
fn bad_json_and_bad_files() {
    let err = load(None, &[], &["{not json"]).unwrap_err();
    assert!(matches!(err, ConfigError::Json { index: 0, .. }), "{err}");
    let err = load(None, &[], &["[1, 2]"]).unwrap_err();
    assert!(matches!(err, ConfigError::Json { index: 0, .. }), "{err}");
    let err = load(Some("adapters = 5"), &[], &[]).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Field { field, .. } if field == "adapters"),
        "{err}"
    );
    let err = load(Some("colour = \"blue\""), &[], &[]).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Field { field, .. } if field == "colour"),
        "{err}"
    );
    let err = load(Some("this is = = not toml"), &[], &[]).unwrap_err();
    assert!(matches!(err, ConfigError::File { .. }), "{err}");
    let err = TierConfig::load(&{
        let mut built = ConfigSources::default();
        built.file = Some("/nonexistent/kvtier.toml".into());
        built.env = Some(HashMap::new());
        built
    })
    .unwrap_err();
    assert!(matches!(err, ConfigError::File { .. }), "{err}");
}

#[test]
fn secrets_are_redacted() {
    let mut v = serde_json::json!({"type": "s3", "aws_secret_access_key": "hunter2", "nested": {"token": "hf_abc"}, "token": null});
    kvtier::config::redact(&mut v);
    let s = v.to_string();
    assert!(!s.contains("hunter2") && !s.contains("hf_abc"), "{s}");
    assert!(s.contains(REDACTED));
}

#[test]
fn fault_inject_parses_its_inner_adapter_strictly() {
    let c = load(
        None,
        &[("KVTIER_ADAPTERS__0__INNER__FSYNC", "true")],
        &[r#"{"type": "fault_inject", "max_capacity_gb": 1, "seed": 9,
              "error_rates": {"put": 0.1, "get": 0.2},
              "latency_ms": {"all": 5, "get": 20},
              "drop_reply_rate": 0.01, "reply_timeout_ms": 500,
              "fail_every_nth_item": 10, "corrupt_size_rate": 0.001,
              "inner": {"type": "fs", "base_path": "/kv"}}"#],
    )
    .unwrap();
    let a = &c.adapters[0];
    assert_eq!(a.spec.kind(), "fault_inject");
    assert_eq!(a.common.max_capacity_gb, 1.0);
    let AdapterSpec::FaultInject(f) = &a.spec else {
        panic!("{a:?}")
    };
    assert_eq!(f.faults.seed, Some(9));
    assert_eq!(
        (f.faults.error_rates.put, f.faults.error_rates.get),
        (0.1, 0.2)
    );
    assert_eq!(f.faults.latency_ms.of("get"), 20);
    assert_eq!(f.faults.latency_ms.of("remove"), 5);
    assert_eq!(f.faults.reply_timeout_ms, 500);
    match &f.inner.spec {
        AdapterSpec::Fs(fs) => assert!(fs.fsync, "env override reached the inner adapter"),
        other => panic!("{other:?}"),
    }
    // Nested wrappers, and the inner secrets are redacted in the resolved JSON.
    #[cfg(feature = "s3")]
    fault_inject_nests_and_redacts_an_s3_adapter();
}

#[cfg(feature = "s3")]
fn fault_inject_nests_and_redacts_an_s3_adapter() {
    let c = load(
        None,
        &[],
        &[r#"{"type": "fault_inject", "inner": {"type": "fault_inject",
              "inner": {"type": "s3", "s3_endpoint": "http://127.0.0.1:9", "s3_bucket": "kv-bucket",
                        "s3_region": "r", "disable_tls": true,
                        "aws_access_key_id": "AKIDFAULT", "aws_secret_access_key": "SECRETFAULT"}}}"#],
    )
    .unwrap();
    let json = c.to_redacted_json();
    let text = json.to_string();
    assert!(
        !text.contains("SECRETFAULT") && !text.contains("AKIDFAULT"),
        "{text}"
    );
    assert_eq!(json["adapters"][0]["inner"]["inner"]["type"], "s3");
    assert_eq!(
        json["adapters"][0]["inner"]["inner"]["aws_secret_access_key"],
        REDACTED
    );
    assert_eq!(json["adapters"][0]["type"], "fault_inject");
}

#[test]
fn fault_inject_errors_name_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        (
            r#"{"type": "fault_inject"}"#,
            "inner",
            "missing field `inner` (the wrapped adapter's config object)",
        ),
        (
            r#"{"type": "fault_inject", "inner": "memory"}"#,
            "inner",
            r#"must be an adapter object like {"type": "memory"}, got a string"#,
        ),
        (
            r#"{"type": "fault_inject", "inner": {"type": "fs"}}"#,
            "inner.base_path",
            "missing field `base_path`",
        ),
        (
            r#"{"type": "fault_inject", "inner": {"type": "memory", "x": 1}}"#,
            "inner.x",
            "unknown field `x`, there are no fields",
        ),
        (
            r#"{"type": "fault_inject", "inner": {"type": "nfs"}}"#,
            "inner.type",
            r#"unknown adapter type "nfs"; expected one of memory, fs, s3, hfbucket, fault_inject"#,
        ),
        (
            r#"{"type": "fault_inject", "inner": {"type": "memory", "max_capacity_gb": 1}}"#,
            "inner.max_capacity_gb",
            "set it on the fault_inject adapter itself, whose name, capacity, eviction and object_name_format apply to the wrapped store",
        ),
        (
            r#"{"type": "fault_inject", "inner": {"type": "memory", "name": "x"}}"#,
            "inner.name",
            "set it on the fault_inject adapter itself, whose name, capacity, eviction and object_name_format apply to the wrapped store",
        ),
        (
            r#"{"type": "fault_inject", "inner": {"type": "fault_inject", "inner": {"type": "fs", "base_path": "/x", "fsync": "yes"}}}"#,
            "inner.inner.fsync",
            r#"invalid type: string "yes", expected a boolean"#,
        ),
        (
            r#"{"type": "fault_inject", "inner": {"type": "memory"}, "error_rates": {"put": 1.5}}"#,
            "error_rates.put",
            "must be in [0, 1], got 1.5",
        ),
        (
            r#"{"type": "fault_inject", "inner": {"type": "memory"}, "error_rates": {"write": 0.5}}"#,
            "error_rates.write",
            "unknown field `write`, expected one of `put`, `head`, `get`, `remove`, `list`",
        ),
        (
            r#"{"type": "fault_inject", "inner": {"type": "memory"}, "drop_reply_rate": -0.1}"#,
            "drop_reply_rate",
            "must be in [0, 1], got -0.1",
        ),
        (
            r#"{"type": "fault_inject", "inner": {"type": "memory"}, "corrupt_size_rate": 2}"#,
            "corrupt_size_rate",
            "must be in [0, 1], got 2",
        ),
        (
            r#"{"type": "fault_inject", "inner": {"type": "memory"}, "latency_ms": {"get": 600001}}"#,
            "latency_ms.get",
            "must be at most 600000 ms, got 600001",
        ),
        (
            r#"{"type": "fault_inject", "inner": {"type": "memory"}, "reply_timeout_ms": 0}"#,
            "reply_timeout_ms",
            "must be at least 1 ms",
        ),
        (
            r#"{"type": "fault_inject", "inner": {"type": "memory"}, "seed": "abc"}"#,
            "seed",
            r#"invalid type: string "abc", expected u64"#,
        ),
    ];
    for (json, field, message) in cases {
        let (i, k, f, m) = adapter_err(load(None, &[], &[json]));
        assert_eq!(
            (i, k.as_str(), f.as_str(), m.as_str()),
            (0, "fault_inject", *field, *message),
            "{json}"
        );
    }
}

#[test]
fn fault_inject_resolved_json_parses_back() {
    let json = r#"{"type": "fault_inject", "max_capacity_gb": 2, "seed": 5,
        "error_rates": {"get": 0.5}, "inner": {"type": "fault_inject", "latency_ms": {"all": 3},
        "inner": {"type": "fs", "base_path": "/kv", "fsync": true}}}"#;
    let c = load(None, &[], &[json]).unwrap();
    let resolved = c.adapters[0].to_redacted_json().to_string();
    let again = load(None, &[], &[&resolved]).unwrap();
    assert_eq!(again.adapters, c.adapters, "{resolved}");
}

/// A build without the `s3` feature names the adapter type and the missing feature, at the
/// top level and inside a `fault_inject` adapter, instead of failing to parse the type.
#[cfg(not(feature = "s3"))]
#[test]
fn s3_without_its_feature_is_a_named_config_error() {
    let err = load(
        None,
        &[],
        &[r#"{"type": "s3", "s3_endpoint": "s3://kv-bucket", "s3_region": "r"}"#],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "adapter #0 (s3): field `type`: adapter type \"s3\" is not in this build: kvtier was \
         built without its cargo feature `s3`; rebuild with `--features s3` (a default feature)"
    );
    let err = load(
        None,
        &[],
        &[r#"{"type": "fault_inject", "inner": {"type": "s3"}}"#],
    )
    .unwrap_err();
    assert!(
        matches!(&err, ConfigError::Adapter { field, message, .. }
            if field == "inner.type" && message.contains("feature `s3`")),
        "{err}"
    );
}

/// The same for `hfbucket`.
#[cfg(not(feature = "hfbucket"))]
#[test]
fn hfbucket_without_its_feature_is_a_named_config_error() {
    let err = load(
        None,
        &[],
        &[r#"{"type": "hfbucket", "bucket_handle": "hf://buckets/o/b"}"#],
    )
    .unwrap_err();
    assert!(
        matches!(&err, ConfigError::Adapter { kind, field, message, .. }
            if kind == "hfbucket" && field == "type"
                && message.contains("without its cargo feature `hfbucket`")),
        "{err}"
    );
}
