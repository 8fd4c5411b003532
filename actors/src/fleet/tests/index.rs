//! One bucket's index shared by nodes: one usage total, locks that keep a key from another
//! node's claims, lookups answered from what another node stored, fleet recency, the eviction
//! lease and a node that restarts with its id. Also listings: what a listing adds and forgets.

use super::*;

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

/// The server's `INFO commandstats`, as `cmdstat_NAME` → calls.
fn calls(redis: &RedisServer) -> std::collections::HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut plain(redis))
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(":calls=")?;
            let n = rest.split(',').next()?.parse().ok()?;
            Some((name.to_string(), n))
        })
        .collect()
}

#[actix_rt::test]
async fn calls_go_by_the_librarys_functions_and_a_lost_library_is_loaded_again() {
    let redis = RedisServer::start();
    let a = node(&redis.url(), "a").await;
    found(&a, "x", "", 100).await;
    assert_eq!(lock(&a, &["x"]).await, vec![FleetLock::Known(100)]);
    let c = calls(&redis);
    assert!(c.get("cmdstat_fcall").copied().unwrap_or(0) >= 3, "{c:?}");
    assert_eq!(c.get("cmdstat_evalsha"), None, "{c:?}");
    assert_eq!(c.get("cmdstat_eval"), None, "{c:?}");

    // The server loses the library (a restart, FUNCTION FLUSH): the next call loads it again.
    admin(&redis, &["FUNCTION", "FLUSH"]);
    a.send(FleetUnlock(names(&["x"]))).await.unwrap().unwrap();
    assert_eq!(claim(&a, &["x"]).await, names(&["x"]));
    assert_eq!(calls(&redis).get("cmdstat_function|load"), Some(&2));
}

#[actix_rt::test]
async fn a_server_without_functions_runs_the_scripts_by_evalsha() {
    let redis = RedisServer::start_on(free_port(), &["--rename-command", "FUNCTION", ""]);
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    found(&a, "x", "", 100).await;
    lock(&a, &["x"]).await;
    assert!(claim(&b, &["x"]).await.is_empty());
    a.send(FleetUnlockSoon(names(&["x"]))).await.unwrap();
    assert_eq!(claim(&a, &["x"]).await, names(&["x"]));
    let c = calls(&redis);
    assert_eq!(c.get("cmdstat_fcall"), None, "{c:?}");
    assert!(c.get("cmdstat_evalsha").copied().unwrap_or(0) >= 4, "{c:?}");
}

/// A queued unlock goes before the node's next call, in its round trip; with no call, it goes
/// on its own soon after.
#[actix_rt::test]
async fn queued_unlocks_ride_with_the_next_call_or_go_alone() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    found(&a, "x", "", 100).await;
    found(&a, "y", "", 100).await;
    lock(&a, &["x", "y"]).await;
    a.send(FleetUnlockSoon(names(&["x"]))).await.unwrap();
    assert_eq!(
        claim(&a, &["x"]).await,
        names(&["x"]),
        "the unlock went first"
    );

    a.send(FleetUnlockSoon(names(&["y"]))).await.unwrap();
    until("a's unlock of y went alone", || async {
        claim(&b, &["y"]).await == names(&["y"])
    })
    .await;
}

/// The index's per-name keys are kept in the server's hash-table forms from their first member
/// (a padding member, never an object's name), however few objects the bucket holds: a size
/// lookup and a deletion's record cost the same in a small bucket as in a large one.
#[actix_rt::test]
async fn sizes_and_deletions_are_kept_as_hash_tables_from_the_start() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    found(&a, "k0", "", 10).await;
    found(&a, "k1", "", 10).await;
    // A deletion while a write is in flight is recorded (the write may have landed before it).
    b.send(writing(&["w"], 10)).await.unwrap().unwrap();
    assert_eq!(claim(&a, &["k0"]).await, names(&["k0"]));
    deleted(&a, &["k0"]).await;
    assert_eq!(encoding(&redis, "size"), "hashtable");
    assert_eq!(encoding(&redis, "gone"), "skiplist");
    // The padding is no object: usage and lookups see only k1.
    let u = usage(&a).await;
    assert_eq!((u.bytes, u.objects), (10, 1));
    assert_eq!(lock(&b, &["k1"]).await, vec![FleetLock::Known(10)]);
}
