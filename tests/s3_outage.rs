//! The `s3` adapter against a real 3-node Garage cluster (`replication_factor = 3`, quorum 2)
//! while nodes die and come back.
//!
//! One test, in phases, with the client talking to node 0:
//! - **a. one node down**: a stream of store → lookup_and_lock → load (bytes compared) → unlock
//!   rounds runs while node 2 is killed; no request may fail.
//! - **b. all nodes down**: the breaker opens; requests fail fast (the latency of a request
//!   refused by the open breaker is measured and printed: p50/max), lookups are misses (of
//!   stored keys too: the size cache is not trusted while the breaker is open), loads are
//!   misses, stores report per-key errors, and nothing hangs (every request runs under a
//!   timeout).
//! - **c. restart**: the breaker closes (status healthy), stores and loads resume, and every
//!   object written in phase a is still there, byte for byte.
//! - **d. accounting**: usage equals what a plain S3 client lists in the bucket.
//!
//! Figures are printed with `eprintln!` (run with `--nocapture` to see them); docs/reliability.md
//! records them. The only timing assertions are hang bounds, not performance targets.

use kvtier_testkit as support;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kvtier::actors::backends::s3::S3Config;
use kvtier::{AdapterConfig, AdapterSpec, ObjectKey, Tier, TierConfig};
use support::garage::GarageCluster;
use support::payload;

const BUCKET: &str = "kvtier-outage";
const CHUNK: usize = 64 * 1024;
const BATCH: u32 = 8;
/// Any single request taking longer than this is a hang.
const HANG: Duration = Duration::from_secs(30);
/// The breaker's cooldown in this test: long enough that many requests meet the open breaker
/// between two half-open probes.
const COOLDOWN_SECS: f64 = 1.0;
/// A request refused by the open breaker never touches the network: it must not take this
/// long (a hang detector, not a performance target).
const FAST_FAILURE_BOUND: Duration = Duration::from_secs(1);

fn key(i: u32) -> ObjectKey {
    ObjectKey::new("outage-model", 0, i.to_be_bytes().to_vec()).unwrap()
}

fn chunk(i: u32) -> bytes::Bytes {
    payload(i, CHUNK)
}

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    match actix_rt::time::timeout(HANG, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what} hung for more than {HANG:?}"),
    }
}

/// p50 and max of `d`, in milliseconds.
fn p50_max(d: &mut [Duration]) -> (f64, f64) {
    if d.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    d.sort();
    let ms = |x: Duration| x.as_secs_f64() * 1e3;
    (ms(d[d.len() / 2]), ms(d[d.len() - 1]))
}

/// One round on fresh keys `first..first+BATCH`: store, lookup_and_lock, load (bytes
/// compared), unlock. Returns what went wrong, if anything.
async fn round(tier: &Tier, first: u32) -> Result<(), String> {
    let ids: Vec<u32> = (first..first + BATCH).collect();
    let keys: Vec<ObjectKey> = ids.iter().map(|&i| key(i)).collect();
    let rep = within(
        "store",
        tier.store(keys.clone(), ids.iter().map(|&i| chunk(i)).collect()),
    )
    .await
    .unwrap();
    if !rep.success() {
        return Err(format!("store failed: {rep:?}"));
    }
    let hits = within("lookup", tier.lookup_and_lock(keys.clone()))
        .await
        .unwrap();
    if !hits.all() {
        return Err(format!("lookup missed: {hits:?}"));
    }
    let bufs = ids.iter().map(|_| BytesMut::zeroed(CHUNK)).collect();
    let loaded = within("load", tier.load(keys.clone(), bufs)).await;
    tier.unlock(keys);
    if !loaded.hits.all() {
        return Err(format!("load missed: {:?}", loaded.hits));
    }
    for (i, buf) in ids.iter().zip(&loaded.buffers) {
        if buf[..] != chunk(*i)[..] {
            return Err(format!("key {i}: loaded bytes differ from the stored ones"));
        }
    }
    Ok(())
}

/// Runs blocking cluster control off the actix thread, so the request stream keeps going.
async fn control(
    cluster: GarageCluster,
    f: impl FnOnce(&mut GarageCluster) + Send + 'static,
) -> GarageCluster {
    tokio::task::spawn_blocking(move || {
        let mut c = cluster;
        f(&mut c);
        c
    })
    .await
    .expect("cluster control panicked")
}

async fn breaker_state(tier: &Tier) -> String {
    let status = within("status", tier.status()).await.unwrap();
    status.adapters[0].details["circuit_breaker"]["state"]
        .as_str()
        .unwrap_or("?")
        .to_owned()
}

/// How many requests the breaker has refused so far (it counts them in its status).
async fn fast_failures(tier: &Tier) -> u64 {
    let status = within("status", tier.status()).await.unwrap();
    status.adapters[0].details["circuit_breaker"]["fast_failures"]
        .as_u64()
        .expect("fast_failures in the breaker's status")
}

/// Bytes and objects under `prefix`, as a plain S3 client lists them from node 0.
async fn bucket_listing(cluster: &GarageCluster, prefix: &str) -> (u64, usize) {
    support::garage::bucket_listing(
        &cluster.node(0).s3_endpoint,
        &cluster.region,
        &cluster.access_key_id,
        &cluster.secret_access_key,
        BUCKET,
        prefix,
    )
    .await
}

#[actix_rt::test]
async fn three_node_outage_breaker_and_recovery() {
    let test_start = Instant::now();
    let t = Instant::now();
    let cluster = GarageCluster::start(3);
    cluster.create_bucket(BUCKET);
    eprintln!(
        "[outage] 3-node cluster up (replication 3) in {:.2} s",
        t.elapsed().as_secs_f64()
    );

    let prefix = format!("run-{:08x}/", rand::random::<u32>());
    let mut cfg = S3Config::new(&cluster.node(0).s3_endpoint, &cluster.region)
        .bucket(BUCKET)
        .access_key_id(&cluster.access_key_id)
        .secret_access_key(&cluster.secret_access_key);
    cfg.s3_key_prefix = Some(prefix.clone());
    cfg.circuit_breaker_cooldown_secs = COOLDOWN_SECS;
    let tier = Rc::new(
        Tier::start(&{
            let mut built = TierConfig::default();
            built.adapters = vec![{
                let mut built = AdapterConfig::default();
                built.common = Default::default();
                built.spec = AdapterSpec::S3(cfg);
                built
            }];
            built.eviction_interval_ms = 50;
            built
        })
        .await
        .unwrap(),
    );

    // ---- a. one node (not the one the client talks to) dies under a request stream ----
    let stop = Rc::new(Cell::new(false));
    // (round start, latency) of every round, and every failure.
    let rounds: Rc<RefCell<Vec<(Instant, Duration)>>> = Rc::default();
    let next = Rc::new(Cell::new(0u32));
    let stream = {
        let (tier, stop, rounds, next) = (tier.clone(), stop.clone(), rounds.clone(), next.clone());
        actix_rt::spawn(async move {
            let mut failures = Vec::new();
            while !stop.get() {
                let first = next.get();
                next.set(first + BATCH);
                let t = Instant::now();
                if let Err(e) = round(&tier, first).await {
                    failures.push(format!("round at key {first}: {e}"));
                }
                rounds.borrow_mut().push((t, t.elapsed()));
            }
            failures
        })
    };
    actix_rt::time::sleep(Duration::from_secs(1)).await;
    let killed = Instant::now();
    let t = Instant::now();
    let cluster = control(cluster, |c| c.stop(2)).await;
    eprintln!(
        "[outage] node 2 killed; the other nodes saw it go within {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    actix_rt::time::sleep(Duration::from_secs(3)).await;
    stop.set(true);
    let failures = within("the request stream", stream).await.unwrap();
    let (mut before, mut after): (Vec<Duration>, Vec<Duration>) = (Vec::new(), Vec::new());
    for (start, d) in rounds.borrow().iter() {
        if *start < killed {
            before.push(*d);
        } else {
            after.push(*d);
        }
    }
    let (n_before, n_after) = (before.len(), after.len());
    let (b50, bmax) = p50_max(&mut before);
    let (a50, amax) = p50_max(&mut after);
    eprintln!(
        "[outage] a. one node down: {} rounds of {BATCH} x {} KiB (store+lookup+load+unlock), \
         {} failed; round latency 3 nodes up p50 {b50:.1} ms max {bmax:.1} ms ({n_before} \
         rounds), 1 node down p50 {a50:.1} ms max {amax:.1} ms ({n_after} rounds)",
        n_before + n_after,
        CHUNK / 1024,
        failures.len(),
    );
    assert!(
        failures.is_empty(),
        "requests failed with one node of three down: {failures:#?}"
    );
    assert!(n_after > 0, "no round ran while node 2 was down");
    let written = next.get();
    assert_eq!(breaker_state(&tier).await, "closed");

    // ---- b. every node down: the breaker opens and requests fail fast ----
    let cluster = control(cluster, |c| c.stop_all()).await;
    let outage = Instant::now();
    let mut to_open = Vec::new();
    let mut fresh = 1_000_000u32;
    while breaker_state(&tier).await != "open" {
        assert!(
            outage.elapsed() < HANG,
            "the breaker did not open within {HANG:?}"
        );
        let object = chunk(fresh);
        let t = Instant::now();
        let rep = within(
            "store (store down)",
            tier.store(vec![key(fresh)], vec![object]),
        )
        .await
        .unwrap();
        to_open.push(t.elapsed());
        fresh += 1;
        assert!(!rep.success(), "a store succeeded with every node down");
        assert_eq!(rep.adapters[0].1.failed.len(), 1, "{rep:?}");
    }
    let opened_after = outage.elapsed();
    let (o50, omax) = p50_max(&mut to_open);
    eprintln!(
        "[outage] b. all nodes down: breaker open after {} failed store(s) in {:.0} ms \
         (each p50 {o50:.0} ms, max {omax:.0} ms: connection refused, with retries)",
        to_open.len(),
        opened_after.as_secs_f64() * 1e3
    );

    // Requests while the store is down, for a few cooldowns: stores of new keys, lookups of an
    // unknown and a known key, loads of a known key. Each is classified by whether the breaker
    // refused it (its fast-failure counter moved) or let it through as a half-open probe.
    let mut refused: [Vec<Duration>; 3] = Default::default(); // store, lookup, load
    let mut probes: [Vec<Duration>; 3] = Default::default();
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs_f64(COOLDOWN_SECS * 3.5) {
        // Only a half-open probe may reach the (dead) store: the breaker never closes here.
        let state = breaker_state(&tier).await;
        assert_ne!(
            state, "closed",
            "the breaker closed while every node is down"
        );
        let object = chunk(fresh);
        let before = fast_failures(&tier).await;
        let t = Instant::now();
        let rep = within(
            "store (breaker)",
            tier.store(vec![key(fresh)], vec![object]),
        )
        .await
        .unwrap();
        let d = t.elapsed();
        fresh += 1;
        assert!(!rep.success());
        assert_eq!(
            rep.adapters[0].1.failed.len(),
            1,
            "one per-key error: {rep:?}"
        );
        let by_breaker = fast_failures(&tier).await > before;
        [&mut probes, &mut refused][by_breaker as usize][0].push(d);

        let before = fast_failures(&tier).await;
        let t = Instant::now();
        let hits = within(
            "lookup (breaker)",
            tier.lookup_and_lock(vec![key(u32::MAX)]),
        )
        .await
        .unwrap();
        let d = t.elapsed();
        assert!(
            !hits.all(),
            "an unknown key is a miss while the store is down"
        );
        let by_breaker = fast_failures(&tier).await > before;
        [&mut probes, &mut refused][by_breaker as usize][1].push(d);

        // A known key is a miss too: with the breaker open the size cache is not trusted.
        let hits = within("lookup (known)", tier.lookup_and_lock(vec![key(0)]))
            .await
            .unwrap();
        if hits.all() {
            let status = within("status", tier.status()).await.unwrap();
            panic!("a stored key was a hit while the store is down: {status:?}");
        }
        let before = fast_failures(&tier).await;
        let t = Instant::now();
        let loaded = within(
            "load (breaker)",
            tier.load(vec![key(0)], vec![BytesMut::zeroed(CHUNK)]),
        )
        .await;
        let d = t.elapsed();
        assert!(
            !loaded.hits.all(),
            "a load cannot hit while the store is down"
        );
        let by_breaker = fast_failures(&tier).await > before;
        [&mut probes, &mut refused][by_breaker as usize][2].push(d);
    }
    let status = within("status", tier.status()).await.unwrap();
    assert!(!status.is_healthy(), "{status:?}");
    let breaker = status.adapters[0].details["circuit_breaker"].clone();
    let mut all_refused: Vec<Duration> = refused.iter().flatten().copied().collect();
    let n_refused = all_refused.len();
    let (r50, rmax) = p50_max(&mut all_refused);
    eprintln!(
        "[outage] b. failed request refused by the open breaker (store, lookup or load): \
         p50 {r50:.3} ms, max {rmax:.3} ms ({n_refused} requests)"
    );
    for (i, op) in ["store", "lookup", "load"].iter().enumerate() {
        let (n_r, n_p) = (refused[i].len(), probes[i].len());
        let (r50, rmax) = p50_max(&mut refused[i]);
        let (p50, pmax) = p50_max(&mut probes[i]);
        eprintln!(
            "[outage] b.   {op:6}: refused p50 {r50:.3} ms max {rmax:.3} ms ({n_r}); \
             half-open probes p50 {p50:.0} ms max {pmax:.0} ms ({n_p})"
        );
    }
    eprintln!("[outage] b. breaker after the window: {breaker}");
    assert!(n_refused > 0, "no request met the open breaker");
    assert!(
        rmax < FAST_FAILURE_BOUND.as_secs_f64() * 1e3,
        "a request refused by the open breaker took {rmax:.1} ms"
    );

    // ---- c. restart: the breaker closes, stores and loads resume ----
    let t = Instant::now();
    let cluster = control(cluster, |c| {
        for i in 0..3 {
            c.restart(i);
        }
    })
    .await;
    let restarted = t.elapsed();
    let t = Instant::now();
    let mut probe = fresh;
    loop {
        let rep = within(
            "store (recovery)",
            tier.store(vec![key(probe)], vec![chunk(probe)]),
        )
        .await
        .unwrap();
        probe += 1;
        if rep.success() {
            break;
        }
        assert!(
            t.elapsed() < HANG,
            "stores did not resume within {HANG:?} after the restart: {rep:?}"
        );
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    let first_success = t.elapsed();
    let status = within("status", tier.status()).await.unwrap();
    assert!(status.is_healthy(), "{status:?}");
    assert_eq!(breaker_state(&tier).await, "closed");
    // New rounds succeed again.
    let mut resumed = Vec::new();
    for r in 0..10 {
        let t = Instant::now();
        round(&tier, 2_000_000 + r * BATCH)
            .await
            .unwrap_or_else(|e| panic!("after recovery: {e}"));
        resumed.push(t.elapsed());
    }
    let (c50, cmax) = p50_max(&mut resumed);
    // Everything written in phase a survived the crash of every node.
    let ids: Vec<u32> = (0..written).collect();
    for part in ids.chunks(64) {
        let keys: Vec<ObjectKey> = part.iter().map(|&i| key(i)).collect();
        let bufs = part.iter().map(|_| BytesMut::zeroed(CHUNK)).collect();
        let loaded = within("load (phase a keys)", tier.load(keys, bufs)).await;
        assert!(loaded.hits.all(), "phase-a objects lost: {:?}", loaded.hits);
        for (i, buf) in part.iter().zip(&loaded.buffers) {
            assert_eq!(&buf[..], &chunk(*i)[..], "key {i} changed");
        }
    }
    eprintln!(
        "[outage] c. all 3 nodes restarted and reconnected in {:.2} s; first successful store \
         {:.0} ms later (breaker closed, healthy); 10 rounds p50 {c50:.1} ms max {cmax:.1} ms; \
         all {written} phase-a objects intact",
        restarted.as_secs_f64(),
        first_success.as_secs_f64() * 1e3
    );

    // ---- d. usage equals the bucket's listing ----
    let usage = within("usage", tier.usage()).await.unwrap();
    let (listed_bytes, listed_keys) = bucket_listing(&cluster, &prefix).await;
    eprintln!(
        "[outage] d. usage {} B in {} keys; bucket lists {listed_bytes} B in {listed_keys} objects",
        usage.adapters[0].used_bytes, usage.adapters[0].keys
    );
    assert_eq!(usage.adapters[0].used_bytes, listed_bytes);
    assert_eq!(usage.adapters[0].keys, listed_keys);
    eprintln!(
        "[outage] total test time {:.1} s",
        test_start.elapsed().as_secs_f64()
    );
    match Rc::try_unwrap(tier) {
        Ok(t) => t.close().await,
        Err(_) => panic!("the tier is still shared"),
    }
    drop(cluster);
}
