//! Fleet chaos with nodes as processes, on the 3-node Garage cluster (replication 3) and a real
//! `redis-server` (Debian's package; `scripts/test-all.sh` installs it).
//!
//! This process is the *observer* node; two more nodes are processes of this test binary
//! running [`fleet_chaos_node_process`] (which does nothing unless started so). All three
//! share one bucket prefix, its capacity and one index. Each node process locks its own set
//! of objects (stored by the observer), then serves a stream of store → lookup_and_lock →
//! load (bytes compared) → unlock until told to stop. In phases:
//! - **a. locks under pressure**: the observer overfills the bucket; eviction rounds run (on
//!   any node) and no locked object leaves the bucket;
//! - **b. kill -9** of node 1, holding its locks: its objects become evictable after its
//!   liveness lapses (the bound of docs/fleet.md: TTL + one heartbeat period) and are
//!   evicted; node 2's stay;
//! - **c. one node cut off**: node 2's connection to the index is killed (`CLIENT KILL ID`,
//!   found by its name); it rejoins by itself (and says when), the observer is not
//!   disturbed, and node 2's locks survive: the observer's delete of them removes nothing;
//! - **d. the index dies and comes back empty**: the observer serves alone (no wrong byte)
//!   and deletes nothing; after the restart it rejoins, the listing rebuilds the index, and
//!   fleet usage equals the bucket's listing (polled, with a generous bound).
//!
//! Node 2 then stops: it reports no wrong byte, and its locked objects load, byte for byte.
//! The waits poll with generous bounds (hang detectors); the measured times are printed
//! (`--nocapture`) and recorded in docs/fleet.md.

use kvtier_testkit as support;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kvtier::{
    AdapterConfig, EvictionConfig, FleetConfig, NameFormat, ObjectKey, S3Config, Tier, TierConfig,
};
use support::garage::GarageCluster;
use support::payload;
use support::redis::RedisServer;

const BUCKET: &str = "kvtier-fleet-chaos";
const OBJ: usize = 16 * 1024;
/// The bucket's capacity: 64 objects.
const CAPACITY: u64 = 64 * OBJ as u64;
const GIB: f64 = (1u64 << 30) as f64;
/// Objects each node process locks.
const LOCKED: u32 = 6;
/// Env var that makes [`fleet_chaos_node_process`] a node: its settings, as JSON.
const NODE_ENV: &str = "KVTIER_FLEET_CHAOS_NODE";
/// A generous bound on every wait (a hang detector, not a performance target).
const HANG: Duration = Duration::from_secs(120);

fn key(i: u32) -> ObjectKey {
    ObjectKey::new("chaos-model", 0, i.to_be_bytes().to_vec()).unwrap()
}

fn chunk(i: u32) -> bytes::Bytes {
    payload(i, OBJ)
}

/// Where a node's objects are, and how it joins the fleet.
#[derive(serde::Serialize, serde::Deserialize, Clone)]
struct NodeSpec {
    endpoint: String,
    region: String,
    access_key_id: String,
    secret_access_key: String,
    prefix: String,
    index: String,
    node: String,
    /// The objects it locks (stored by the observer) and the first key of its own stream.
    locks: Vec<u32>,
    stream_from: u32,
}

fn tier_config(spec: &NodeSpec, listing: Duration) -> TierConfig {
    let mut s3 = S3Config::new(&spec.endpoint, &spec.region)
        .bucket(BUCKET)
        .access_key_id(&spec.access_key_id)
        .secret_access_key(&spec.secret_access_key);
    s3.s3_key_prefix = Some(spec.prefix.clone());
    TierConfig::default()
        .adapter(
            AdapterConfig::s3(s3)
                .capacity_gb(CAPACITY as f64 / GIB)
                .eviction(EvictionConfig::lru()),
        )
        .eviction_interval(Duration::from_millis(50))
        .fleet(
            FleetConfig::new(&spec.index)
                .node_id(&spec.node)
                .listing_interval(listing),
        )
}

async fn joined(tier: &Tier) -> bool {
    let s = tier.status().await.unwrap();
    s.adapters[0].fleet.as_ref().is_some_and(|f| f.joined)
}

/// Polls `f` (the test kit's `wait_until`, [`HANG`] at most), failing naming `what`; returns
/// how long it took.
async fn until<F, Fut>(what: &str, f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t = Instant::now();
    assert!(
        support::wait_until(HANG.as_secs(), f).await,
        "timed out waiting until {what}"
    );
    t.elapsed()
}

/// Store → lookup_and_lock → load (bytes compared) → unlock of key `i`: `Ok(true)` on a hit,
/// `Ok(false)` on a miss (another node may have evicted it), `Err` on a wrong byte or a
/// failed store.
async fn round(tier: &Tier, i: u32) -> Result<bool, String> {
    let r = tier.store(vec![key(i)], vec![chunk(i)]).await.unwrap();
    if !r.success() {
        return Err(format!("store of {i} failed: {r:?}"));
    }
    if !tier.lookup_and_lock(vec![key(i)]).await.unwrap().all() {
        return Ok(false);
    }
    let loaded = tier.load(vec![key(i)], vec![BytesMut::zeroed(OBJ)]).await;
    tier.unlock(vec![key(i)]);
    if !loaded.hits.all() {
        return Ok(false);
    }
    if loaded.buffers[0][..] != chunk(i)[..] {
        return Err(format!("wrong bytes loaded for {i}"));
    }
    Ok(true)
}

/// The entry point of a node process (see the module docs). Run by the test without
/// [`NODE_ENV`], it has nothing to do.
#[actix_rt::test]
async fn fleet_chaos_node_process() {
    let Ok(json) = std::env::var(NODE_ENV) else {
        return;
    };
    let spec: NodeSpec = serde_json::from_str(&json).unwrap();
    let tier = Tier::start(&tier_config(&spec, Duration::from_secs(300)))
        .await
        .unwrap();
    until("joined", || joined(&tier)).await;
    let locks: Vec<ObjectKey> = spec.locks.iter().map(|&i| key(i)).collect();
    let hits = tier.lookup_and_lock(locks.clone()).await.unwrap();
    assert!(hits.all(), "the objects to lock are stored: {hits}");
    println!("CHAOS LOCKED");
    // Stop when the observer closes our stdin.
    let (tx, stop) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut line = String::new();
        while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
            line.clear();
        }
        let _ = tx.send(());
    });
    let (mut hits, mut misses, mut i) = (0u64, 0u64, spec.stream_from);
    let mut joins = 1;
    while stop.try_recv().is_err() {
        // Tell the observer each time this node joins the index again.
        let status = tier.status().await.unwrap();
        let now = status.adapters[0].fleet.as_ref().map_or(0, |f| f.joins);
        if now > joins {
            joins = now;
            println!("CHAOS JOINED {joins}");
        }
        match round(&tier, i).await {
            Ok(true) => hits += 1,
            Ok(false) => misses += 1,
            Err(e) => {
                println!("CHAOS WRONG {e}");
                std::process::exit(3);
            }
        }
        i += 1;
    }
    let loaded = tier
        .load(locks.clone(), vec![BytesMut::zeroed(OBJ); spec.locks.len()])
        .await;
    let intact = loaded.hits.all()
        && spec
            .locks
            .iter()
            .zip(&loaded.buffers)
            .all(|(&i, b)| b[..] == chunk(i)[..]);
    tier.unlock(locks);
    println!("CHAOS DONE hits={hits} misses={misses} locked_intact={intact}");
    tier.close().await;
}

/// A node process and its stdout lines.
struct NodeProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl NodeProcess {
    fn start(spec: &NodeSpec) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "fleet_chaos_node_process", "--nocapture"])
            .env(NODE_ENV, serde_json::to_string(spec).unwrap())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("CHAOS ") {
                    let _ = tx.send(rest.to_string());
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
        }
    }

    /// The next line starting with `what` (failing on a wrong byte or a hang).
    fn expect(&self, what: &str) -> String {
        let deadline = Instant::now() + HANG;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(what) => return line,
                Ok(line) => assert!(!line.starts_with("WRONG"), "a node loaded {line}"),
                Err(RecvTimeoutError::Timeout) => panic!("no `{what}` from a node process"),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("a node process ended before `{what}`")
                }
            }
        }
    }

    /// Asks it to stop (closes its stdin) and returns its last report.
    fn stop(mut self) -> String {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.flush();
        }
        let line = self.expect("DONE");
        assert!(self.child.wait().unwrap().success());
        line
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The object names under `prefix`, as a plain S3 client lists them, and their bytes.
async fn listing(cluster: &GarageCluster, prefix: &str) -> (HashSet<String>, u64) {
    let client = support::garage::plain_client(
        &cluster.node(0).s3_endpoint,
        &cluster.region,
        &cluster.access_key_id,
        &cluster.secret_access_key,
    );
    let (mut names, mut bytes) = (HashSet::new(), 0);
    let mut token = None;
    loop {
        let out = client
            .list_objects_v2()
            .bucket(BUCKET)
            .prefix(prefix)
            .set_continuation_token(token)
            .send()
            .await
            .unwrap();
        for o in out.contents() {
            let name = o.key().unwrap_or_default();
            names.insert(name.strip_prefix(prefix).unwrap_or(name).to_string());
            bytes += o.size().unwrap_or(0) as u64;
        }
        match out.next_continuation_token() {
            Some(t) if out.is_truncated().unwrap_or(false) => token = Some(t.to_owned()),
            _ => return (names, bytes),
        }
    }
}

fn name(i: u32) -> String {
    key(i).object_name(NameFormat::Seed)
}

/// How many of `keys` are in the bucket.
async fn present(cluster: &GarageCluster, prefix: &str, keys: &[u32]) -> usize {
    let (names, _) = listing(cluster, prefix).await;
    keys.iter().filter(|&&i| names.contains(&name(i))).count()
}

/// Whether the observer has delete requests in flight (its `kvtier_inflight_requests` gauge).
fn deletes_in_flight(tier: &Tier) -> bool {
    tier.metrics_text().unwrap().lines().any(|l| {
        l.starts_with("kvtier_inflight_requests{")
            && l.contains("op=\"delete\"")
            && !l.ends_with(" 0")
    })
}

async fn fleet_bytes(tier: &Tier) -> Option<u64> {
    let u = tier.usage().await.unwrap();
    u.adapters[0]
        .node_used_bytes
        .map(|_| u.adapters[0].used_bytes)
}

/// Stores `n` new objects from `*next` on (each checked with a round).
async fn fill(tier: &Tier, next: &mut u32, n: u32) {
    for _ in 0..n {
        round(tier, *next).await.unwrap();
        *next += 1;
    }
}

#[actix_rt::test]
async fn fleet_nodes_as_processes_survive_kills_cuts_and_a_lost_index() {
    let cluster = GarageCluster::start(3);
    cluster.create_bucket(BUCKET);
    let mut redis = RedisServer::start();
    let port = redis.port();
    let prefix = format!("chaos-{:08x}/", rand::random::<u32>());
    let spec = |node: &str, locks: std::ops::Range<u32>, stream_from: u32| NodeSpec {
        endpoint: cluster.node(0).s3_endpoint.clone(),
        region: cluster.region.clone(),
        access_key_id: cluster.access_key_id.clone(),
        secret_access_key: cluster.secret_access_key.clone(),
        prefix: prefix.clone(),
        index: redis.url(),
        node: node.into(),
        locks: locks.collect(),
        stream_from,
    };
    let observer_spec = spec("observer", 0..0, 0);
    let (n1, n2) = (
        spec("node-1", 1000..1000 + LOCKED, 100_000),
        spec("node-2", 2000..2000 + LOCKED, 200_000),
    );
    let tier = Tier::start(&tier_config(&observer_spec, Duration::from_secs(2)))
        .await
        .unwrap();
    until("the observer joined", || joined(&tier)).await;
    for i in n1.locks.iter().chain(&n2.locks) {
        round(&tier, *i).await.unwrap();
    }
    let node1 = NodeProcess::start(&n1);
    let node2 = NodeProcess::start(&n2);
    node1.expect("LOCKED");
    node2.expect("LOCKED");

    // a. Three times the capacity through the bucket: locked objects stay.
    let mut next = 10_000;
    fill(&tier, &mut next, 3 * 64).await;
    assert_eq!(present(&cluster, &prefix, &n1.locks).await, LOCKED as usize);
    assert_eq!(present(&cluster, &prefix, &n2.locks).await, LOCKED as usize);
    let (_, bytes) = listing(&cluster, &prefix).await;
    eprintln!(
        "[chaos] a: after {} stores the bucket holds {:.2}x its capacity; every locked object is there",
        3 * 64,
        bytes as f64 / CAPACITY as f64
    );

    // b. kill -9 node 1: its locks lapse, and its objects are evicted; node 2's stay.
    drop(node1);
    let killed = Instant::now();
    let mut gone = Duration::ZERO;
    while present(&cluster, &prefix, &n1.locks).await > 0 {
        assert!(
            killed.elapsed() < HANG,
            "node 1's objects were never evicted"
        );
        fill(&tier, &mut next, 8).await;
        gone = killed.elapsed();
    }
    assert_eq!(present(&cluster, &prefix, &n2.locks).await, LOCKED as usize);
    eprintln!(
        "[chaos] b: node 1 killed; its locked objects evicted {:.1} s later",
        gone.as_secs_f64()
    );

    // c. Every connection to the index cut: the nodes rejoin, node 2 keeps its locks.
    assert_eq!(
        redis.cut_client("kvtier-node-2"),
        1,
        "node 2's one connection"
    );
    let cut = Instant::now();
    node2.expect("JOINED 2");
    let back = cut.elapsed();
    assert!(joined(&tier).await, "the observer was not cut off");
    fill(&tier, &mut next, 8).await;
    let deleted = tier
        .delete(n2.locks.iter().map(|&i| key(i)).collect())
        .await
        .unwrap();
    assert_eq!(
        deleted.all_keys().count(),
        0,
        "node 2's locks survived the cut"
    );
    assert_eq!(present(&cluster, &prefix, &n2.locks).await, LOCKED as usize);
    eprintln!(
        "[chaos] c: node 2 cut off; joined again {:.1} s later; its locks held",
        back.as_secs_f64()
    );

    // d. The index dies: the observer serves alone and deletes nothing.
    let report = node2.stop();
    assert!(report.contains("locked_intact=true"), "node 2: {report}");
    eprintln!("[chaos] node 2: {report}");
    redis.stop();
    until("the observer is alone", || async { !joined(&tier).await }).await;
    // A round claimed before the index went down may still be deleting: that deletion was
    // granted; what counts is that none starts while alone.
    until("the deletes claimed before the outage ended", || async {
        !deletes_in_flight(&tier)
    })
    .await;
    let (before, _) = listing(&cluster, &prefix).await;
    fill(&tier, &mut next, 3 * 64).await;
    let (after, bytes) = listing(&cluster, &prefix).await;
    assert!(
        before.is_subset(&after),
        "an object was deleted while alone"
    );
    eprintln!(
        "[chaos] d: alone, {} stores and no deletion: the bucket holds {:.2}x its capacity",
        3 * 64,
        bytes as f64 / CAPACITY as f64
    );
    // Back, empty: the observer rejoins, rebuilds the index from the listing, and evicts.
    redis = RedisServer::start_on(port);
    let restarted = Instant::now();
    until("the observer joined the new index", || joined(&tier)).await;
    until(
        "fleet usage equals the listing, under the capacity",
        || async {
            let (_, listed) = listing(&cluster, &prefix).await;
            fleet_bytes(&tier).await == Some(listed) && listed <= CAPACITY
        },
    )
    .await;
    let settled = restarted.elapsed();
    eprintln!(
        "[chaos] d: index restarted empty; usage equal to the bucket's listing, under the capacity, {:.1} s later",
        settled.as_secs_f64()
    );
    tier.close().await;
    drop(redis);
}
