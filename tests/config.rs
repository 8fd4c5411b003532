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
    let res = TierConfig::load(&ConfigSources {
        file: file.as_ref().map(|f| f.path().to_owned()),
        search_dir: None,
        env: Some(
            env.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>(),
        ),
        cli_adapters: cli.iter().map(|s| s.to_string()).collect(),
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
    let ev = fs.common.eviction.unwrap();
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
    assert_eq!(c.adapters[0].common.eviction.unwrap().eviction_ratio, 0.5);
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
    let err = TierConfig::load(&ConfigSources {
        file: Some("/nonexistent/kvtier.toml".into()),
        env: Some(HashMap::new()),
        ..Default::default()
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
