//! A bucket's index split over several hash tags ([`FleetShards`]): on a real 3-master
//! Redis Cluster started on 127.0.0.1, and on one server for the count's check and the
//! capacity's slices.

use super::super::placement::{shard_identity, shard_of};
use super::*;

/// Three `redis-server`s with `--cluster-enabled yes`, the 16,384 slots split over them,
/// met into one cluster (what `redis-cli --cluster create` does, by plain commands).
struct Cluster {
    masters: Vec<RedisServer>,
}

impl Cluster {
    async fn start() -> Self {
        let masters: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start_on(free_port(), &["--cluster-enabled", "yes"]))
            .collect();
        for (i, m) in masters.iter().enumerate() {
            let (from, to) = (i * 16384 / 3, (i + 1) * 16384 / 3 - 1);
            admin(
                m,
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &from.to_string(),
                    &to.to_string(),
                ],
            );
        }
        for m in &masters[1..] {
            admin(
                &masters[0],
                &["CLUSTER", "MEET", "127.0.0.1", &m.port.to_string()],
            );
        }
        let cluster = Self { masters };
        until("the cluster is up", || async {
            cluster.masters.iter().all(|m| {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut plain(m))
                    .unwrap();
                info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
            })
        })
        .await;
        cluster
    }

    /// The master (0, 1 or 2) that serves `key`'s slot.
    fn master_of(&self, key: &str) -> usize {
        let slot: u64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut plain(&self.masters[0]))
            .unwrap();
        (0..3)
            .find(|i| (slot as usize) < (i + 1) * 16384 / 3)
            .unwrap()
    }
}

fn router(url: &str, node: &str, identity: &str, shards: u32) -> Addr<FleetShards> {
    let mut c = config(url, node, DEFAULT_TTL);
    c.identity = identity.into();
    FleetShards::start(c, shards)
}

async fn joined_all(node: &Addr<FleetShards>) {
    until("every tag joined", || async {
        node.send(GetFleetStatus).await.unwrap().joined
    })
    .await;
}

/// `count` names of the form `kN` that hash to `tag` of `shards`.
fn names_on(tag: usize, shards: usize, count: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("k{i}"))
        .filter(|n| shard_of(n, shards) == tag)
        .take(count)
        .collect()
}

fn objects(names: &[String], size: u64) -> Vec<FleetObject> {
    names.iter().map(|n| obj(n, "", size)).collect()
}

#[actix_rt::test]
async fn one_bucket_over_three_tags_spreads_over_a_cluster_and_keeps_every_lock() {
    let cluster = Cluster::start().await;
    // Three tags of any bucket land on the three masters (one per third of the slots).
    let identity = "s3:cluster/bucket";
    let mut on: Vec<usize> = (0..3)
        .map(|t| {
            cluster.master_of(&format!(
                "kvtier:{{{}}}:usage",
                shard_identity(identity, t, 3)
            ))
        })
        .collect();
    on.sort_unstable();
    assert_eq!(on, [0, 1, 2]);
    // The nodes are given one master's URL; each tag reaches its own master by the redirect.
    let url = cluster.masters[0].url();
    let a = router(&url, "a", identity, 3);
    let b = router(&url, "b", identity, 3);
    joined_all(&a).await;
    joined_all(&b).await;

    let all: Vec<String> = (0..30).map(|i| format!("k{i}")).collect();
    let stored = a
        .send(FleetStored::found(objects(&all, 100)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((stored.bytes, stored.objects), (3000, 30));
    let seen = b.send(GetFleetUsage).await.unwrap().unwrap();
    assert_eq!((seen.bytes, seen.objects), (3000, 30), "b reads every tag");
    for (i, m) in cluster.masters.iter().enumerate() {
        let keys: u64 = redis::cmd("DBSIZE").query(&mut plain(m)).unwrap();
        assert!(keys > 0, "master {i} holds none of the bucket's index");
    }

    // b's locks hold against a's claims on every tag; in the lookup's order.
    let locks = b
        .send(FleetLockNames(touched(&all)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(locks, vec![FleetLock::Known(100); 30]);
    let claimed = a.send(FleetClaim(all.clone())).await.unwrap().unwrap();
    assert!(
        claimed.is_empty(),
        "claimed names b holds locked: {claimed:?}"
    );
    b.send(FleetUnlock(all.clone())).await.unwrap().unwrap();
    let mut claimed = a
        .send(FleetClaim(all[..10].to_vec()))
        .await
        .unwrap()
        .unwrap();
    claimed.sort();
    let mut want = all[..10].to_vec();
    want.sort();
    assert_eq!(claimed, want);
    let after = a
        .send(FleetRelease {
            removed: all[..10].to_vec(),
            kept: vec![],
            evicted: false,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!((after.bytes, after.objects), (2000, 20));
}

#[actix_rt::test]
async fn a_node_that_gives_another_count_of_tags_is_refused_and_stays_alone() {
    let redis = RedisServer::start();
    let a = router(&redis.url(), "a", "fs:/shared", 3);
    joined_all(&a).await;
    for (node, shards) in [("c", 1), ("d", 2)] {
        let other = router(&redis.url(), node, "fs:/shared", shards);
        until("the other node was refused", || async {
            let s = other.send(GetFleetStatus).await.unwrap();
            !s.joined && s.reason.is_some_and(|r| r.contains("fleet.shards"))
        })
        .await;
        let err = other.send(FleetClaim(names(&["k1"]))).await.unwrap();
        assert!(
            matches!(err, Err(FleetError::Unreachable(_))),
            "{node}: {err:?}"
        );
    }
    assert!(a.send(GetFleetStatus).await.unwrap().joined);
}

#[actix_rt::test]
async fn each_tag_evicts_and_takes_writes_against_its_slice_of_the_capacity() {
    let redis = RedisServer::start();
    let a = router(&redis.url(), "a", "fs:/slices", 3);
    joined_all(&a).await;

    // A write whose share on one tag fits that tag's slice and on another does not is
    // refused whole, and the tag that took it forgets it.
    let (on0, on1) = (names_on(0, 3, 1), names_on(1, 3, 2));
    let both: Vec<String> = on0.iter().chain(&on1).cloned().collect();
    let msg = FleetWriting {
        names: both,
        bytes: 300,
        limit: Some(300),
    };
    let announced = a.send(msg).await.unwrap().unwrap();
    assert!(!announced.started);
    until("the tag that took the write forgot it", || async {
        a.send(GetFleetUsage).await.unwrap().unwrap().pending == 0
    })
    .await;

    // Tag 0 alone past its slice's watermark: its round is due (fullest), the others' are not;
    // a store's end that carries the round runs it on the tags due after the store.
    let full = names_on(0, 3, 9);
    let msg = FleetStoredRound {
        stored: FleetStored::found(objects(&full, 100)),
        round: round(3000),
    };
    let (usage, found) = a.send(msg).await.unwrap().unwrap();
    assert_eq!(usage.bytes, 900);
    assert_eq!(usage.fullest, Some((2700, 2700)));
    let Round::Claimed(victims) = found else {
        panic!("no round on the full tag");
    };
    assert!(!victims.is_empty());
    assert!(
        victims.iter().all(|(n, _)| shard_of(n, 3) == 0),
        "{victims:?}"
    );
}
