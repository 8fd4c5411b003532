//! The host API as a host meets it, from outside the crates: configurations built with named
//! setters, a host's own `Storage` started by `Tier::builder`, and the `Tier` methods that wrap
//! the messages a host sends (listing, quotas, eviction order), whose errors are `TierError`s.

use kvtier_testkit as support;

use bytes::BytesMut;
use kvtier::actors::backends::memory::MemoryStorage;
use kvtier::actors::config::{CommonConfig, EvictionConfig, EvictionPolicy, GIB};
use kvtier::actors::eviction::QuotaError;
use kvtier::actors::{ListKeys, NameFormat};
use kvtier::{AdapterConfig, MissReason, StartError, Tier, TierConfig, TierError};
use support::{key, payload, salted};

/// One LRU adapter with a capacity and an eviction interval is one expression, and equals the
/// same configuration written field by field.
#[test]
fn builders_set_the_fields_they_name() {
    let built = TierConfig::default()
        .adapter(
            AdapterConfig::memory()
                .capacity_gb(2.0)
                .eviction(
                    EvictionConfig::lru()
                        .trigger_watermark(0.5)
                        .eviction_ratio(0.25),
                )
                .name("hot"),
        )
        .eviction_interval(std::time::Duration::from_millis(50))
        .metrics(false);
    let mut by_hand = TierConfig::default();
    let mut adapter = AdapterConfig::memory();
    adapter.common.max_capacity_gb = 2.0;
    let mut eviction = EvictionConfig::with_policy(EvictionPolicy::Lru);
    eviction.trigger_watermark = 0.5;
    eviction.eviction_ratio = 0.25;
    adapter.common.eviction = Some(eviction);
    adapter.common.name = Some("hot".into());
    by_hand.adapters.push(adapter);
    by_hand.eviction_interval_ms = 50;
    by_hand.metrics = false;
    assert_eq!(built, by_hand);
}

/// A storage the host brings gets what a built-in one gets: locks, loads, usage accounting and
/// eviction under its capacity.
#[actix_rt::test]
async fn a_hosts_own_storage_gets_locks_usage_and_eviction() {
    let capacity = 4096u64;
    let tier = Tier::builder(TierConfig::default())
        .storage(
            Box::new(MemoryStorage::new(NameFormat::default())),
            CommonConfig::default()
                .capacity_gb(capacity as f64 / GIB)
                .eviction(EvictionConfig::lru()),
        )
        .start()
        .await
        .unwrap();
    for i in 0..8 {
        assert!(tier
            .store(vec![key(i)], vec![payload(i, 1024)])
            .await
            .unwrap()
            .success());
    }
    tier.when_idle(0).await.unwrap();
    let usage = tier.usage().await.unwrap();
    assert_eq!(usage.adapters.len(), 1);
    assert_eq!(usage.adapters[0].capacity_bytes, capacity);
    assert!(
        usage.adapters[0].used_bytes <= capacity * 8 / 10,
        "evicted below the watermark: {usage:?}"
    );
    assert!(!tier.eviction_order(0).await.unwrap().is_empty());
    // The newest key survived, and loads like any other.
    assert!(tier.lookup_and_lock(vec![key(7)]).await.unwrap().all());
    let report = tier.load(vec![key(7)], vec![BytesMut::zeroed(1024)]).await;
    assert!(report.hits.all());
    tier.unlock(vec![key(7)]);
    assert_eq!(tier.status().await.unwrap().adapters[0].kind, "memory");
    tier.close().await;
}

/// The common fields of a host's storage are checked as a configuration's would be.
#[actix_rt::test]
async fn an_invalid_common_config_of_a_hosts_storage_is_a_start_error() {
    let err = Tier::builder(TierConfig::default().adapter(AdapterConfig::memory()))
        .storage(
            Box::new(MemoryStorage::new(NameFormat::default())),
            CommonConfig::default().capacity_gb(-1.0),
        )
        .start()
        .await
        .err()
        .expect("a start error");
    match &err {
        StartError::Invalid {
            index,
            kind,
            source,
        } => {
            assert_eq!((*index, *kind), (1, "memory"));
            assert_eq!(source.field, "max_capacity_gb");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// Listing and quotas through `Tier` methods; a refused quota is a `TierError::Quota`.
#[actix_rt::test]
async fn listing_and_quotas_are_tier_methods() {
    let isolated = EvictionConfig::with_policy(EvictionPolicy::IsolatedLru).quota("a", 1 << 20);
    let tier = Tier::start(
        &TierConfig::default()
            .adapter(AdapterConfig::memory().capacity_gb(1.0).eviction(isolated))
            .adapter(
                AdapterConfig::memory()
                    .capacity_gb(1.0)
                    .eviction(EvictionConfig::lru()),
            ),
    )
    .await
    .unwrap();
    assert!(tier
        .store(
            vec![salted(1, "a"), key(2)],
            vec![payload(1, 64), payload(2, 32)]
        )
        .await
        .unwrap()
        .success());
    // IsolatedLRU's allowlist rule: the unsalted key has no quota, so it goes.
    tier.when_idle(0).await.unwrap();

    let page = tier
        .list_keys(ListKeys {
            model: None,
            cursor: None,
            page_size: 0,
            adapter: 0,
        })
        .await
        .unwrap();
    assert_eq!(page.entries, vec![(salted(1, "a"), 64)]);

    assert_eq!(
        tier.set_quota(0, "a", Some(4096)).await.unwrap(),
        Some(1 << 20)
    );
    assert_eq!(tier.quotas(0).await.unwrap().unwrap().get("a"), Some(4096));
    match tier.set_quota(1, "a", Some(1)).await {
        Err(TierError::Quota(QuotaError::NotIsolated(1, _))) => {}
        other => panic!("expected a refused quota, got {other:?}"),
    }
    tier.close().await;
}

/// A load says why each key missed: absent, another size, not served (keys and buffers that
/// differ in number); hits have no reason.
#[actix_rt::test]
async fn a_load_says_why_each_key_missed() {
    let tier = Tier::start(&TierConfig::default().adapter(AdapterConfig::memory()))
        .await
        .unwrap();
    assert!(tier
        .store(vec![key(1), key(2)], vec![payload(1, 64), payload(2, 64)])
        .await
        .unwrap()
        .success());
    let bufs = vec![
        BytesMut::zeroed(64),
        BytesMut::zeroed(32),
        BytesMut::zeroed(64),
    ];
    let r = tier.load(vec![key(1), key(2), key(3)], bufs).await;
    assert_eq!(format!("{}", r.hits), "100");
    assert_eq!(r.miss_reason(0), None);
    assert_eq!(r.miss_reason(1), Some(MissReason::WrongSize { actual: 64 }));
    assert_eq!(r.miss_reason(2), Some(MissReason::Absent));
    assert_eq!(r.misses.len(), 2);

    let r = tier
        .load(vec![key(1), key(2)], vec![BytesMut::zeroed(64)])
        .await;
    assert_eq!(format!("{}", r.hits), "00");
    assert_eq!(
        r.misses,
        vec![(0, MissReason::NotServed), (1, MissReason::NotServed)]
    );
    assert_eq!(r.buffers.len(), 1, "the buffer comes back");

    tier.close().await;
}
