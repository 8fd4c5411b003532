//! The fleet's eviction orders other than LRU, as the index keeps them: `FLRU`'s priority with
//! its use history, and `ARC`'s lists, ghosts and target. Every check is a round's claims (the
//! path a node evicts by), with objects touched on two nodes.

use super::*;

async fn ordered(url: &str, name: &str, order: FleetOrder) -> Addr<FleetIndex> {
    let addr = FleetIndex::new(IndexConfig {
        order: Some(order),
        layout: Some(1),
        ..config(url, name, DEFAULT_TTL)
    })
    .start();
    joined(&addr, 1).await;
    addr
}

fn flru(bonus: f64, adaptive: bool) -> FleetOrder {
    FleetOrder::Flru { bonus, adaptive }
}

/// Nodes `a` and `b`, each joined with `order`.
async fn two(redis: &RedisServer, order: FleetOrder) -> (Addr<FleetIndex>, Addr<FleetIndex>) {
    (
        ordered(&redis.url(), "a", order).await,
        ordered(&redis.url(), "b", order).await,
    )
}

/// One round on a bucket of `objects` objects, `bytes` in all, that claims exactly `k`: the
/// stored bytes sit at the watermark (nothing to catch up) and LMCache's
/// `floor(objects × ratio)` is `k`; the bytes landing play no part. The claimed names are
/// then deleted and released (an eviction's), in the order claimed.
async fn evict(node: &Addr<FleetIndex>, bytes: u64, objects: usize, k: usize) -> Vec<String> {
    let round = FleetRound {
        capacity: bytes,
        watermark: 1.0,
        ratio: (k as f64 + 0.5) / objects as f64,
        per_salt: false,
        ahead: 2.0,
        catch_up: false,
        waiting: 0,
    };
    let got = claimed(node.send(round).await.unwrap().unwrap());
    let removed: Vec<&str> = got.iter().map(String::as_str).collect();
    end_round(node, &removed).await;
    got
}

/// `node` finds each of `n` (10 bytes each), one tick apart.
async fn store(node: &Addr<FleetIndex>, n: &[&str]) {
    for name in n {
        found(node, name, "", 10).await;
    }
}

/// A lookup hit of `name` on `node`: lock, then unlock.
async fn hit(node: &Addr<FleetIndex>, name: &str) {
    lock(node, &[name]).await;
    node.send(FleetUnlock(names(&[name])))
        .await
        .unwrap()
        .unwrap();
}

fn ks(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("k{i}")).collect()
}

/// A key of the index (`field` of a hash, else a string), read straight from the server
/// (what a node never needs to read).
fn index_read(redis: &RedisServer, key: &str, field: Option<&str>) -> Option<String> {
    let mut con = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let key = format!("kvtier:{{s3:127.0.0.1/bucket/prefix}}:{LAYOUT}:{key}");
    match field {
        Some(field) => redis::cmd("HGET").arg(key).arg(field).query(&mut con),
        None => redis::cmd("GET").arg(key).query(&mut con),
    }
    .unwrap()
}

fn index_get(redis: &RedisServer, key: &str) -> Option<String> {
    index_read(redis, key, None)
}

#[actix_rt::test]
async fn flru_keeps_an_object_used_again_past_later_ones_and_remembers_uses_after_eviction() {
    let redis = RedisServer::start();
    let (a, b) = two(&redis, flru(0.4, true)).await;
    assert_eq!(index_get(&redis, "order").as_deref(), Some("flru:0.4"));
    // FLRU's hashes are hash tables from the start, the shadows' too (see `hashes_ready`).
    for key in ["uses", "hist", "sh1:uses", "sh5:uses", "sh3:hist"] {
        assert_eq!(encoding(&redis, key), "hashtable", "{key}");
    }
    // A node that does not evict leaves the bucket's order as it is.
    let reader = FleetIndex::new(IndexConfig {
        order: None,
        ..config(&redis.url(), "reader", DEFAULT_TTL)
    })
    .start();
    joined(&reader, 1).await;
    assert_eq!(index_get(&redis, "order").as_deref(), Some("flru:0.4"));
    let first: Vec<String> = ks(0..10);
    store(&a, &first.iter().map(String::as_str).collect::<Vec<_>>()).await;
    // Two hits on b: k0 has 3 uses, priority 12 + 0.4 × 10 × 2 = 20, above the ticks of
    // the five stored next (13..17). By recency alone it would go right after k9.
    hit(&b, "k0").await;
    hit(&b, "k0").await;
    store(&a, &["k10", "k11", "k12", "k13", "k14"]).await;
    assert_eq!(evict(&a, 150, 15, 14).await, ks(1..15), "k0 goes last");
    assert_eq!(evict(&b, 10, 1, 1).await, ks(0..1));
    // Stored again, k0 has its 3 earlier uses and this one: priority 18 + 0.4 × 15 × 3 = 36,
    // above ten objects stored after it (ticks 19..28).
    store(&b, &["k0"]).await;
    let later: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    store(&a, &later.iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert_eq!(
        evict(&a, 110, 11, 10).await,
        later,
        "the uses outlived the eviction"
    );
}

#[actix_rt::test]
async fn arc_takes_t1_first_and_moves_its_target_on_ghost_hits() {
    let redis = RedisServer::start();
    let (a, b) = two(&redis, FleetOrder::Arc).await;
    // T1 = k1, k2, k3 (seen once), T2 = k0 (hit on b).
    store(&a, &["k0", "k1"]).await;
    hit(&b, "k0").await;
    store(&a, &["k2", "k3"]).await;
    // Target 0: T1 first, though k0 is less recent than k2 (LRU would take k1, k0).
    assert_eq!(evict(&a, 40, 4, 2).await, ks(1..3));
    assert_eq!(index_get(&redis, "arc_p"), None);
    // k1 stored again while a ghost in B1: the target grows by max(1, |B2| / |B1|) = 1 and k1
    // comes back into T2.
    store(&b, &["k1"]).await;
    assert_eq!(index_get(&redis, "arc_p").as_deref(), Some("1"));
    // T1 = k3 (size 1, at the target: T1 first), then T2 = k0, k1.
    assert_eq!(evict(&b, 30, 3, 2).await, names(&["k3", "k0"]));
    // k0 stored again while a ghost in B2 (B1 = k2, k3): the target shrinks by
    // max(1, |B1| / |B2|) = 2, to 0.
    store(&a, &["k0"]).await;
    assert_eq!(index_get(&redis, "arc_p").as_deref(), Some("0"));
    // A deletion that is not an eviction leaves no ghost: k1, deleted and stored again, is
    // new (T1), so with the target at 0 it goes before k0 (T2), though stored after it.
    assert_eq!(claim(&a, &["k1"]).await, names(&["k1"]));
    deleted(&a, &["k1"]).await;
    store(&a, &["k1"]).await;
    assert_eq!(evict(&a, 20, 2, 1).await, names(&["k1"]));
}

/// ARC's ghosts are trimmed as LMCache's are: `|T1| + |B1|` kept to the capacity in objects
/// (here the most objects known at once, 4), the oldest ghosts first; then a new object once
/// in B1 is new again (T1), one still there a ghost hit (T2, and the target grows).
#[actix_rt::test]
async fn arc_drops_its_oldest_ghosts_past_the_capacity() {
    let redis = RedisServer::start();
    let (a, _b) = two(&redis, FleetOrder::Arc).await;
    store(&a, &["k0", "k1", "k2", "k3"]).await;
    // B1 = k0, k1, k2 (in that order), T1 = k3: 4, at the capacity.
    assert_eq!(evict(&a, 40, 4, 3).await, ks(0..3));
    // Two new objects make T1 3: B1 keeps 1 (k2), k0 and k1 dropped (ghosts of one round
    // share a tick: the least name first).
    store(&a, &["k4", "k5"]).await;
    store(&a, &["k2", "k0"]).await;
    assert_eq!(
        index_get(&redis, "arc_p").as_deref(),
        Some("1"),
        "k2 was a ghost"
    );
    // T1 = k3, k4, k5, k0 (k0 new again), T2 = k2: T1 first (size 4 > target 1).
    assert_eq!(evict(&a, 50, 5, 4).await, names(&["k3", "k4", "k5", "k0"]));
}

#[actix_rt::test]
async fn flru_rates_keep_the_object_used_most_often_where_recency_would_not() {
    let redis = RedisServer::start();
    // Bonus 0: FLRU's priority is plain recency, so only the rate order keeps k0.
    let (a, b) = two(&redis, flru(0.0, false)).await;
    assert_eq!(index_get(&redis, "order").as_deref(), Some("flru:0:rates"));
    store(&a, &["k0"]).await;
    for _ in 0..5 {
        hit(&b, "k0").await;
    }
    store(&a, &["k1", "k2", "k3", "k4", "k5"]).await;
    // k0: 6 uses in 11 ticks; k1..k5 once each, k1 the longest ago. By recency k0 would go
    // first.
    assert_eq!(evict(&a, 60, 6, 1).await, names(&["k1"]));
    assert_eq!(evict(&b, 50, 5, 4).await, ks(2..6), "k0 goes last");
}

/// Names the test nodes mark as sampled by the shadows (see `sampled`). Only `s7` and `s18`
/// would be sampled by the SHA-1 of their names (the index's rule before nodes marked keys).
const SAMPLED: [&str; 21] = [
    "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13", "s14",
    "s15", "s16", "s17", "s18", "s19", "s20",
];

#[actix_rt::test]
async fn flru_shadows_choose_the_mode_from_every_nodes_stores_and_hits() {
    let redis = RedisServer::start();
    // Bonus 0: in LRU placement FLRU's order is plain recency.
    let (a, b) = two(&redis, flru(0.0, true)).await;
    // One hot sampled name, hit on b between stores on a of sampled names used once: in the
    // shadows' tier of one object LRU placement never hits, the others keep the hot one.
    let (hot, once) = SAMPLED.split_first().unwrap();
    store(&a, &[*hot]).await;
    for name in once {
        store(&a, &[*name]).await;
        hit(&b, hot).await;
    }
    assert_eq!(
        index_read(&redis, "sh:score", Some("1")).as_deref(),
        Some("0")
    );
    let last: f64 = index_read(&redis, "sh:score", Some("3"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        last > 1.0,
        "placing new names last hits the hot one: {last}"
    );
    // x0 used twice, then x1 stored once (neither sampled): by recency x0 would go first;
    // in every other mode the new x1 goes before it.
    store(&a, &["x0"]).await;
    hit(&b, "x0").await;
    store(&a, &["x1"]).await;
    let order = evict(&a, 230, 23, 23).await;
    let at = |n: &str| order.iter().position(|o| o == n).unwrap();
    assert!(at("x1") < at("x0"), "{order:?}");
}

/// `cmd` (a read that answers a count: `ZCARD`, `LLEN`) of index key `key`.
fn index_count(redis: &RedisServer, cmd: &str, key: &str) -> i64 {
    redis::cmd(cmd)
        .arg(format!(
            "kvtier:{{s3:127.0.0.1/bucket/prefix}}:{LAYOUT}:{key}"
        ))
        .query(&mut plain(redis))
        .unwrap()
}

#[actix_rt::test]
async fn flru_shadows_take_the_sampled_names_in_batches_of_a_quarter_of_their_tier() {
    let redis = RedisServer::start();
    let (a, b) = two(&redis, flru(0.4, true)).await;
    // 96 names the shadows do not sample, then one they do: a peak of 97 objects, a shadow
    // tier of 6, batches of 2.
    let many = ks(0..96);
    store(&a, &many.iter().map(String::as_str).collect::<Vec<_>>()).await;
    store(&a, &[SAMPLED[0]]).await;
    assert_eq!(index_count(&redis, "LLEN", "sh:queue"), 1, "it waits");
    assert_eq!(index_count(&redis, "ZCARD", "sh1:order"), 0);
    // The second sampled name, a hit on b, makes the batch: the shadows see both, in order.
    hit(&b, SAMPLED[0]).await;
    assert_eq!(index_count(&redis, "LLEN", "sh:queue"), 0);
    for m in 1..=5 {
        assert_eq!(index_count(&redis, "ZCARD", &format!("sh{m}:order")), 1);
    }
    // The hit found the name in every shadow: each one's hits rose from 0.
    for m in ["1", "2", "3", "4", "5"] {
        let score: f64 = index_read(&redis, "sh:score", Some(m))
            .unwrap()
            .parse()
            .unwrap();
        assert!(score > 0.9, "shadow {m}: {score}");
    }
}
