//! The `s3` adapter against a real Garage server: the conformance suite, plus interop with a
//! plain S3 client, key-prefix isolation, restart recovery and the circuit breaker.
//!
//! Garage is started by the tests themselves (tests/support/garage.rs); `scripts/test-all.sh`
//! installs it.

use kvtier_testkit as support;

use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use bytes::BytesMut;
use kvtier::actors::backends::s3::{DataPath, S3Config};
use kvtier::actors::ListKeys;
use kvtier::{AdapterConfig, AdapterSpec, ObjectKey, Tier, TierConfig};
use support::conformance::Fixture;
use support::garage::Garage;
use support::{key, payload, wait_until};

const BUCKET: &str = "kvtier-test";

/// One Garage per test; each adapter slot gets its own key prefix in the shared bucket.
struct S3 {
    garage: Garage,
    run: String,
    data_path: DataPath,
}

impl S3 {
    fn new() -> Self {
        let garage = Garage::start();
        garage.create_bucket(BUCKET);
        S3 {
            garage,
            run: format!("run-{:08x}", rand::random::<u32>()),
            data_path: DataPath::Direct,
        }
    }

    /// The same fixture with the SDK carrying every request.
    fn sdk() -> Self {
        S3 {
            data_path: DataPath::Sdk,
            ..Self::new()
        }
    }

    fn config(&self) -> S3Config {
        let mut c = S3Config::new(&self.garage.s3_endpoint, &self.garage.region)
            .bucket(BUCKET)
            .access_key_id(&self.garage.access_key_id)
            .secret_access_key(&self.garage.secret_access_key);
        c.s3_data_path = self.data_path;
        c
    }

    /// A plain aws-sdk-s3 client: what any other S3 tool (or LMCache) would see.
    async fn plain_client(&self) -> aws_sdk_s3::Client {
        support::garage::plain_client(
            &self.garage.s3_endpoint,
            &self.garage.region,
            &self.garage.access_key_id,
            &self.garage.secret_access_key,
        )
    }
}

impl S3 {
    fn adapter_with_prefix(&self, prefix: &str) -> AdapterConfig {
        let mut c = self.config();
        c.s3_key_prefix = Some(prefix.to_owned());
        {
            let mut built = AdapterConfig::default();
            built.common = Default::default();
            built.spec = AdapterSpec::S3(c);
            built
        }
    }
}

impl Fixture for S3 {
    fn adapter(&self, slot: usize) -> AdapterConfig {
        let mut c = self.config();
        c.s3_key_prefix = Some(format!("{}/slot{slot}", self.run));
        {
            let mut built = AdapterConfig::default();
            built.common = Default::default();
            built.spec = AdapterSpec::S3(c);
            built
        }
    }
}

support::conformance_tests!(S3::new());

/// The same conformance suite with `s3_data_path = "sdk"`: the SDK carries PUT, GET and HEAD
/// too (the path taken with expiring credentials or S3 Express).
mod sdk_data_path {
    use super::*;
    support::conformance_tests!(S3::sdk());
}

fn tier_config(adapters: Vec<AdapterConfig>) -> TierConfig {
    {
        let mut built = TierConfig::default();
        built.adapters = adapters;
        built.eviction_interval_ms = 50;
        built
    }
}

async fn list_names(client: &aws_sdk_s3::Client, prefix: &str) -> Vec<(String, i64)> {
    let out = client
        .list_objects_v2()
        .bucket(BUCKET)
        .prefix(prefix)
        .send()
        .await
        .unwrap();
    out.contents()
        .iter()
        .map(|o| (o.key().unwrap().to_owned(), o.size().unwrap()))
        .collect()
}

#[actix_rt::test]
async fn interop_with_a_plain_s3_client() {
    let fx = S3::new();
    let client = fx.plain_client().await;
    // An object written by someone else (LMCache MP) under the seed name, at the bucket root.
    let theirs = ObjectKey::new("llama", 255, vec![0u8, 1, 2, 3])
        .unwrap()
        .with_salt("user-42")
        .unwrap();
    client
        .put_object()
        .bucket(BUCKET)
        .key("llama@000000ff@00010203@user-42")
        .body(ByteStream::from(payload(7, 4096).to_vec()))
        .send()
        .await
        .unwrap();
    let adapter = {
        let mut built = AdapterConfig::default();
        built.common = Default::default();
        built.spec = AdapterSpec::S3(fx.config());
        built
    };
    let tier = Tier::start(&tier_config(vec![adapter])).await.unwrap();
    assert!(tier
        .lookup_and_lock(vec![theirs.clone()])
        .await
        .unwrap()
        .all());
    let loaded = tier
        .load(vec![theirs.clone()], vec![BytesMut::zeroed(4096)])
        .await;
    assert!(loaded.hits.all());
    assert_eq!(&loaded.buffers[0][..], &payload(7, 4096)[..]);
    let page = tier
        .controller()
        .send(ListKeys {
            model: Some("llama".into()),
            cursor: None,
            page_size: 10,
            adapter: 0,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.entries, vec![(theirs.clone(), 4096)]);
    tier.unlock(vec![theirs]);

    // Ours, as a plain client lists them: raw bytes under the exact names.
    let ours = ObjectKey::new("mistral", 1, vec![0xab, 0xcd]).unwrap();
    assert!(tier
        .store(vec![ours], vec![payload(8, 100)])
        .await
        .unwrap()
        .success());
    let names = list_names(&client, "mistral@").await;
    assert_eq!(names, vec![("mistral@00000001@abcd".to_owned(), 100)]);
    let body = client
        .get_object()
        .bucket(BUCKET)
        .key("mistral@00000001@abcd")
        .send()
        .await
        .unwrap();
    assert_eq!(
        body.body.collect().await.unwrap().into_bytes(),
        payload(8, 100)
    );
    tier.close().await;
}

#[actix_rt::test]
async fn grouped_names_and_key_prefix() {
    let fx = S3::new();
    let mut c = fx.config();
    c.s3_key_prefix = Some("/kv/prod/".into());
    let mut a = {
        let mut built = AdapterConfig::default();
        built.common = Default::default();
        built.spec = AdapterSpec::S3(c);
        built
    };
    a.common.object_name_format = kvtier::NameFormat::Grouped;
    let tier = Tier::start(&tier_config(vec![a])).await.unwrap();
    let k = ObjectKey::new("llama", 255, vec![0u8, 1, 2, 3])
        .unwrap()
        .with_group(2);
    assert!(tier
        .store(vec![k.clone()], vec![payload(1, 10)])
        .await
        .unwrap()
        .success());
    let client = fx.plain_client().await;
    assert_eq!(
        list_names(&client, "").await,
        vec![("kv/prod/llama@000000ff@2@00010203".to_owned(), 10)]
    );
    tier.close().await;
}

/// `s3_payload_signing` and `s3_checksum`: every combination stores and loads the exact bytes,
/// and with CRC32C (asked for, or `auto` over this plain-HTTP endpoint) the store keeps the
/// object's checksum (a plain client sees it).
#[actix_rt::test]
async fn payload_signing_and_crc32c_round_trip() {
    use kvtier::actors::backends::s3::{ChecksumMode, PayloadSigning};
    let fx = S3::new();
    let client = fx.plain_client().await;
    let cases = [
        (PayloadSigning::Unsigned, ChecksumMode::None),
        (PayloadSigning::Unsigned, ChecksumMode::Crc32c),
        (PayloadSigning::Signed, ChecksumMode::Crc32c),
        (PayloadSigning::Auto, ChecksumMode::None),
    ];
    for (i, (signing, checksum)) in cases.into_iter().enumerate() {
        let mut c = fx.config();
        c.s3_key_prefix = Some(format!("case{i}"));
        c.s3_payload_signing = signing;
        c.s3_checksum = checksum;
        let tier = Tier::start(&tier_config(vec![{
            let mut built = AdapterConfig::default();
            built.common = Default::default();
            built.spec = AdapterSpec::S3(c);
            built
        }]))
        .await
        .unwrap();
        let data = payload(i as u32 + 7, 300_000);
        let rep = tier.store(vec![key(1)], vec![data.clone()]).await.unwrap();
        assert!(
            rep.adapters[0].1.failed.is_empty(),
            "{signing:?}/{checksum:?}: {rep:?}"
        );
        let status = tier.status().await.unwrap();
        let details = &status.adapters[0].details;
        assert_eq!(
            details["payload_signed"],
            signing == PayloadSigning::Signed,
            "plain http: auto does not hash the payload"
        );
        assert!(tier.lookup_and_lock(vec![key(1)]).await.unwrap().all());
        let loaded = tier
            .load(vec![key(1)], vec![BytesMut::zeroed(data.len())])
            .await;
        assert!(loaded.hits.all(), "{signing:?}/{checksum:?}");
        assert_eq!(&loaded.buffers[0][..], &data[..]);
        tier.unlock(vec![key(1)]);

        let names = list_names(&client, &format!("case{i}/")).await;
        assert_eq!(names.len(), 1);
        let head = client
            .head_object()
            .bucket(BUCKET)
            .key(&names[0].0)
            .checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled)
            .send()
            .await
            .unwrap();
        assert_eq!(
            head.checksum_crc32_c().is_some(),
            checksum == ChecksumMode::Crc32c || signing == PayloadSigning::Auto,
            "{signing:?}/{checksum:?}: the stored object's CRC32C (auto sends one over plain http)"
        );
        tier.close().await;
    }
}

/// `Verify` (`kvtier scrub`) on S3 asks the store for the CRC32C it kept: an object kvtier
/// stored with one is checked (intact), one written by another client without a CRC32C (as
/// LMCache's adapters write) is unverifiable, a missing one is absent.
#[actix_rt::test]
async fn verify_checks_the_crc32c_the_store_kept() {
    use kvtier::actors::backends::s3::ChecksumMode;
    use kvtier::actors::Verdict;
    let fx = S3::new();
    let prefix = format!("{}-verify", fx.run);
    let c = fx.config().prefix(&prefix).checksum(ChecksumMode::Crc32c);
    let tier = Tier::start(&tier_config(vec![AdapterConfig::s3(c)]))
        .await
        .unwrap();
    assert!(tier
        .store(vec![key(1)], vec![payload(1, 100_000)])
        .await
        .unwrap()
        .success());
    // key(2): the same name scheme, written by a plain client that sends no CRC32C.
    let other = format!(
        "{prefix}/{}",
        key(2).object_name(kvtier::NameFormat::default())
    );
    fx.plain_client()
        .await
        .put_object()
        .bucket(BUCKET)
        .key(&other)
        .body(payload(2, 4096).to_vec().into())
        .send()
        .await
        .unwrap();
    let report = tier
        .verify(kvtier::Verify {
            keys: vec![key(1), key(2), key(3)],
            delete_corrupt: false,
            adapter: 0,
        })
        .await
        .unwrap();
    let verdicts: Vec<Verdict> = report
        .results
        .into_iter()
        .map(|(_, v)| v.unwrap())
        .collect();
    assert_eq!(
        verdicts,
        vec![Verdict::Intact, Verdict::Unverifiable, Verdict::Absent]
    );
    tier.close().await;
}

#[actix_rt::test]
async fn key_prefixes_isolate_adapters() {
    let fx = S3::new();
    let a = Tier::start(&tier_config(vec![fx.adapter(0)]))
        .await
        .unwrap();
    let b = Tier::start(&tier_config(vec![fx.adapter(1)]))
        .await
        .unwrap();
    assert!(a
        .store(vec![key(1)], vec![payload(1, 64)])
        .await
        .unwrap()
        .success());
    assert!(a.lookup_and_lock(vec![key(1)]).await.unwrap().all());
    assert!(!b.lookup_and_lock(vec![key(1)]).await.unwrap().all());
    let page = b
        .controller()
        .send(ListKeys {
            model: None,
            cursor: None,
            page_size: 10,
            adapter: 0,
        })
        .await
        .unwrap()
        .unwrap();
    assert!(page.entries.is_empty());
    a.unlock(vec![key(1)]);
    a.close().await;
    b.close().await;
}

#[actix_rt::test]
async fn restart_recovers_usage_from_the_bucket() {
    let fx = S3::new();
    let mut a = fx.adapter(0);
    a.common.max_capacity_gb = 1.0;
    a.common.eviction = Some(Default::default());
    let tier = Tier::start(&tier_config(vec![a.clone()])).await.unwrap();
    let keys: Vec<_> = (0..5).map(key).collect();
    assert!(tier
        .store(
            keys.clone(),
            (0..5).map(|i| payload(i, 100 + i as usize)).collect(),
        )
        .await
        .unwrap()
        .success());
    let before = tier.usage().await.unwrap();
    tier.close().await;

    let tier = Tier::start(&tier_config(vec![a])).await.unwrap();
    let after = tier.usage().await.unwrap();
    assert_eq!(after, before);
    assert_eq!(after.adapters[0].keys, 5);
    let rep = tier
        .store(vec![key(0)], vec![payload(0, 100)])
        .await
        .unwrap();
    assert_eq!(rep.adapters[0].1.new_bytes, 0, "a recovered key is not new");
    tier.close().await;
}

#[actix_rt::test]
async fn breaker_opens_when_the_store_dies_and_closes_when_it_returns() {
    let mut fx = S3::new();
    let mut c = fx.config();
    c.circuit_breaker_cooldown_secs = 0.5;
    c.s3_key_prefix = Some(fx.run.clone());
    let tier = Tier::start(&tier_config(vec![{
        let mut built = AdapterConfig::default();
        built.common = Default::default();
        built.spec = AdapterSpec::S3(c);
        built
    }]))
    .await
    .unwrap();
    assert!(tier
        .store(vec![key(1), key(2)], vec![payload(1, 50), payload(2, 60)])
        .await
        .unwrap()
        .success());
    assert!(tier.status().await.unwrap().is_healthy());

    fx.garage.stop();
    // Connection failures: the stores fail, the process does not.
    for i in 10..14 {
        let rep = tier
            .store(vec![key(i)], vec![payload(i, 10)])
            .await
            .unwrap();
        assert!(!rep.success());
    }
    let status = tier.status().await.unwrap();
    let breaker = &status.adapters[0].details["circuit_breaker"];
    assert_eq!(breaker["state"], "open", "{status:?}");
    assert!(!status.is_healthy());
    // While open, requests fail at once, without network traffic: the breaker refuses them
    // before any request is built (each refusal is one of its fast failures).
    let fast = breaker["fast_failures"].as_u64().unwrap();
    let hits = tier.lookup_and_lock(vec![key(99)]).await.unwrap();
    assert!(!hits.all());
    let rep = tier
        .store(vec![key(20)], vec![payload(20, 10)])
        .await
        .unwrap();
    assert!(
        rep.adapters[0].1.failed[0]
            .error
            .contains("circuit breaker open"),
        "{rep:?}"
    );
    let status = tier.status().await.unwrap();
    let breaker = &status.adapters[0].details["circuit_breaker"];
    assert_eq!(
        breaker["fast_failures"].as_u64().unwrap(),
        fast + 2,
        "the lookup and the store were refused by the breaker: {breaker}"
    );
    // Loads of known keys are misses, not errors or hangs.
    let loaded = tier.load(vec![key(1)], vec![BytesMut::zeroed(50)]).await;
    assert!(!loaded.hits.all());

    fx.garage.restart();
    let healed = wait_until(20, || async {
        tier.store(vec![key(3)], vec![payload(3, 70)])
            .await
            .unwrap()
            .success()
    })
    .await;
    assert!(healed, "the breaker closes after the store returns");
    assert!(tier.status().await.unwrap().is_healthy());
    // Usage equals what the bucket holds.
    let client = fx.plain_client().await;
    let listed: i64 = list_names(&client, &fx.run)
        .await
        .iter()
        .map(|(_, s)| s)
        .sum();
    assert_eq!(
        tier.usage().await.unwrap().adapters[0].used_bytes as i64,
        listed
    );
    tier.close().await;
}

/// A store that accepts connections and never answers (frozen, not dead): with a short
/// `s3_attempt_timeout_secs` the attempts time out, the breaker opens, and requests then fail
/// at once. Nothing hangs.
#[actix_rt::test]
async fn a_frozen_endpoint_times_out_and_opens_the_breaker() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accept and hold every connection without reading or answering.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            match conn {
                Ok(c) => held.push(c),
                Err(_) => break,
            }
        }
    });
    let mut c = S3Config::new(format!("http://127.0.0.1:{port}"), "garage")
        .bucket(BUCKET)
        .access_key_id("GKfrozen")
        .secret_access_key("frozen-secret");
    c.s3_attempt_timeout_secs = Some(0.3);
    c.circuit_breaker_cooldown_secs = 60.0;
    let tier = Tier::start(&tier_config(vec![{
        let mut built = AdapterConfig::default();
        built.common = Default::default();
        built.spec = AdapterSpec::S3(c);
        built
    }]))
    .await
    .unwrap();
    let keys: Vec<ObjectKey> = (1..=3).map(key).collect();
    // A hang guard only; what ends the store is the attempt timeout (a PUT is not retried).
    let rep = tokio::time::timeout(
        Duration::from_secs(60),
        tier.store(keys, (1..=3).map(|i| payload(i, 10)).collect()),
    )
    .await
    .expect("a frozen store must not hang a request")
    .unwrap();
    assert_eq!(rep.adapters[0].1.failed.len(), 3, "{rep:?}");
    assert!(
        rep.adapters[0].1.failed[0]
            .error
            .contains("attempt timeout"),
        "{rep:?}"
    );
    let status = tier.status().await.unwrap();
    let breaker = &status.adapters[0].details["circuit_breaker"];
    assert_eq!(breaker["state"], "open", "{status:?}");
    assert!(!status.adapters[0].is_healthy, "{status:?}");
    let fast = breaker["fast_failures"].as_u64().unwrap();
    // Now requests fail without waiting for the frozen store: the breaker refuses the
    // lookup itself (its fast-failure count grows by one), before any request is sent.
    assert!(!tier.lookup_and_lock(vec![key(9)]).await.unwrap().all());
    let status = tier.status().await.unwrap();
    assert_eq!(
        status.adapters[0].details["circuit_breaker"]["fast_failures"],
        fast + 1,
        "{status:?}"
    );
    tier.close().await;
}

#[test]
fn bad_s3_configs_are_named_errors() {
    use kvtier::config::{parse_adapter_json, ConfigError};
    let cases = [
        (r#"{"type": "s3", "s3_region": "us-east-1"}"#, "s3_endpoint"),
        (r#"{"type": "s3", "s3_endpoint": "s3://b-1"}"#, "s3_region"),
        (
            r#"{"type": "s3", "s3_endpoint": "s3://b-1", "s3_region": "r", "s3_prefer_http2": "true"}"#,
            "s3_prefer_http2",
        ),
        (
            r#"{"type": "s3", "s3_endpoint": "s3://b-1", "s3_region": "r", "s3_num_io_threads": 0}"#,
            "s3_num_io_threads",
        ),
        (
            r#"{"type": "s3", "s3_endpoint": "s3://b-1", "s3_region": "r", "aws_access_key_id": "AKIA"}"#,
            "aws_secret_access_key",
        ),
        (
            r#"{"type": "s3", "s3_endpoint": "http://127.0.0.1:3900", "s3_region": "r", "disable_tls": true}"#,
            "s3_bucket",
        ),
        (
            r#"{"type": "s3", "s3_endpoint": "s3://b-1", "s3_region": "r", "s3_addressing_style": "dns"}"#,
            "s3_addressing_style",
        ),
        (
            r#"{"type": "s3", "s3_endpoint": "s3://b-1", "s3_region": "r", "s3_express": true}"#,
            "s3_express",
        ),
    ];
    for (json, field) in cases {
        match parse_adapter_json(0, json) {
            Err(ConfigError::Adapter {
                index: 0,
                kind,
                field: f,
                ..
            }) => {
                assert_eq!((kind.as_str(), f.as_str()), ("s3", field), "{json}")
            }
            other => panic!("{json}: {other:?}"),
        }
    }
    // The seed's MP example parses verbatim.
    let seed = r#"{
     "type": "s3",
     "s3_endpoint": "s3://my-bucket",
     "s3_region": "us-east-1",
     "s3_num_io_threads": 64,
     "s3_prefer_http2": true,
     "s3_enable_s3express": false,
     "disable_tls": false,
     "max_capacity_gb": 500,
     "eviction": {
       "eviction_policy": "LRU",
       "trigger_watermark": 0.85,
       "eviction_ratio": 0.2
     }
   }"#;
    let a = parse_adapter_json(0, seed).unwrap();
    assert_eq!(a.common.max_capacity_gb, 500.0);
    // A secret of the wrong type is reported without echoing it.
    let err = parse_adapter_json(0, r#"{"type": "s3", "s3_endpoint": "s3://b-1", "s3_region": "r", "aws_access_key_id": "AKIA", "aws_secret_access_key": 123456789}"#)
        .unwrap_err()
        .to_string();
    assert!(!err.contains("123456789"), "{err}");
}

#[actix_rt::test]
async fn virtual_host_and_path_style_addressing() {
    use actix::Actor;
    use kvtier::actors::backends::s3::{AddressingStyle, S3Storage};
    use kvtier::actors::{AdapterHandle, BackendActor, Controller, LookupAndLock, Store};

    let fx = S3::new();
    // Virtual host: <bucket>.s3.garage.localhost:<port>, resolved to 127.0.0.1 by the client
    // (Garage's root_domain takes the bucket from the Host header).
    let mut c = fx.config();
    c.s3_endpoint = format!("http://s3.garage.localhost:{}", fx.garage.s3_port);
    c.s3_addressing_style = Some(AddressingStyle::Virtual);
    c.s3_key_prefix = Some(fx.run.clone());
    let storage = S3Storage::open_resolving(&c, Default::default(), 0, Some([127, 0, 0, 1].into()))
        .await
        .unwrap();
    let (arbiter, addr) = BackendActor::new(0, Box::new(storage), 0, Vec::new()).spawn();
    let controller = Controller::new(vec![AdapterHandle::new(0, "s3", addr.clone())]).start();
    let rep = controller
        .send(Store {
            keys: vec![key(1)],
            objects: vec![payload(1, 32)],
        })
        .await
        .unwrap();
    assert!(rep.success(), "{rep:?}");
    // The same object through path-style addressing on the plain endpoint.
    let path_style = Tier::start(&tier_config(vec![fx.adapter_with_prefix(&fx.run)]))
        .await
        .unwrap();
    assert!(path_style
        .lookup_and_lock(vec![key(1)])
        .await
        .unwrap()
        .all());
    // And the virtual-host client finds what it stored.
    assert!(controller
        .send(LookupAndLock { keys: vec![key(1)] })
        .await
        .unwrap()
        .all());
    path_style.close().await;
    arbiter.stop();
}

/// A server that lies: it declares 100 bytes and sends 50, then closes. The object probes as
/// present, but its load is a miss, never a partial copy; a declared size other than the
/// buffer's is a miss too.
#[actix_rt::test]
async fn truncated_bodies_and_wrong_sizes_are_misses() {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { break };
            let head = support::read_request_head(&mut c);
            let reply: &[u8] = if head.starts_with("HEAD") {
                b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n"
            } else {
                b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n0123456789012345678901234567890123456789012345678"
            };
            let _ = c.write_all(reply);
        }
    });
    let c = S3Config::new(format!("http://127.0.0.1:{port}"), "garage")
        .bucket(BUCKET)
        .access_key_id("GKliar")
        .secret_access_key("liar-secret");
    let tier = Tier::start(&tier_config(vec![{
        let mut built = AdapterConfig::default();
        built.common = Default::default();
        built.spec = AdapterSpec::S3(c);
        built
    }]))
    .await
    .unwrap();
    assert!(tier.lookup_and_lock(vec![key(1)]).await.unwrap().all());
    let truncated = tier.load(vec![key(1)], vec![BytesMut::zeroed(100)]).await;
    assert!(!truncated.hits.all(), "a truncated body is a miss");
    let wrong = tier.load(vec![key(1)], vec![BytesMut::zeroed(80)]).await;
    assert!(
        !wrong.hits.all(),
        "a declared size other than the buffer's is a miss"
    );
    assert!(
        wrong.buffers[0].iter().all(|b| *b == 0),
        "a size mismatch leaves the buffer unwritten"
    );
    tier.unlock(vec![key(1)]);
    tier.close().await;
}

/// The direct data path and the SDK read each other's objects (same names, same bytes, with
/// and without CRC32C), and each adapter reports which path carries its data.
#[actix_rt::test]
async fn both_data_paths_read_each_others_objects() {
    use kvtier::actors::backends::s3::ChecksumMode;
    let fx = S3::new();
    for (round, checksum) in [ChecksumMode::None, ChecksumMode::Crc32c]
        .into_iter()
        .enumerate()
    {
        let config_for = |path: DataPath| {
            let mut c = fx.config();
            c.s3_data_path = path;
            c.s3_checksum = checksum;
            c.s3_key_prefix = Some(format!("{}/paths", fx.run));
            tier_config(vec![{
                let mut built = AdapterConfig::default();
                built.common = Default::default();
                built.spec = AdapterSpec::S3(c);
                built
            }])
        };
        let direct = Tier::start(&config_for(DataPath::Direct)).await.unwrap();
        let sdk = Tier::start(&config_for(DataPath::Sdk)).await.unwrap();
        for (tier, want) in [(&direct, "direct"), (&sdk, "sdk: s3_data_path is \"sdk\"")] {
            let status = tier.status().await.unwrap();
            assert_eq!(status.adapters[0].details["data_path"], want, "{status:?}");
        }
        for (i, (writer, reader)) in [(&direct, &sdk), (&sdk, &direct)].into_iter().enumerate() {
            let k = key(100 + 10 * round as u32 + i as u32);
            let data = payload(i as u32, 300_000);
            let rep = writer
                .store(vec![k.clone()], vec![data.clone()])
                .await
                .unwrap();
            assert!(rep.adapters[0].1.failed.is_empty(), "{rep:?}");
            assert!(reader.lookup_and_lock(vec![k.clone()]).await.unwrap().all());
            let got = reader
                .load(vec![k.clone()], vec![BytesMut::zeroed(data.len())])
                .await;
            assert!(
                got.hits.all(),
                "{checksum:?}: written by one path, read by the other"
            );
            assert_eq!(&got.buffers[0][..], &data[..]);
            reader.unlock(vec![k]);
        }
        direct.close().await;
        sdk.close().await;
    }
}

/// Against Garage, on both data paths: a bucket deleted under a running tier, and a bucket
/// that never existed, are errors for the adapter (breaker open, status unhealthy, the bucket
/// named), never misses. The HEAD 404 of a lookup is confirmed with `HeadBucket`
/// (`s3_bucket_check_secs = 0`: on every HEAD 404); the GET of a load reads `NoSuchBucket`.
#[actix_rt::test]
async fn a_missing_bucket_is_an_error_not_a_miss() {
    for fx in [S3::new(), S3::sdk()] {
        const GONE: &str = "kvtier-gone";
        fx.garage.create_bucket(GONE);
        let mut c = fx.config();
        c.s3_bucket = Some(GONE.into());
        c.s3_bucket_check_secs = 0.0;
        let adapter = |c: S3Config| {
            let mut built = AdapterConfig::default();
            built.spec = AdapterSpec::S3(c);
            built
        };
        let tier = Tier::start(&tier_config(vec![adapter(c.clone())]))
            .await
            .unwrap();
        assert!(tier
            .store(vec![key(1)], vec![payload(1, 100)])
            .await
            .unwrap()
            .success());
        // A HEAD 404 on an existing bucket is a miss.
        assert!(!tier.lookup_and_lock(vec![key(2)]).await.unwrap().all());
        assert!(tier.status().await.unwrap().is_healthy());
        // The bucket goes away.
        let client = fx.plain_client().await;
        let listed = client.list_objects_v2().bucket(GONE).send().await.unwrap();
        for o in listed.contents() {
            client
                .delete_object()
                .bucket(GONE)
                .key(o.key().unwrap())
                .send()
                .await
                .unwrap();
        }
        client.delete_bucket().bucket(GONE).send().await.unwrap();
        assert!(!tier.lookup_and_lock(vec![key(3)]).await.unwrap().all());
        let status = tier.status().await.unwrap();
        assert!(!status.is_healthy(), "{:?}: {status:?}", fx.data_path);
        let why = status.adapters[0].details["circuit_breaker"]["last_failure"].to_string();
        assert!(
            why.contains("bucket \\\"kvtier-gone\\\" does not exist"),
            "{why}"
        );
        tier.close().await;

        // A bucket that never existed is unhealthy in status before any data request (the
        // issue: it said healthy), with the bucket named; and on Garage, the status check
        // itself needs no data request to find out.
        c.s3_bucket = Some("kvtier-never-was".into());
        let tier = Tier::start(&tier_config(vec![adapter(c.clone())]))
            .await
            .unwrap();
        let status = tier.status().await.unwrap();
        assert!(!status.is_healthy(), "{:?}: {status:?}", fx.data_path);
        let why = status.adapters[0].reason.clone().unwrap_or_default();
        assert!(
            why.contains("bucket \"kvtier-never-was\" does not exist"),
            "{:?}: {why}",
            fx.data_path
        );
        tier.close().await;

        // A load from a bucket that never existed.
        let tier = Tier::start(&tier_config(vec![adapter(c)])).await.unwrap();
        let got = tier.load(vec![key(1)], vec![BytesMut::zeroed(100)]).await;
        assert!(!got.hits.all());
        let status = tier.status().await.unwrap();
        assert!(!status.is_healthy(), "{:?}: {status:?}", fx.data_path);
        let why = status.adapters[0].details["circuit_breaker"]["last_failure"].to_string();
        assert!(
            why.contains("bucket \\\"kvtier-never-was\\\" does not exist"),
            "{:?}: {why}",
            fx.data_path
        );
        tier.close().await;
    }
}
