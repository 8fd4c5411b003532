//! The `hfbucket` adapter against the loopback Hub emulator, whose Xet storage is xet-client's
//! own local CAS server: the conformance suite, plus handle/token behaviour, the metadata
//! cache, partial batch failures, bucket creation and throttling.

use kvtier_testkit as support;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kvtier::actors::backends::hfbucket::HfBucketConfig;
use kvtier::actors::config::Secret;
use kvtier::{AdapterConfig, AdapterSpec, HostRegion, Tier, TierConfig};
use support::conformance::Fixture;
use support::hub::{HubEmulator, Route};
use support::{key, payload};

const TOKEN: &str = "hf_test_token";
const BUCKET: &str = "kvtier-org/kv";

struct Hf {
    hub: HubEmulator,
    run: String,
}

impl Hf {
    fn new() -> Self {
        let hub = HubEmulator::start(TOKEN);
        hub.create_bucket(BUCKET);
        Hf {
            hub,
            run: format!("run{:08x}", rand::random::<u32>()),
        }
    }

    fn config(&self, prefix: &str) -> HfBucketConfig {
        let mut c = HfBucketConfig::new(format!("hf://buckets/{BUCKET}/{prefix}"));
        c.token = Some(Secret::new(TOKEN));
        c.token_env = "KVTIER_TEST_NO_SUCH_VAR".into();
        c.hf_endpoint = Some(self.hub.endpoint().to_owned());
        c
    }

    /// The bucket path of `key(k)` under the run's prefix (the `seed` name format).
    fn path(&self, k: u32) -> String {
        let name = key(k).object_name(kvtier::NameFormat::Seed);
        format!("{}/{}", self.run, kvtier::actors::key::hf_encode(&name))
    }

    fn adapter_with(&self, c: HfBucketConfig) -> AdapterConfig {
        {
            let mut built = AdapterConfig::default();
            built.common = Default::default();
            built.spec = AdapterSpec::HfBucket(c);
            built
        }
    }
}

impl Fixture for Hf {
    fn adapter(&self, slot: usize) -> AdapterConfig {
        self.adapter_with(self.config(&format!("{}/slot{slot}", self.run)))
    }
}

support::conformance_tests!(Hf::new());

fn tier_config(adapters: Vec<AdapterConfig>) -> TierConfig {
    {
        let mut built = TierConfig::default();
        built.adapters = adapters;
        built.eviction_interval_ms = 50;
        built
    }
}

#[actix_rt::test]
async fn objects_land_under_prefix_and_encoded_names() {
    let fx = Hf::new();
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(fx.config("prod"))]))
        .await
        .unwrap();
    let k = kvtier::ObjectKey::new("llama", 255, vec![0u8, 1, 2, 3])
        .unwrap()
        .with_salt("user-42")
        .unwrap();
    assert!(tier
        .store(vec![k], vec![payload(1, 100)])
        .await
        .unwrap()
        .success());
    assert_eq!(
        fx.hub.paths(BUCKET),
        vec!["prod/llama%40000000ff%4000010203%40user-42".to_owned()]
    );
    tier.close().await;
}

#[actix_rt::test]
async fn metadata_cache_serves_lookups_without_requests() {
    let fx = Hf::new();
    let mut c = fx.config(&fx.run);
    c.metadata_cache_ttl_secs = 0.5;
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(c)]))
        .await
        .unwrap();
    assert!(tier
        .store(vec![key(1)], vec![payload(1, 10)])
        .await
        .unwrap()
        .success());
    fx.hub.reset_requests();
    // Stored and never-seen keys: the stored one is cached by the store; the other is asked once.
    assert_eq!(
        format!(
            "{}",
            tier.lookup_and_lock(vec![key(1), key(2)]).await.unwrap()
        ),
        "10"
    );
    assert_eq!(fx.hub.requests(Route::PathsInfo), 1);
    assert_eq!(
        format!(
            "{}",
            tier.lookup_and_lock(vec![key(1), key(2)]).await.unwrap()
        ),
        "10"
    );
    assert_eq!(
        fx.hub.requests(Route::PathsInfo),
        1,
        "hit and negative result served from the cache"
    );
    // The same, as metrics: three cache hits (the stored key twice, the absent one once), one
    // miss, one paths-info request and the store's batch.
    let text = tier.metrics_text().expect("metrics on by default");
    let value = |series: &str| {
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit_once(' '))
            .map(|(_, v)| v.to_owned())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    let labels = r#"adapter="0",adapter_type="hfbucket",name="hfbucket""#;
    assert_eq!(
        value(&format!(
            "kvtier_hf_metadata_cache_total{{{labels},result=\"hit\"}}"
        )),
        "3"
    );
    assert_eq!(
        value(&format!(
            "kvtier_hf_metadata_cache_total{{{labels},result=\"miss\"}}"
        )),
        "1"
    );
    assert_eq!(
        value(&format!(
            "kvtier_hub_requests_total{{{labels},route=\"paths-info\"}}"
        )),
        "1"
    );
    assert_eq!(
        value(&format!(
            "kvtier_hub_requests_total{{{labels},route=\"batch\"}}"
        )),
        "1"
    );
    actix_rt::time::sleep(Duration::from_millis(600)).await;
    tier.lookup_and_lock(vec![key(1), key(2)]).await.unwrap();
    assert_eq!(
        fx.hub.requests(Route::PathsInfo),
        2,
        "refetched after the TTL"
    );
    tier.unlock(vec![key(1), key(1), key(1)]);
    tier.close().await;

    let mut c = fx.config(&fx.run);
    c.metadata_cache_ttl_secs = 0.0;
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(c)]))
        .await
        .unwrap();
    fx.hub.reset_requests();
    tier.lookup_and_lock(vec![key(2)]).await.unwrap();
    tier.lookup_and_lock(vec![key(2)]).await.unwrap();
    assert_eq!(
        fx.hub.requests(Route::PathsInfo),
        2,
        "TTL 0 disables the cache"
    );
    tier.close().await;
}

#[actix_rt::test]
async fn partial_batch_failure_counts_exactly_the_landed_objects() {
    let fx = Hf::new();
    let mut a = fx.adapter_with(fx.config(&fx.run));
    a.common.max_capacity_gb = 1.0;
    let tier = Tier::start(&tier_config(vec![a])).await.unwrap();
    fx.hub.fail_batch_line(Some(2));
    let keys: Vec<_> = (0..4).map(key).collect();
    let rep = tier
        .store(keys.clone(), (0..4).map(|i| payload(i, 100)).collect())
        .await
        .unwrap();
    fx.hub.fail_batch_line(None);
    let o = &rep.adapters[0].1;
    assert_eq!(o.failed.len(), 1, "{rep:?}");
    assert_eq!(o.stored, 3);
    assert_eq!(o.new_bytes, 300);
    let usage = tier.usage().await.unwrap().adapters[0].used_bytes;
    assert_eq!(
        usage,
        fx.hub.total_size(BUCKET),
        "usage equals the bucket listing"
    );
    tier.close().await;
}

#[actix_rt::test]
async fn create_bucket_if_missing_and_retry_after_failure() {
    let fx = Hf::new();
    let mut c = HfBucketConfig::new("hf://buckets/new-org/fresh");
    c.token = Some(Secret::new(TOKEN));
    c.token_env = "KVTIER_TEST_NO_SUCH_VAR".into();
    c.hf_endpoint = Some(fx.hub.endpoint().to_owned());
    // Without the flag, a store to a missing bucket fails.
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(c.clone())]))
        .await
        .unwrap();
    assert!(!tier
        .store(vec![key(1)], vec![payload(1, 10)])
        .await
        .unwrap()
        .success());
    tier.close().await;
    c.create_bucket_if_missing = true;
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(c)]))
        .await
        .unwrap();
    // Creation fails once (5xx on every attempt), then succeeds on the next store.
    fx.hub.fail_next(5, 500, Some(Route::CreateBucket));
    assert!(!tier
        .store(vec![key(1)], vec![payload(1, 10)])
        .await
        .unwrap()
        .success());
    assert!(!fx.hub.bucket_exists("new-org/fresh"));
    assert!(tier
        .store(vec![key(1)], vec![payload(1, 10)])
        .await
        .unwrap()
        .success());
    assert!(fx.hub.bucket_exists("new-org/fresh"));
    tier.close().await;
}

#[actix_rt::test]
async fn survives_a_429_storm() {
    let fx = Hf::new();
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(fx.config(&fx.run))]))
        .await
        .unwrap();
    fx.hub.throttle_next(3, 0, None);
    let rep = tier
        .store(vec![key(1)], vec![payload(1, 64)])
        .await
        .unwrap();
    assert!(rep.success(), "{rep:?}");
    fx.hub.throttle_next(3, 0, None);
    let loaded = tier.load(vec![key(1)], vec![BytesMut::zeroed(64)]).await;
    assert!(loaded.hits.all());
    assert_eq!(&loaded.buffers[0][..], &payload(1, 64)[..]);
    tier.close().await;
}

#[actix_rt::test]
async fn a_slow_hub_does_not_delay_other_backends() {
    use kvtier::actors::{Delete, ListKeys, Store};
    let fx = Hf::new();
    let tier = Tier::start(&tier_config(vec![
        AdapterConfig::memory(),
        fx.adapter_with(fx.config(&fx.run)),
    ]))
    .await
    .unwrap();
    fx.hub.set_latency(Duration::from_millis(1500));
    let before = fx.hub.total_requests();
    let c = tier.controller().clone();
    let started = std::time::Instant::now();
    let slow = actix_rt::spawn(async move {
        c.send(Store {
            keys: vec![key(1)],
            objects: vec![payload(1, 10)],
        })
        .await
    });
    // The store's first Hub request has arrived (the emulator counts it, then holds it).
    assert!(
        support::wait_until(5, || async { fx.hub.total_requests() > before }).await,
        "the store never reached the Hub"
    );
    // The memory adapter answers while the Hub store is still in flight.
    for _ in 0..20 {
        tier.controller()
            .send(ListKeys {
                model: None,
                cursor: None,
                page_size: 10,
                adapter: 0,
            })
            .await
            .unwrap()
            .unwrap();
        tier.controller()
            .send(Delete {
                keys: vec![key(9)],
                adapter: Some(0),
            })
            .await
            .unwrap();
    }
    assert!(!slow.is_finished(), "the Hub store is still in flight");
    assert_eq!(
        tier.usage().await.unwrap().adapters[1].used_bytes,
        0,
        "the Hub store has not been accounted yet"
    );
    let rep = slow.await.unwrap().unwrap();
    assert!(rep.success(), "{rep:?}");
    assert!(started.elapsed() >= Duration::from_millis(1500));
    fx.hub.set_latency(Duration::ZERO);
    tier.close().await;
}

#[actix_rt::test]
async fn restart_recovers_usage_and_close_removes_temp_files() {
    let fx = Hf::new();
    let tmp = tempfile::tempdir().unwrap();
    let mut c = fx.config(&fx.run);
    c.download_tmp_dir = Some(tmp.path().to_owned());
    let mut a = fx.adapter_with(c);
    a.common.max_capacity_gb = 1.0;
    let tier = Tier::start(&tier_config(vec![a.clone()])).await.unwrap();
    assert!(tier
        .store(
            (0..3).map(key).collect(),
            (0..3).map(|i| payload(i, 50 + i as usize)).collect(),
        )
        .await
        .unwrap()
        .success());
    let before = tier.usage().await.unwrap();
    assert!(
        std::fs::read_dir(tmp.path()).unwrap().count() > 0,
        "a working directory while running"
    );
    tier.close().await;
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "close removed the temporary files"
    );
    let tier = Tier::start(&tier_config(vec![a])).await.unwrap();
    assert_eq!(tier.usage().await.unwrap(), before);
    tier.close().await;
}

/// A start that fails at its second adapter stops the first before it returns: the `hfbucket`
/// adapter it had opened is closed (its working directory is gone), not left running.
#[actix_rt::test]
async fn a_failed_start_closes_the_adapters_it_opened() {
    let fx = Hf::new();
    let tmp = tempfile::tempdir().unwrap();
    let mut c = fx.config(&fx.run);
    c.download_tmp_dir = Some(tmp.path().join("hf"));
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let err = Tier::start(&tier_config(vec![
        fx.adapter_with(c),
        AdapterConfig::fs(file.join("sub")),
    ]))
    .await
    .err()
    .expect("the fs adapter cannot create a directory under a file");
    assert!(err.to_string().starts_with("adapter #1 (fs): "), "{err}");
    let left: Vec<_> = std::fs::read_dir(tmp.path().join("hf"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "the hfbucket adapter still runs: {left:?}");
}

/// The adapter's load counters from `status`: (xet, resolve, xet_fallbacks).
async fn load_counters(tier: &Tier) -> (u64, u64, u64) {
    let st = tier.status().await.unwrap();
    let l = &st.adapters[0].details["loads"];
    let n = |f: &str| l[f].as_u64().unwrap();
    (n("xet"), n("resolve"), n("xet_fallbacks"))
}

/// Both load paths (`xet_load_path`): kvtier's direct reader (the default) and hf-xet's stream.
#[actix_rt::test]
async fn loads_read_through_xet_without_resolve() {
    for path in ["direct", "hf-xet"] {
        loads_read_through_xet(path).await;
    }
}

async fn loads_read_through_xet(path: &str) {
    let fx = Hf::new();
    let mut c = fx.config(&fx.run);
    c.xet_load_path = serde_json::from_value(serde_json::json!(path)).unwrap();
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(c)]))
        .await
        .unwrap();
    let st = tier.status().await.unwrap();
    assert_eq!(st.adapters[0].details["loads"]["xet_load_path"], path);
    let keys: Vec<_> = (0..6).map(key).collect();
    let payloads: Vec<_> = (0..6).map(|i| payload(i, 3000 + i as usize)).collect();
    assert!(tier
        .store(keys.clone(), payloads.clone())
        .await
        .unwrap()
        .success());
    fx.hub.reset_requests();
    for round in 0..2 {
        let bufs = payloads.iter().map(|p| BytesMut::zeroed(p.len())).collect();
        let loaded = tier.load(keys.clone(), bufs).await;
        assert!(loaded.hits.all(), "{path}: round {round}");
        for (b, p) in loaded.buffers.iter().zip(&payloads) {
            assert_eq!(&b[..], &p[..], "{path}");
        }
    }
    assert_eq!(fx.hub.requests(Route::Resolve), 0, "{path}: no resolve");
    assert_eq!(fx.hub.requests(Route::Bytes), 0, "no bytes through the Hub");
    assert_eq!(
        fx.hub.requests(Route::PathsInfo),
        0,
        "the hashes come from the store"
    );
    assert_eq!(
        fx.hub.requests(Route::XetReadToken),
        1,
        "one reader for every load"
    );
    assert_eq!(load_counters(&tier).await, (12, 0, 0));

    // A buffer of the wrong size is a miss and is left as it was, with no transfer.
    let loaded = tier
        .load(vec![key(0)], vec![BytesMut::from(&[7u8; 2999][..])])
        .await;
    assert!(!loaded.hits.get(0));
    assert!(loaded.buffers[0].iter().all(|&b| b == 7));
    assert_eq!(load_counters(&tier).await, (13, 0, 0));
    tier.close().await;
}

#[actix_rt::test]
async fn loads_of_uncached_keys_ask_paths_info_once_then_use_xet() {
    let fx = Hf::new();
    let mut c = fx.config(&fx.run);
    c.metadata_cache_ttl_secs = 0.0;
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(c)]))
        .await
        .unwrap();
    let keys: Vec<_> = (0..4).map(key).collect();
    assert!(tier
        .store(keys.clone(), (0..4).map(|i| payload(i, 500)).collect())
        .await
        .unwrap()
        .success());
    fx.hub.reset_requests();
    let mut bufs: Vec<_> = (0..4).map(|_| BytesMut::zeroed(500)).collect();
    bufs.push(BytesMut::zeroed(500));
    let mut with_missing = keys.clone();
    with_missing.push(key(99));
    let loaded = tier.load(with_missing, bufs).await;
    assert_eq!(format!("{}", loaded.hits), "11110");
    assert_eq!(&loaded.buffers[3][..], &payload(3, 500)[..]);
    assert_eq!(fx.hub.requests(Route::PathsInfo), 1, "one per batch");
    assert_eq!(fx.hub.requests(Route::Resolve), 0);
    assert_eq!(load_counters(&tier).await, (4, 0, 0));
    tier.close().await;
}

#[actix_rt::test]
async fn loads_fall_back_to_resolve_when_xet_is_unavailable() {
    let fx = Hf::new();
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(fx.config(&fx.run))]))
        .await
        .unwrap();
    let keys: Vec<_> = (0..3).map(key).collect();
    assert!(tier
        .store(keys.clone(), (0..3).map(|i| payload(i, 700)).collect())
        .await
        .unwrap()
        .success());
    fx.hub.reset_requests();
    // The read-token route refuses: no reader, every load follows resolve.
    fx.hub.fail_next(1, 403, Some(Route::XetReadToken));
    let loaded = tier
        .load(
            keys.clone(),
            (0..3).map(|_| BytesMut::zeroed(700)).collect(),
        )
        .await;
    assert!(loaded.hits.all());
    assert_eq!(&loaded.buffers[2][..], &payload(2, 700)[..]);
    assert_eq!(fx.hub.requests(Route::XetReadToken), 1);
    assert_eq!(fx.hub.requests(Route::Resolve), 3);
    assert_eq!(load_counters(&tier).await, (0, 3, 0));
    tier.close().await;
}

/// A tier on the run's prefix holding `key(1)`, 64 bytes.
async fn one_object(fx: &Hf) -> Tier {
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(fx.config(&fx.run))]))
        .await
        .unwrap();
    assert!(tier
        .store(vec![key(1)], vec![payload(1, 64)])
        .await
        .unwrap()
        .success());
    tier
}

#[actix_rt::test]
async fn a_failed_xet_load_falls_back_to_resolve() {
    let fx = Hf::new();
    let tier = one_object(&fx).await;
    // A file whose xetHash the CAS does not know: the CAS has no reconstruction for it, the
    // adapter falls back to resolve, and resolve answers 404.
    fx.hub
        .insert_file(BUCKET, &fx.path(2), &"ab".repeat(32), 64);
    fx.hub.reset_requests();
    let loaded = tier
        .load(
            vec![key(1), key(2)],
            vec![BytesMut::zeroed(64), BytesMut::zeroed(64)],
        )
        .await;
    assert_eq!(format!("{}", loaded.hits), "10");
    assert_eq!(fx.hub.requests(Route::Resolve), 1, "only the failed one");
    assert_eq!(load_counters(&tier).await, (1, 1, 1));
    // The direct reader that failed is dropped: the next batch opens one with a new token.
    let tokens = fx.hub.requests(Route::XetReadToken);
    let loaded = tier.load(vec![key(1)], vec![BytesMut::zeroed(64)]).await;
    assert!(loaded.hits.all());
    assert_eq!(fx.hub.requests(Route::XetReadToken), tokens + 1);
    assert_eq!(load_counters(&tier).await, (2, 1, 1));
    tier.close().await;
}

/// A path whose Xet file is not the size the Hub lists (here: the Hub says 100 bytes, the
/// file behind its hash holds 64) is a miss, and no byte reaches the buffer: the direct reader
/// checks the reconstruction's size before it fetches, and `resolve` checks the length the
/// server declares.
#[actix_rt::test]
async fn a_xet_file_of_another_size_is_a_miss_without_a_partial_copy() {
    let fx = Hf::new();
    let tier = one_object(&fx).await;
    let stored = fx.path(1);
    let hash = fx
        .hub
        .files(BUCKET)
        .into_iter()
        .find(|f| f.path == stored)
        .expect("the stored file")
        .xet_hash;
    fx.hub.insert_file(BUCKET, &fx.path(2), &hash, 100);
    let loaded = tier
        .load(vec![key(2)], vec![BytesMut::from(&[7u8; 100][..])])
        .await;
    assert!(!loaded.hits.get(0));
    assert!(loaded.buffers[0].iter().all(|&b| b == 7), "no partial copy");
    // The Xet read failed (and fell back); `resolve` found 64 bytes.
    assert_eq!(load_counters(&tier).await, (0, 1, 1));
    tier.close().await;
}

/// A direct reader serves loads while its read token has more than a minute left; a load
/// batch that finds it shorter opens a new reader with a new token first.
#[actix_rt::test]
async fn direct_loads_renew_their_read_token_before_it_expires() {
    let fx = Hf::new();
    for (lifetime, tokens) in [(3600, 1), (20, 3)] {
        fx.hub.set_xet_token_lifetime(Duration::from_secs(lifetime));
        let c = fx.config(&format!("{}/{lifetime}", fx.run));
        let tier = Tier::start(&tier_config(vec![fx.adapter_with(c)]))
            .await
            .unwrap();
        let keys: Vec<_> = (0..2).map(key).collect();
        let data: Vec<_> = (0..2).map(|i| payload(i, 5000)).collect();
        assert!(tier
            .store(keys.clone(), data.clone())
            .await
            .unwrap()
            .success());
        let before = fx.hub.requests(Route::XetReadToken);
        for batch in 0..3 {
            let loaded = tier
                .load(
                    keys.clone(),
                    (0..2).map(|_| BytesMut::zeroed(5000)).collect(),
                )
                .await;
            assert!(loaded.hits.all(), "{lifetime} s tokens, batch {batch}");
            assert!(loaded.buffers[1][..] == data[1][..]);
        }
        assert_eq!(
            fx.hub.requests(Route::XetReadToken) - before,
            tokens,
            "{lifetime} s tokens"
        );
        assert_eq!(load_counters(&tier).await, (6, 0, 0), "{lifetime} s tokens");
        tier.close().await;
    }
}

#[actix_rt::test]
async fn a_cache_of_1024_entries_is_not_swept_on_every_refresh() {
    let fx = Hf::new();
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(fx.config(&fx.run))]))
        .await
        .unwrap();
    let keys: Vec<_> = (0..1024).map(key).collect();
    let rep = tier
        .store(keys.clone(), (0..1024).map(|i| payload(i, 8)).collect())
        .await
        .unwrap();
    assert!(rep.success(), "{rep:?}");
    for _ in 0..3 {
        assert!(tier.lookup_and_lock(keys.clone()).await.unwrap().all());
    }
    let st = tier.status().await.unwrap();
    let cache = &st.adapters[0].details["metadata_cache"];
    assert_eq!(cache["entries"].as_u64(), Some(1024));
    assert_eq!(cache["hits"].as_u64(), Some(3 * 1024));
    // One sweep when the cache first reached 1024 entries; refreshing them sweeps no more.
    assert!(cache["sweeps"].as_u64().unwrap() <= 1, "{cache}");
    tier.close().await;
}

/// Issue #6's Hub faults one after the other (a 429 storm with `Retry-After`, a 5xx burst the
/// retries absorb, one they cannot, a partial batch, slow responses), each on a store of a
/// fresh batch: afterwards usage equals the bucket's listing exactly and every key that the
/// reports say was stored loads back byte for byte.
#[actix_rt::test]
async fn hub_faults_leave_exact_accounting() {
    let fx = Hf::new();
    let mut a = fx.adapter_with(fx.config(&fx.run));
    a.common.max_capacity_gb = 1.0;
    let tier = Tier::start(&tier_config(vec![a])).await.unwrap();
    let mut stored = Vec::new();
    let mut failed_total = 0;
    for (round, fault) in ["429", "5xx", "5xx-long", "partial", "slow"]
        .into_iter()
        .enumerate()
    {
        match fault {
            "429" => fx.hub.throttle_next(4, 1, None),
            "5xx" => fx.hub.fail_next(3, 503, None),
            "5xx-long" => fx.hub.fail_next(12, 500, Some(Route::Batch)),
            "partial" => fx.hub.fail_batch_line(Some(3)),
            _ => fx.hub.set_latency(Duration::from_millis(200)),
        }
        let base = 100 + 10 * round as u32;
        let keys: Vec<_> = (base..base + 6).map(key).collect();
        let rep = tier
            .store(
                keys.clone(),
                (base..base + 6).map(|i| payload(i, 333)).collect(),
            )
            .await
            .unwrap();
        fx.hub.clear_faults();
        let o = &rep.adapters[0].1;
        assert_eq!(o.stored + o.failed.len(), 6, "{fault}: {rep:?}");
        failed_total += o.failed.len();
        let failed: Vec<_> = o.failed.iter().map(|f| f.key.clone()).collect();
        stored.extend(keys.into_iter().filter(|k| !failed.contains(k)));
        let usage = tier.usage().await.unwrap().adapters[0].used_bytes;
        assert_eq!(usage, fx.hub.total_size(BUCKET), "{fault}: usage == bucket");
        assert_eq!(
            usage,
            333 * stored.len() as u64,
            "{fault}: usage == stored keys"
        );
    }
    assert!(
        failed_total > 0,
        "the long 5xx burst and the partial batch cost keys"
    );
    assert!(tier.lookup_and_lock(stored.clone()).await.unwrap().all());
    let loaded = tier
        .load(
            stored.clone(),
            stored.iter().map(|_| BytesMut::zeroed(333)).collect(),
        )
        .await;
    assert!(loaded.hits.all());
    for (k, buf) in stored.iter().zip(&loaded.buffers) {
        let i = (100..160).find(|i| key(*i) == *k).unwrap();
        assert_eq!(&buf[..], &payload(i, 333)[..]);
    }
    tier.unlock(stored);
    tier.close().await;
}

/// The Hub goes down (every request answered 503, past the retries): the half-open breaker
/// (the one the `s3` adapter uses) opens, status turns unhealthy, and requests fail fast
/// without reaching the Hub. When the Hub answers again, the probe after the cooldown closes
/// the breaker and requests succeed.
#[actix_rt::test]
async fn a_hub_outage_opens_the_breaker_and_recovery_closes_it() {
    let fx = Hf::new();
    let mut c = fx.config(&fx.run);
    c.circuit_breaker_cooldown_secs = 0.5;
    c.metadata_cache_ttl_secs = 0.0;
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(c)]))
        .await
        .unwrap();
    assert!(tier
        .store(vec![key(1)], vec![payload(1, 64)])
        .await
        .unwrap()
        .success());

    // Three stores at once (each one batch request, which counts once): each fails after
    // its retries, and the third failure opens the breaker.
    fx.hub.fail_next(u32::MAX, 503, None);
    let store = |i: u32| tier.store(vec![key(i)], vec![payload(i, 64)]);
    let (a, b, c) = tokio::join!(store(2), store(3), store(4));
    for rep in [a, b, c] {
        let rep = rep.unwrap();
        assert_eq!(rep.adapters[0].1.failed.len(), 1, "{rep:?}");
    }
    let status = tier.status().await.unwrap();
    assert!(!status.adapters[0].is_healthy, "{status:?}");
    let b = &status.adapters[0].details["circuit_breaker"];
    assert_eq!(b["state"], "open", "{b}");
    assert!(
        b["last_failure"]
            .as_str()
            .unwrap_or_default()
            .contains("503"),
        "{b}"
    );

    // Open: refused at once, nothing reaches the Hub.
    fx.hub.reset_requests();
    let found = tier.lookup_and_lock(vec![key(1)]).await.unwrap();
    assert!(!found.all());
    let loaded = tier.load(vec![key(1)], vec![BytesMut::zeroed(64)]).await;
    assert!(!loaded.hits.all());
    assert_eq!(fx.hub.total_requests(), 0, "the breaker sent nothing");

    // The Hub returns: after the cooldown the probe closes the breaker.
    fx.hub.clear_faults();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let found = tier.lookup_and_lock(vec![key(1)]).await.unwrap();
        if found.all() {
            tier.unlock(vec![key(1)]);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the breaker never closed"
        );
        // Polling the breaker's state (bounded by the deadline), not waiting for an outcome.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = tier.status().await.unwrap();
    assert!(status.adapters[0].is_healthy, "{status:?}");
    assert_eq!(
        status.adapters[0].details["circuit_breaker"]["times_opened"],
        1
    );
    let loaded = tier.load(vec![key(1)], vec![BytesMut::zeroed(64)]).await;
    assert!(loaded.hits.all());
    tier.close().await;
}

/// The adapter's store counters from `status` (`details.stores`).
async fn store_details(tier: &Tier) -> serde_json::Value {
    tier.status().await.unwrap().adapters[0].details["stores"].clone()
}

/// Starts a tier on `adapter` and stores `data` under `keys` (every object must land); returns
/// the tier and its `details.stores` after the store.
async fn start_and_store(
    adapter: AdapterConfig,
    keys: &[kvtier::ObjectKey],
    data: &[Bytes],
) -> (Tier, serde_json::Value) {
    let tier = Tier::start(&tier_config(vec![adapter])).await.unwrap();
    assert!(tier
        .store(keys.to_vec(), data.to_vec())
        .await
        .unwrap()
        .success());
    let st = store_details(&tier).await;
    (tier, st)
}

/// Text that LZ4 shrinks several times over, distinct in every chunk (no deduplication).
fn compressible(seed: u32, n: usize) -> Bytes {
    let mut s = String::with_capacity(n + 64);
    let mut line = 0u64;
    while s.len() < n {
        s.push_str(&format!("object {seed} line {line:010} of the KV cache\n"));
        line += 1;
    }
    s.truncate(n);
    Bytes::from(s)
}

#[actix_rt::test]
async fn stores_share_one_xet_session_and_write_token_and_read_host_memory_in_place() {
    let fx = Hf::new();
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(fx.config(&fx.run))]))
        .await
        .unwrap();
    const CHUNK: usize = 96 << 10;
    let mut arena = vec![0u8; 12 * CHUNK];
    for (i, c) in arena.chunks_mut(CHUNK).enumerate() {
        c.copy_from_slice(&payload(1000 + i as u32, CHUNK));
    }
    // Three batches of four objects, straight from host memory.
    for batch in 0..3 {
        let keys: Vec<_> = (batch * 4..batch * 4 + 4).map(key).collect();
        let regions: Vec<HostRegion> = (0..4)
            // SAFETY: disjoint regions of `arena`, which outlives the call and is not touched
            // until `store_from` has returned (it returns once kvtier holds no reference).
            .map(|i| unsafe {
                HostRegion::new(
                    arena.as_mut_ptr().add((batch as usize * 4 + i) * CHUNK),
                    CHUNK,
                )
            })
            .collect();
        // A hang bound only: `store_from` returns once Xet dropped every slice of the regions.
        let rep = tokio::time::timeout(Duration::from_secs(120), tier.store_from(keys, regions))
            .await
            .expect("the store released the host memory")
            .unwrap();
        assert!(rep.success(), "batch {batch}");
    }
    assert_eq!(
        fx.hub.requests(Route::XetWriteToken),
        1,
        "one write token for every batch"
    );
    let st = store_details(&tier).await;
    assert_eq!(st["xet_writers_opened"], 1, "one Xet session: {st}");
    assert_eq!(st["xet_commits"], 3, "{st}");
    assert_eq!(st["xet_failed_commits"], 0, "{st}");
    assert_eq!(st["xet_writer_open"], true, "{st}");
    // The host may reuse the memory: what landed is what it held at the store.
    let expected = arena.clone();
    arena.fill(0);
    let keys: Vec<_> = (0..12).map(key).collect();
    let loaded = tier
        .load(keys, (0..12).map(|_| BytesMut::zeroed(CHUNK)).collect())
        .await;
    assert!(loaded.hits.all());
    for (i, b) in loaded.buffers.iter().enumerate() {
        assert_eq!(&b[..], &expected[i * CHUNK..(i + 1) * CHUNK], "object {i}");
    }
    tier.close().await;
}

/// Stores three batches and loads them back; returns the write tokens fetched meanwhile.
async fn three_batches_round_trip(fx: &Hf, tier: &Tier, seed: u32) -> u64 {
    let before = fx.hub.requests(Route::XetWriteToken);
    const CHUNK: usize = 64 << 10;
    for batch in 0..3 {
        let n = seed + batch * 2;
        let keys: Vec<_> = (n..n + 2).map(key).collect();
        let data: Vec<_> = (n..n + 2).map(|i| payload(i, CHUNK)).collect();
        assert!(tier
            .store(keys.clone(), data.clone())
            .await
            .unwrap()
            .success());
        let loaded = tier
            .load(keys, (0..2).map(|_| BytesMut::zeroed(CHUNK)).collect())
            .await;
        assert!(loaded.hits.all(), "batch {batch}");
        assert!(loaded
            .buffers
            .iter()
            .zip(&data)
            .all(|(b, d)| b[..] == d[..]));
    }
    let st = store_details(tier).await;
    assert_eq!(st["xet_failed_commits"], 0, "{st}");
    fx.hub.requests(Route::XetWriteToken) - before
}

/// Commits run without Xet's token refresher only while the token outlives the reserve. A
/// Hub that issues tokens shorter than the reserve gets commits with a refresher: with
/// 20-second tokens Xet must refresh before its first CAS request (it refreshes 30 s ahead),
/// so a commit without one would fail.
#[actix_rt::test]
async fn commits_carry_the_token_refresher_only_when_the_token_is_short_lived() {
    let fx = Hf::new();
    // Hour-long tokens (the Hub's): one token for every batch, no refresher needed.
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(fx.config(&fx.run))]))
        .await
        .unwrap();
    assert_eq!(three_batches_round_trip(&fx, &tier, 0).await, 1);
    assert_eq!(store_details(&tier).await["xet_token_reserve_secs"], 600);
    tier.close().await;

    // 20-second tokens: each batch fetches one (it has less than the 60-second margin left);
    // kvtier's own writer (the default) replaces a token only when it has less than half its
    // lifetime left before a CAS request, which these short commits never see.
    fx.hub.set_xet_token_lifetime(Duration::from_secs(20));
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(fx.config(&fx.run))]))
        .await
        .unwrap();
    assert_eq!(three_batches_round_trip(&fx, &tier, 100).await, 3);
    tier.close().await;

    // Tokens that have run out when they arrive: the writer replaces one before each of its
    // CAS requests (grant, commit, shard), so a commit never sends a token it knows is dead.
    fx.hub.set_xet_token_lifetime(Duration::ZERO);
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(fx.config(&fx.run))]))
        .await
        .unwrap();
    let fetched = three_batches_round_trip(&fx, &tier, 200).await;
    assert!(
        fetched >= 3 * 4,
        "the writer replaced tokens: {fetched} tokens"
    );
    tier.close().await;

    // 20-second tokens on hf-xet's store path, whose commits then carry Xet's refresher: it
    // refreshes 30 s ahead, so it fetches more during each commit.
    fx.hub.set_xet_token_lifetime(Duration::from_secs(20));
    let mut c = fx.config(&fx.run);
    c.xet_store_path = serde_json::from_value(serde_json::json!("hf-xet")).unwrap();
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(c)]))
        .await
        .unwrap();
    let fetched = three_batches_round_trip(&fx, &tier, 300).await;
    assert!(fetched > 3, "hf-xet's refresher ran: {fetched} tokens");
    tier.close().await;

    // Reserve 0 (hf_xet's behaviour) with hour-long tokens: still one token.
    fx.hub.set_xet_token_lifetime(Duration::from_secs(3600));
    let mut c = fx.config(&fx.run);
    c.xet_token_reserve_secs = 0;
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(c)]))
        .await
        .unwrap();
    assert_eq!(three_batches_round_trip(&fx, &tier, 200).await, 1);
    tier.close().await;
}

#[actix_rt::test]
async fn xet_compression_none_stores_chunks_raw_and_lz4_shrinks_them() {
    let fx = Hf::new();
    let size = 512 << 10;
    for (n, scheme) in [(0u32, "none"), (1, "lz4"), (2, "bg4-lz4"), (3, "auto")] {
        let mut c = fx.config(&format!("{}/{scheme}", fx.run));
        c.xet_compression = serde_json::from_value(serde_json::json!(scheme)).unwrap();
        let keys: Vec<_> = (0..4).map(|i| key(n * 10 + i)).collect();
        let data: Vec<_> = (0..4).map(|i| compressible(n * 10 + i, size)).collect();
        let (tier, st) = start_and_store(fx.adapter_with(c), &keys, &data).await;
        assert_eq!(st["xet_compression"], scheme);
        let new = st["xet_new_bytes"].as_u64().unwrap();
        let xorb = st["xet_xorb_bytes"].as_u64().unwrap();
        assert_eq!(new, 4 * size as u64, "{scheme}: nothing deduplicated: {st}");
        if scheme == "none" {
            assert!(xorb >= new, "{scheme}: stored raw: {st}");
        } else {
            assert!(xorb < new / 2, "{scheme}: compressed: {st}");
        }
        // Whatever the scheme, the objects read back as stored.
        let loaded = tier
            .load(keys, (0..4).map(|_| BytesMut::zeroed(size)).collect())
            .await;
        assert!(loaded.hits.all(), "{scheme}");
        for (b, d) in loaded.buffers.iter().zip(&data) {
            assert!(b[..] == d[..], "{scheme}: content");
        }
        // Through the direct reader, which decoded every scheme (no fallback to resolve).
        assert_eq!(load_counters(&tier).await, (4, 0, 0), "{scheme}");
        tier.close().await;
    }
}

/// The conformance suite on the other store paths: hf-xet's commit (`xet_store_path =
/// "hf-xet"`, the switch back) and kvtier's writer with fixed 64 KiB chunks.
struct HfStorePath {
    hf: Hf,
    store: &'static str,
    chunking: &'static str,
}

impl HfStorePath {
    fn new(store: &'static str, chunking: &'static str) -> Self {
        Self {
            hf: Hf::new(),
            store,
            chunking,
        }
    }
}

impl Fixture for HfStorePath {
    fn adapter(&self, slot: usize) -> AdapterConfig {
        let mut c = self.hf.config(&format!("{}/slot{slot}", self.hf.run));
        c.xet_store_path = serde_json::from_value(serde_json::json!(self.store)).unwrap();
        c.xet_chunking = serde_json::from_value(serde_json::json!(self.chunking)).unwrap();
        self.hf.adapter_with(c)
    }
}

mod hf_xet_store {
    use super::*;
    support::conformance_tests!(HfStorePath::new("hf-xet", "cdc"));
}

mod fixed_chunks {
    use super::*;
    support::conformance_tests!(HfStorePath::new("direct", "fixed"));
}

/// Every store path writes objects that both load paths read back (across xorbs: one batch
/// holds 80 MiB, more than a xorb), through the CAS's own checks of xorbs and shards; with
/// Xet's chunker, kvtier's own writer gives exactly hf-xet's Xet hashes.
#[actix_rt::test]
async fn every_store_path_writes_what_every_load_path_reads() {
    let fx = Hf::new();
    let sizes = [1usize, 3000, 64 << 10, 200_000, 40 << 20, 40 << 20];
    let data: Vec<Bytes> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| payload(500 + i as u32, n))
        .collect();
    let keys: Vec<_> = (0..sizes.len() as u32).map(key).collect();
    let mut hashes = std::collections::BTreeMap::new();
    for (store, chunking) in [("hf-xet", "cdc"), ("direct", "cdc"), ("direct", "fixed")] {
        let prefix = format!("{}/{store}-{chunking}", fx.run);
        let config = |load: &str| {
            let mut c = fx.config(&prefix);
            c.xet_store_path = serde_json::from_value(serde_json::json!(store)).unwrap();
            c.xet_chunking = serde_json::from_value(serde_json::json!(chunking)).unwrap();
            // "verify": the direct reader checking every load against its Xet hash.
            c.xet_verify_loads = load == "verify";
            let load = if load == "verify" { "direct" } else { load };
            c.xet_load_path = serde_json::from_value(serde_json::json!(load)).unwrap();
            fx.adapter_with(c)
        };
        let (tier, st) = start_and_store(config("direct"), &keys, &data).await;
        assert_eq!(st["xet_store_path"], store, "{st}");
        assert_eq!(st["xet_chunking"], chunking, "{st}");
        assert_eq!(st["xet_commits"], 1, "{st}");
        tier.close().await;
        for load in ["direct", "hf-xet", "verify"] {
            let tier = Tier::start(&tier_config(vec![config(load)])).await.unwrap();
            let bufs = sizes.iter().map(|&n| BytesMut::zeroed(n)).collect();
            let loaded = tier.load(keys.clone(), bufs).await;
            assert!(loaded.hits.all(), "{store}/{chunking} read by {load}");
            for (i, (b, d)) in loaded.buffers.iter().zip(&data).enumerate() {
                assert!(
                    b[..] == d[..],
                    "{store}/{chunking} read by {load}: object {i}"
                );
            }
            // With "verify", a hash that did not match would have fallen back to resolve.
            let (_, resolve, fallbacks) = load_counters(&tier).await;
            assert_eq!(
                (resolve, fallbacks),
                (0, 0),
                "{store}/{chunking} read by {load}: no resolve fallback"
            );
            tier.close().await;
        }
        let mine: Vec<(u64, String)> = fx
            .hub
            .files(BUCKET)
            .into_iter()
            .filter(|f| f.path.starts_with(&format!("{prefix}/")))
            .map(|f| (f.size, f.xet_hash))
            .collect();
        assert_eq!(mine.len(), sizes.len());
        hashes.insert(format!("{store}-{chunking}"), mine);
    }
    assert_eq!(
        hashes["direct-cdc"], hashes["hf-xet-cdc"],
        "Xet's chunker in kvtier's writer gives hf-xet's hashes"
    );
    // One chunk either way for the small objects; more, cut elsewhere, for the large ones.
    let (fixed, cdc) = (&hashes["direct-fixed"], &hashes["hf-xet-cdc"]);
    for (f, c) in fixed.iter().zip(cdc) {
        assert_eq!(f.0, c.0);
        if f.0 <= 3000 {
            assert_eq!(f.1, c.1, "size {}", f.0);
        } else if f.0 >= 40 << 20 {
            assert_ne!(f.1, c.1, "size {}", f.0);
        }
    }
}

/// kvtier's own writer stores xorbs through the CAS's upload grants (grant, upload to the
/// grant URL, commit) when it offers them, and posts them to the CAS when it does not; both
/// land objects every reader reads back.
#[actix_rt::test]
async fn direct_stores_use_upload_grants_or_post_xorbs_when_the_cas_has_none() {
    let fx = Hf::new();
    const SIZE: usize = 300 << 10;
    let data: Vec<Bytes> = (0..4).map(|i| payload(500 + i, SIZE)).collect();
    let keys: Vec<_> = (0..4).map(key).collect();
    let (tier, st) = start_and_store(fx.adapter(0), &keys[..2], &data[..2]).await;
    assert_eq!(
        st["xet_xorbs_posted"], 0,
        "the xorb went through a grant: {st}"
    );
    // The CAS stops offering grants (the Xet project's simulation switch).
    let r = ureq::post(format!(
        "{}/simulation/set_config?config=xorb_upload_grants&value=off",
        fx.hub.cas_endpoint()
    ))
    .send_empty()
    .expect("the CAS switch");
    assert_eq!(r.status().as_u16(), 200);
    let rep = tier
        .store(keys[2..].to_vec(), data[2..].to_vec())
        .await
        .unwrap();
    assert!(rep.success());
    let st = store_details(&tier).await;
    assert_eq!(st["xet_xorbs_posted"], 1, "{st}");
    assert_eq!(st["xet_failed_commits"], 0, "{st}");
    let loaded = tier
        .load(
            keys.clone(),
            (0..4).map(|_| BytesMut::zeroed(SIZE)).collect(),
        )
        .await;
    assert!(loaded.hits.all());
    for (b, d) in loaded.buffers.iter().zip(&data) {
        assert!(b[..] == d[..]);
    }
    tier.close().await;
}

/// Status asks the Hub whether it can serve (the bucket's info route, before any data
/// request): a missing bucket (unless `create_bucket_if_missing`), a refused token and an
/// unreachable Hub are unhealthy, with the reason; a bucket that exists is healthy.
#[actix_rt::test]
async fn status_is_unhealthy_when_the_hub_cannot_serve() {
    let fx = Hf::new();
    let tier = Tier::start(&tier_config(vec![fx.adapter(0)]))
        .await
        .unwrap();
    let before = fx.hub.requests(Route::BucketInfo);
    let status = tier.status().await.unwrap();
    assert!(status.adapters[0].is_healthy, "{status:?}");
    assert_eq!(status.adapters[0].reason, None);
    assert_eq!(
        fx.hub.requests(Route::BucketInfo),
        before + 1,
        "one health check per status"
    );
    // The bucket is deleted under the running tier.
    fx.hub.delete_bucket(BUCKET);
    let status = tier.status().await.unwrap();
    assert!(!status.adapters[0].is_healthy, "{status:?}");
    let why = status.adapters[0].reason.clone().unwrap_or_default();
    assert!(
        why.contains(&format!("bucket \"{BUCKET}\" does not exist")),
        "{why}"
    );
    tier.close().await;

    // A missing bucket that the first store will create is not a fault.
    let mut c = fx.config(&fx.run);
    c.create_bucket_if_missing = true;
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(c)]))
        .await
        .unwrap();
    let status = tier.status().await.unwrap();
    assert!(status.adapters[0].is_healthy, "{status:?}");
    tier.close().await;
    fx.hub.create_bucket(BUCKET);

    // A token the Hub refuses.
    let mut c = fx.config(&fx.run);
    c.token = Some(Secret::new("hf_refused_token_value"));
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(c)]))
        .await
        .unwrap();
    let status = tier.status().await.unwrap();
    assert!(!status.adapters[0].is_healthy, "{status:?}");
    let why = status.adapters[0].reason.clone().unwrap_or_default();
    assert!(
        why.contains("health check failed") && why.contains("401"),
        "{why}"
    );
    assert!(!why.contains("hf_refused_token_value"), "no secret: {why}");
    tier.close().await;

    // Nothing listens at the endpoint.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut c = fx.config(&fx.run);
    c.hf_endpoint = Some(format!("http://127.0.0.1:{port}"));
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(c)]))
        .await
        .unwrap();
    let status = tier.status().await.unwrap();
    assert!(!status.adapters[0].is_healthy, "{status:?}");
    let why = status.adapters[0].reason.clone().unwrap_or_default();
    assert!(why.contains("health check failed"), "{why}");
    tier.close().await;
}

/// One deadline per request across its retries (`retry_timeout_secs`): a Hub that answers the
/// batch route 429 with `Retry-After: 30` is asked once when the deadline (1 s) cannot fit the
/// wait, where the attempt count alone (5) would have allowed four more; the store fails and
/// says the deadline passed. Counts and messages, not timings.
#[actix_rt::test]
async fn a_hub_request_ends_by_its_deadline_whatever_the_retries_say() {
    let fx = Hf::new();
    let mut c = fx.config(&fx.run);
    c.retry_timeout_secs = 1.0;
    let tier = Tier::start(&tier_config(vec![fx.adapter_with(c)]))
        .await
        .unwrap();
    fx.hub.throttle_next(u32::MAX, 30, Some(Route::Batch));
    fx.hub.reset_requests();
    let rep = tokio::time::timeout(
        Duration::from_secs(120),
        tier.store(vec![key(1)], vec![payload(1, 64)]),
    )
    .await
    .expect("hang guard")
    .unwrap();
    let failed = &rep.adapters[0].1.failed;
    assert_eq!(failed.len(), 1, "{rep:?}");
    assert!(
        failed[0].error.contains("deadline passed")
            && failed[0].error.contains("retry_timeout_secs = 1s"),
        "{}",
        failed[0].error
    );
    assert_eq!(
        fx.hub.requests(Route::Batch),
        1,
        "no retry past the deadline"
    );
    tier.close().await;
}
