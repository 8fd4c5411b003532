//! Message-level tests of the fleet index against a real `redis-server` (Debian's package;
//! `scripts/test-all.sh` installs it), started by each test on 127.0.0.1. Several
//! [`FleetIndex`] actors on one bucket identity stand for several nodes.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::*;

mod index;
mod links;
mod model;
mod orders;
mod rounds;
mod shards;
mod writes;

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

/// A plain client's connection to the server, for what a test asks or does outside the nodes.
fn plain(redis: &RedisServer) -> redis::Connection {
    let client = redis::Client::open(redis.url()).unwrap();
    client.get_connection().unwrap()
}

/// How the server keeps index key `key` of the test bucket (`OBJECT ENCODING`).
fn encoding(redis: &RedisServer, key: &str) -> String {
    redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(format!(
            "kvtier:{{s3:127.0.0.1/bucket/prefix}}:{LAYOUT}:{key}"
        ))
        .query(&mut plain(redis))
        .unwrap()
}

/// A plain command on the server, from a plain client.
fn admin(redis: &RedisServer, args: &[&str]) {
    let _: redis::Value = redis::cmd(args[0])
        .arg(&args[1..])
        .query(&mut plain(redis))
        .unwrap();
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
        layout: Some(1),
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
