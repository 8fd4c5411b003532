//! Fleet mode from a host's side: several tiers (nodes) on one bucket (a shared `fs` directory)
//! and one fleet index (a real `redis-server` on 127.0.0.1, started by each test). Each test
//! also shows what goes wrong without the fleet where that is the point.

use kvtier_testkit as support;

use std::time::Duration;

use bytes::BytesMut;
use kvtier::actors::backends::fault_inject::FaultInjectConfig;
use kvtier::actors::config::{EvictionConfig, GIB};
use kvtier::{
    AdapterConfig, AdapterSpec, ConfigSources, EvictionPolicy, FleetConfig, FsConfig, ObjectKey,
    Quotas, Tier, TierConfig,
};
use support::redis::{free_port, RedisServer};
use support::{key, payload, salted};

const OBJ: usize = 1024;
/// 100 objects of `OBJ` bytes.
const CAPACITY: u64 = 100 * OBJ as u64;

/// A node: one `fs` adapter on `dir` with `CAPACITY` and LRU 0.8 / 0.2, in the fleet on `url`
/// when given (then returned once it has joined the index).
async fn node(dir: &std::path::Path, url: Option<&str>, id: &str) -> Tier {
    node_sized(dir, url, id, CAPACITY).await
}

/// [`node`] with another capacity.
async fn node_sized(dir: &std::path::Path, url: Option<&str>, id: &str, capacity: u64) -> Tier {
    started(&node_config(dir, url, id, capacity)).await
}

/// Starts a tier; with a fleet, returns once it has joined the index.
async fn started(config: &TierConfig) -> Tier {
    let tier = Tier::start(config).await.unwrap();
    if config.fleet.is_some() {
        until("the node joined", || joined(&tier)).await;
    }
    tier
}

/// The configuration of [`node_sized`].
fn node_config(dir: &std::path::Path, url: Option<&str>, id: &str, capacity: u64) -> TierConfig {
    let mut config = TierConfig::default()
        .adapter(
            AdapterConfig::fs(dir)
                .capacity_gb(capacity as f64 / GIB)
                .eviction(EvictionConfig::lru()),
        )
        .eviction_interval(Duration::from_millis(50));
    if let Some(url) = url {
        config = config.fleet(FleetConfig::new(url).node_id(id));
    }
    config
}

/// A node of one adapter in the fleet on `url`, its eviction checked every 50 ms.
fn fleet_node(adapter: AdapterConfig, url: &str, id: &str) -> TierConfig {
    TierConfig::default()
        .adapter(adapter)
        .eviction_interval(Duration::from_millis(50))
        .fleet(FleetConfig::new(url).node_id(id))
}

/// Polls `f` (the test kit's `wait_until`, 60 s at most) and fails naming `what`.
async fn until<F, Fut>(what: &str, f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    assert!(
        support::wait_until(60, f).await,
        "timed out waiting until {what}"
    );
}

async fn joined(tier: &Tier) -> bool {
    let s = tier.status().await.unwrap();
    s.adapters[0].fleet.as_ref().is_some_and(|f| f.joined)
}

/// The files of the bucket (the directory) with their sizes, as a listing sees them (a file
/// an eviction removes while it is listed is not counted).
fn files(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(m) = e.metadata() else {
            continue;
        };
        if m.is_dir() {
            out.extend(files(&e.path()));
        } else {
            out.push((e.path(), m.len()));
        }
    }
    out
}

/// Bytes of the objects in the bucket.
fn bucket_bytes(dir: &std::path::Path) -> u64 {
    files(dir).iter().map(|(_, n)| n).sum()
}

async fn store(tier: &Tier, range: std::ops::Range<u32>) {
    for i in range {
        let r = tier
            .store(vec![key(i)], vec![payload(i, OBJ)])
            .await
            .unwrap();
        assert!(r.success(), "{r:?}");
    }
}

/// Two nodes each storing 60 % of the capacity: with the fleet, usage is one total and the
/// bucket is brought under the watermark; without it, each node sees 60 % and the bucket holds
/// 120 %.
#[actix_rt::test]
async fn two_nodes_on_one_bucket_share_one_capacity() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let a = node(dir.path(), Some(&redis.url()), "a").await;
    let b = node(dir.path(), Some(&redis.url()), "b").await;
    store(&a, 0..60).await;
    store(&b, 1000..1060).await;
    let watermark = (CAPACITY as f64 * 0.8) as u64;
    until("the fleet is under its watermark", || async {
        a.usage().await.unwrap().adapters[0].used_bytes < watermark
    })
    .await;
    let usage = a.usage().await.unwrap().adapters[0].clone();
    assert!(usage.node_used_bytes.is_some(), "{usage:?}");
    assert!(
        bucket_bytes(dir.path()) <= CAPACITY,
        "bucket {} > capacity {CAPACITY}",
        bucket_bytes(dir.path())
    );
    a.close().await;
    b.close().await;

    // Without the fleet: nothing is evicted, the bucket holds 120 % of the capacity.
    let dir = tempfile::tempdir().unwrap();
    let a = node(dir.path(), None, "a").await;
    let b = node(dir.path(), None, "b").await;
    store(&a, 0..60).await;
    store(&b, 1000..1060).await;
    a.when_idle(0).await.unwrap();
    b.when_idle(0).await.unwrap();
    assert!(bucket_bytes(dir.path()) > CAPACITY);
    a.close().await;
    b.close().await;
}

/// The same two nodes with the bucket's index split over three hash tags (`fleet.shards`):
/// one usage for both, each tag evicting against its third of the capacity, so the bucket is
/// brought under the watermark and never holds more than the capacity.
#[actix_rt::test]
async fn two_nodes_on_a_bucket_split_over_three_tags_share_one_capacity() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    for id in ["a", "b"] {
        let mut config = node_config(dir.path(), None, id, CAPACITY);
        config = config.fleet(FleetConfig::new(redis.url()).node_id(id).shards(3));
        nodes.push(started(&config).await);
    }
    store(&nodes[0], 0..60).await;
    store(&nodes[1], 1000..1060).await;
    let watermark = (CAPACITY as f64 * 0.8) as u64;
    until("the fleet is under its watermark", || async {
        nodes[1].usage().await.unwrap().adapters[0].used_bytes < watermark
    })
    .await;
    assert!(
        bucket_bytes(dir.path()) <= CAPACITY,
        "bucket {} > capacity {CAPACITY}",
        bucket_bytes(dir.path())
    );
    // Every tag holds a part of the bucket's objects.
    let objects = redis.hash_fields("kvtier:*:usage", "objects");
    assert_eq!(objects.len(), 3, "{objects:?}");
    assert!(
        objects
            .iter()
            .all(|o| o.as_deref().and_then(|v| v.parse::<u64>().ok()) > Some(0)),
        "{objects:?}"
    );
    for n in nodes {
        n.close().await;
    }
}

/// Bytes of `tier`'s writes waiting for room in the full bucket, as its status says.
async fn waiting(tier: &Tier) -> u64 {
    let s = tier.status().await.unwrap();
    s.adapters[0].fleet.as_ref().map_or(0, |f| f.waiting_bytes)
}

/// Writes of `tier` that waited for room, made when room came (`over` false) or past the
/// capacity when the wait ran out (`over` true), from its metrics.
fn waits(tier: &Tier, over: bool) -> u64 {
    let outcome = if over { "over" } else { "written" };
    let text = tier.metrics_text().unwrap();
    text.lines()
        .find(|l| {
            l.starts_with("kvtier_fleet_write_waits_total")
                && l.contains(&format!("outcome=\"{outcome}\""))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// A write that would take the bucket past its capacity waits for a round's deletes. Node `a`
/// holds 70 objects locked, so node `b`'s write of 40 more finds the bucket full: it waits
/// (its status says so) and the bucket stays within its capacity; once `a` unlocks them, `b`'s
/// round makes room and the write is made. With a short wait and the locks kept, the write is
/// made past the capacity when the wait runs out: the store succeeds (nothing is lost), and
/// the locked objects stay.
#[actix_rt::test]
async fn a_write_waits_for_room_in_a_full_bucket() {
    for long in [true, false] {
        let redis = RedisServer::start();
        let url = redis.url();
        let dir = tempfile::tempdir().unwrap();
        let a = node(dir.path(), Some(&url), "a").await;
        store(&a, 0..70).await;
        let held: Vec<_> = (0..70).map(key).collect();
        assert!(a.lookup_and_lock(held.clone()).await.unwrap().all());
        let wait = Duration::from_millis(if long { 600_000 } else { 50 });
        let fleet = FleetConfig::new(&url).node_id("b").write_wait(wait);
        let b = started(&node_config(dir.path(), None, "b", CAPACITY).fleet(fleet)).await;
        let keys: Vec<_> = (1000..1040).map(key).collect();
        let objects = (1000..1040).map(|i| payload(i, OBJ)).collect();
        let write = b.store(keys.clone(), objects);
        let meanwhile = async {
            if long {
                until("b's write waits", || async { waiting(&b).await > 0 }).await;
                assert_eq!(waiting(&b).await, 40 * OBJ as u64);
                assert_eq!(bucket_bytes(dir.path()), 70 * OBJ as u64, "not written yet");
                a.unlock(held.clone());
            }
        };
        let (r, ()) = futures_util::future::join(write, meanwhile).await;
        assert!(r.unwrap().success());
        b.when_idle(0).await.unwrap();
        assert_eq!(waiting(&b).await, 0);
        assert_eq!(waits(&b, !long), 1);
        assert_eq!(waits(&b, long), 0);
        let status = b.status().await.unwrap().adapters[0].fleet.clone().unwrap();
        assert_eq!(
            (status.writes_waited, status.writes_over),
            if long { (1, 0) } else { (0, 1) },
            "status counts the waits as the metric does"
        );
        if long {
            let bucket = bucket_bytes(dir.path());
            assert!(bucket <= CAPACITY, "bucket {bucket} > capacity {CAPACITY}");
            let found = b.lookup_and_lock(keys).await.unwrap();
            assert!(found.all(), "{found:?}");
        } else {
            // Made past the capacity; the next rounds could take only b's objects.
            let loaded = a.load(held.clone(), vec![BytesMut::zeroed(OBJ); 70]).await;
            assert!(loaded.hits.all(), "{:?}", loaded.misses);
        }
        a.close().await;
        b.close().await;
    }
}

/// A key node `a` holds locked is the least recent in the bucket; node `b` fills the bucket
/// far past its capacity. With the fleet the key stays and loads; once unlocked it can go.
/// Without the fleet, `b` (which found the key at start) deletes it under `a`'s lock.
#[actix_rt::test]
async fn a_key_locked_on_one_node_is_never_evicted_by_another() {
    for fleet in [true, false] {
        let redis = RedisServer::start();
        let url = fleet.then(|| redis.url());
        let dir = tempfile::tempdir().unwrap();
        let a = node(dir.path(), url.as_deref(), "a").await;
        store(&a, 0..1).await;
        assert!(a.lookup_and_lock(vec![key(0)]).await.unwrap().all());
        let b = node(dir.path(), url.as_deref(), "b").await;
        store(&b, 1000..1200).await;
        b.when_idle(0).await.unwrap();
        until("the bucket is under its capacity", || async {
            bucket_bytes(dir.path()) <= CAPACITY
        })
        .await;
        let loaded = a.load(vec![key(0)], vec![BytesMut::zeroed(OBJ)]).await;
        if !fleet {
            assert!(
                !loaded.hits.all(),
                "without a fleet the locked key is deleted"
            );
            a.close().await;
            b.close().await;
            continue;
        }
        assert!(loaded.hits.all(), "{:?}", loaded.misses);
        assert_eq!(&loaded.buffers[0][..], &payload(0, OBJ)[..]);
        // Unlocked, it is the least recent object: the next round takes it.
        a.unlock(vec![key(0)]);
        store(&b, 1200..1240).await;
        until("the unlocked key is evicted", || async {
            !a.lookup_and_lock(vec![key(0)]).await.unwrap().all()
        })
        .await;
        a.close().await;
        b.close().await;
    }
}

/// Keys another node stored are found through the index, with no probe of the store: node
/// `b`'s probes all fail (fault_inject), yet its lookups hit; without the fleet they miss.
#[actix_rt::test]
async fn lookups_of_keys_another_node_stored_come_from_the_index() {
    for fleet in [true, false] {
        let redis = RedisServer::start();
        let dir = tempfile::tempdir().unwrap();
        let mut faults = FaultInjectConfig::default();
        faults.error_rates.head = 1.0;
        let inner = AdapterSpec::Fs(FsConfig::new(dir.path()));
        let mut config = TierConfig::default().adapter(AdapterConfig::fault_inject(inner, faults));
        if fleet {
            config = config.fleet(FleetConfig::new(redis.url()).node_id("b"));
        }
        // `b` starts first, so its own ledger knows nothing of `a`'s objects.
        let b = started(&config).await;
        let url = fleet.then(|| redis.url());
        // Room for the 80 objects under the watermark: none is evicted.
        let a = node_sized(dir.path(), url.as_deref(), "a", 2 * CAPACITY).await;
        store(&a, 0..80).await;
        let hits = b.lookup_and_lock((0..80).map(key).collect()).await.unwrap();
        assert_eq!(hits.all(), fleet, "{hits}");
        if fleet {
            let loaded = b
                .load((0..80).map(key).collect(), vec![BytesMut::zeroed(OBJ); 80])
                .await;
            assert!(loaded.hits.all());
            b.unlock((0..80).map(key).collect());
        }
        a.close().await;
        b.close().await;
    }
}

/// With the index down, a node serves alone: stores, lookups and loads work, `status` says why
/// it is alone, deletes remove nothing (another node's lock cannot be seen). When the index
/// comes up, the node joins without a restart.
#[actix_rt::test]
async fn a_node_without_its_index_serves_alone_and_joins_later() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}/0");
    let dir = tempfile::tempdir().unwrap();
    // The index is down: the node starts alone.
    let a = Tier::start(&node_config(dir.path(), Some(&url), "a", CAPACITY))
        .await
        .unwrap();
    store(&a, 0..3).await;
    assert!(a.lookup_and_lock(vec![key(0)]).await.unwrap().all());
    let loaded = a.load(vec![key(0)], vec![BytesMut::zeroed(OBJ)]).await;
    assert!(loaded.hits.all());
    a.unlock(vec![key(0)]);
    let status = a.status().await.unwrap();
    let fleet = status.adapters[0].fleet.clone().unwrap();
    assert!(!fleet.joined && fleet.reason.is_some(), "{fleet:?}");
    assert!(status.is_healthy(), "the store itself serves");
    let deleted = a.delete(vec![key(1)]).await.unwrap();
    assert_eq!(deleted.all_keys().count(), 0, "nothing deleted while alone");

    let gauge = |tier: &Tier| {
        let text = tier.metrics_text().unwrap();
        text.lines()
            .find(|l| l.starts_with("kvtier_fleet_joined{"))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_owned)
    };
    assert_eq!(gauge(&a).as_deref(), Some("0"), "alone");

    let _redis = RedisServer::start_on(port);
    until("a joins", || joined(&a)).await;
    assert_eq!(gauge(&a).as_deref(), Some("1"), "joined");
    let deleted = a.delete(vec![key(1)]).await.unwrap();
    assert_eq!(deleted.all_keys().count(), 1);
    a.close().await;
}

/// The index is a cache of the bucket: objects written without the fleet are counted by the
/// listing, objects removed behind its back are forgotten, and an index that lost its data
/// (restarted without persistence) is rebuilt from the listing.
#[actix_rt::test]
async fn the_listing_corrects_the_index_and_rebuilds_a_lost_one() {
    let dir = tempfile::tempdir().unwrap();
    let alone = node(dir.path(), None, "alone").await;
    store(&alone, 0..30).await;
    alone.close().await;

    let port = free_port();
    let redis = RedisServer::start_on(port);
    let config = TierConfig::default()
        .adapter(AdapterConfig::fs(dir.path()).capacity_gb(1.0))
        .fleet(
            FleetConfig::new(redis.url())
                .node_id("a")
                .listing_interval(Duration::from_secs(1)),
        );
    let a = Tier::start(&config).await.unwrap();
    async fn fleet_bytes(tier: &Tier) -> u64 {
        tier.usage().await.unwrap().adapters[0].used_bytes
    }
    // Joined first: until then `usage` is the node's own ledger.
    until("the 30 objects written alone are counted", || async {
        joined(&a).await && fleet_bytes(&a).await == 30 * OBJ as u64
    })
    .await;
    store(&a, 100..110).await;
    assert_eq!(fleet_bytes(&a).await, 40 * OBJ as u64);

    // Five objects removed behind the fleet's back.
    for (f, _) in files(dir.path()).iter().take(5) {
        std::fs::remove_file(f).unwrap();
    }
    until("the listing forgets them", || async {
        fleet_bytes(&a).await == 35 * OBJ as u64
    })
    .await;

    // The index restarts empty: the node joins again and the listing rebuilds it.
    drop(redis);
    let _redis = RedisServer::start_on(port);
    until("the index is rebuilt", || async {
        joined(&a).await && fleet_bytes(&a).await == 35 * OBJ as u64
    })
    .await;
    a.close().await;
}

/// `IsolatedLRU` in a fleet: a quota set on one node is the fleet's; another node's stores of
/// that salt are brought back under it, and both nodes report it.
#[actix_rt::test]
async fn isolated_lru_quotas_are_the_fleets() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = |id: &str| {
        let adapter = AdapterConfig::fs(dir.path())
            .eviction(EvictionConfig::with_policy(EvictionPolicy::IsolatedLru));
        fleet_node(adapter, &redis.url(), id)
    };
    let (a, b) = (started(&config("a")).await, started(&config("b")).await);
    let limit = 10 * OBJ as u64;
    assert_eq!(a.set_quota(0, "tenant", Some(limit)).await.unwrap(), None);
    let want = Some(Quotas(
        [("tenant".to_string(), limit)].into_iter().collect(),
    ));
    assert_eq!(b.quotas(0).await.unwrap(), want, "the fleet's quota");
    for i in 0..20 {
        let r = b
            .store(vec![salted(i, "tenant")], vec![payload(i, OBJ)])
            .await
            .unwrap();
        assert!(r.success(), "{r:?}");
    }
    until("the tenant is back under its quota's watermark", || async {
        bucket_bytes(dir.path()) <= 8 * OBJ as u64
    })
    .await;
    assert!(bucket_bytes(dir.path()) > 0, "only the excess goes");
    a.close().await;
    b.close().await;
}

/// Every policy evicts over the fleet by its own order, kept in the index from every node's
/// stores and hits: node `a` stores 50 objects and looks the first one up three times; node
/// `b` then stores 100 more. `LRU` lets that key go with the rest of `a`'s (its hits are older
/// than `b`'s stores); `ARC` keeps it (seen again: `T2`, while `T1` goes first); `FLRU`
/// keeps it (its uses put it ahead of objects used once).
#[actix_rt::test]
async fn every_policy_evicts_by_its_own_order_over_the_fleet() {
    for (policy, kept) in [
        (EvictionPolicy::Lru, false),
        (EvictionPolicy::Arc, true),
        (EvictionPolicy::Flru, true),
    ] {
        let redis = RedisServer::start();
        let dir = tempfile::tempdir().unwrap();
        let config = |id: &str| {
            let adapter = AdapterConfig::fs(dir.path())
                .capacity_gb(CAPACITY as f64 / GIB)
                .eviction(EvictionConfig::with_policy(policy));
            fleet_node(adapter, &redis.url(), id)
        };
        let (a, b) = (started(&config("a")).await, started(&config("b")).await);
        store(&a, 0..50).await;
        for _ in 0..3 {
            assert!(a.lookup_and_lock(vec![key(0)]).await.unwrap().all());
            a.unlock(vec![key(0)]);
        }
        store(&b, 1000..1100).await;
        until("the bucket is under its capacity", || async {
            bucket_bytes(dir.path()) <= CAPACITY
        })
        .await;
        let found = a.lookup_and_lock(vec![key(0)]).await.unwrap().all();
        assert_eq!(found, kept, "{policy:?}");
        assert!(
            !a.lookup_and_lock(vec![key(1)]).await.unwrap().all(),
            "{policy:?}: an object used once goes"
        );
        a.close().await;
        b.close().await;
    }
}

/// The 64-bit digest a key hashes as (what one node's `FLRU` shadows sample by).
fn digest(k: &ObjectKey) -> u64 {
    use std::hash::BuildHasher;
    nohash_hasher::BuildNoHashHasher::<ObjectKey>::default().hash_one(k)
}

/// `FLRU`'s shadows in the index sample the keys one node's shadows would (a digest that is a
/// multiple of 16): the node marks them in its stores and locks, since the index sees only
/// names. The shadows' clock ticks once per sampled use: after a store and a lookup of 90
/// keys, twice the number of sampled ones. Fails with the marks left out (the clock stays 0)
/// or with the index sampling by name.
#[actix_rt::test]
async fn the_index_shadows_sample_the_keys_one_nodes_shadows_do() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let adapter = AdapterConfig::fs(dir.path())
        .capacity_gb(CAPACITY as f64 / GIB)
        .eviction(EvictionConfig::with_policy(EvictionPolicy::Flru));
    let a = started(&fleet_node(adapter, &redis.url(), "a")).await;
    store(&a, 0..90).await;
    let keys: Vec<_> = (0..90).map(key).collect();
    assert!(a.lookup_and_lock(keys.clone()).await.unwrap().all());
    a.unlock(keys.clone());
    let sampled = keys.iter().filter(|k| digest(k).is_multiple_of(16)).count();
    assert!(sampled > 0, "no key of the 90 is sampled: pick others");
    assert_eq!(redis.read("*sh:clock"), Some((2 * sampled).to_string()));
    a.close().await;
}

/// `[fleet]` in the file and the environment; errors name the field and never quote the URL.
#[test]
fn fleet_is_configured_like_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kvtier.toml");
    std::fs::write(
        &file,
        "[fleet]\nindex = \"redis://:pw@10.0.0.7:6379/0\"\nnode_id = \"gpu-17\"\nlisting_interval_secs = 60\n",
    )
    .unwrap();
    let config = TierConfig::load(&ConfigSources::file(&file).env(Default::default())).unwrap();
    let fleet = config.fleet.clone().unwrap();
    assert_eq!(fleet.index.expose(), "redis://:pw@10.0.0.7:6379/0");
    assert_eq!(fleet.resolved_node_id(), "gpu-17");
    assert_eq!(fleet.listing_interval_secs, 60);
    assert!(!format!("{config:?} {}", config.to_redacted_json()).contains("pw@"));

    let env = [
        ("KVTIER_FLEET__INDEX", "rediss://h:6380"),
        ("KVTIER_FLEET__LISTING_INTERVAL_SECS", "0"),
        ("KVTIER_FLEET__LANDING_MARK", "0.95"),
        ("KVTIER_FLEET__WRITE_WAIT_MS", "0"),
        ("KVTIER_FLEET__SHARDS", "4"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()));
    let config =
        TierConfig::load(&ConfigSources::file(&file).env(env.into_iter().collect())).unwrap();
    let fleet = config.fleet.unwrap();
    assert_eq!(fleet.index.expose(), "rediss://h:6380");
    assert_eq!(fleet.listing_interval_secs, 0, "the environment wins");
    assert_eq!(fleet.landing_mark, Some(0.95));
    assert_eq!(fleet.write_wait_ms, 0, "writes do not wait");
    assert_eq!(fleet.shards, 4);
    let default = FleetConfig::new("redis://h");
    assert_eq!(default.landing_mark, None, "default: from the wait");
    assert_eq!(default.write_wait_ms, 2000);
    assert_eq!(default.shards, 1, "default: one hash tag");
    std::fs::write(&file, "[fleet]\nindex = \"redis://h\"\nshards = 0\n").unwrap();
    let err = TierConfig::load(&ConfigSources::file(&file).env(Default::default())).unwrap_err();
    assert!(err.to_string().contains("fleet.shards"), "{err}");

    std::fs::write(
        &file,
        "[fleet]\nindex = \"redis://h\"\nlanding_mark = 1.5\n",
    )
    .unwrap();
    let err = TierConfig::load(&ConfigSources::file(&file).env(Default::default())).unwrap_err();
    assert!(err.to_string().contains("fleet.landing_mark"), "{err}");

    std::fs::write(&file, "[fleet]\nindex = \"http://:secret@h\"\n").unwrap();
    let err = TierConfig::load(&ConfigSources::file(&file).env(Default::default())).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("fleet.index") && !text.contains("secret"),
        "{text}"
    );
    std::fs::write(&file, "[fleet]\nindx = \"redis://h\"\n").unwrap();
    let err = TierConfig::load(&ConfigSources::file(&file).env(Default::default())).unwrap_err();
    assert!(err.to_string().contains("fleet.indx"), "{err}");
    // A fleet setting without an index (say, one variable left in the environment) says the
    // index is missing, not that a secret is wrong.
    let env = [("KVTIER_FLEET__LANDING_MARK", "0.8")].map(|(k, v)| (k.to_string(), v.to_string()));
    let err = TierConfig::load(&ConfigSources::default().env(env.into_iter().collect()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("fleet.index") && err.contains("missing"),
        "{err}"
    );

    let without = TierConfig::load(&ConfigSources::default().env(Default::default())).unwrap();
    assert!(without.fleet.is_none());
    assert!(FleetConfig::new("redis://h")
        .resolved_node_id()
        .ends_with(&format!("-{}", std::process::id())));
}
