//! Hostile input: fuzzing (proptest) of object-name parsing, key construction, bucket-handle
//! parsing and configuration loading (adapter JSON, TOML files, environment overrides), a table
//! of bad inputs with the exact error text each one gets, and `fs` path traversal.
//!
//! The properties: nothing panics; every rejection is a named error whose text says what was
//! wrong; everything accepted round-trips. The number of cases per property is in [`CASES`];
//! `cargo test --test hostile_input -- --nocapture` prints each property's count and time.

use kvtier_testkit as support;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use bytes::BytesMut;
use kvtier::actors::backends::fs::name::lmcache_round_trips;
use kvtier::actors::backends::fs::{file_name, parse_file_name};
use kvtier::actors::backends::hfbucket::{BucketHandle, HandleError};
use kvtier::actors::key::MAX_SALT_CHARS;
use kvtier::actors::KeyError;
use kvtier::config::parse_adapter;
use kvtier::{AdapterConfig, ConfigError, ConfigSources, NameFormat, ObjectKey, Tier, TierConfig};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::Value;
use support::payload;

/// Cases per property (the cheap ones); config loading through files runs [`FILE_CASES`].
const CASES: u32 = 4000;
const FILE_CASES: u32 = 500;

/// Runs `test` on `cases` values of `strategy` (it returns whether the input was accepted),
/// printing the counts and time; both outcomes must occur, or the property proves little.
fn fuzz<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    both: Both,
    test: impl Fn(S::Value) -> bool,
) {
    let accepted = std::cell::Cell::new(0u32);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let started = Instant::now();
    let result = runner.run(&strategy, |v| {
        if test(v) {
            accepted.set(accepted.get() + 1);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    let accepted = accepted.get();
    eprintln!(
        "{name}: {cases} cases ({accepted} accepted, {} rejected) in {:.2} s",
        cases - accepted,
        started.elapsed().as_secs_f64()
    );
    if both == Both::Required {
        assert!(
            accepted > 0 && accepted < cases,
            "{name}: {accepted} of {cases} accepted"
        );
    }
}

/// Whether a fuzz run must see both accepted and rejected inputs (random strings are rarely
/// valid anything, so for them it is not required).
#[derive(PartialEq, Eq)]
enum Both {
    Required,
    Optional,
}

fn formats() -> [NameFormat; 2] {
    [NameFormat::Seed, NameFormat::Grouped]
}

/// Pieces that make a name parse often enough to test both sides.
fn name_like() -> impl Strategy<Value = String> {
    let model = prop_oneof![
        Just("llama".to_owned()),
        Just("meta-llama/Llama-3".to_owned()),
        Just("..".to_owned()),
        "[a-zA-Z/._\\\\ \u{0}-]{0,12}",
        any::<String>(),
    ];
    let rank = prop_oneof![
        "[0-9a-f]{8}",
        "[0-9a-fA-F]{0,10}",
        Just("000000ff".to_owned())
    ];
    let group = prop_oneof!["[0-9a-f]{1,9}", "0[0-9a-f]{0,3}", Just(String::new())];
    let hash = prop_oneof!["([0-9a-f]{2}){1,6}", "[0-9a-fA-Fxz]{0,7}"];
    let salt = prop_oneof![
        Just(None),
        "[a-z0-9@/\\\\-]{0,10}".prop_map(Some),
        "x{120,140}".prop_map(Some),
    ];
    (model, rank, group, hash, salt, any::<bool>()).prop_map(|(m, r, g, h, s, grouped)| {
        let mut n = format!("{m}@{r}@");
        if grouped {
            n.push_str(&g);
            n.push('@');
        }
        n.push_str(&h);
        if let Some(s) = s {
            n.push('@');
            n.push_str(&s);
        }
        n
    })
}

fn check_name(name: &str) -> bool {
    let mut accepted = false;
    for fmt in formats() {
        match ObjectKey::parse(name, fmt) {
            Ok(key) => {
                accepted = true;
                // One key, one name: parsing is the exact inverse of naming.
                assert_eq!(key.object_name(fmt), name, "{fmt}");
                assert_eq!(ObjectKey::parse(&key.object_name(fmt), fmt).unwrap(), key);
            }
            Err(KeyError::BadName {
                name: quoted,
                format,
                reason,
            }) => {
                assert_eq!(format, fmt);
                assert!(quoted.chars().count() <= 200);
                assert!(name.starts_with(&quoted), "the quoted name is a prefix");
                assert!(!reason.is_empty());
            }
            Err(other) => panic!("{name:?} ({fmt}): not a BadName error: {other:?}"),
        }
    }
    accepted
}

#[test]
fn fuzz_object_names() {
    fuzz(
        "object names (any string)",
        CASES,
        any::<String>(),
        Both::Optional,
        |s| check_name(&s),
    );
    fuzz(
        "object names (name-like)",
        CASES,
        name_like(),
        Both::Required,
        |s| check_name(&s),
    );
}

#[test]
fn fuzz_keys_and_salts() {
    fuzz(
        "keys and salts",
        CASES,
        (
            any::<String>(),
            any::<u32>(),
            prop::collection::vec(any::<u8>(), 0..40),
            prop_oneof![any::<String>(), "[a-z@/\\\\\u{0}]{0,140}"],
            any::<u32>(),
        ),
        Both::Required,
        |(model, rank, hash, salt, group)| {
            let key = ObjectKey::new(&model, rank, hash.clone());
            let expected = if model.is_empty() {
                Some(KeyError::EmptyModel)
            } else if model.contains('@') {
                Some(KeyError::ModelHasSeparator {
                    model: model.chars().take(200).collect(),
                })
            } else if hash.is_empty() {
                Some(KeyError::EmptyHash)
            } else {
                None
            };
            let key = match (key, expected) {
                (Err(e), Some(want)) => {
                    assert_eq!(e, want);
                    return false;
                }
                (Ok(k), None) => k.with_group(group),
                (got, want) => panic!("{model:?}: got {got:?}, expected {want:?}"),
            };
            let chars = salt.chars().count();
            let forbidden = salt.chars().find(|c| matches!(c, '@' | '/' | '\\' | '\0'));
            match (key.clone().with_salt(&salt), forbidden) {
                (Err(e), _) if chars > MAX_SALT_CHARS => {
                    assert_eq!(e, KeyError::SaltTooLong { chars });
                    false
                }
                (Err(e), Some(ch)) => {
                    assert_eq!(e, KeyError::SaltForbiddenChar { ch });
                    false
                }
                (Ok(k), None) if chars <= MAX_SALT_CHARS => {
                    for fmt in formats() {
                        let back = ObjectKey::parse(&k.object_name(fmt), fmt).unwrap();
                        let want = if fmt == NameFormat::Seed {
                            k.clone().with_group(0)
                        } else {
                            k.clone()
                        };
                        assert_eq!(back, want, "{fmt}");
                    }
                    // fs names never leave the directory.
                    let f = file_name(&k, NameFormat::Seed);
                    assert!(!f.contains('/') && f.ends_with(".data"), "{f:?}");
                    assert_eq!(Path::new("/b").join(&f).parent(), Some(Path::new("/b")));
                    assert_eq!(parse_file_name(&f, NameFormat::Seed), Some(k.with_group(0)));
                    true
                }
                (got, _) => panic!("salt {salt:?}: {got:?}"),
            }
        },
    );
}

fn check_handle(h: &str) -> bool {
    match BucketHandle::parse(h) {
        Ok(b) => {
            let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
            for part in [&b.namespace, &b.bucket] {
                assert!(!part.is_empty() && part.chars().all(ok), "{h:?}: {part:?}");
                assert!(part != "." && part != "..", "{h:?}");
            }
            if let Some(p) = &b.prefix {
                assert!(!p.is_empty() && !p.starts_with('/') && !p.ends_with('/'));
                assert!(p.split('/').all(|s| !s.is_empty() && s != "." && s != ".."));
            }
            // The canonical spelling parses to the same handle.
            let canon = match &b.prefix {
                Some(p) => format!("hf://buckets/{}/{p}", b.id()),
                None => format!("hf://buckets/{}", b.id()),
            };
            assert_eq!(BucketHandle::parse(&canon).unwrap(), b);
            true
        }
        Err(e) => {
            let text = e.to_string();
            assert!(text.starts_with('"'), "{text}");
            assert!(
                text.len() < 1700,
                "error texts stay bounded: {}",
                text.len()
            );
            false
        }
    }
}

#[test]
fn fuzz_bucket_handles() {
    fuzz(
        "bucket handles (any string)",
        CASES,
        any::<String>(),
        Both::Optional,
        |s| check_handle(&s),
    );
    let handle_like = (
        prop_oneof![
            Just("hf://buckets/"),
            Just(" hf://buckets/"),
            Just("hf://models/")
        ],
        prop::collection::vec(
            prop_oneof![
                "[a-z0-9._-]{0,6}",
                Just("..".to_owned()),
                Just(" ".to_owned()),
                "[?#%/ @:]{1,3}",
                any::<String>()
            ],
            0..5,
        ),
    )
        .prop_map(|(scheme, segs)| format!("{scheme}{}", segs.join("/")));
    fuzz(
        "bucket handles (handle-like)",
        CASES,
        handle_like,
        Both::Required,
        |s| check_handle(&s),
    );
}

/// Field names every adapter type knows, and some it does not.
const FIELDS: &[&str] = &[
    "type",
    "base_path",
    "fsync",
    "num_workers",
    "relative_tmp_dir",
    "recover_on_start",
    "max_capacity_gb",
    "eviction",
    "eviction_policy",
    "trigger_watermark",
    "eviction_ratio",
    "object_name_format",
    "name",
    "s3_endpoint",
    "s3_region",
    "s3_bucket",
    "disable_tls",
    "aws_access_key_id",
    "aws_secret_access_key",
    "bucket_handle",
    "token",
    "token_env",
    "inner",
    "error_rates",
    "put",
    "latency_ms",
    "seed",
    "drop_reply_rate",
    "bogus",
];
const TYPES: &[&str] = &[
    "memory",
    "fs",
    "s3",
    "hfbucket",
    "fault_inject",
    "nfs",
    "",
    "MEMORY",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop::sample::select(TYPES).prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        Just(Value::from("hf://buckets/o/b")),
        Just(Value::from("http://127.0.0.1:9")),
        Just(Value::from("/tmp")),
        Just(Value::from(0.5)),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(FIELDS), inner), 0..8).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}

/// An adapter object: a type, then random known and unknown fields.
fn adapter_object() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(TYPES),
        prop::collection::vec((prop::sample::select(FIELDS), json_value()), 0..6),
    )
        .prop_map(|(t, kv)| {
            let mut m = serde_json::Map::new();
            m.insert("type".into(), Value::from(t));
            for (k, v) in kv {
                m.insert(k.to_owned(), v);
            }
            Value::Object(m)
        })
}

fn check_config_error(e: &ConfigError) {
    let text = e.to_string();
    match e {
        ConfigError::Adapter { field, message, .. } => {
            assert!(!field.is_empty() && !message.is_empty(), "{text}");
            assert!(text.starts_with("adapter #"), "{text}");
        }
        ConfigError::Json { message, .. } => assert!(!message.is_empty(), "{text}"),
        ConfigError::Env { var, .. } => assert!(var.starts_with("KVTIER_"), "{text}"),
        ConfigError::Field { field, .. } => assert!(!field.is_empty(), "{text}"),
        ConfigError::File { .. } | ConfigError::NoAdapters => {}
        other => panic!("a ConfigError this test does not know: {other}"),
    }
}

#[test]
fn fuzz_adapter_json() {
    fuzz(
        "adapter JSON text (any string)",
        CASES,
        any::<String>(),
        Both::Optional,
        |s| match kvtier::config::parse_adapter_json(0, &s) {
            Ok(_) => true,
            Err(e) => {
                check_config_error(&e);
                false
            }
        },
    );
    fuzz(
        "adapter JSON objects",
        CASES,
        prop_oneof![adapter_object(), json_value()],
        Both::Required,
        |v| match parse_adapter(0, v.clone()) {
            Ok(a) => {
                // What was accepted prints (redacted) and, secrets aside, parses back the same.
                let printed = a.to_redacted_json();
                if !printed.to_string().contains("<redacted>") {
                    assert_eq!(parse_adapter(0, printed).unwrap(), a, "{v}");
                }
                true
            }
            Err(e) => {
                check_config_error(&e);
                false
            }
        },
    );
}

fn load(
    toml: Option<&str>,
    env: &[(String, String)],
    cli: &[String],
) -> Result<TierConfig, ConfigError> {
    let file = toml.map(|t| {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(t.as_bytes()).unwrap();
        f
    });
    TierConfig::load(&{
        let mut built = ConfigSources::default();
        built.file = file.as_ref().map(|f| f.path().to_owned());
        built.search_dir = None;
        built.env = Some(env.iter().cloned().collect::<HashMap<_, _>>());
        built.cli_adapters = cli.to_vec();
        built
    })
}

#[test]
fn fuzz_toml_files() {
    let toml_like = prop::collection::vec(
        prop_oneof![
            Just("[[adapters]]".to_owned()),
            Just("[adapters.eviction]".to_owned()),
            Just("type = \"memory\"".to_owned()),
            Just("type = \"fs\"".to_owned()),
            Just("base_path = \"/tmp/x\"".to_owned()),
            Just("eviction_interval_ms = 0".to_owned()),
            Just("adapters = 5".to_owned()),
            Just("l2_adapter = ['{\"type\": \"memory\"}']".to_owned()),
            Just("l2_adapter = 3".to_owned()),
            (
                prop::sample::select(FIELDS),
                "[-0-9a-z.\"'\\[\\]{}=, ]{0,12}"
            )
                .prop_map(|(k, v)| format!("{k} = {v}")),
            any::<String>(),
        ],
        0..8,
    )
    .prop_map(|lines| lines.join("\n"));
    fuzz(
        "TOML files",
        FILE_CASES,
        toml_like,
        Both::Required,
        |t| match load(Some(&t), &[], &[]) {
            Ok(_) => true,
            Err(e) => {
                check_config_error(&e);
                false
            }
        },
    );
}

#[test]
fn fuzz_env_overrides() {
    let var = (
        prop_oneof![
            Just("KVTIER_ADAPTERS__".to_owned()),
            Just("KVTIER_EVICTION_INTERVAL_MS".to_owned()),
            Just("KVTIER_L2_ADAPTER".to_owned()),
        ],
        prop::collection::vec(
            prop_oneof![
                "[0-9]{1,3}",
                prop::sample::select(FIELDS).prop_map(|f| f.to_uppercase()),
                Just(String::new()),
                "[A-Za-z_]{0,5}",
                Just("99999999999999999999999".to_owned()),
            ],
            0..4,
        ),
        prop_oneof![
            any::<String>(),
            Just("true".to_owned()),
            Just("0.5".to_owned()),
            Just("{\"type\": \"memory\"}".to_owned()),
            Just("[1,2]".to_owned()),
            Just("\"5\"".to_owned()),
        ],
    )
        .prop_map(|(head, path, value)| {
            let name = if head.ends_with("__") {
                format!("{head}{}", path.join("__"))
            } else {
                head
            };
            (name, value)
        });
    fuzz(
        "environment overrides",
        FILE_CASES,
        prop::collection::vec(var, 0..4),
        Both::Required,
        |vars| {
            let cli = vec![r#"{"type": "fault_inject", "inner": {"type": "memory"}}"#.to_owned()];
            match load(None, &vars, &cli) {
                Ok(c) => {
                    assert!(!c.adapters.is_empty());
                    true
                }
                Err(e) => {
                    check_config_error(&e);
                    false
                }
            }
        },
    );
}

/// The exact text each bad input gets.
#[test]
fn bad_inputs_get_these_exact_errors() {
    let keys: &[(Result<ObjectKey, KeyError>, &str)] = &[
        (
            ObjectKey::new("", 0, vec![1u8]),
            "model_name must not be empty",
        ),
        (
            ObjectKey::new("a@b", 0, vec![1u8]),
            r#"model_name "a@b" must not contain '@'"#,
        ),
        (
            ObjectKey::new("m", 0, Vec::<u8>::new()),
            "chunk_hash must not be empty",
        ),
        (
            ObjectKey::new("m", 0, vec![1u8])
                .unwrap()
                .with_salt("x".repeat(129)),
            "cache_salt is 129 characters long; at most 128 are allowed",
        ),
        (
            ObjectKey::new("m", 0, vec![1u8])
                .unwrap()
                .with_salt("../etc"),
            r#"cache_salt must not contain '/' (forbidden: '@', '/', '\\', NUL)"#,
        ),
        (
            ObjectKey::new("m", 0, vec![1u8]).unwrap().with_salt("a\0b"),
            r#"cache_salt must not contain '\0' (forbidden: '@', '/', '\\', NUL)"#,
        ),
        (
            ObjectKey::parse("llama@000000FF@00", NameFormat::Seed),
            r#"object name "llama@000000FF@00" is not a seed object name: kv_rank is not 8 lowercase hex digits"#,
        ),
        (
            ObjectKey::parse("llama@000000ff@0", NameFormat::Seed),
            r#"object name "llama@000000ff@0" is not a seed object name: chunk_hash is not lowercase hex of whole bytes"#,
        ),
        (
            ObjectKey::parse("a@b", NameFormat::Seed),
            r#"object name "a@b" is not a seed object name: wrong number of '@'-separated fields"#,
        ),
        (
            ObjectKey::parse("@000000ff@00", NameFormat::Seed),
            r#"object name "@000000ff@00" is not a seed object name: model_name or chunk_hash is empty"#,
        ),
        (
            ObjectKey::parse("m@000000ff@00@a/b", NameFormat::Seed),
            r#"object name "m@000000ff@00@a/b" is not a seed object name: cache_salt is not valid"#,
        ),
        (
            ObjectKey::parse("m@000000ff@123456789@00", NameFormat::Grouped),
            r#"object name "m@000000ff@123456789@00" is not a grouped object name: object_group_id is not lowercase hex"#,
        ),
        (
            ObjectKey::parse("m@000000ff@00@00", NameFormat::Grouped),
            r#"object name "m@000000ff@00@00" is not a grouped object name: object_group_id has leading zeros"#,
        ),
    ];
    for (res, want) in keys {
        assert_eq!(res.as_ref().unwrap_err().to_string(), *want);
    }
    let long = format!("{}@x", "m".repeat(300));
    let e = ObjectKey::parse(&long, NameFormat::Seed)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            r#"object name "{}" is not a seed object name: wrong number of '@'-separated fields"#,
            "m".repeat(200)
        ),
        "long names are cut at 200 characters"
    );

    let handles: &[(&str, &str)] = &[
        ("", r#""" must start with "hf://buckets/""#),
        (
            "s3://bucket",
            r#""s3://bucket" must start with "hf://buckets/""#,
        ),
        (
            "hf://buckets/only-ns",
            r#""hf://buckets/only-ns" must name a namespace and a bucket: hf://buckets/<namespace>/<bucket>[/<prefix>]"#,
        ),
        (
            "hf://buckets/org/b/../x",
            r#""hf://buckets/org/b/../x" must not contain '.' or '..' segments"#,
        ),
        (
            "hf://buckets/org?x=1/b",
            r#""hf://buckets/org?x=1/b": the namespace "org?x=1" may only contain A-Z a-z 0-9 '-' '_' '.'"#,
        ),
        (
            "hf://buckets/org/b%2F..",
            r#""hf://buckets/org/b%2F..": the bucket "b%2F.." may only contain A-Z a-z 0-9 '-' '_' '.'"#,
        ),
    ];
    for (h, want) in handles {
        let e: HandleError = BucketHandle::parse(h).unwrap_err();
        assert_eq!(e.to_string(), *want, "{h:?}");
    }

    let no_env: &[(String, String)] = &[];
    let json: &[(&str, &str)] = &[
        (
            "{not json",
            "adapter #0: not a JSON object: key must be a string at line 1 column 2",
        ),
        (
            "[1, 2]",
            "adapter #0: not a JSON object: expected an object, got an array",
        ),
        (
            "",
            "adapter #0: not a JSON object: EOF while parsing a value at line 1 column 0",
        ),
        (
            r#"{"type": "fs", "base_path": "/x", "fsync": "true"}"#,
            r#"adapter #0 (fs): field `fsync`: invalid type: string "true", expected a boolean"#,
        ),
        (
            r#"{"type": "fs", "base_path": ""}"#,
            "adapter #0 (fs): field `base_path`: must not be empty",
        ),
        (
            r#"{"type": "fs", "base_path": "/x", "relative_tmp_dir": "/abs"}"#,
            r#"adapter #0 (fs): field `relative_tmp_dir`: must be a relative path without '..', got "/abs""#,
        ),
        (
            r#"{"type": "memory", "max_capacity_gb": 1e400}"#,
            "adapter #0: not a JSON object: number out of range at line 1 column 43",
        ),
        (
            r#"{"type": "hfbucket", "bucket_handle": "hf://buckets/o/b", "token": 5}"#,
            "adapter #0 (hfbucket): field `token`: invalid value (not shown: secret)",
        ),
        (
            r#"{"type": "hfbucket", "bucket_handle": "hf://buckets/o b/x"}"#,
            r#"adapter #0 (hfbucket): field `bucket_handle`: "hf://buckets/o b/x": the namespace "o b" may only contain A-Z a-z 0-9 '-' '_' '.'"#,
        ),
        (
            r#"{"type": "s3", "s3_endpoint": "s3://b", "s3_region": "r", "aws_secret_access_key": ["hunter2"]}"#,
            "adapter #0 (s3): field `aws_secret_access_key`: invalid value (not shown: secret)",
        ),
        (
            r#"{"type": "fault_inject", "inner": {"type": "memory"}, "error_rates": {"get": 2}}"#,
            "adapter #0 (fault_inject): field `error_rates.get`: must be in [0, 1], got 2",
        ),
    ];
    for (text, want) in json {
        let e = load(None, no_env, &[text.to_string()]).unwrap_err();
        assert_eq!(e.to_string(), *want, "{text}");
    }

    let toml: &[(&str, &str)] = &[
        ("adapters = 5", "config: field `adapters`: must be an array of tables ([[adapters]]), got a number"),
        (
            "colour = \"blue\"",
            "config: field `colour`: unknown field; expected one of adapters, l2_adapter, eviction_interval_ms, metrics, fleet",
        ),
        (
            "metrics = \"yes\"",
            "config: field `metrics`: must be true or false, got \"yes\"",
        ),
        (
            "[[adapters]]\ntype = \"memory\"\nname = \"a b\"\n",
            "adapter #0 (memory): field `name`: must be 1 to 64 ASCII letters, digits, '-', '_' or '.', got \"a b\"",
        ),
        (
            "eviction_interval_ms = 0",
            "config: field `eviction_interval_ms`: must be a whole number of milliseconds > 0, got 0",
        ),
        (
            "l2_adapter = 3",
            "config: field `l2_adapter`: must be a JSON string or an array of them, got a number",
        ),
        (
            "[[adapters]]\ntype = \"fs\"\nbase_path = \"/x\"\nnum_workers = 0\n",
            "adapter #0 (fs): field `num_workers`: must be between 1 and 1024, got 0",
        ),
        (
            "l2_adapter = ['{\"type\": \"memory\"', '{}']",
            "adapter #0: not a JSON object: EOF while parsing an object at line 1 column 17",
        ),
    ];
    for (text, want) in toml {
        let e = load(Some(text), no_env, &[]).unwrap_err();
        assert_eq!(e.to_string(), *want, "{text}");
    }

    let base = [r#"{"type": "fs", "base_path": "/x"}"#.to_owned()];
    let env: &[(&str, &str, &str)] = &[
        (
            "KVTIER_ADAPTERS__x__FSYNC",
            "true",
            r#"environment variable KVTIER_ADAPTERS__x__FSYNC: "x" is not an adapter index"#,
        ),
        (
            "KVTIER_ADAPTERS__0",
            "true",
            "environment variable KVTIER_ADAPTERS__0: expected KVTIER_ADAPTERS__<index>__<field>",
        ),
        (
            "KVTIER_ADAPTERS__0____FSYNC",
            "true",
            "environment variable KVTIER_ADAPTERS__0____FSYNC: expected KVTIER_ADAPTERS__<index>__<field>",
        ),
        (
            "KVTIER_ADAPTERS__1__FSYNC",
            "true",
            "environment variable KVTIER_ADAPTERS__1__FSYNC: there is no adapter #1 (there are 1)",
        ),
        (
            "KVTIER_ADAPTERS__0__FSYNC",
            "maybe",
            r#"adapter #0 (fs): field `fsync`: invalid type: string "maybe", expected a boolean"#,
        ),
        (
            "KVTIER_ADAPTERS__0__BASE_PATH__DEEP",
            "1",
            "environment variable KVTIER_ADAPTERS__0__BASE_PATH__DEEP: adapter #0 is not a table",
        ),
        (
            "KVTIER_EVICTION_INTERVAL_MS",
            "-5",
            "config: field `eviction_interval_ms`: must be a whole number of milliseconds > 0, got -5",
        ),
    ];
    for (var, value, want) in env {
        let e = load(None, &[(var.to_string(), value.to_string())], &base).unwrap_err();
        assert_eq!(e.to_string(), *want, "{var}={value}");
    }
}

/// Every regular file under `root`, recursively.
fn files_under(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[actix_rt::test]
async fn fs_keys_cannot_escape_the_base_directory() {
    let root = tempfile::TempDir::new().unwrap();
    let base = root.path().join("a/b/base");
    let tier = Tier::start(&TierConfig::with_adapters(vec![AdapterConfig::fs(&base)]))
        .await
        .unwrap();
    let long = "m".repeat(300);
    let models = [
        "..",
        "../..",
        "../../escaped",
        "/etc/passwd",
        "a/../../../b",
        ".",
        "./x",
        "..\\..\\win",
        "nul\0byte",
        "-SEP-..-SEP-..",
        "\n",
        long.as_str(),
    ];
    let keys: Vec<ObjectKey> = models
        .iter()
        .map(|m| {
            ObjectKey::new(m, 7, vec![0xde, 0xad])
                .unwrap()
                .with_salt("..")
                .unwrap()
        })
        .collect();
    let objs: Vec<_> = (0..keys.len() as u32).map(|i| payload(i, 32)).collect();
    let rep = tier.store(keys.clone(), objs).await.unwrap();
    let o = &rep.adapters[0].1;
    // NUL and an over-long file name are refused by the OS: named per-key errors.
    let failed: Vec<(&str, &str)> = o
        .failed
        .iter()
        .map(|f| (f.key.model_name(), f.error.as_str()))
        .collect();
    assert_eq!(
        failed,
        vec![
            (
                "nul\0byte",
                "adapter #0 (fs): put failed: file name contained an unexpected NUL byte"
            ),
            (
                long.as_str(),
                "adapter #0 (fs): put failed: File name too long (os error 36)"
            ),
        ]
    );
    assert_eq!(o.stored, models.len() - 2);
    tier.close().await;

    let all = files_under(root.path());
    assert_eq!(all.len(), models.len() - 2, "{all:?}");
    for f in &all {
        assert_eq!(
            f.parent(),
            Some(base.as_path()),
            "{f:?} is outside the base directory"
        );
    }
    // They load back after a restart (recovered from the directory listing).
    let tier = Tier::start(&TierConfig::with_adapters(vec![AdapterConfig::fs(&base)]))
        .await
        .unwrap();
    let ok: Vec<ObjectKey> = keys
        .iter()
        .filter(|k| !o.failed.iter().any(|f| f.key == **k))
        .cloned()
        .collect();
    let bufs = ok.iter().map(|_| BytesMut::zeroed(32)).collect();
    let loaded = tier.load(ok.clone(), bufs).await;
    assert!(loaded.hits.all(), "{}", loaded.hits);
    tier.close().await;
}

/// Model names built from the pieces that matter to `fs` file names: LMCache's `-SEP-` (how it
/// writes `/`), `/`, parts of both, kvtier's escapes and rank marks, dots, and any character.
fn fs_model() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("-SEP-".to_owned()),
        Just("/".to_owned()),
        Just("SEP".to_owned()),
        Just("-".to_owned()),
        Just("%".to_owned()),
        Just("%2F".to_owned()),
        Just("%25".to_owned()),
        Just("~0x".to_owned()),
        Just("0x".to_owned()),
        Just("..".to_owned()),
        "[a-zA-Z0-9._]{1,4}",
        any::<char>()
            .prop_filter("no '@', no NUL", |c| *c != '@' && *c != '\0')
            .prop_map(String::from),
    ];
    prop::collection::vec(piece, 1..8).prop_map(|p| p.concat())
}

/// LMCache 0.5.6's `fs` file name of a key (`_object_key_to_filename`), written here from its
/// definition: `/` as `-SEP-`, `0x`-prefixed rank, group, hash, salt.
fn lmcache_fs_name(k: &ObjectKey) -> String {
    let mut s = format!(
        "{}@0x{:08x}@{:x}@{}",
        k.model_name().replace('/', "-SEP-"),
        k.kv_rank(),
        k.object_group_id(),
        k.chunk_hash()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    if let Some(salt) = k.cache_salt() {
        s = format!("{s}@{salt}");
    }
    s + ".data"
}

/// Every model name round-trips through `fs` file names (both formats), the separator
/// `-SEP-` included; names LMCache itself reads back get exactly LMCache's file name; two
/// different keys never share a file; no name leaves the directory.
#[test]
fn fs_file_names_round_trip_and_match_lmcache() {
    fuzz(
        "fs_file_names_round_trip_and_match_lmcache",
        CASES,
        (
            fs_model(),
            fs_model(),
            any::<u32>(),
            prop::collection::vec(any::<u8>(), 1..8),
            prop::option::of("[a-z0-9._-]{1,8}"),
            0u32..3,
        ),
        Both::Required,
        |(model, other, rank, hash, salt, group)| {
            let key = ObjectKey::new(&model, rank, hash.clone()).unwrap();
            let key = match &salt {
                Some(s) => key.with_salt(s).unwrap(),
                None => key,
            };
            let grouped = key.clone().with_group(group);
            let lm_reads_back = model.replace('/', "-SEP-").replace("-SEP-", "/") == model;
            assert_eq!(lmcache_round_trips(&model), lm_reads_back, "{model:?}");
            for (k, fmt) in [(&key, NameFormat::Seed), (&grouped, NameFormat::Grouped)] {
                let f = file_name(k, fmt);
                assert!(!f.contains('/') && f.ends_with(".data"), "{f:?}");
                assert_eq!(parse_file_name(&f, fmt).as_ref(), Some(k), "{f:?}");
            }
            let f = file_name(&grouped, NameFormat::Grouped);
            if lm_reads_back {
                assert_eq!(f, lmcache_fs_name(&grouped), "LMCache's own name");
            } else {
                assert!(f.contains("@~0x"), "escaped: {f:?}");
            }
            // Another model, same rest: another file (one name, one key).
            let twin = ObjectKey::new(&other, rank, hash)
                .unwrap()
                .with_group(group);
            let twin = match &salt {
                Some(s) => twin.with_salt(s).unwrap(),
                None => twin,
            };
            assert_eq!(
                file_name(&twin, NameFormat::Grouped) == f,
                other == model,
                "{model:?} and {other:?}"
            );
            lm_reads_back
        },
    );
}
