//! `--lmcache-config FILE.yaml`: the seed's three LMCache YAML examples (`s3.rst`, as printed
//! there; the S3 Express one with its placeholders filled in) pass `check-config` and become
//! one `s3` adapter each, and every rule of the mapping fails with a message naming the file
//! and the field.

use std::path::PathBuf;

#[path = "support/cli.rs"]
mod cli_support;
use cli_support::kvtier;

use kvtier::config::{ConfigError, ConfigSources, TierConfig};

const BASIC: &str = r#"chunk_size: 256
local_cpu: False
save_unfull_chunk: False
remote_url: "s3://your-bucket-name"
remote_serde: "naive"
blocking_timeout_secs: 10
extra_config:
  s3_region: "us-east-1"
  s3_num_io_threads: 64
  save_chunk_meta: False
"#;

const S3_EXPRESS: &str = r#"chunk_size: 256
local_cpu: False
save_unfull_chunk: False
remote_url: "s3://{BUCKET_NAME}.s3express-{AZ_ID}.{REGION}.amazonaws.com"
remote_serde: "naive"
blocking_timeout_secs: 10
extra_config:
  save_chunk_meta: False
  s3_num_io_threads: 64
  s3_prefer_http2: True
  s3_region: "{REGION}"
  s3_enable_s3express: True
"#;

const COREWEAVE: &str = r#"chunk_size: 256
local_cpu: False
max_local_cpu_size: 50
save_unfull_chunk: False
enable_async_loading: True
remote_url: "s3://test-127.cwlota.com"
remote_serde: "naive"
blocking_timeout_secs: 10
extra_config:
  s3_num_io_threads: 320
  s3_prefer_http2: False
  s3_region: "US-WEST-04A"
  s3_enable_s3express: False
  save_chunk_meta: False
  disable_tls: True
  aws_access_key_id: "your-access-key-id"
  aws_secret_access_key: "your-secret-access-key"
"#;

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn check_config(args: &[&str]) -> (i32, String, String) {
    kvtier(&[&["check-config"], args].concat())
}

fn load(path: PathBuf) -> Result<TierConfig, ConfigError> {
    let mut src = ConfigSources::default();
    src.env = Some(Default::default());
    src.lmcache_config = Some(path);
    TierConfig::load(&src)
}

#[test]
fn the_seeds_three_examples_pass_check_config() {
    let dir = tempfile::tempdir().unwrap();
    let express = S3_EXPRESS
        .replace("{BUCKET_NAME}", "kv--usw2-az1--x-s3")
        .replace("{AZ_ID}", "usw2-az1")
        .replace("{REGION}", "us-west-2");
    let cases = [
        (
            "basic.yaml",
            BASIC.to_owned(),
            "s3://your-bucket-name",
            "us-east-1",
        ),
        (
            "express.yaml",
            express,
            "s3://kv--usw2-az1--x-s3.s3express-usw2-az1.us-west-2.amazonaws.com",
            "us-west-2",
        ),
        (
            "coreweave.yaml",
            COREWEAVE.to_owned(),
            "s3://test-127.cwlota.com",
            "US-WEST-04A",
        ),
    ];
    for (name, text, endpoint, region) in cases {
        let path = write(&dir, name, &text);
        let (code, out, err) = check_config(&["--lmcache-config", path.to_str().unwrap()]);
        assert_eq!(code, 0, "{name}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let a = &v["adapters"][0];
        assert_eq!(v["adapters"].as_array().unwrap().len(), 1, "{name}: {out}");
        assert_eq!(a["type"], "s3", "{name}");
        assert_eq!(a["s3_endpoint"], endpoint, "{name}");
        assert_eq!(a["s3_region"], region, "{name}");
        // LMCache's engine fields are named on stderr as accepted and ignored.
        for f in ["chunk_size", "local_cpu", "blocking_timeout_secs"] {
            assert!(
                err.contains(&format!("`{f}` belongs to LMCache's engine")),
                "{name}: {err}"
            );
        }
        assert!(
            !err.contains("remote_url"),
            "{name}: mapped, not ignored: {err}"
        );
    }
    // The S3 Express and CoreWeave specifics reach the adapter; the secrets stay hidden.
    let c = load(dir.path().join("express.yaml")).unwrap();
    let e = c.adapters[0].to_redacted_json();
    assert_eq!(
        (&e["s3_enable_s3express"], &e["s3_prefer_http2"]),
        (&true.into(), &true.into())
    );
    let c = load(dir.path().join("coreweave.yaml")).unwrap();
    let cw = c.adapters[0].to_redacted_json();
    assert_eq!(cw["s3_num_io_threads"], 320);
    assert_eq!(cw["disable_tls"], true);
    assert_eq!(cw["s3_prefer_http2"], false);
    assert_eq!(cw["aws_secret_access_key"], "<redacted>");
    let (_, out, _) = check_config(&[
        "--lmcache-config",
        dir.path().join("coreweave.yaml").to_str().unwrap(),
    ]);
    assert!(!out.contains("your-secret-access-key"), "{out}");
}

/// Each rule of the mapping, as a failing file: exit 2, and the message names the file, the
/// field and what is wrong.
#[test]
fn every_rule_fails_with_its_message() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "save_unfull_chunk: False",
            "save_unfull_chunk: True",
            "save_unfull_chunk",
            "must be false: S3 stores full chunks only",
        ),
        (
            "  save_chunk_meta: False",
            "  save_chunk_meta: True",
            "extra_config.save_chunk_meta",
            "must be false",
        ),
        (
            "remote_serde: \"naive\"",
            "remote_serde: \"cachegen\"",
            "remote_serde",
            "\"cachegen\" is not supported",
        ),
        (
            "  save_chunk_meta: False",
            "  save_chunk_meta: \"false\"",
            "extra_config.save_chunk_meta",
            "must be true or false, got the string \"false\"",
        ),
        (
            "local_cpu: False",
            "local_cpu: \"False\"",
            "local_cpu",
            "must be true or false, got the string \"False\"",
        ),
        (
            "  s3_num_io_threads: 64",
            "  s3_num_io_threads: \"64\"",
            "extra_config.s3_num_io_threads",
            "must be a whole number",
        ),
        (
            "remote_url: \"s3://your-bucket-name\"",
            "remote_url: \"lm://localhost:65432\"",
            "remote_url",
            "only s3:// remote URLs",
        ),
        (
            "  s3_region: \"us-east-1\"",
            "  s3_regoin: \"us-east-1\"",
            "extra_config.s3_regoin",
            "not a key of LMCache's S3 connector",
        ),
        (
            "chunk_size: 256",
            "chunk_sise: 256",
            "chunk_sise",
            "not an LMCache configuration field",
        ),
    ];
    for (i, (from, to, field, says)) in cases.iter().enumerate() {
        assert!(BASIC.contains(from), "{from}");
        let path = write(&dir, &format!("bad{i}.yaml"), &BASIC.replace(from, to));
        let (code, _, err) = check_config(&["--lmcache-config", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{to}: {err}");
        let want = format!("LMCache config {}: field `{field}`: ", path.display());
        assert!(err.contains(&want), "{to}: {err}");
        assert!(err.contains(says), "{to}: {err}");
    }
    // A value the s3 adapter itself refuses is named by the adapter's field.
    let path = write(
        &dir,
        "threads0.yaml",
        &BASIC.replace("s3_num_io_threads: 64", "s3_num_io_threads: 0"),
    );
    let (code, _, err) = check_config(&["--lmcache-config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("(s3): field `s3_num_io_threads`"), "{err}");
}

/// The YAML's adapter comes after the TOML file's adapters, takes environment overrides like
/// any adapter (here the capacity, which LMCache's YAML has no field for), and `--l2-adapter`
/// still replaces every adapter.
#[test]
fn the_yaml_adapter_layers_like_any_other() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = write(&dir, "lmcache.yaml", BASIC);
    let toml = write(&dir, "kvtier.toml", "[[adapters]]\ntype = \"memory\"\n");
    let mut src = ConfigSources::default();
    src.file = Some(toml);
    src.lmcache_config = Some(yaml.clone());
    src.env = Some(
        [(
            "KVTIER_ADAPTERS__1__MAX_CAPACITY_GB".to_owned(),
            "50".to_owned(),
        )]
        .into_iter()
        .collect(),
    );
    let (c, notes) = TierConfig::load_with_notes(&src).unwrap();
    let kinds: Vec<_> = c.adapters.iter().map(|a| a.spec.kind()).collect();
    assert_eq!(kinds, ["memory", "s3"]);
    assert_eq!(c.adapters[1].common.max_capacity_gb, 50.0);
    assert_eq!(notes.len(), 3, "{notes:?}");
    src.env = Some(Default::default());
    src.cli_adapters = vec![r#"{"type": "memory"}"#.into()];
    let c = TierConfig::load(&src).unwrap();
    assert_eq!(c.adapters.len(), 1);
    // A file that does not exist is an error naming it.
    let err = load(dir.path().join("absent.yaml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("absent.yaml") && err.contains("cannot read"),
        "{err}"
    );
}
