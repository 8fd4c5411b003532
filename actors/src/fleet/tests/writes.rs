//! Writes in flight: a write a deletion may have removed is not added, a write past the limit
//! waits for the deletes, and a dead writer's pending bytes lapse.

use super::*;

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

/// The taint is a write's, not a name's: a write announced after the deletion is added even
/// while an earlier write of the name, announced before it, is still in flight (and is not).
/// A write made without an announcement (the index was unreachable then) is never added: the
/// index cannot tell whether a deletion came after it (a lookup probes the store instead).
#[actix_rt::test]
async fn a_write_announced_after_the_deletion_is_added_and_one_before_it_is_not() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    found(&a, "x", "", 100).await;
    assert_eq!(claim(&a, &["x"]).await, names(&["x"]));
    b.send(writing(&["x"], 300)).await.unwrap().unwrap();
    deleted(&a, &["x"]).await;
    // a writes x after the delete: its PUT lands after the DELETE, so the store holds it.
    a.send(writing(&["x"], 200)).await.unwrap().unwrap();
    // (bytes, objects, pending) after a node's write ends, having written `objects`.
    let end = |node: &Addr<FleetIndex>,
               objects: Vec<FleetObject>,
               ended: &'static [&'static str],
               size| {
        let msg = written(objects, ended, size);
        let node = node.clone();
        async move {
            let u = node.send(msg).await.unwrap().unwrap();
            (u.bytes, u.objects, u.pending)
        }
    };
    let added = end(&a, vec![obj("x", "", 200)], &["x"], 200).await;
    assert_eq!(added, (200, 1, 300), "added: announced after the deletion");
    let before = end(&b, vec![obj("x", "", 300)], &["x"], 300).await;
    assert_eq!(
        before,
        (200, 1, 0),
        "b's write, announced before, changes nothing"
    );
    // Unannounced: not added.
    let alone = end(&b, vec![obj("x", "", 50), obj("y", "", 50)], &[], 0).await;
    assert_eq!(alone, (200, 1, 0), "neither added, x left at 200");
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
