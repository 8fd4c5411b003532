//! A bounded soak of the whole runtime against a single-node Garage: mixed store, lookup,
//! load, unlock and delete at full speed, with a capacity small enough that LRU eviction runs
//! all the time. It ends by itself after `KVTIER_SOAK_SECS` seconds (default 60, so CI stays
//! short; docs/reliability.md records a 600 s run).
//!
//! Every 10 s it prints one row: operations and bytes per second, usage, keys evicted, RSS and
//! open file descriptors (`/proc/self/fd`). At the end it prints peak RSS (`VmHWM`) and the
//! descriptors at start and end.
//!
//! It asserts what must hold whatever the timing:
//! - no store fails (a store of a key whose deletion runs waits for it, so none is refused as
//!   "being deleted"), and no load of a key that a lookup found and locked misses (locked keys
//!   are never evicted or deleted);
//! - every loaded byte is the byte stored;
//! - no file-descriptor growth beyond a small slack (a leak would show thousands);
//! - at the end, no key is locked and usage equals the bucket's listing (bytes and keys).
//!
//! ```text
//! KVTIER_SOAK_SECS=600 cargo test --release --test soak -- --nocapture
//! ```

use kvtier_testkit as support;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kvtier::actors::backends::s3::S3Config;
use kvtier::actors::config::EvictionConfig;
use kvtier::{AdapterConfig, AdapterSpec, ObjectKey, Tier, TierConfig};
use rand::{Rng, SeedableRng};
use support::garage::Garage;
use support::payload;

const BUCKET: &str = "kvtier-soak";
const DEFAULT_SECS: u64 = 60;
const INTERVAL: Duration = Duration::from_secs(10);
const CHUNK: usize = 64 * 1024;
/// Keys the workers pick from: 1024 × 64 KiB = 64 MiB, three times the capacity.
const KEYSPACE: u32 = 1024;
/// 0.02 GiB ≈ 20.5 MiB ≈ 327 chunks; eviction starts at 80 %.
const CAPACITY_GB: f64 = 0.02;
const WORKERS: u64 = 8;
const BATCH: usize = 4;
/// Descriptors the run may end with beyond those it had after the first interval (pooled
/// connections vary with the request mix; a leak would add thousands).
const FD_SLACK: usize = 32;
/// Longest any single request may take before it counts as a hang.
const HANG: Duration = Duration::from_secs(60);

fn key(i: u32) -> ObjectKey {
    ObjectKey::new("soak-model", 0, i.to_be_bytes().to_vec()).unwrap()
}

/// What the workers did, shared by the tasks of the one actix thread.
#[derive(Debug, Default, Clone)]
struct Counters {
    ops: u64,
    stored_keys: u64,
    stored_bytes: u64,
    refused_deleting: u64,
    store_errors: Vec<String>,
    lookups: u64,
    lookup_hits: u64,
    loaded_keys: u64,
    loaded_bytes: u64,
    locked_but_missed: u64,
    corrupt: u64,
    deletes: u64,
    deleted_keys: u64,
}

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A `/proc/self/status` field in kB (`VmRSS`, `VmHWM`), as MiB.
fn proc_status_mib(field: &str) -> f64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn timed<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    match actix_rt::time::timeout(HANG, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what} hung for more than {HANG:?}"),
    }
}

async fn worker(tier: Rc<Tier>, seed: u64, deadline: Instant, c: Rc<RefCell<Counters>>) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    while Instant::now() < deadline {
        let mut ids: Vec<u32> = (0..BATCH).map(|_| rng.gen_range(0..KEYSPACE)).collect();
        ids.sort_unstable();
        ids.dedup();
        let keys: Vec<ObjectKey> = ids.iter().map(|&i| key(i)).collect();
        match rng.gen_range(0..10) {
            // Store.
            0..=3 => {
                let objects = ids.iter().map(|&i| payload(i, CHUNK)).collect();
                let rep = timed("store", tier.store(keys.clone(), objects))
                    .await
                    .unwrap();
                let out = &rep.adapters[0].1;
                let mut c = c.borrow_mut();
                c.stored_keys += out.stored as u64;
                c.stored_bytes += (out.stored * CHUNK) as u64;
                for f in &out.failed {
                    if f.error.contains("being deleted") {
                        c.refused_deleting += 1;
                    }
                    c.store_errors.push(format!("{}: {}", f.key, f.error));
                }
            }
            // Lookup, load what was found (bytes compared), unlock.
            4..=7 => {
                let hits = timed("lookup", tier.lookup_and_lock(keys.clone()))
                    .await
                    .unwrap();
                let found: Vec<u32> = ids
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| hits.get(*j))
                    .map(|(_, &i)| i)
                    .collect();
                let found_keys: Vec<ObjectKey> = found.iter().map(|&i| key(i)).collect();
                let mut loaded_keys = 0u64;
                let (mut missed, mut corrupt) = (0u64, 0u64);
                if !found.is_empty() {
                    let bufs = found.iter().map(|_| BytesMut::zeroed(CHUNK)).collect();
                    let loaded = timed("load", tier.load(found_keys.clone(), bufs)).await;
                    for (j, (&i, buf)) in found.iter().zip(&loaded.buffers).enumerate() {
                        if !loaded.hits.get(j) {
                            missed += 1;
                        } else if buf[..] != payload(i, CHUNK)[..] {
                            corrupt += 1;
                        } else {
                            loaded_keys += 1;
                        }
                    }
                    tier.unlock(found_keys);
                }
                let mut c = c.borrow_mut();
                c.lookups += ids.len() as u64;
                c.lookup_hits += found.len() as u64;
                c.loaded_keys += loaded_keys;
                c.loaded_bytes += loaded_keys * CHUNK as u64;
                c.locked_but_missed += missed;
                c.corrupt += corrupt;
            }
            // Lookup and unlock without loading.
            8 => {
                let hits = timed("lookup", tier.lookup_and_lock(keys.clone()))
                    .await
                    .unwrap();
                let found: Vec<ObjectKey> = keys
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| hits.get(*j))
                    .map(|(_, k)| k.clone())
                    .collect();
                let n = found.len() as u64;
                tier.unlock(found);
                let mut c = c.borrow_mut();
                c.lookups += ids.len() as u64;
                c.lookup_hits += n;
            }
            // Explicit delete (evict) of a couple of keys.
            _ => {
                let rep = timed("delete", tier.delete(keys[..keys.len().min(2)].to_vec()))
                    .await
                    .unwrap();
                let mut c = c.borrow_mut();
                c.deletes += 1;
                c.deleted_keys += rep.adapters[0].1.len() as u64;
            }
        }
        c.borrow_mut().ops += 1;
    }
}

/// Bytes and objects under `prefix`, as a plain S3 client lists them.
async fn listing(garage: &Garage, prefix: &str) -> (u64, usize) {
    support::garage::bucket_listing(
        &garage.s3_endpoint,
        &garage.region,
        &garage.access_key_id,
        &garage.secret_access_key,
        BUCKET,
        prefix,
    )
    .await
}

#[actix_rt::test]
async fn soak_mixed_load_with_eviction() {
    let secs: u64 = std::env::var("KVTIER_SOAK_SECS")
        .ok()
        .map(|s| s.parse().expect("KVTIER_SOAK_SECS: a number of seconds"))
        .unwrap_or(DEFAULT_SECS);
    let garage = Garage::start();
    garage.create_bucket(BUCKET);
    let prefix = format!("soak-{:08x}/", rand::random::<u32>());
    let mut cfg = S3Config::new(&garage.s3_endpoint, &garage.region)
        .bucket(BUCKET)
        .access_key_id(&garage.access_key_id)
        .secret_access_key(&garage.secret_access_key);
    cfg.s3_key_prefix = Some(prefix.clone());
    let mut adapter = {
        let mut built = AdapterConfig::default();
        built.common = Default::default();
        built.spec = AdapterSpec::S3(cfg);
        built
    };
    adapter.common.max_capacity_gb = CAPACITY_GB;
    adapter.common.eviction = Some(EvictionConfig::default());

    let fds_start = fd_count();
    let rss_start = proc_status_mib("VmRSS:");
    let tier = Rc::new(
        Tier::start(&{
            let mut built = TierConfig::default();
            built.adapters = vec![adapter];
            built.eviction_interval_ms = 50;
            built
        })
        .await
        .unwrap(),
    );
    eprintln!(
        "[soak] {secs} s, {WORKERS} workers, batches of {BATCH} x {} KiB over {KEYSPACE} keys, \
         capacity {:.1} MiB (LRU at 80 %, 20 %); fds {fds_start}, RSS {rss_start:.1} MiB",
        CHUNK / 1024,
        CAPACITY_GB * 1024.0
    );
    eprintln!(
        "[soak] {:>6} {:>8} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8} {:>7} {:>4}",
        "t(s)",
        "ops/s",
        "store/s",
        "load/s",
        "MiB/s w",
        "MiB/s r",
        "usage MiB",
        "evicted",
        "RSS MiB",
        "fds"
    );

    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let counters: Rc<RefCell<Counters>> = Rc::default();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| actix_rt::spawn(worker(tier.clone(), w, deadline, counters.clone())))
        .collect();

    let mut last = Counters::default();
    let mut last_t = start;
    let mut fds_warm = None;
    let mut rows = 0;
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let next = (last_t + INTERVAL).min(deadline);
        actix_rt::time::sleep(next - now).await;
        let t = Instant::now();
        let dt = (t - last_t).as_secs_f64();
        let c = counters.borrow().clone();
        let usage = timed("usage", tier.usage()).await.unwrap();
        let evicted: u64 = timed("eviction stats", tier.eviction_stats())
            .await
            .unwrap()
            .iter()
            .map(|(_, s)| s.evicted_keys)
            .sum();
        let fds = fd_count();
        fds_warm.get_or_insert(fds);
        let mib = 1024.0 * 1024.0;
        eprintln!(
            "[soak] {:>6.0} {:>8.0} {:>9.0} {:>9.0} {:>8.1} {:>9.1} {:>9.1} {:>8} {:>7.1} {:>4}",
            (t - start).as_secs_f64(),
            (c.ops - last.ops) as f64 / dt,
            (c.stored_keys - last.stored_keys) as f64 / dt,
            (c.loaded_keys - last.loaded_keys) as f64 / dt,
            (c.stored_bytes - last.stored_bytes) as f64 / dt / mib,
            (c.loaded_bytes - last.loaded_bytes) as f64 / dt / mib,
            usage.adapters[0].used_bytes as f64 / mib,
            evicted,
            proc_status_mib("VmRSS:"),
            fds
        );
        rows += 1;
        last = c;
        last_t = t;
    }
    for w in workers {
        timed("a worker", w).await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let c = counters.borrow().clone();

    // Quiesce: unlocks are fire-and-forget and an eviction round may still run; wait until no
    // key is locked and usage equals the listing.
    let settle = Instant::now();
    let (usage, listed) = loop {
        let status = timed("status", tier.status()).await.unwrap();
        let usage = timed("usage", tier.usage()).await.unwrap().adapters[0].clone();
        let listed = listing(&garage, &prefix).await;
        let locked = status.adapters[0].locked_keys;
        if locked == 0 && (usage.used_bytes, usage.keys) == listed {
            break (usage, listed);
        }
        if settle.elapsed() > Duration::from_secs(30) {
            panic!(
                "accounting did not settle: {locked} keys locked, usage {} B in {} keys, \
                 bucket lists {} B in {} objects",
                usage.used_bytes, usage.keys, listed.0, listed.1
            );
        }
        actix_rt::time::sleep(Duration::from_millis(200)).await;
    };
    let stats = timed("eviction stats", tier.eviction_stats())
        .await
        .unwrap();
    let fds_end = fd_count();
    let rss_end = proc_status_mib("VmRSS:");
    let rss_peak = proc_status_mib("VmHWM:");
    let fds_warm = fds_warm.unwrap_or(fds_end);
    eprintln!(
        "[soak] totals over {elapsed:.0} s ({rows} intervals): {} ops ({:.0}/s); stored {} keys \
         ({:.1} MiB/s), {} refused while being deleted; lookups {} ({} hits); loaded {} keys \
         ({:.1} MiB/s); {} deletes ({} keys removed); eviction {:?}",
        c.ops,
        c.ops as f64 / elapsed,
        c.stored_keys,
        c.stored_bytes as f64 / elapsed / (1024.0 * 1024.0),
        c.refused_deleting,
        c.lookups,
        c.lookup_hits,
        c.loaded_keys,
        c.loaded_bytes as f64 / elapsed / (1024.0 * 1024.0),
        c.deletes,
        c.deleted_keys,
        stats
    );
    eprintln!(
        "[soak] end: usage {} B in {} keys == bucket listing {} B in {} objects (settled in {} ms)",
        usage.used_bytes,
        usage.keys,
        listed.0,
        listed.1,
        settle.elapsed().as_millis()
    );
    eprintln!(
        "[soak] RSS start {rss_start:.1} MiB, end {rss_end:.1} MiB, peak (VmHWM) {rss_peak:.1} \
         MiB; fds start {fds_start}, after the first interval {fds_warm}, end {fds_end}"
    );

    assert_eq!(
        c.refused_deleting, 0,
        "stores refused while the key was being deleted"
    );
    assert!(
        c.store_errors.is_empty(),
        "{} stores failed, e.g. {:?}",
        c.store_errors.len(),
        &c.store_errors[..c.store_errors.len().min(5)]
    );
    assert_eq!(c.locked_but_missed, 0, "loads of locked keys missed");
    assert_eq!(c.corrupt, 0, "loaded bytes differ from the stored ones");
    assert!(
        c.loaded_keys > 0 && c.stored_keys > 0,
        "the soak did nothing"
    );
    assert!(
        stats.iter().map(|(_, s)| s.evicted_keys).sum::<u64>() > 0,
        "eviction never ran"
    );
    assert!(
        fds_end <= fds_warm + FD_SLACK,
        "file descriptors grew from {fds_warm} to {fds_end}"
    );

    match Rc::try_unwrap(tier) {
        Ok(t) => t.close().await,
        Err(_) => panic!("the tier is still shared"),
    }
    // `close` returns once every thread of the tier has exited: its sockets and files are
    // closed by then.
    let fds_closed = fd_count();
    eprintln!("[soak] fds after close: {fds_closed} (before start: {fds_start})");
    assert!(
        fds_closed <= fds_start + FD_SLACK,
        "file descriptors left open after close: {fds_closed}, against {fds_start} before start"
    );
}
