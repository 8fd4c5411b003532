//! Message-level tests of the fleet index against a real `redis-server` (Debian's package;
//! `scripts/test-all.sh` installs it), started by each test on 127.0.0.1. Several
//! [`FleetIndex`] actors on one bucket identity stand for several nodes.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::*;

mod model;
mod orders;

/// A `redis-server` on 127.0.0.1 with nothing persisted, ended on drop.
struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl RedisServer {
    fn start() -> Self {
        Self::start_on(free_port(), &[])
    }

    fn start_on(port: u16, extra: &[&str]) -> Self {
        let bin = std::env::var("KVTIER_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(extra)
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start `{bin}` ({e}): the fleet tests need a Redis server; install \
                     Debian's `redis-server` (scripts/test-all.sh does) or set KVTIER_REDIS_SERVER"
                )
            });
        let server = Self {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Stops a node's actor without unlocking or releasing anything, as a process that dies.
#[derive(Message)]
#[rtype(result = "()")]
struct Die;

impl Handler<Die> for FleetIndex {
    type Result = ();

    fn handle(&mut self, _: Die, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

fn config(url: &str, node: &str, ttl: Duration) -> IndexConfig {
    IndexConfig {
        url: Secret::new(url),
        node: node.into(),
        identity: "s3:127.0.0.1/bucket/prefix".into(),
        ttl,
        timeout: Duration::from_secs(5),
        metrics: crate::metrics::AdapterMetrics::off(),
        quotas: Default::default(),
        order: Some(FleetOrder::Lru),
    }
}

/// Polls `f` until it holds (a generous bound: a failure, not a timing assertion).
async fn until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn joined(node: &Addr<FleetIndex>, joins: u64) {
    until("the node joined", || async {
        let s = node.send(GetFleetStatus).await.unwrap();
        s.joined && s.joins >= joins
    })
    .await;
}

async fn node_with(url: &str, name: &str, ttl: Duration) -> Addr<FleetIndex> {
    let addr = FleetIndex::new(config(url, name, ttl)).start();
    joined(&addr, 1).await;
    addr
}

async fn node(url: &str, name: &str) -> Addr<FleetIndex> {
    node_with(url, name, DEFAULT_TTL).await
}

/// Whether the test nodes mark `name` as sampled by `FLRU`'s shadows: `s` and a number (a
/// node marks the keys whose digest is a multiple of 16).
fn sampled(name: &str) -> bool {
    name.strip_prefix('s')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn obj(name: &str, salt: &str, size: u64) -> FleetObject {
    FleetObject {
        name: name.into(),
        salt: salt.into(),
        size,
        sampled: sampled(name),
    }
}

/// `n` as names a node locks or touches, marked as [`sampled`] says.
fn touched(n: &[String]) -> Vec<FleetName> {
    n.iter()
        .map(|name| FleetName {
            name: name.clone(),
            sampled: sampled(name),
        })
        .collect()
}

fn names(n: &[&str]) -> Vec<String> {
    n.iter().map(|s| s.to_string()).collect()
}

/// `node` tells the index a probe found `name`.
async fn found(node: &Addr<FleetIndex>, name: &str, salt: &str, size: u64) {
    node.send(FleetStored::found(vec![obj(name, salt, size)]))
        .await
        .unwrap()
        .unwrap();
}

/// `node` locks `n` in the index.
async fn lock(node: &Addr<FleetIndex>, n: &[&str]) -> Vec<FleetLock> {
    node.send(FleetLockNames(touched(&names(n))))
        .await
        .unwrap()
        .unwrap()
}

/// `node` claims the deletion of `n`; the names granted.
async fn claim(node: &Addr<FleetIndex>, n: &[&str]) -> Vec<String> {
    node.send(FleetClaim(names(n))).await.unwrap().unwrap()
}

async fn usage(node: &Addr<FleetIndex>) -> FleetUsage {
    node.send(GetFleetUsage).await.unwrap().unwrap()
}

/// `node` releases its claims of `n`, deleted by a host's delete (not an eviction); the usage.
async fn deleted(node: &Addr<FleetIndex>, n: &[&str]) -> FleetUsage {
    node.send(FleetRelease {
        removed: names(n),
        kept: vec![],
        evicted: false,
    })
    .await
    .unwrap()
    .unwrap()
}

#[actix_rt::test]
async fn usage_is_one_total_for_every_node() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    a.send(FleetStored::found(vec![
        obj("x", "", 100),
        obj("y", "s", 200),
    ]))
    .await
    .unwrap()
    .unwrap();
    let u = b
        .send(FleetStored::found(vec![
            obj("y", "s", 200),
            obj("z", "", 50),
        ]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((u.bytes, u.objects), (350, 3), "y counts once");
    assert_eq!(u.by_salt.get(""), Some(&150));
    assert_eq!(u.by_salt.get("s"), Some(&200));
    // A store with another size moves usage by the difference.
    let u = a
        .send(FleetStored::found(vec![obj("x", "", 120)]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((u.bytes, u.objects), (370, 3));
    assert_eq!(usage(&a).await, usage(&b).await);
    // Each node's status counts the live nodes at its last heartbeat.
    until("a sees two nodes", || async {
        a.send(GetFleetStatus).await.unwrap().nodes == 2
    })
    .await;
}

#[actix_rt::test]
async fn a_key_locked_on_one_node_is_never_claimed_by_another() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    found(&a, "x", "", 100).await;
    let locked = lock(&a, &["x"]).await;
    assert_eq!(locked, vec![FleetLock::Known(100)]);
    assert!(claim(&b, &["x"]).await.is_empty());
    assert!(b
        .send(FleetCandidates {
            limit: 10,
            scan: 10
        })
        .await
        .unwrap()
        .unwrap()
        .is_empty());

    // Two nodes' locks are counted apart: a's unlock leaves b's.
    lock(&b, &["x"]).await;
    a.send(FleetUnlock(names(&["x"]))).await.unwrap().unwrap();
    assert!(claim(&a, &["x"]).await.is_empty());
    // An unlock of a name a node does not hold changes nothing.
    a.send(FleetUnlock(names(&["x"]))).await.unwrap().unwrap();
    assert!(claim(&a, &["x"]).await.is_empty());
    b.send(FleetUnlock(names(&["x"]))).await.unwrap().unwrap();

    // Claimed: no node locks it until it is released.
    assert_eq!(claim(&b, &["x"]).await, names(&["x"]));
    assert!(claim(&a, &["x"]).await.is_empty(), "one claim");
    let refused = lock(&a, &["x"]).await;
    assert_eq!(refused, vec![FleetLock::Deleting]);
    let u = deleted(&b, &["x"]).await;
    assert_eq!((u.bytes, u.objects), (0, 0));
    let after = lock(&a, &["x"]).await;
    assert_eq!(
        after,
        vec![FleetLock::Unknown],
        "forgotten: a lookup probes the store"
    );
}

#[actix_rt::test]
async fn lookups_of_keys_another_node_stored_come_from_the_index() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    let objects: Vec<_> = (0..80)
        .map(|i| obj(&format!("k{i}"), "", 1000 + i))
        .collect();
    a.send(FleetStored::found(objects)).await.unwrap().unwrap();
    let mut asked: Vec<String> = (0..80).map(|i| format!("k{i}")).collect();
    asked.push("never-stored".into());
    let found = b
        .send(FleetLockNames(touched(&asked)))
        .await
        .unwrap()
        .unwrap();
    let mut want: Vec<_> = (0..80).map(|i| FleetLock::Known(1000 + i)).collect();
    want.push(FleetLock::Unknown);
    assert_eq!(found, want);
}

#[actix_rt::test]
async fn eviction_candidates_follow_fleet_recency() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    for n in ["c", "b", "a"] {
        a.send(FleetStored::found(vec![obj(n, "", 10)]))
            .await
            .unwrap()
            .unwrap();
    }
    let order = |v: Vec<(String, u64)>| v.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    let c = b
        .send(FleetCandidates { limit: 3, scan: 10 })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(order(c), names(&["c", "b", "a"]), "oldest store first");
    // A hit on another node makes `c` the most recent for the whole fleet.
    b.send(FleetTouch(touched(&names(&["c"]))))
        .await
        .unwrap()
        .unwrap();
    let c = a
        .send(FleetCandidates { limit: 3, scan: 10 })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(order(c), names(&["b", "a", "c"]));
    // A locked name is skipped, and `limit` bounds the answer.
    lock(&b, &["b"]).await;
    let c = a
        .send(FleetCandidates { limit: 1, scan: 10 })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c, vec![("a".to_string(), 10)]);
}

#[actix_rt::test]
async fn one_node_evicts_at_a_time_and_a_dead_nodes_lease_and_locks_lapse() {
    let redis = RedisServer::start();
    let ttl = Duration::from_millis(300);
    let (a, b) = (
        node_with(&redis.url(), "a", ttl).await,
        node_with(&redis.url(), "b", ttl).await,
    );
    found(&a, "x", "", 100).await;
    lock(&a, &["x"]).await;
    assert!(a.send(FleetLease(Lease::Evict)).await.unwrap().unwrap());
    assert!(
        !b.send(FleetLease(Lease::Evict)).await.unwrap().unwrap(),
        "one holder"
    );
    assert!(
        a.send(FleetLease(Lease::Evict)).await.unwrap().unwrap(),
        "renewed by its holder"
    );
    assert!(claim(&b, &["x"]).await.is_empty());

    // `a` dies holding the lease and a lock: both lapse, and `b`'s heartbeat reaps them.
    a.send(Die).await.unwrap();
    until("b takes the lease", || async {
        b.send(FleetLease(Lease::Evict)).await.unwrap().unwrap()
    })
    .await;
    until("a's lock is released", || async {
        !claim(&b, &["x"]).await.is_empty()
    })
    .await;
    assert_eq!(b.send(GetFleetStatus).await.unwrap().nodes, 1);
}

#[actix_rt::test]
async fn a_node_that_restarts_with_its_id_drops_its_earlier_locks() {
    let redis = RedisServer::start();
    let a = node(&redis.url(), "a").await;
    found(&a, "x", "", 100).await;
    lock(&a, &["x"]).await;
    a.send(Die).await.unwrap();
    // Long before its liveness lapses, the same node id joins again.
    let a = node(&redis.url(), "a").await;
    assert_eq!(claim(&a, &["x"]).await, names(&["x"]));
}

fn writing(names: &[&str], bytes: u64) -> FleetWriting {
    FleetWriting {
        names: self::names(names),
        bytes,
        limit: None,
    }
}

fn written(objects: Vec<FleetObject>, ended: &[&str], bytes: u64) -> FleetStored {
    FleetStored {
        objects,
        written: true,
        ended_names: names(ended),
        ended_bytes: bytes,
    }
}

#[actix_rt::test]
async fn a_write_that_a_deletion_may_have_removed_is_not_added() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    found(&a, "x", "", 100).await;
    assert_eq!(claim(&a, &["x"]).await, names(&["x"]));
    // b writes x again while a deletes it: b's PUT may land before a's DELETE.
    let u = b.send(writing(&["x"], 300)).await.unwrap().unwrap().usage;
    assert_eq!((u.bytes, u.pending), (100, 300), "the write is pending");
    let u = deleted(&a, &["x"]).await;
    assert_eq!((u.bytes, u.objects), (0, 0));
    let u = b
        .send(written(vec![obj("x", "", 300)], &["x"], 300))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (u.bytes, u.objects, u.pending),
        (0, 0, 0),
        "not added: the store may not hold it"
    );
    let l = lock(&b, &["x"]).await;
    assert_eq!(l, vec![FleetLock::Unknown], "a lookup probes the store");
    b.send(FleetUnlock(names(&["x"]))).await.unwrap().unwrap();
    // The taint ends with the write: the next write of x is added, and a probe's find always is.
    b.send(writing(&["x"], 300)).await.unwrap().unwrap();
    let u = b
        .send(written(vec![obj("x", "", 300)], &["x"], 300))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((u.bytes, u.objects, u.pending), (300, 1, 0));
    // A vanished object is forgotten.
    let u = b.send(FleetVanished(names(&["x"]))).await.unwrap().unwrap();
    assert_eq!((u.bytes, u.objects), (0, 0));
}

/// With a limit, a write is announced only while the bucket's footprint stays within it: the
/// objects known (claimed ones too, which the bucket holds until deleted), every node's writes
/// in flight, and this one. A refused write records nothing.
#[actix_rt::test]
async fn a_write_past_the_limit_waits_for_the_deletes() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    found(&a, "x", "", 60).await;
    let within = |n: &[&str], bytes| FleetWriting {
        limit: Some(100),
        ..writing(n, bytes)
    };
    let r = a.send(within(&["y"], 30)).await.unwrap().unwrap();
    assert_eq!(
        (r.started, r.usage.pending),
        (true, 30),
        "60 + 30 fit in 100"
    );
    let r = b.send(within(&["z"], 20)).await.unwrap().unwrap();
    assert_eq!(
        (r.started, r.usage.pending),
        (false, 30),
        "60 + 30 + 20 do not"
    );
    assert_eq!(claim(&a, &["x"]).await, names(&["x"]));
    let r = b.send(within(&["z"], 20)).await.unwrap().unwrap();
    assert!(!r.started, "x is claimed but still in the bucket");
    deleted(&a, &["x"]).await;
    let r = b.send(within(&["z"], 20)).await.unwrap().unwrap();
    assert_eq!((r.started, r.usage.pending), (true, 50), "x is gone");
    // Recorded as being written: a deletion of z meanwhile taints it.
    found(&a, "z", "", 20).await;
    claim(&a, &["z"]).await;
    deleted(&a, &["z"]).await;
    let u = b
        .send(written(vec![obj("z", "", 20)], &["z"], 20))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((u.bytes, u.pending), (0, 30), "z was being written");
    let r = a.send(writing(&["w"], 500)).await.unwrap().unwrap();
    assert_eq!((r.started, r.usage.pending), (true, 530), "no limit");
}

#[actix_rt::test]
async fn a_dead_writers_pending_bytes_and_writes_lapse() {
    let redis = RedisServer::start();
    let ttl = Duration::from_millis(300);
    let (a, b) = (
        node_with(&redis.url(), "a", ttl).await,
        node_with(&redis.url(), "b", ttl).await,
    );
    a.send(writing(&["x"], 500)).await.unwrap().unwrap();
    a.send(Die).await.unwrap();
    until("a's pending bytes lapse", || async {
        usage(&b).await.pending == 0
    })
    .await;
    // x is no longer being written: a deletion of it taints nothing, and b's write of it counts.
    found(&b, "x", "", 10).await;
    claim(&b, &["x"]).await;
    deleted(&b, &["x"]).await;
    b.send(writing(&["x"], 10)).await.unwrap().unwrap();
    let u = b
        .send(written(vec![obj("x", "", 10)], &["x"], 10))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((u.bytes, u.objects, u.pending), (10, 1, 0));
}

/// A round of LRU 0.8/0.2 that keeps the bytes landing under the capacity itself (`ahead`
/// 1.0), so the arithmetic below is the rule's alone; see
/// `landing_bytes_are_kept_under_the_landing_mark` for the mark nodes use.
fn round(capacity: u64) -> FleetRound {
    FleetRound {
        capacity,
        watermark: 0.8,
        ratio: 0.2,
        per_salt: false,
        ahead: 1.0,
        catch_up: false,
        waiting: 0,
    }
}

/// `node` releases its claims of `removed`, deleted, and gives the eviction lease up.
async fn end_round(node: &Addr<FleetIndex>, removed: &[&str]) {
    node.send(FleetRelease {
        removed: names(removed),
        kept: vec![],
        evicted: true,
    })
    .await
    .unwrap()
    .unwrap();
    node.send(FleetLeaseRelease(Lease::Evict))
        .await
        .unwrap()
        .unwrap();
}

fn claimed(r: Round) -> Vec<String> {
    match r {
        Round::Claimed(v) => v.into_iter().map(|(n, _)| n).collect(),
        other => panic!("expected a round, got {other:?}"),
    }
}

#[actix_rt::test]
async fn a_round_starts_at_the_watermark_and_claims_the_least_recent_free_objects() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    for i in 0..7 {
        found(&a, &format!("k{i}"), "", 10).await;
    }
    // 70 bytes on a 100-byte bucket: under 0.8 x 100, and 20 bytes being written leave it
    // under the capacity.
    b.send(writing(&["v"], 20)).await.unwrap().unwrap();
    assert_eq!(a.send(round(100)).await.unwrap().unwrap(), Round::Under);
    // 10 more being written make 100 landing: a round of what brings it back under the
    // capacity (at least 1), though the known objects are under the watermark.
    b.send(writing(&["w"], 10)).await.unwrap().unwrap();
    lock(&b, &["k0"]).await;
    assert_eq!(
        claimed(a.send(round(100)).await.unwrap().unwrap()),
        names(&["k1"]),
        "the least recent unlocked object"
    );
    assert_eq!(
        b.send(round(100)).await.unwrap().unwrap(),
        Round::Under,
        "what is claimed no longer counts"
    );
    b.send(written(vec![obj("v", "", 20)], &["v"], 20))
        .await
        .unwrap()
        .unwrap();
    b.send(written(vec![obj("w", "", 10)], &["w"], 10))
        .await
        .unwrap()
        .unwrap();
    end_round(&a, &["k1"]).await;
    // 90 known bytes in 8 objects: LMCache's floor(8 x 0.2) = 1, least recent first, k0
    // still locked.
    let u = usage(&a).await;
    assert_eq!((u.bytes, u.objects, u.pending), (90, 8, 0));
    assert_eq!(
        claimed(b.send(round(100)).await.unwrap().unwrap()),
        names(&["k2"])
    );
    // 80 stored less claimed, still at the watermark: floor(7 x 0.2) = 1; with the bytes unit's
    // catch-up, down to 0.8 x 100 x 0.8 = 64 at the average size (11.25): 2.
    let catch_up = FleetRound {
        catch_up: true,
        ..round(100)
    };
    assert_eq!(
        claimed(b.send(catch_up).await.unwrap().unwrap()),
        names(&["k3", "k4"])
    );
    // b holds the lease until it gives it up: a finds the bucket full but another node busy.
    found(&a, "k10", "", 100).await;
    assert_eq!(a.send(round(100)).await.unwrap().unwrap(), Round::Busy);
    b.send(FleetLeaseRelease(Lease::Evict))
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        a.send(round(100)).await.unwrap().unwrap(),
        Round::Claimed(_)
    ));
}

#[actix_rt::test]
async fn landing_bytes_are_kept_under_the_landing_mark() {
    assert_eq!(
        landing_mark(0.8, false),
        0.9,
        "halfway between watermark and capacity"
    );
    assert_eq!(landing_mark(0.8, true), 1.0, "writes wait for room");
    let redis = RedisServer::start();
    let a = node(&redis.url(), "a").await;
    for i in 0..5 {
        found(&a, &format!("k{i}"), "", 10).await;
    }
    // 50 bytes stored and 40 being written on a 100-byte bucket: under the watermark, and 90
    // landing is under the capacity but not under 0.9 of it.
    a.send(writing(&["w"], 40)).await.unwrap().unwrap();
    let under = FleetRound {
        ahead: 0.95,
        ..round(100)
    };
    assert_eq!(a.send(under).await.unwrap().unwrap(), Round::Under);
    let ahead = FleetRound {
        ahead: landing_mark(0.8, false),
        ..round(100)
    };
    assert_eq!(
        claimed(a.send(ahead).await.unwrap().unwrap()),
        names(&["k0"]),
        "a round ahead of the capacity, of at least one object"
    );
    end_round(&a, &["k0"]).await;
    // 40 stored and 40 being written: under 0.9. With 25 bytes this node waits to write (the
    // bucket was full for them), 105 landing: a round that brings it back under 90.
    let waiting = FleetRound {
        waiting: 25,
        ..ahead
    };
    assert_eq!(a.send(ahead).await.unwrap().unwrap(), Round::Under);
    assert_eq!(
        claimed(a.send(waiting).await.unwrap().unwrap()),
        names(&["k1", "k2"]),
        "room for the waiting bytes"
    );
}

#[actix_rt::test]
async fn a_batchs_first_name_is_its_most_recent() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    // Stored in one batch, then locked in one batch: as on one node, a request's first chunk
    // is touched last, so its suffix goes first and its prefix stays.
    let batch = ["p0", "p1", "p2"].map(|n| obj(n, "", 10)).to_vec();
    a.send(written(batch, &[], 0)).await.unwrap().unwrap();
    assert_eq!(
        claimed(a.send(round(30)).await.unwrap().unwrap()),
        names(&["p2"]),
        "stored"
    );
    end_round(&a, &["p2"]).await;
    found(&a, "q", "", 10).await;
    lock(&b, &["p0", "p1"]).await;
    b.send(FleetUnlock(names(&["p0", "p1"])))
        .await
        .unwrap()
        .unwrap();
    // q, p1, p0 from the least recent; 30 bytes of 30: floor(3 x 0.2) = 0, at least 1.
    assert_eq!(
        claimed(a.send(round(30)).await.unwrap().unwrap()),
        names(&["q"])
    );
    end_round(&a, &["q"]).await;
    assert_eq!(
        claimed(a.send(round(25)).await.unwrap().unwrap()),
        names(&["p1"]),
        "locked"
    );
}

fn salted_round() -> FleetRound {
    FleetRound {
        per_salt: true,
        ..round(0)
    }
}

#[actix_rt::test]
async fn isolated_rounds_follow_the_fleets_quota_of_each_salt() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    for i in 0..3 {
        found(&a, &format!("a{i}"), "sa", 10).await;
        found(&b, &format!("b{i}"), "sb", 10).await;
    }
    // Quotas set on one node are the fleet's.
    let set = |salt: &str, limit| FleetSetQuota {
        salt: salt.into(),
        limit,
    };
    assert_eq!(a.send(set("sa", Some(100))).await.unwrap().unwrap(), None);
    assert_eq!(a.send(set("sb", Some(20))).await.unwrap().unwrap(), None);
    assert_eq!(
        b.send(set("sb", Some(20))).await.unwrap().unwrap(),
        Some(20),
        "the previous limit"
    );
    let u = usage(&b).await;
    assert_eq!(u.quotas.get("sa"), Some(&100));
    // sa: 30 of 0.8 x 100: not due. sb: 30 of 0.8 x 20 = 16: due, its victims only, least
    // recent first, the locked one skipped: LMCache's floor(3 x 0.2) = 0, at least 1; and
    // again while sb (20 less what is claimed) is still at its mark.
    lock(&a, &["b0"]).await;
    assert_eq!(
        claimed(b.send(salted_round()).await.unwrap().unwrap()),
        names(&["b1"])
    );
    assert_eq!(
        claimed(b.send(salted_round()).await.unwrap().unwrap()),
        names(&["b2"])
    );
    end_round(&b, &["b1", "b2"]).await;
    assert_eq!(b.send(salted_round()).await.unwrap().unwrap(), Round::Under);
    // A salt without a quota has a limit of 0 (LMCache's allowlist rule): all of it goes.
    a.send(set("sa", None)).await.unwrap().unwrap();
    assert_eq!(
        claimed(a.send(salted_round()).await.unwrap().unwrap()),
        names(&["a0", "a1", "a2"])
    );
    // A node's configured quotas fill in only salts the fleet has none for.
    let mut c = config(&redis.url(), "c", DEFAULT_TTL);
    c.quotas = crate::config::Quotas(
        [("sa".to_string(), 5), ("sc".to_string(), 7)]
            .into_iter()
            .collect(),
    );
    let c = FleetIndex::new(c).start();
    joined(&c, 1).await;
    b.send(set("sb", Some(20))).await.unwrap().unwrap();
    let q = usage(&c).await.quotas;
    assert_eq!(
        (q.get("sa"), q.get("sb"), q.get("sc")),
        (Some(&5), Some(&20), Some(&7))
    );
}

/// Cuts every client connection of the server (as a network blip would), from a plain client.
fn cut_connections(redis: &RedisServer) {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut conn)
        .unwrap();
}

#[actix_rt::test]
async fn a_node_cut_off_for_less_than_its_ttl_keeps_its_locks() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    found(&a, "x", "", 100).await;
    lock(&a, &["x"]).await;
    cut_connections(&redis);
    until("a notices the cut", || async {
        a.send(GetFleetUsage).await.unwrap().is_err()
    })
    .await;
    joined(&a, 2).await;
    until("b is connected again", || async {
        b.send(GetFleetUsage).await.unwrap().is_ok()
    })
    .await;
    assert!(
        claim(&b, &["x"]).await.is_empty(),
        "a's lock survived its reconnection"
    );
}

/// A TCP forwarder to the server that a test can cut: while cut, it closes every connection
/// through it and new ones at once (a node on the far side of a partition). The only state
/// shared with its threads is the `cut` flag: each pump reads with a short timeout and
/// checks it, so no list of connections is kept.
struct Proxy {
    port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    fn start(target: u16) -> Self {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = Self {
            port,
            cut: Default::default(),
        };
        let cut = proxy.cut.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if cut.load(Ordering::SeqCst) {
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client.try_clone().unwrap()),
                ] {
                    let cut = cut.clone();
                    from.set_read_timeout(Some(Duration::from_millis(20)))
                        .unwrap();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        while !cut.load(Ordering::SeqCst) {
                            match from.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) if to.write_all(&buf[..n]).is_ok() => {}
                                Ok(_) => break,
                                Err(e)
                                    if e.kind() == std::io::ErrorKind::WouldBlock
                                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                                Err(_) => break,
                            }
                        }
                        let _ = from.shutdown(std::net::Shutdown::Both);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        proxy
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn set_cut(&self, cut: bool) {
        self.cut.store(cut, std::sync::atomic::Ordering::SeqCst);
    }
}

#[actix_rt::test]
async fn a_node_cut_off_longer_than_its_ttl_loses_its_locks_and_rejoins_by_itself() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port);
    let ttl = Duration::from_millis(600);
    let a = node_with(&proxy.url(), "a", ttl).await;
    let b = node_with(&redis.url(), "b", ttl).await;
    found(&a, "x", "", 100).await;
    lock(&a, &["x"]).await;
    assert!(claim(&b, &["x"]).await.is_empty(), "a holds x");
    proxy.set_cut(true);
    until("a is alone", || async {
        !a.send(GetFleetStatus).await.unwrap().joined
    })
    .await;
    // b's heartbeats reap a once its liveness lapses: the lock goes with it, and b may delete
    // x (the bound docs/fleet.md states for a cut longer than the TTL).
    until("b reaps a and claims x", || async {
        claim(&b, &["x"]).await == names(&["x"])
    })
    .await;
    deleted(&b, &["x"]).await;
    proxy.set_cut(false);
    joined(&a, 2).await;
    // Back without a restart: the index no longer knows x, so a's next lookup of it probes the
    // store (and misses there), never loads it on the index's word.
    assert_eq!(lock(&a, &["x"]).await, vec![FleetLock::Unknown]);
    assert_eq!(usage(&a).await.objects, 0);
}

#[actix_rt::test]
async fn an_unreachable_index_is_reported_and_the_node_rejoins_without_a_restart() {
    let port = free_port();
    let url = format!("redis://:hunter2-secret@127.0.0.1:{port}/0");
    let a = FleetIndex::new(config(&url, "a", Duration::from_millis(300))).start();
    until("a reports why it is alone", || async {
        a.send(GetFleetStatus)
            .await
            .unwrap()
            .reason
            .is_some_and(|r| r != "not connected yet")
    })
    .await;
    let err = a
        .send(FleetStored::found(vec![obj("x", "", 1)]))
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, FleetError::Unreachable(_)), "{err:?}");
    let status = a.send(GetFleetStatus).await.unwrap();
    assert!(!status.joined);
    for text in [format!("{err}"), format!("{status:?}")] {
        assert!(!text.contains("hunter2"), "the password leaked: {text}");
    }

    // The server comes up (with a password): the node joins on its own.
    let auth = ["--requirepass", "hunter2-secret"];
    let redis = RedisServer::start_on(port, &auth);
    joined(&a, 1).await;
    found(&a, "x", "", 1).await;

    // It goes away: the next request fails at once, and the node is alone.
    drop(redis);
    until("a notices the index is gone", || async {
        a.send(GetFleetUsage).await.unwrap().is_err()
    })
    .await;
    assert!(!a.send(GetFleetStatus).await.unwrap().joined);
    // And back (empty, as a restarted server without persistence): the node joins again.
    let _redis = RedisServer::start_on(port, &auth);
    joined(&a, 2).await;
    assert_eq!(
        usage(&a).await,
        FleetUsage::default(),
        "a restarted index starts empty"
    );
}

#[actix_rt::test]
async fn a_listing_adds_what_the_index_lacks_and_forgets_what_it_did_not_see() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    a.send(FleetStored::found(vec![
        obj("x", "", 100),
        obj("y", "", 200),
    ]))
    .await
    .unwrap()
    .unwrap();
    let start = a.send(FleetSyncStart).await.unwrap().unwrap();
    // Stored after the listing began: never swept by it.
    found(&b, "z", "", 50).await;
    // The listing sees only `w`, an object another writer put in the bucket.
    let added = a
        .send(FleetSyncPage(vec![obj("w", "s", 10)]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(added, 1);
    // Locked: kept, though unseen.
    lock(&b, &["y"]).await;
    let u = a.send(FleetSyncEnd { start }).await.unwrap().unwrap();
    assert_eq!(
        (u.bytes, u.objects),
        (260, 3),
        "x forgotten; y, z kept; w added"
    );
    assert_eq!(u.by_salt.get("s"), Some(&10));
    let order = a
        .send(FleetCandidates { limit: 5, scan: 10 })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        order.first().map(|(n, _)| n.as_str()),
        Some("w"),
        "added as least recent"
    );
}
