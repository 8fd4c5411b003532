//! Secrets never leak: a run that configures S3 keys and Hugging Face tokens with distinctive
//! values (in JSON, an environment override, a token variable, a wrapped `fault_inject`
//! adapter), starts a tier against a loopback server that refuses every request and against
//! closed ports, and drives every operation, must not print any of them: not in any tracing
//! output (captured at TRACE level, `log` records included), nor in any error text, `Debug`
//! output, status, or redacted configuration. Bad configurations with secrets in them are
//! checked the same way. The loopback server checks the secrets were really sent, so the run
//! did use them.

use kvtier_testkit as support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use kvtier::actors::ListKeys;
use kvtier::logging::CREDENTIAL_CAPS;
use kvtier::{ConfigSources, Tier, TierConfig};
use support::{key, payload};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

const S3_KEY_ID: &str = "AKIDKVTIERLEAKCHECK7";
const S3_SECRET: &str = "s3secret-Zq9x7Wv-never-print";
const S3_SECRET_ENV: &str = "s3secret-from-env-Kp4Lm2";
const INNER_SECRET: &str = "inner-secret-Rt5Yu8";
const INNER_KEY_ID: &str = "AKIDINNERLEAKCHECK9";
const HF_TOKEN: &str = "hf_tokenConfigXy12Ab34";
const HF_TOKEN_ENV: &str = "hf_tokenEnvQw56Er78";
const TOKEN_VAR: &str = "KVTIER_SECRETS_TEST_HF_TOKEN";
const BAD_CONFIG_SECRETS: &[&str] = &[
    "tomlSecretLine-Aa11",
    "jsonSecretArray-Bb22",
    "jsonSecretMap-Cc33",
    "jsonSecretTypo-Dd44",
    "jsonSecretSyntax-Ee55",
    "envSecretDeep-Ff66",
    "tomlSecretMulti-Gg77",
];

fn all_secrets() -> Vec<&'static str> {
    let mut v = vec![
        S3_KEY_ID,
        S3_SECRET,
        S3_SECRET_ENV,
        INNER_SECRET,
        INNER_KEY_ID,
        HF_TOKEN,
        HF_TOKEN_ENV,
    ];
    v.extend(BAD_CONFIG_SECRETS);
    v
}

/// A `tracing` writer appending to a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// A loopback HTTP server that answers every request `403` and keeps what it received.
fn refusing_server() -> (u16, Captured) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Captured::default();
    let mut record = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
            let mut buf = [0u8; 65536];
            let mut got = Vec::new();
            while let Ok(n) = conn.read(&mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                if got.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            let _ = record.write_all(&got);
            let _ = conn.write_all(
                b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n\
                  Content-Length: 2\r\nConnection: close\r\n\r\n{}",
            );
        }
    });
    (port, seen)
}

fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn load(
    file: Option<&str>,
    env: &[(&str, &str)],
    cli: &[String],
) -> Result<TierConfig, kvtier::ConfigError> {
    let f = file.map(|t| {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(t.as_bytes()).unwrap();
        f
    });
    TierConfig::load(&{
        let mut built = ConfigSources::default();
        built.file = f.as_ref().map(|f| f.path().to_owned());
        built.search_dir = None;
        built.env = Some(
            env.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>(),
        );
        built.cli_adapters = cli.to_vec();
        built
    })
}

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    actix_rt::time::timeout(Duration::from_secs(120), fut)
        .await
        .unwrap_or_else(|_| panic!("{what} took more than 120 s"))
}

#[actix_rt::test]
async fn secrets_never_appear_in_logs_errors_or_status() {
    // Everything at TRACE, through the filter the CLI uses (and hosts are told to use): the
    // dependency targets that print credentials are capped. A second layer records just those
    // targets, uncapped, to report what the cap hides.
    let logs = Captured::default();
    let capped = Captured::default();
    let (w1, w2) = (logs.clone(), capped.clone());
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || w1.clone())
                .with_filter(kvtier::logging::env_filter("trace").unwrap()),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || w2.clone())
                .with_filter(filter_fn(|meta| {
                    CREDENTIAL_CAPS
                        .iter()
                        .any(|c| meta.target().starts_with(c.split('=').next().unwrap()))
                })),
        )
        .try_init()
        .expect("the only subscriber of this test binary");
    // The process environment is read for token variables; this test binary runs one test.
    std::env::set_var(TOKEN_VAR, HF_TOKEN_ENV);

    let (port, received) = refusing_server();
    let closed = closed_port();
    let mut texts: Vec<String> = Vec::new();

    let s3 = format!(
        r#"{{"type": "s3", "s3_endpoint": "http://127.0.0.1:{port}", "s3_bucket": "kv-bucket",
            "s3_region": "us-east-1", "disable_tls": true, "max_capacity_gb": 1,
            "aws_access_key_id": "{S3_KEY_ID}", "aws_secret_access_key": "{S3_SECRET}"}}"#
    );
    let hf = format!(
        r#"{{"type": "hfbucket", "bucket_handle": "hf://buckets/org/kv", "token": "{HF_TOKEN}",
            "token_env": "KVTIER_SECRETS_TEST_UNSET", "hf_endpoint": "http://127.0.0.1:{port}",
            "max_capacity_gb": 1, "num_workers": 1}}"#
    );
    let hf_env = format!(
        r#"{{"type": "hfbucket", "bucket_handle": "hf://buckets/org/kv2",
            "token_env": "{TOKEN_VAR}", "hf_endpoint": "http://127.0.0.1:{port}",
            "num_workers": 1}}"#
    );
    let wrapped = format!(
        r#"{{"type": "fault_inject", "error_rates": {{"get": 0.5}}, "seed": 1,
            "inner": {{"type": "s3", "s3_endpoint": "http://127.0.0.1:{closed}",
            "s3_bucket": "kv-bucket", "s3_region": "us-east-1", "disable_tls": true,
            "aws_access_key_id": "{INNER_KEY_ID}", "aws_secret_access_key": "{INNER_SECRET}"}}}}"#
    );
    // The environment override replaces the first adapter's secret: both values stay hidden.
    let config = load(
        None,
        &[("KVTIER_ADAPTERS__0__AWS_SECRET_ACCESS_KEY", S3_SECRET_ENV)],
        &[s3.clone(), hf, hf_env, wrapped],
    )
    .unwrap();
    texts.push(format!("{config:?}"));
    texts.push(config.to_redacted_json().to_string());
    texts.push(serde_json::to_string_pretty(&config.to_redacted_json()).unwrap());
    let plain = load(None, &[], &[s3]).unwrap();
    texts.push(format!("{plain:?}"));
    texts.push(plain.to_redacted_json().to_string());

    match within("start", Tier::start(&config)).await {
        Err(e) => {
            texts.push(e.to_string());
            texts.push(format!("{e:?}"));
        }
        Ok(tier) => {
            let keys = vec![key(1), key(2)];
            let rep = within(
                "store",
                tier.store(keys.clone(), vec![payload(1, 64), payload(2, 64)]),
            )
            .await
            .unwrap();
            assert!(!rep.success(), "nothing can be stored: {rep:?}");
            texts.push(format!("{rep:?}"));
            texts.push(serde_json::to_string(&rep).unwrap());
            let hits = within("lookup", tier.lookup_and_lock(keys.clone()))
                .await
                .unwrap();
            texts.push(format!("{hits:?}"));
            let loaded = within(
                "load",
                tier.load(
                    keys.clone(),
                    vec![BytesMut::zeroed(64), BytesMut::zeroed(64)],
                ),
            )
            .await;
            texts.push(format!("{:?}", loaded.hits));
            tier.unlock(keys.clone());
            let del = within("delete", tier.delete(keys)).await.unwrap();
            texts.push(format!("{del:?}"));
            for adapter in 0..4 {
                let page = within(
                    "list",
                    tier.controller().send(ListKeys {
                        model: None,
                        cursor: None,
                        page_size: 10,
                        adapter,
                    }),
                )
                .await
                .unwrap();
                texts.push(format!("{page:?}"));
                if let Err(e) = page {
                    texts.push(e.to_string());
                }
            }
            let usage = tier.usage().await.unwrap();
            texts.push(format!("{usage:?}"));
            let status = within("status", tier.status()).await.unwrap();
            texts.push(format!("{status:?}"));
            texts.push(serde_json::to_string(&status).unwrap());
            // Every actor has stopped (and logged what it logs when it stops) once this returns.
            tier.close().await;
        }
    }

    // Bad configurations with secrets in them.
    let bad_toml = [
        format!(
            "[[adapters]]\ntype = \"s3\"\naws_secret_access_key = \"{}\" oops\n",
            BAD_CONFIG_SECRETS[0]
        ),
        format!(
            "[[adapters]]\ntype = \"hfbucket\"\nbucket_handle = \"hf://buckets/o/b\"\n\
             token = \"\"\"\n{}\n\"\"\" junk\n",
            BAD_CONFIG_SECRETS[6]
        ),
    ];
    for t in &bad_toml {
        let e = load(Some(t), &[], &[]).unwrap_err();
        texts.push(e.to_string());
        texts.push(format!("{e:?}"));
    }
    let bad_json = [
        format!(
            r#"{{"type": "s3", "s3_endpoint": "s3://b", "s3_region": "r", "aws_secret_access_key": ["{}"]}}"#,
            BAD_CONFIG_SECRETS[1]
        ),
        format!(
            r#"{{"type": "hfbucket", "bucket_handle": "hf://buckets/o/b", "token": {{"v": "{}"}}}}"#,
            BAD_CONFIG_SECRETS[2]
        ),
        format!(
            r#"{{"type": "hfbucket", "bucket_handle": "hf://buckets/o/b", "tokn": "{}"}}"#,
            BAD_CONFIG_SECRETS[3]
        ),
        format!(
            r#"{{"type": "s3", "aws_secret_access_key": "{}",}}"#,
            BAD_CONFIG_SECRETS[4]
        ),
    ];
    for j in &bad_json {
        let e = load(None, &[], std::slice::from_ref(j)).unwrap_err();
        texts.push(e.to_string());
        texts.push(format!("{e:?}"));
    }
    let e = load(
        None,
        &[("KVTIER_ADAPTERS__0__TOKEN__DEEP", BAD_CONFIG_SECRETS[5])],
        &[r#"{"type": "hfbucket", "bucket_handle": "hf://buckets/o/b"}"#.to_owned()],
    )
    .unwrap_err();
    texts.push(e.to_string());
    texts.push(format!("{e:?}"));

    let log = logs.text();
    // The capture works, at TRACE level, and includes the failures above.
    assert!(log.contains("TRACE"), "no TRACE output captured");
    assert!(
        log.contains("adapter #0 (s3)"),
        "the S3 failures were logged"
    );
    // The secrets were really used: the refusing server saw the token and the key id.
    let seen = received.text();
    assert!(
        seen.contains(&format!("Bearer {HF_TOKEN}")),
        "the Hub token was sent"
    );
    assert!(
        seen.contains(&format!("Bearer {HF_TOKEN_ENV}")),
        "the token from {TOKEN_VAR} was sent"
    );
    assert!(seen.contains(S3_KEY_ID), "the S3 key id was sent (SigV4)");

    // Hex dumps (`ureq_proto` style: 16 bytes per line, ASCII at the end) split a secret over
    // lines: check their ASCII columns joined too.
    let dumps: String = log
        .lines()
        .filter_map(|l| {
            let (_, tail) = l.rsplit_once("  ")?;
            (tail.len() == 16 && l.contains("util")).then(|| tail.replace('.', " "))
        })
        .collect();
    let everything = format!("{log}\n{dumps}\n{}", texts.join("\n"));
    if let Ok(path) = std::env::var("KVTIER_SECRETS_DUMP") {
        std::fs::write(path, &everything).unwrap();
    }
    for secret in all_secrets() {
        if let Some(at) = everything.find(secret) {
            let from = at.saturating_sub(300);
            let end = (at + secret.len() + 100).min(everything.len());
            panic!(
                "secret {secret:?} leaked:\n…{}…",
                everything.get(from..end).unwrap_or("?")
            );
        }
    }
    let hidden = capped.text();
    eprintln!(
        "checked {} bytes of logs and {} texts; the capped targets would have printed {} lines \
         with the S3 key id",
        log.len(),
        texts.len(),
        hidden.lines().filter(|l| l.contains(S3_KEY_ID)).count()
    );
}
