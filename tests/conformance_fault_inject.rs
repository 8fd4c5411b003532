//! The conformance suite through `fault_inject` (every fault off, wrapping `memory`), and
//! message-level tests of injected faults: per-key errors and misses, exact accounting, no
//! leaked locks, dropped replies that fail instead of hanging, latency that blocks no thread.

use kvtier_testkit as support;

use std::time::{Duration, Instant};

use bytes::BytesMut;
use kvtier::actors::backends::fault_inject::{FaultInjectConfig, PerOp};
use kvtier::actors::backends::memory::MemoryConfig;
use kvtier::actors::{GetUsage, Store};
use kvtier::{AdapterConfig, AdapterSpec, MissReason, ObjectKey, Tier, TierConfig};
use support::conformance::Fixture;
use support::{key, payload};

struct FaultInject;

impl Fixture for FaultInject {
    fn adapter(&self, _slot: usize) -> AdapterConfig {
        AdapterConfig::fault_inject(
            AdapterSpec::Memory(MemoryConfig::default()),
            FaultInjectConfig::default(),
        )
    }
}

support::conformance_tests!(FaultInject);

async fn start(faults: FaultInjectConfig) -> Tier {
    Tier::start(&{
        let mut built = TierConfig::default();
        built.adapters = vec![AdapterConfig::fault_inject(
            AdapterSpec::Memory(MemoryConfig::default()),
            faults,
        )];
        built.eviction_interval_ms = 50;
        built
    })
    .await
    .unwrap()
}

fn size_of(i: u32) -> usize {
    100 + i as usize
}

/// Stores keys `0..n` (sizes `100 + i`) in batches of 20; returns the keys that failed.
async fn store_all(tier: &Tier, n: u32) -> Vec<(ObjectKey, String)> {
    let mut failed = Vec::new();
    for start in (0..n).step_by(20) {
        let ids: Vec<u32> = (start..(start + 20).min(n)).collect();
        let rep = tier
            .store(
                ids.iter().map(|i| key(*i)).collect(),
                ids.iter().map(|i| payload(*i, size_of(*i))).collect(),
            )
            .await
            .unwrap();
        let o = &rep.adapters[0].1;
        assert_eq!(o.stored + o.failed.len(), ids.len(), "every key reported");
        failed.extend(o.failed.iter().map(|f| (f.key.clone(), f.error.clone())));
    }
    failed
}

async fn details(tier: &Tier) -> serde_json::Value {
    tier.status().await.unwrap().adapters[0].details.clone()
}

async fn locked(tier: &Tier) -> usize {
    tier.status().await.unwrap().adapters[0].locked_keys
}

#[actix_rt::test]
async fn put_errors_are_per_key_and_usage_counts_exactly_the_stored_keys() {
    let tier = start({
        let mut built = FaultInjectConfig::default();
        built.error_rates = {
            let mut built = PerOp::default();
            built.put = 0.3;
            built
        };
        built.seed = Some(1);
        built
    })
    .await;
    let failed = store_all(&tier, 200).await;
    assert!(
        (20..100).contains(&failed.len()),
        "about 30% of 200 fail: {}",
        failed.len()
    );
    for (_, error) in &failed {
        assert_eq!(
            error,
            "adapter #0 (fault_inject): put failed: injected fault (error_rates.put = 0.3)"
        );
    }
    let failed_keys: Vec<ObjectKey> = failed.into_iter().map(|(k, _)| k).collect();
    let stored: Vec<u32> = (0..200)
        .filter(|i| !failed_keys.contains(&key(*i)))
        .collect();
    let u = &tier.usage().await.unwrap().adapters[0];
    assert_eq!(
        u.used_bytes,
        stored.iter().map(|i| size_of(*i) as u64).sum::<u64>()
    );
    assert_eq!(u.keys, stored.len());
    // Lookups find exactly the stored keys; the failed ones never reached the store.
    let all: Vec<ObjectKey> = (0..200).map(key).collect();
    let hits = tier.lookup_and_lock(all.clone()).await.unwrap();
    let found: Vec<u32> = (0..200).filter(|i| hits.get(*i as usize)).collect();
    assert_eq!(found, stored);
    assert_eq!(locked(&tier).await, stored.len());
    tier.unlock(all);
    assert_eq!(locked(&tier).await, 0, "no leaked locks");
    let d = details(&tier).await;
    assert_eq!(d["injected"]["errors"]["put"], failed_keys.len());
    assert_eq!(d["injected_total"], failed_keys.len());
    assert_eq!(d["seed"], 1);
    assert_eq!(d["inner"]["kind"], "memory");
    assert_eq!(d["inner"]["details"]["objects"], stored.len());
    tier.close().await;
}

#[actix_rt::test]
async fn get_and_remove_errors_are_misses_and_kept_keys() {
    let tier = start({
        let mut built = FaultInjectConfig::default();
        built.error_rates = {
            let mut built = PerOp::default();
            built.get = 0.5;
            built.remove = 0.5;
            built
        };
        built.seed = Some(3);
        built
    })
    .await;
    assert!(store_all(&tier, 60).await.is_empty());
    let all: Vec<ObjectKey> = (0..60).map(key).collect();
    assert!(tier.lookup_and_lock(all.clone()).await.unwrap().all());
    let bufs = (0..60u32)
        .map(|i| {
            let mut b = BytesMut::zeroed(size_of(i));
            b.fill(0xEE);
            b
        })
        .collect();
    let loaded = tier.load(all.clone(), bufs).await;
    let misses = 60 - loaded.hits.count_ones();
    assert!((10..50).contains(&misses), "{misses}");
    assert_eq!(loaded.misses.len(), misses);
    assert!(
        loaded
            .misses
            .iter()
            .all(|(_, r)| matches!(r, MissReason::Failed(_))),
        "an injected get error is a failed load, not an absent key: {:?}",
        loaded.misses
    );
    for i in 0..60u32 {
        let b = &loaded.buffers[i as usize];
        if loaded.hits.get(i as usize) {
            assert_eq!(&b[..], &payload(i, size_of(i))[..], "hit {i} exact");
        } else {
            assert!(b.iter().all(|x| *x == 0xEE), "miss {i} left untouched");
        }
    }
    tier.unlock(all.clone());
    assert_eq!(locked(&tier).await, 0);
    // Failed loads of present objects do not drop them from the accounting.
    assert_eq!(tier.usage().await.unwrap().adapters[0].keys, 60);

    let removed: Vec<ObjectKey> = tier
        .delete(all.clone())
        .await
        .unwrap()
        .all_keys()
        .cloned()
        .collect();
    assert!((10..50).contains(&removed.len()), "{}", removed.len());
    let kept: Vec<u32> = (0..60).filter(|i| !removed.contains(&key(*i))).collect();
    let u = &tier.usage().await.unwrap().adapters[0];
    assert_eq!(
        u.used_bytes,
        kept.iter().map(|i| size_of(*i) as u64).sum::<u64>()
    );
    let hits = tier.lookup_and_lock(all.clone()).await.unwrap();
    assert_eq!(
        (0..60)
            .filter(|i| hits.get(*i as usize))
            .collect::<Vec<u32>>(),
        kept
    );
    tier.unlock(all);
    let d = details(&tier).await;
    assert_eq!(d["injected"]["errors"]["get"], misses);
    assert_eq!(d["injected"]["errors"]["remove"], 60 - removed.len());
    tier.close().await;
}

#[actix_rt::test]
async fn every_nth_item_of_a_batch_fails() {
    let tier = start({
        let mut built = FaultInjectConfig::default();
        built.fail_every_nth_item = 4;
        built
    })
    .await;
    let failed = store_all(&tier, 10).await;
    let keys: Vec<ObjectKey> = failed.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(keys, vec![key(3), key(7)]);
    assert!(
        failed[0]
            .1
            .ends_with("injected fault: item 4 of the batch (fail_every_nth_item = 4)"),
        "{}",
        failed[0].1
    );
    let u = &tier.usage().await.unwrap().adapters[0];
    let want: u64 = (0..10)
        .filter(|i| *i != 3 && *i != 7)
        .map(|i| size_of(i) as u64)
        .sum();
    assert_eq!((u.used_bytes, u.keys), (want, 8));
    assert_eq!(
        details(&tier).await["injected"]["nth_item_failures"]["put"],
        2
    );
    tier.close().await;
}

#[actix_rt::test]
async fn a_dropped_reply_fails_after_the_timeout_instead_of_hanging() {
    let tier = start({
        let mut built = FaultInjectConfig::default();
        built.drop_reply_rate = 1.0;
        built.reply_timeout_ms = 200;
        built
    })
    .await;
    let t = Instant::now();
    let rep = actix_rt::time::timeout(
        Duration::from_secs(5),
        tier.store(vec![key(1), key(2)], vec![payload(1, 10), payload(2, 10)]),
    )
    .await
    .expect("no hang")
    .unwrap();
    let elapsed = t.elapsed();
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    let o = &rep.adapters[0].1;
    assert_eq!(o.stored, 0);
    assert_eq!(o.failed.len(), 2);
    assert_eq!(
        o.failed[0].error,
        "adapter #0 (fault_inject): put could not reach the store: no reply within 200 ms (injected: reply dropped)"
    );
    assert_eq!(tier.usage().await.unwrap().adapters[0].used_bytes, 0);
    // Lookups probe (the ledger does not know the keys) and their replies are dropped too.
    let hits = tier.lookup_and_lock(vec![key(1)]).await.unwrap();
    assert_eq!(format!("{hits}"), "0");
    assert_eq!(locked(&tier).await, 0);
    let d = details(&tier).await;
    assert_eq!(d["injected"]["dropped_replies"]["put"], 1);
    assert_eq!(d["injected"]["dropped_replies"]["head"], 1);
    tier.close().await;
}

#[actix_rt::test]
async fn latency_delays_replies_without_blocking_the_actor() {
    let mut faults = FaultInjectConfig::default();
    faults.latency_ms.put = Some(1000);
    let tier = start(faults).await;
    let c = tier.controller().clone();
    let t = Instant::now();
    let slow = actix_rt::spawn(async move {
        c.send(Store {
            keys: vec![key(1)],
            objects: vec![payload(1, 10)],
        })
        .await
    });
    // The backend actor answers other messages while the store waits for its timer: a status
    // that counts the delayed put (it is counted when the put is issued) and a usage without
    // its bytes (they are accounted when its reply comes) were both answered in between.
    assert!(
        support::wait_until(5, || async {
            details(&tier).await["injected"]["delayed"]["put"] == 1
        })
        .await,
        "the store never reached the adapter"
    );
    let u = tier.controller().send(GetUsage).await.unwrap();
    assert_eq!(
        u.adapters[0].used_bytes, 0,
        "usage answered during the delay"
    );
    let rep = slow.await.unwrap().unwrap();
    assert!(rep.success());
    assert!(
        t.elapsed() >= Duration::from_millis(1000),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(tier.usage().await.unwrap().adapters[0].used_bytes, 10);
    assert_eq!(details(&tier).await["injected"]["delayed"]["put"], 1);
    tier.close().await;
}

#[actix_rt::test]
async fn corrupted_sizes_make_loads_miss() {
    let tier = start({
        let mut built = FaultInjectConfig::default();
        built.corrupt_size_rate = 1.0;
        built
    })
    .await;
    assert!(tier
        .store(vec![key(1)], vec![payload(1, 64)])
        .await
        .unwrap()
        .success());
    let mut b = BytesMut::zeroed(64);
    b.fill(7);
    let loaded = tier.load(vec![key(1)], vec![b]).await;
    assert_eq!(format!("{}", loaded.hits), "0");
    assert!(matches!(
        loaded.miss_reason(0),
        Some(MissReason::WrongSize { .. })
    ));
    assert!(loaded.buffers[0].iter().all(|x| *x == 7));
    // A size mismatch is a miss, not a deletion: the key stays accounted.
    assert_eq!(tier.usage().await.unwrap().adapters[0].used_bytes, 64);
    assert_eq!(
        details(&tier).await["injected"]["corrupted_sizes"]["get"],
        1
    );
    tier.close().await;
}

#[actix_rt::test]
async fn wraps_fs_and_nests() {
    let dir = tempfile::TempDir::new().unwrap();
    let fs = AdapterConfig::fs(dir.path());
    let once = AdapterConfig::fault_inject(fs.spec, FaultInjectConfig::default());
    let twice = AdapterConfig::fault_inject(once.spec, {
        let mut built = FaultInjectConfig::default();
        built.fail_every_nth_item = 2;
        built
    });
    let tier = Tier::start(&TierConfig::with_adapters(vec![twice]))
        .await
        .unwrap();
    let rep = tier
        .store(vec![key(1), key(2)], vec![payload(1, 8), payload(2, 8)])
        .await
        .unwrap();
    assert_eq!(rep.adapters[0].1.stored, 1);
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(files.len(), 1, "only the first item reached the directory");
    let d = details(&tier).await;
    assert_eq!(d["inner"]["kind"], "fault_inject");
    assert_eq!(d["inner"]["details"]["inner"]["kind"], "fs");
    tier.close().await;
}
