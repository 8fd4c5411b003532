//! The conformance suite: the same behaviour tests against every backend.
//!
//! A backend's test file implements [`Fixture`] (how to make a fresh, empty adapter) and invokes
//! [`conformance_tests!`](crate::conformance_tests), which expands to one `#[actix_rt::test]` per
//! behaviour below.

use std::time::Duration;

use bytes::BytesMut;
use kvtier::actors::config::{EvictionConfig, EvictionPolicy, GIB};
use kvtier::actors::eviction::{GetLruOrder, WhenIdle};
use kvtier::actors::{Delete, ListKeys, TierEvent, UsageEventKind};
use kvtier::{AdapterConfig, MissReason, Tier, TierConfig};

use crate::{key, payload, salted, wait_until};

/// Makes fresh, empty adapters of one backend type.
pub trait Fixture {
    /// A new adapter with its own empty namespace (directory, bucket prefix, ...). `slot`
    /// distinguishes several adapters of one test.
    fn adapter(&self, slot: usize) -> AdapterConfig;
}

/// Starts a tier with one adapter from `fx`, after `tweak` adjusts it.
pub async fn start(fx: &impl Fixture, tweak: impl FnOnce(&mut AdapterConfig)) -> Tier {
    start_slot(fx, 0, tweak).await
}

/// Starts a tier with adapter `slot` from `fx` (a fresh namespace per slot).
pub async fn start_slot(
    fx: &impl Fixture,
    slot: usize,
    tweak: impl FnOnce(&mut AdapterConfig),
) -> Tier {
    let mut a = fx.adapter(slot);
    tweak(&mut a);
    Tier::start(&{
        let mut built = TierConfig::default();
        built.adapters = vec![a];
        built.eviction_interval_ms = 50;
        built
    })
    .await
    .expect("tier starts")
}

/// Capacity of `bytes` with an eviction policy.
pub fn with_capacity(
    bytes: u64,
    eviction: Option<EvictionConfig>,
) -> impl FnOnce(&mut AdapterConfig) {
    move |a| {
        a.common.max_capacity_gb = bytes as f64 / GIB;
        a.common.eviction = eviction;
    }
}

fn lru(watermark: f64, ratio: f64) -> Option<EvictionConfig> {
    Some({
        let mut built = EvictionConfig::default();
        built.eviction_policy = EvictionPolicy::Lru;
        built.trigger_watermark = watermark;
        built.eviction_ratio = ratio;
        built
    })
}

fn bufs(n: usize, size: usize) -> Vec<BytesMut> {
    (0..n).map(|_| BytesMut::zeroed(size)).collect()
}

async fn used(tier: &Tier) -> u64 {
    tier.usage().await.unwrap().adapters[0].used_bytes
}

/// Store, lookup, load, verify, unlock.
pub async fn roundtrip(fx: &impl Fixture) {
    let tier = start(fx, |_| {}).await;
    let keys: Vec<_> = (0..4).map(key).collect();
    let objs: Vec<_> = (0..4).map(|i| payload(i, 1024)).collect();
    let rep = tier.store(keys.clone(), objs.clone()).await.unwrap();
    assert!(rep.success(), "{rep:?}");
    assert_eq!(rep.adapters[0].1.stored, 4);
    assert_eq!(rep.adapters[0].1.new_bytes, 4096);
    let hits = tier.lookup_and_lock(keys.clone()).await.unwrap();
    assert_eq!(format!("{hits}"), "1111");
    let loaded = tier.load(keys.clone(), bufs(4, 1024)).await;
    assert_eq!(format!("{}", loaded.hits), "1111");
    for (b, o) in loaded.buffers.iter().zip(&objs) {
        assert_eq!(&b[..], &o[..]);
    }
    tier.unlock(keys);
    tier.close().await;
}

/// Lookups of stored and unknown keys give a 1010 pattern; loads likewise.
pub async fn partial_hits(fx: &impl Fixture) {
    let tier = start(fx, |_| {}).await;
    assert!(tier
        .store(vec![key(0), key(2)], vec![payload(0, 512), payload(2, 512)])
        .await
        .unwrap()
        .success());
    let keys = vec![key(0), key(1), key(2), key(3)];
    let hits = tier.lookup_and_lock(keys.clone()).await.unwrap();
    assert_eq!(format!("{hits}"), "1010");
    let loaded = tier.load(keys.clone(), bufs(4, 512)).await;
    assert_eq!(format!("{}", loaded.hits), "1010");
    assert_eq!(
        loaded.misses,
        vec![(1, MissReason::Absent), (3, MissReason::Absent)]
    );
    assert_eq!(&loaded.buffers[2][..], &payload(2, 512)[..]);
    tier.unlock(keys);
    tier.close().await;
}

/// Loading an absent key is a miss and leaves the buffer alone.
pub async fn load_miss(fx: &impl Fixture) {
    let tier = start(fx, |_| {}).await;
    let mut b = BytesMut::zeroed(64);
    b.fill(7);
    let loaded = tier.load(vec![key(9)], vec![b]).await;
    assert_eq!(format!("{}", loaded.hits), "0");
    assert_eq!(loaded.miss_reason(0), Some(MissReason::Absent));
    assert!(loaded.buffers[0].iter().all(|x| *x == 7));
    tier.close().await;
}

/// An object whose size differs from its buffer is a miss, never a partial copy.
pub async fn size_mismatch_is_miss(fx: &impl Fixture) {
    let tier = start(fx, |_| {}).await;
    assert!(tier
        .store(vec![key(1)], vec![payload(1, 1000)])
        .await
        .unwrap()
        .success());
    for size in [999, 1001] {
        let mut b = BytesMut::zeroed(size);
        b.fill(7);
        let loaded = tier.load(vec![key(1)], vec![b]).await;
        assert_eq!(format!("{}", loaded.hits), "0", "buffer of {size}");
        assert_eq!(
            loaded.miss_reason(0),
            Some(MissReason::WrongSize { actual: 1000 }),
            "buffer of {size}"
        );
        assert!(
            loaded.buffers[0].iter().all(|x| *x == 7),
            "buffer of {size} was written"
        );
        assert_eq!(loaded.buffers[0].len(), size);
    }
    tier.close().await;
}

/// Empty objects are rejected and named in the report; other keys of the batch still land.
pub async fn empty_object_rejected(fx: &impl Fixture) {
    let tier = start(fx, |_| {}).await;
    let rep = tier
        .store(vec![key(1), key(2)], vec![payload(1, 0), payload(2, 10)])
        .await
        .unwrap();
    let o = &rep.adapters[0].1;
    assert_eq!(o.stored, 1);
    assert_eq!(o.failed.len(), 1);
    assert_eq!(o.failed[0].key, key(1));
    assert!(
        o.failed[0].error.contains("empty object"),
        "{}",
        o.failed[0].error
    );
    assert!(
        o.failed[0].error.starts_with("adapter #0 ("),
        "{}",
        o.failed[0].error
    );
    assert_eq!(o.new_bytes, 10);
    tier.close().await;
}

async fn delete_one(tier: &Tier, k: kvtier::ObjectKey) -> usize {
    tier.delete(vec![k]).await.unwrap().all_keys().count()
}

/// Two lookups need two unlocks before a delete goes through.
pub async fn lock_refcounts(fx: &impl Fixture) {
    let tier = start(fx, |_| {}).await;
    assert!(tier
        .store(vec![key(1)], vec![payload(1, 100)])
        .await
        .unwrap()
        .success());
    assert!(tier.lookup_and_lock(vec![key(1)]).await.unwrap().all());
    assert!(tier.lookup_and_lock(vec![key(1)]).await.unwrap().all());
    assert_eq!(delete_one(&tier, key(1)).await, 0, "locked twice: kept");
    tier.unlock(vec![key(1)]);
    assert_eq!(
        delete_one(&tier, key(1)).await,
        0,
        "still locked once: kept"
    );
    tier.unlock(vec![key(1)]);
    assert_eq!(delete_one(&tier, key(1)).await, 1, "unlocked: removed");
    assert!(!tier.lookup_and_lock(vec![key(1)]).await.unwrap().all());
    // Extra unlocks and unknown keys are ignored.
    tier.unlock(vec![key(1), key(99)]);
    tier.close().await;
}

/// A locked key survives delete and goes after unlock; deletes report exactly what went.
pub async fn locked_survives_delete(fx: &impl Fixture) {
    let tier = start(fx, |_| {}).await;
    assert!(tier
        .store(vec![key(1), key(2)], vec![payload(1, 100), payload(2, 100)])
        .await
        .unwrap()
        .success());
    tier.lookup_and_lock(vec![key(1)]).await.unwrap();
    let rep = tier.delete(vec![key(1), key(2), key(3)]).await.unwrap();
    let removed: Vec<_> = rep.all_keys().cloned().collect();
    assert_eq!(removed, vec![key(2)]);
    let loaded = tier.load(vec![key(1)], bufs(1, 100)).await;
    assert!(loaded.hits.all(), "locked key still loads");
    tier.unlock(vec![key(1)]);
    let removed: Vec<_> = tier
        .delete(vec![key(1)])
        .await
        .unwrap()
        .all_keys()
        .cloned()
        .collect();
    assert_eq!(removed, vec![key(1)]);
    assert_eq!(used(&tier).await, 0);
    tier.close().await;
}

/// Deleting keys that were never stored is a no-op.
pub async fn delete_unknown(fx: &impl Fixture) {
    let tier = start(fx, |_| {}).await;
    let rep = tier.delete(vec![key(5), key(6)]).await.unwrap();
    assert_eq!(rep.all_keys().count(), 0);
    assert_eq!(used(&tier).await, 0);
    tier.close().await;
}

/// Capacity 0: fraction -1 and nothing is evicted, even with an eviction policy.
pub async fn capacity_zero_never_evicts(fx: &impl Fixture) {
    let tier = start(fx, with_capacity(0, lru(0.1, 1.0))).await;
    let keys: Vec<_> = (0..20).map(key).collect();
    let objs: Vec<_> = (0..20).map(|i| payload(i, 256)).collect();
    assert!(tier.store(keys.clone(), objs).await.unwrap().success());
    // The evictor has seen the stores and found nothing to do.
    tier.evictor().send(WhenIdle(0)).await.unwrap();
    let u = &tier.usage().await.unwrap().adapters[0];
    assert_eq!(u.fraction, -1.0);
    assert_eq!(u.capacity_bytes, 0);
    assert_eq!(u.used_bytes, 20 * 256);
    assert_eq!(
        tier.lookup_and_lock(keys.clone())
            .await
            .unwrap()
            .count_ones(),
        20
    );
    tier.unlock(keys);
    tier.close().await;
}

/// Usage counts new keys only, shrinks on delete, never goes below zero.
pub async fn usage_accounting(fx: &impl Fixture) {
    let tier = start(fx, with_capacity(1 << 20, None)).await;
    let rep = tier
        .store(vec![key(1)], vec![payload(1, 300)])
        .await
        .unwrap();
    assert_eq!(rep.adapters[0].1.new_bytes, 300);
    let rep = tier
        .store(vec![key(1)], vec![payload(1, 300)])
        .await
        .unwrap();
    assert_eq!(rep.adapters[0].1.new_bytes, 0, "re-store adds 0");
    assert!(rep.success());
    assert!(tier
        .store(vec![key(2)], vec![payload(2, 200)])
        .await
        .unwrap()
        .success());
    let u = &tier.usage().await.unwrap().adapters[0];
    assert_eq!((u.used_bytes, u.keys), (500, 2));
    assert!((u.fraction - 500.0 / (1 << 20) as f64).abs() < 1e-12);
    tier.delete(vec![key(1)]).await.unwrap();
    assert_eq!(used(&tier).await, 200);
    tier.delete(vec![key(1), key(2), key(2)]).await.unwrap();
    assert_eq!(used(&tier).await, 0);
    tier.delete(vec![key(2)]).await.unwrap();
    assert_eq!(used(&tier).await, 0, "never below 0");
    tier.close().await;
}

/// Bytes are accounted per cache salt.
pub async fn per_salt_bytes(fx: &impl Fixture) {
    let tier = start(fx, |_| {}).await;
    assert!(tier
        .store(
            vec![key(1), salted(2, "a"), salted(3, "a"), salted(4, "b")],
            vec![
                payload(1, 10),
                payload(2, 20),
                payload(3, 30),
                payload(4, 40),
            ],
        )
        .await
        .unwrap()
        .success());
    let u = tier.usage().await.unwrap().adapters[0].clone();
    assert_eq!(u.bytes_by_cache_salt.get(""), Some(&10));
    assert_eq!(u.bytes_by_cache_salt.get("a"), Some(&50));
    assert_eq!(u.bytes_by_cache_salt.get("b"), Some(&40));
    tier.delete(vec![salted(4, "b")]).await.unwrap();
    let u = tier.usage().await.unwrap().adapters[0].clone();
    assert_eq!(
        u.bytes_by_cache_salt.get("b"),
        None,
        "only positive entries"
    );
    tier.close().await;
}

/// Waits without blocking the arbiter (the controller runs on the test's thread).
async fn next_event(rx: &flume::Receiver<TierEvent>) -> UsageEventKind {
    loop {
        let ev = actix_rt::time::timeout(Duration::from_secs(5), rx.recv_async())
            .await
            .expect("an event within 5 s")
            .expect("channel open");
        match ev {
            TierEvent::Usage(e) => return e.kind,
            TierEvent::Completed { .. } => continue,
        }
    }
}

/// Stored events carry sizes; lookups hits emit Accessed (misses don't); loads emit nothing;
/// deletes emit Deleted with sizes.
pub async fn events(fx: &impl Fixture) {
    let tier = start(fx, |_| {}).await;
    let rx = tier.events();
    assert!(tier
        .store(vec![key(1), key(2)], vec![payload(1, 10), payload(2, 20)])
        .await
        .unwrap()
        .success());
    match next_event(&rx).await {
        UsageEventKind::Stored { keys, sizes } => {
            assert_eq!(keys, vec![key(1), key(2)]);
            assert_eq!(sizes, vec![10, 20]);
        }
        other => panic!("expected Stored, got {other:?}"),
    }
    tier.lookup_and_lock(vec![key(1), key(3)]).await.unwrap();
    match next_event(&rx).await {
        UsageEventKind::Accessed { keys } => assert_eq!(keys, vec![key(1)]),
        other => panic!("expected Accessed, got {other:?}"),
    }
    tier.load(
        vec![key(1), key(2)],
        vec![BytesMut::zeroed(10), BytesMut::zeroed(20)],
    )
    .await;
    // A marker lookup: its event comes after anything the load could have emitted.
    tier.lookup_and_lock(vec![key(2)]).await.unwrap();
    match next_event(&rx).await {
        UsageEventKind::Accessed { keys } => assert_eq!(keys, vec![key(2)], "load emitted nothing"),
        other => panic!("expected the marker's Accessed, got {other:?}"),
    }
    tier.unlock(vec![key(1), key(2)]);
    tier.delete(vec![key(2)]).await.unwrap();
    match next_event(&rx).await {
        UsageEventKind::Deleted { keys, sizes, cause } => {
            assert_eq!(keys, vec![key(2)]);
            assert_eq!(sizes, vec![20]);
            assert_eq!(cause, kvtier::actors::DeleteCause::Deleted);
        }
        other => panic!("expected Deleted, got {other:?}"),
    }
    tier.close().await;
}

/// Stores and lookup hits refresh recency; eviction takes the least recent first.
pub async fn lru_order(fx: &impl Fixture) {
    // Capacity far above use: nothing is evicted, only the order is observed.
    let tier = start(fx, with_capacity(1 << 30, lru(0.9, 0.2))).await;
    for i in 0..4 {
        assert!(tier
            .store(vec![key(i)], vec![payload(i, 10)])
            .await
            .unwrap()
            .success());
    }
    tier.lookup_and_lock(vec![key(0)]).await.unwrap();
    tier.unlock(vec![key(0)]);
    assert!(tier
        .store(vec![key(1)], vec![payload(1, 10)])
        .await
        .unwrap()
        .success());
    let want = vec![key(2), key(3), key(0), key(1)];
    let ok = wait_until(5, || async {
        tier.evictor().send(GetLruOrder(0)).await.unwrap() == want
    })
    .await;
    assert!(
        ok,
        "LRU order: {:?}",
        tier.evictor().send(GetLruOrder(0)).await.unwrap()
    );
    tier.close().await;
}

/// Fills 10 keys of 100 bytes into a 1000-byte capacity with a 0.5 watermark and `ratio`;
/// returns the keys left once eviction settles.
async fn fill_and_settle(fx: &impl Fixture, slot: usize, ratio: f64, locked: &[u32]) -> Vec<u32> {
    let tier = start_slot(fx, slot, with_capacity(1000, lru(1.0, ratio))).await;
    // Locked keys first (oldest), so they are the first candidates.
    for i in 0..9u32 {
        assert!(tier
            .store(vec![key(i)], vec![payload(i, 100)])
            .await
            .unwrap()
            .success());
        if locked.contains(&i) {
            assert!(tier.lookup_and_lock(vec![key(i)]).await.unwrap().all());
        }
    }
    // Recency order is now 0..9 except locked keys refreshed by their lookup.
    assert!(tier
        .store(vec![key(9)], vec![payload(9, 100)])
        .await
        .unwrap()
        .success()); // 1000 / 1000: evict
    tier.evictor().send(WhenIdle(0)).await.unwrap();
    let keys: Vec<_> = (0..10).map(key).collect();
    let hits = tier.lookup_and_lock(keys.clone()).await.unwrap();
    tier.unlock(keys);
    tier.close().await;
    (0..10).filter(|i| hits.get(*i as usize)).collect()
}

/// Ratio edge cases: 0 evicts nothing, 1 everything unlocked, 0.5 half, a tiny ratio one key.
pub async fn eviction_ratios(fx: &impl Fixture) {
    assert_eq!(fill_and_settle(fx, 10, 0.0, &[]).await.len(), 10, "ratio 0");
    assert_eq!(
        fill_and_settle(fx, 11, 1.0, &[]).await,
        Vec::<u32>::new(),
        "ratio 1"
    );
    assert_eq!(
        fill_and_settle(fx, 12, 0.5, &[]).await,
        (5..10).collect::<Vec<_>>(),
        "ratio 0.5"
    );
    assert_eq!(
        fill_and_settle(fx, 13, 0.001, &[]).await,
        (1..10).collect::<Vec<_>>(),
        "tiny ratio"
    );
}

/// Over capacity, eviction brings usage under the watermark and never deletes a locked key.
pub async fn eviction_skips_locked(fx: &impl Fixture) {
    let left = fill_and_settle(fx, 10, 1.0, &[0, 1]).await;
    assert_eq!(
        left,
        vec![0, 1],
        "only the locked keys survive a ratio of 1"
    );

    let tier = start_slot(fx, 11, with_capacity(2000, lru(0.5, 0.2))).await;
    assert!(tier
        .store(vec![key(100)], vec![payload(100, 100)])
        .await
        .unwrap()
        .success());
    assert!(tier.lookup_and_lock(vec![key(100)]).await.unwrap().all());
    for i in 0..30u32 {
        assert!(tier
            .store(vec![key(i)], vec![payload(i, 100)])
            .await
            .unwrap()
            .success());
    }
    let ok = wait_until(5, || async {
        let u = &tier.usage().await.unwrap().adapters[0];
        u.fraction < 0.5
    })
    .await;
    assert!(
        ok,
        "usage under the watermark: {:?}",
        tier.usage().await.unwrap()
    );
    assert!(tier.eviction_stats().await.unwrap()[0].1.evicted_keys > 0);
    let loaded = tier.load(vec![key(100)], bufs(1, 100)).await;
    assert!(loaded.hits.all(), "the locked key was never evicted");
    tier.unlock(vec![key(100)]);
    tier.close().await;
}

/// Two adapters: the first that has a key wins; the duplicate lock on the other is released.
pub async fn multi_adapter_first_hit(fx: &impl Fixture) {
    let tier = Tier::start(&{
        let mut built = TierConfig::default();
        built.adapters = vec![fx.adapter(0), fx.adapter(1)];
        built.eviction_interval_ms = 50;
        built
    })
    .await
    .unwrap();
    let rep = tier
        .store(vec![key(1), key(2)], vec![payload(1, 64), payload(2, 64)])
        .await
        .unwrap();
    assert_eq!(rep.adapters.len(), 2);
    assert!(rep.success());
    // key(2) only on adapter 1.
    let d = tier
        .controller()
        .send(Delete {
            keys: vec![key(2)],
            adapter: Some(0),
        })
        .await
        .unwrap();
    assert_eq!(d.adapters, vec![(0, vec![key(2)])]);
    let hits = tier
        .lookup_and_lock(vec![key(1), key(2), key(3)])
        .await
        .unwrap();
    assert_eq!(format!("{hits}"), "110");
    // Adapter 1's lock on key(1) was released: it can delete there; adapter 0 holds it.
    let d = tier
        .controller()
        .send(Delete {
            keys: vec![key(1)],
            adapter: Some(1),
        })
        .await
        .unwrap();
    assert_eq!(
        d.adapters,
        vec![(1, vec![key(1)])],
        "duplicate lock released"
    );
    let d = tier
        .controller()
        .send(Delete {
            keys: vec![key(1)],
            adapter: Some(0),
        })
        .await
        .unwrap();
    assert_eq!(d.adapters, vec![(0, vec![])], "winner's lock kept");
    let loaded = tier.load(vec![key(1), key(2)], bufs(2, 64)).await;
    assert_eq!(format!("{}", loaded.hits), "11");
    assert!(loaded.misses.is_empty());
    // A key on no adapter: each adapter is asked; the last one's reason is reported.
    let loaded = tier.load(vec![key(3), key(1)], bufs(2, 64)).await;
    assert_eq!(format!("{}", loaded.hits), "01");
    assert_eq!(loaded.misses, vec![(0, MissReason::Absent)]);
    assert_eq!(&loaded.buffers[1][..], &payload(1, 64)[..]);
    tier.unlock(vec![key(1), key(2)]);
    let d = tier.delete(vec![key(1), key(2)]).await.unwrap();
    let mut all: Vec<_> = d.all_keys().cloned().collect();
    all.sort();
    assert_eq!(all, vec![key(1), key(2)], "unlock went to the holders");
    tier.close().await;
}

/// Listing pages through keys of one model, with sizes.
pub async fn list_keys(fx: &impl Fixture) {
    let tier = start(fx, |_| {}).await;
    let keys: Vec<_> = (0..7).map(key).collect();
    let objs: Vec<_> = (0..7).map(|i| payload(i, 10 + i as usize)).collect();
    assert!(tier.store(keys.clone(), objs).await.unwrap().success());
    let other = kvtier::ObjectKey::new("other-model", 1, vec![1u8]).unwrap();
    assert!(tier
        .store(vec![other.clone()], vec![payload(0, 5)])
        .await
        .unwrap()
        .success());
    let mut cursor = None;
    let mut seen = Vec::new();
    loop {
        let page = tier
            .controller()
            .send(ListKeys {
                model: Some("test-model".into()),
                cursor,
                page_size: 3,
                adapter: 0,
            })
            .await
            .unwrap()
            .unwrap();
        assert!(page.entries.len() <= 3);
        seen.extend(page.entries);
        match page.next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    seen.sort();
    let want: Vec<_> = (0..7).map(|i| (key(i), 10 + i as u64)).collect();
    assert_eq!(seen, want);
    tier.close().await;
}

/// Every key of `fx`'s model `test-model` in adapter 0, through the store's own listing.
async fn listed(tier: &Tier) -> Vec<(kvtier::ObjectKey, u64)> {
    let page = tier
        .controller()
        .send(ListKeys {
            model: Some("test-model".into()),
            cursor: None,
            page_size: 0,
            adapter: 0,
        })
        .await
        .unwrap()
        .unwrap();
    let mut entries = page.entries;
    entries.sort();
    entries
}

/// An empty cache salt is no salt: a key stored with salt `""` is found, loaded and deleted
/// through the unsalted key and vice versa, and its object name has no trailing `@`.
pub async fn empty_salt_is_no_salt(fx: &impl Fixture) {
    let tier = start(fx, |_| {}).await;
    assert_eq!(salted(1, ""), key(1));
    // Stored with "", used without salt.
    let rep = tier
        .store(vec![salted(1, "")], vec![payload(1, 100)])
        .await
        .unwrap();
    assert!(rep.success(), "{rep:?}");
    // Stored without salt, used with "": the same object, so it adds no bytes.
    let rep = tier
        .store(vec![key(2)], vec![payload(2, 50)])
        .await
        .unwrap();
    assert_eq!(rep.adapters[0].1.new_bytes, 50, "{rep:?}");
    let rep = tier
        .store(vec![salted(2, "")], vec![payload(2, 50)])
        .await
        .unwrap();
    assert_eq!(rep.adapters[0].1.new_bytes, 0, "{rep:?}");
    let hits = tier
        .lookup_and_lock(vec![key(1), salted(2, "")])
        .await
        .unwrap();
    assert_eq!(format!("{hits}"), "11");
    let loaded = tier
        .load(
            vec![key(1), salted(2, "")],
            vec![BytesMut::zeroed(100), BytesMut::zeroed(50)],
        )
        .await;
    assert_eq!(format!("{}", loaded.hits), "11");
    assert_eq!(&loaded.buffers[0][..], &payload(1, 100)[..]);
    assert_eq!(&loaded.buffers[1][..], &payload(2, 50)[..]);
    // Unlocking through the other spelling releases the same locks.
    tier.unlock(vec![salted(1, ""), key(2)]);
    // The store holds two unsalted objects, named without a trailing '@'.
    let entries = listed(&tier).await;
    assert_eq!(entries, vec![(key(1), 100), (key(2), 50)]);
    for (k, _) in &entries {
        assert_eq!(k.cache_salt(), None);
        let name = k.object_name(kvtier::NameFormat::Seed);
        assert!(!name.ends_with('@'), "{name}");
    }
    let u = tier.usage().await.unwrap().adapters[0].clone();
    assert_eq!((u.keys, u.used_bytes), (2, 150));
    assert_eq!(
        u.bytes_by_cache_salt.into_iter().collect::<Vec<_>>(),
        vec![(String::new(), 150)]
    );
    let d = tier.delete(vec![key(1), salted(2, "")]).await.unwrap();
    assert_eq!(
        d.adapters[0].1.len(),
        2,
        "both removed, no lock left: {d:?}"
    );
    let hits = tier
        .lookup_and_lock(vec![salted(1, ""), key(2)])
        .await
        .unwrap();
    assert_eq!(format!("{hits}"), "00");
    assert_eq!(listed(&tier).await, vec![]);
    assert_eq!(used(&tier).await, 0);
    tier.close().await;
}

/// In the default `seed` name format, which has no group field, a key of a non-zero
/// `object_group_id` is refused with a named error (it would share the group-0 key's object):
/// a store fails for that key, a lookup and a load miss (buffer untouched), a delete skips it.
/// With `object_name_format = "grouped"` both keys are stored as two objects.
pub async fn seed_format_refuses_groups(fx: &impl Fixture) {
    let tier = start(fx, |_| {}).await;
    let g = key(1).with_group(3);
    let rep = tier
        .store(
            vec![key(1), g.clone()],
            vec![payload(1, 64), payload(9, 64)],
        )
        .await
        .unwrap();
    let outcome = &rep.adapters[0].1;
    assert_eq!((outcome.stored, outcome.new_bytes), (1, 64), "{rep:?}");
    assert_eq!(outcome.failed.len(), 1, "{rep:?}");
    assert_eq!(outcome.failed[0].key, g);
    let error = &outcome.failed[0].error;
    for part in [
        "adapter #0",
        "object_group_id 3",
        r#"object_name_format = "grouped""#,
    ] {
        assert!(error.contains(part), "{part:?} not in {error:?}");
    }
    let hits = tier.lookup_and_lock(vec![g.clone(), key(1)]).await.unwrap();
    assert_eq!(format!("{hits}"), "01");
    let mut b = BytesMut::zeroed(64);
    b.fill(7);
    let loaded = tier
        .load(vec![g.clone(), key(1)], vec![b, BytesMut::zeroed(64)])
        .await;
    assert_eq!(format!("{}", loaded.hits), "01");
    assert_eq!(loaded.buffers[0].len(), 64);
    assert!(
        loaded.buffers[0].iter().all(|x| *x == 7),
        "buffer untouched"
    );
    assert_eq!(&loaded.buffers[1][..], &payload(1, 64)[..]);
    tier.unlock(vec![key(1)]);
    let d = tier.delete(vec![g.clone()]).await.unwrap();
    assert_eq!(d.adapters[0].1, vec![], "skipped");
    assert_eq!(listed(&tier).await, vec![(key(1), 64)], "group 0 kept");
    let u = tier.usage().await.unwrap().adapters[0].clone();
    assert_eq!((u.keys, u.used_bytes), (1, 64));
    tier.close().await;

    let tier = start_slot(fx, 1, |a| {
        a.common.object_name_format = kvtier::NameFormat::Grouped;
    })
    .await;
    let rep = tier
        .store(
            vec![key(1), g.clone()],
            vec![payload(1, 64), payload(9, 64)],
        )
        .await
        .unwrap();
    assert!(rep.success(), "{rep:?}");
    assert_eq!(rep.adapters[0].1.new_bytes, 128);
    let hits = tier.lookup_and_lock(vec![g.clone(), key(1)]).await.unwrap();
    assert_eq!(format!("{hits}"), "11");
    let loaded = tier.load(vec![g.clone(), key(1)], bufs(2, 64)).await;
    assert_eq!(format!("{}", loaded.hits), "11");
    assert_eq!(&loaded.buffers[0][..], &payload(9, 64)[..]);
    assert_eq!(&loaded.buffers[1][..], &payload(1, 64)[..]);
    tier.unlock(vec![g.clone(), key(1)]);
    let d = tier.delete(vec![g.clone()]).await.unwrap();
    assert_eq!(d.adapters[0].1, vec![g]);
    assert_eq!(listed(&tier).await, vec![(key(1), 64)]);
    tier.close().await;
}

/// The conformance tests for a backend: `conformance_tests!(fixture_expression);`
#[macro_export]
macro_rules! conformance_tests {
    ($fx:expr) => {
        $crate::conformance_tests!(@each $fx; roundtrip, partial_hits, load_miss,
            size_mismatch_is_miss, empty_object_rejected, lock_refcounts, locked_survives_delete,
            delete_unknown, capacity_zero_never_evicts, usage_accounting, per_salt_bytes, events,
            lru_order, eviction_ratios, eviction_skips_locked, multi_adapter_first_hit, list_keys,
            empty_salt_is_no_salt, seed_format_refuses_groups);
    };
    (@each $fx:expr; $($name:ident),*) => {
        $(
            #[actix_rt::test]
            async fn $name() {
                let fx = $fx;
                $crate::conformance::$name(&fx).await;
            }
        )*
    };
}
