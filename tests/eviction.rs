//! LMCache's eviction semantics as message-level tests on a `memory` adapter: `IsolatedLRU`
//! quotas (over quota evicted down within the watermark rule, under quota untouched, other
//! tenants never touched, quota 0 and no quota wipe the salt, locked keys stay, changes at run
//! time through [`SetQuota`]), and eviction by bytes. Settled states are awaited with
//! [`WhenIdle`], never with sleeps.

use kvtier::actors::config::{EvictionConfig, EvictionPolicy, EvictionUnit, FlruAdmission, GIB};
use kvtier::actors::eviction::{GetQuotas, QuotaError, SetQuota, WhenIdle};
use kvtier::{AdapterConfig, ObjectKey, Tier, TierConfig};

use kvtier_testkit as support;
use support::payload;

fn skey(salt: &str, i: u32) -> ObjectKey {
    ObjectKey::new("m", 0, i.to_be_bytes().to_vec())
        .unwrap()
        .with_salt(salt)
        .unwrap()
}

async fn start(capacity: u64, e: EvictionConfig) -> Tier {
    let mut a = AdapterConfig::memory();
    a.common.max_capacity_gb = capacity as f64 / GIB;
    a.common.eviction = Some(e);
    Tier::start(&{
        let mut built = TierConfig::default();
        built.adapters = vec![a];
        // Far longer than a test: only events and messages drive eviction here.
        built.eviction_interval_ms = 3_600_000;
        built
    })
    .await
    .unwrap()
}

fn isolated(quotas: &[(&str, u64)]) -> EvictionConfig {
    let mut e = EvictionConfig::with_policy(EvictionPolicy::IsolatedLru);
    for (s, q) in quotas {
        e.quotas.0.insert(s.to_string(), *q);
    }
    e
}

async fn store_salt(tier: &Tier, salt: &str, n: u32, size: usize) {
    for i in 0..n {
        assert!(tier
            .store(vec![skey(salt, i)], vec![payload(i, size)])
            .await
            .unwrap()
            .success());
    }
}

async fn salt_bytes(tier: &Tier, salt: &str) -> u64 {
    tier.evictor().send(WhenIdle(0)).await.unwrap();
    let u = tier.usage().await.unwrap();
    u.adapters[0]
        .bytes_by_cache_salt
        .get(salt)
        .copied()
        .unwrap_or(0)
}

#[actix_rt::test]
async fn isolated_lru_quotas() {
    // No capacity: IsolatedLRU is driven by quotas alone.
    let tier = start(0, isolated(&[("a", 1000), ("b", 10_000)])).await;
    store_salt(&tier, "a", 10, 100).await;
    store_salt(&tier, "b", 10, 100).await;
    // a: 1000 >= 0.8 × 1000 → 20 % of 10 keys (2) → 800, still >= 800 → 1 more → 700.
    assert_eq!(
        salt_bytes(&tier, "a").await,
        700,
        "over quota: evicted down"
    );
    assert_eq!(salt_bytes(&tier, "b").await, 1000, "under quota: untouched");
    // The least recent keys of a went first.
    let hits = tier
        .lookup_and_lock((0..10).map(|i| skey("a", i)).collect())
        .await
        .unwrap();
    assert_eq!(
        (0..10).map(|i| hits.get(i)).collect::<Vec<_>>(),
        [false, false, false, true, true, true, true, true, true, true]
    );
    // Keep a's key 9 locked, then wipe a with a quota of 0 at run time.
    tier.unlock((3..9).map(|i| skey("a", i)).collect());
    // Unlock is fire-and-forget through the controller; a round trip behind it makes sure the
    // backend has applied it before the eviction round below asks for those keys.
    tier.usage().await.unwrap();
    let old = tier
        .evictor()
        .send(SetQuota {
            adapter: 0,
            cache_salt: "a".into(),
            limit_bytes: Some(0),
        })
        .await
        .unwrap();
    assert_eq!(old, Ok(Some(1000)));
    assert_eq!(
        salt_bytes(&tier, "a").await,
        100,
        "quota 0 wipes all but the locked key"
    );
    assert_eq!(
        salt_bytes(&tier, "b").await,
        1000,
        "another tenant is never touched"
    );
    tier.unlock(vec![skey("a", 9)]);
    // Unsalted keys have no quota: allowlist rule, wiped at the next cycle.
    assert!(tier
        .store(vec![skey("", 1)], vec![payload(1, 50)])
        .await
        .unwrap()
        .success());
    assert_eq!(salt_bytes(&tier, "").await, 0, "no quota: wiped");
    assert_eq!(salt_bytes(&tier, "a").await, 0, "the unlocked key goes too");
    // Removing b's quota puts it under the allowlist rule.
    tier.evictor()
        .send(SetQuota {
            adapter: 0,
            cache_salt: "b".into(),
            limit_bytes: None,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(salt_bytes(&tier, "b").await, 0);
    let q = tier.evictor().send(GetQuotas(0)).await.unwrap().unwrap();
    assert_eq!(q.0.into_iter().collect::<Vec<_>>(), vec![("a".into(), 0)]);
    tier.close().await;
}

#[actix_rt::test]
async fn quotas_need_isolated_lru() {
    let tier = start(1000, EvictionConfig::default()).await;
    let r = tier
        .evictor()
        .send(SetQuota {
            adapter: 0,
            cache_salt: "a".into(),
            limit_bytes: Some(5),
        })
        .await
        .unwrap();
    assert_eq!(r, Err(QuotaError::NotIsolated(0, "LRU")));
    let r = tier
        .evictor()
        .send(SetQuota {
            adapter: 3,
            cache_salt: "a".into(),
            limit_bytes: Some(5),
        })
        .await
        .unwrap();
    assert_eq!(r, Err(QuotaError::NoEviction(3)));
    tier.close().await;
}

/// One 600-byte key (the oldest) and four of 100 bytes in a 1000-byte tier, watermark 1.0 and
/// ratio 0.5: by keys a round removes 2 keys whatever their size; by bytes it frees 500 bytes.
async fn mixed_sizes(unit: EvictionUnit) -> (u64, usize) {
    let mut e = EvictionConfig::default();
    e.trigger_watermark = 1.0;
    e.eviction_ratio = 0.5;
    e.eviction_unit = unit;
    let tier = start(1000, e).await;
    assert!(tier
        .store(vec![skey("", 100)], vec![payload(100, 600)])
        .await
        .unwrap()
        .success());
    for i in 0..4 {
        assert!(tier
            .store(vec![skey("", i)], vec![payload(i, 100)])
            .await
            .unwrap()
            .success());
    }
    tier.evictor().send(WhenIdle(0)).await.unwrap();
    let u = tier.usage().await.unwrap().adapters[0].clone();
    tier.close().await;
    (u.used_bytes, u.keys)
}

#[actix_rt::test]
async fn eviction_by_keys_or_bytes() {
    // Keys: floor(5 × 0.5) = 2 keys, the 600-byte one and one of 100 → 300 bytes in 3 keys.
    assert_eq!(mixed_sizes(EvictionUnit::Keys).await, (300, 3));
    // Bytes: ceil(1000 × 0.5) = 500 bytes: the 600-byte key alone → 400 bytes in 4 keys.
    assert_eq!(mixed_sizes(EvictionUnit::Bytes).await, (400, 4));
}

#[actix_rt::test]
async fn every_policy_evicts_under_the_watermark() {
    for p in [
        EvictionPolicy::Lru,
        EvictionPolicy::Arc,
        EvictionPolicy::Flru,
    ] {
        let tier = start(1000, EvictionConfig::with_policy(p)).await;
        for i in 0..30 {
            assert!(tier
                .store(vec![skey("", i)], vec![payload(i, 100)])
                .await
                .unwrap()
                .success());
        }
        tier.evictor().send(WhenIdle(0)).await.unwrap();
        let u = tier.usage().await.unwrap().adapters[0].clone();
        let w = EvictionConfig::with_policy(p).trigger_watermark;
        assert!((u.used_bytes as f64) < w * 1000.0, "{p:?}: {u:?}");
        tier.close().await;
    }
}

/// A burst far past the capacity is caught up in one round with the byte unit: `FLRU` evicts
/// 0.5 % of the bytes per round, which alone would take a round per key here (and fall behind
/// a fast writer in production).
#[actix_rt::test]
async fn a_byte_round_catches_up_with_a_burst() {
    use kvtier::actors::eviction::GetEvictionStats;
    for p in [EvictionPolicy::Flru] {
        let tier = start(1000, EvictionConfig::with_policy(p)).await;
        let keys: Vec<ObjectKey> = (0..30).map(|i| skey("", i)).collect();
        let data = (0..30).map(|i| payload(i, 100)).collect();
        assert!(tier.store(keys, data).await.unwrap().success());
        tier.evictor().send(WhenIdle(0)).await.unwrap();
        let u = tier.usage().await.unwrap().adapters[0].clone();
        // Down to at most 0.995 × 1000 × (1 − 0.005) = 990.0 bytes: 9 keys of 100.
        assert_eq!(u.used_bytes, 900, "{p:?}");
        let stats = tier.evictor().send(GetEvictionStats).await.unwrap();
        assert_eq!(stats[0].1.rounds, 1, "{p:?}: {stats:?}");
        tier.close().await;
    }
}

/// `flru_bonus_per_use` reaches the adapter's `FLRU`: a key hit once outlives a newer key
/// stored once with the default bonus, and ranks by recency alone with a bonus of 0.
#[actix_rt::test]
async fn the_flru_bonus_is_the_configured_one() {
    use kvtier::actors::eviction::GetLruOrder;
    for (bonus, last_two) in [(None, [8, 0]), (Some(0.0), [0, 8])] {
        let mut e = EvictionConfig::with_policy(EvictionPolicy::Flru);
        e.flru_bonus_per_use = bonus;
        let tier = start(1000, e).await;
        for i in 0..8 {
            assert!(tier
                .store(vec![skey("", i)], vec![payload(i, 100)])
                .await
                .unwrap()
                .success());
        }
        let hit = tier.lookup_and_lock(vec![skey("", 0)]).await.unwrap();
        assert!(hit.get(0), "{bonus:?}");
        tier.unlock(vec![skey("", 0)]);
        assert!(tier
            .store(vec![skey("", 8)], vec![payload(8, 100)])
            .await
            .unwrap()
            .success());
        tier.evictor().send(WhenIdle(0)).await.unwrap();
        let order = tier.evictor().send(GetLruOrder(0)).await.unwrap();
        let want: Vec<ObjectKey> = last_two.iter().map(|&i| skey("", i)).collect();
        assert_eq!(order[order.len() - 2..], want[..], "{bonus:?}");
        tier.close().await;
    }
}

/// An `FLRU` tier of 1,024 chunks of 100 bytes with this admission.
async fn flru_tier(admission: Option<FlruAdmission>) -> Tier {
    let mut e = EvictionConfig::with_policy(EvictionPolicy::Flru);
    e.flru_admission = admission;
    start(1024 * 100, e).await
}

/// `flru_admission` reaches the adapter's `FLRU`. A hot set of 64 chunks, each request one
/// of them and 64 chunks never seen again, in a tier of 1,024 chunks: with the default
/// (`adaptive`), the shadows place the new chunks last and the hot set is hit from its third
/// pass on; `rates` ranks the scan below the hot set.
#[actix_rt::test]
async fn flru_admission_keeps_a_hot_set_through_a_scan() {
    let mut hits = Vec::new();
    for admission in [None, Some(FlruAdmission::Rates)] {
        let tier = flru_tier(admission).await;
        let mut fresh = 1_000_000;
        let mut n = 0;
        for _pass in 0..8 {
            for h in 0..64 {
                let hot = skey("", h);
                let found = tier.lookup_and_lock(vec![hot.clone()]).await.unwrap();
                let mut keys: Vec<ObjectKey> = (fresh..fresh + 64).map(|i| skey("", i)).collect();
                fresh += 64;
                if found.get(0) {
                    n += 1;
                } else {
                    keys.insert(0, hot.clone());
                }
                let data = (0..keys.len() as u32).map(|i| payload(i, 100)).collect();
                assert!(tier.store(keys, data).await.unwrap().success());
                if found.get(0) {
                    tier.unlock(vec![hot]);
                }
                tier.evictor().send(WhenIdle(0)).await.unwrap();
            }
        }
        tier.close().await;
        hits.push(n);
    }
    let (adaptive, rates) = (hits[0], hits[1]);
    assert!(adaptive >= 5 * 64, "hot-set hits: adaptive {adaptive}");
    // The fixed rate mode credits a new chunk with 0.1 uses: the scan ranks below the hot set.
    assert!(rates >= 5 * 64, "hot-set hits: rates {rates}");
}

/// The rate modes of `FLRU`'s default admission reach the adapter. Every chunk is stored once
/// and asked for once, 450 chunks (900 uses) later, in a tier of 1,024 chunks: FLRU's bonus
/// keeps the chunks already asked for (which are dead) and pushes out those still waiting; the
/// default's high-prior rate mode ranks the waiting chunks above the dead ones and hits most of
/// them. `rates` is the low-prior rate mode alone, without shadows: it cannot switch to the
/// high prior, and misses more second uses than the default.
#[actix_rt::test]
async fn flru_rates_keep_chunks_that_wait_for_their_second_use() {
    let mut hits = Vec::new();
    for admission in [None, Some(FlruAdmission::Rates)] {
        let tier = flru_tier(admission).await;
        let mut n = 0;
        for i in 0..6_000u32 {
            let mut keys = vec![skey("", i)];
            if i >= 450 {
                let again = skey("", i - 450);
                let found = tier.lookup_and_lock(vec![again.clone()]).await.unwrap();
                if found.get(0) {
                    n += 1;
                    tier.unlock(vec![again]);
                } else {
                    keys.push(again);
                }
            }
            let data = (0..keys.len() as u32)
                .map(|j| payload(i + j, 100))
                .collect();
            assert!(tier.store(keys, data).await.unwrap().success());
            tier.evictor().send(WhenIdle(0)).await.unwrap();
        }
        tier.close().await;
        hits.push(n);
    }
    let (adaptive, rates) = (hits[0], hits[1]);
    assert!(
        adaptive > rates + rates / 4,
        "second-use hits of 5,550: adaptive {adaptive}, rates {rates}"
    );
}

/// Stores five 100-byte keys one by one in a 500-byte LRU tier (watermark 1.0, ratio 0.2: the
/// fifth store evicts one key); with `touch`, the oldest key is touched ([`Tier::touch`])
/// before the fifth store. Returns which keys are still held.
async fn five_keys_with_touch(touch: bool) -> Vec<bool> {
    let mut e = EvictionConfig::with_policy(EvictionPolicy::Lru);
    e.trigger_watermark = 1.0;
    e.eviction_ratio = 0.2;
    let tier = start(500, e).await;
    for i in 0..4 {
        assert!(tier
            .store(vec![skey("", i)], vec![payload(i, 100)])
            .await
            .unwrap()
            .success());
    }
    if touch {
        // Fire-and-forget, and still ordered: the controller forwards it before the store below.
        tier.touch(vec![skey("", 0), skey("", 99)]);
    }
    assert!(tier
        .store(vec![skey("", 4)], vec![payload(4, 100)])
        .await
        .unwrap()
        .success());
    tier.evictor().send(WhenIdle(0)).await.unwrap();
    let usage = tier.usage().await.unwrap().adapters[0].clone();
    assert_eq!((usage.used_bytes, usage.keys), (400, 4), "one key evicted");
    let held = tier
        .lookup_and_lock((0..5).map(|i| skey("", i)).collect())
        .await
        .unwrap();
    tier.close().await;
    held.iter().collect()
}

/// A touch refreshes recency without moving bytes: the touched oldest key survives the round
/// that, without the touch, takes it (the unknown key in the touch is ignored).
#[actix_rt::test]
async fn a_touched_key_survives_lru_eviction() {
    assert_eq!(
        five_keys_with_touch(false).await,
        [false, true, true, true, true],
        "without the touch the oldest key goes"
    );
    assert_eq!(
        five_keys_with_touch(true).await,
        [true, false, true, true, true],
        "the touched key stays; the next oldest goes"
    );
}
