//! The fleet's lookup against today's probes: a lookup of 80 keys that another node stored.
//!
//! ```sh
//! cargo run --release --example fleet_lookup -- [BATCHES]
//! ```
//!
//! Starts a throwaway single-node Garage (the test kit's; `scripts/test-all.sh` installs it)
//! and a `redis-server` on 127.0.0.1, and three tiers on one bucket prefix: the writer (in the
//! fleet) stores each batch of 80 objects of 16 KiB; then a reader in the fleet and a reader
//! without it (started before the writes, so that its ledger does not know them) each look the
//! batch up once and unlock it. The fleet reader's lookup is one script on the index and no
//! request to the store; the other probes every key with a HEAD (concurrently, up to the
//! adapter's `s3_num_io_threads`). Prints the p50 and p99 of both, over BATCHES batches
//! (default 50). docs/fleet.md records the figures.

use std::time::{Duration, Instant};

use kvtier::{AdapterConfig, FleetConfig, ObjectKey, S3Config, Tier, TierConfig};
use kvtier_testkit::garage::Garage;
use kvtier_testkit::payload;
use kvtier_testkit::redis::RedisServer;

const BUCKET: &str = "kvtier-fleet-lookup";
const KEYS: u32 = 80;
const OBJ: usize = 16 * 1024;

fn key(i: u32) -> ObjectKey {
    ObjectKey::new("lookup-model", 0, i.to_be_bytes().to_vec()).unwrap()
}

async fn tier(garage: &Garage, prefix: &str, fleet: Option<(&str, &str)>) -> Tier {
    let mut s3 = S3Config::new(&garage.s3_endpoint, &garage.region)
        .bucket(BUCKET)
        .access_key_id(&garage.access_key_id)
        .secret_access_key(&garage.secret_access_key);
    s3.s3_key_prefix = Some(prefix.to_string());
    let mut config = TierConfig::default().adapter(AdapterConfig::s3(s3));
    if let Some((url, node)) = fleet {
        config = config.fleet(FleetConfig::new(url).node_id(node));
    }
    let tier = Tier::start(&config).await.unwrap();
    if fleet.is_some() {
        let joined = kvtier_testkit::wait_until(60, || async {
            let status = tier.status().await.unwrap();
            status.adapters[0].fleet.as_ref().is_some_and(|f| f.joined)
        })
        .await;
        assert!(joined, "never joined the index");
    }
    tier
}

/// The time of one lookup of `keys` (all must hit), then unlocks them.
async fn lookup(tier: &Tier, keys: &[ObjectKey]) -> Duration {
    let t = Instant::now();
    let hits = tier.lookup_and_lock(keys.to_vec()).await.unwrap();
    let took = t.elapsed();
    assert!(hits.all(), "{hits}");
    tier.unlock(keys.to_vec());
    took
}

fn p50_p99(d: &mut [Duration]) -> (f64, f64) {
    d.sort();
    let ms = |x: Duration| x.as_secs_f64() * 1e3;
    (ms(d[d.len() / 2]), ms(d[(d.len() * 99) / 100]))
}

#[actix::main]
async fn main() {
    let batches: u32 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("BATCHES is a number"))
        .unwrap_or(50);
    let garage = Garage::start();
    garage.create_bucket(BUCKET);
    let redis = RedisServer::start();
    let url = redis.url();
    let prefix = format!("lookup-{:08x}/", rand::random::<u32>());
    let alone = tier(&garage, &prefix, None).await;
    let writer = tier(&garage, &prefix, Some((&url, "writer"))).await;
    let reader = tier(&garage, &prefix, Some((&url, "reader"))).await;
    let (mut fleet, mut probes) = (Vec::new(), Vec::new());
    for b in 0..batches {
        let keys: Vec<ObjectKey> = (b * KEYS..(b + 1) * KEYS).map(key).collect();
        let objects = keys.iter().map(|_| payload(b, OBJ)).collect();
        assert!(writer.store(keys.clone(), objects).await.unwrap().success());
        // Alternate which reader goes first, so neither always meets a warmer store.
        if b % 2 == 0 {
            fleet.push(lookup(&reader, &keys).await);
            probes.push(lookup(&alone, &keys).await);
        } else {
            probes.push(lookup(&alone, &keys).await);
            fleet.push(lookup(&reader, &keys).await);
        }
    }
    let (f50, f99) = p50_p99(&mut fleet);
    let (h50, h99) = p50_p99(&mut probes);
    println!("lookup of {KEYS} keys another node stored, {batches} batches:");
    println!("  fleet index (one script, no store request): p50 {f50:.2} ms, p99 {f99:.2} ms");
    println!("  no fleet ({KEYS} HEADs):                     p50 {h50:.2} ms, p99 {h99:.2} ms");
    println!("  p50 ratio (HEADs / index): {:.1}", h50 / f50);
    for t in [alone, writer, reader] {
        t.close().await;
    }
}
