//! Eviction rounds under LRU: where a round starts and what it claims, the landing mark, a
//! batch's recency order, and isolated rounds per salt quota.

use super::*;

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
    a.send(FleetStored::found(batch)).await.unwrap().unwrap();
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

/// Under plain LRU the unsalted objects' recency is the bucket's own (no `srec:` is kept):
/// an IsolatedLRU round on such a bucket takes the unsalted names from it, skipping salted
/// ones, and a node that joins with another order builds the unsalted recency from it, so the
/// same round then takes the same names.
/// An IsolatedLRU round on `node`, whose claims are then released kept (not deleted).
async fn taken_and_kept(node: &Addr<FleetIndex>) -> Vec<String> {
    let got = claimed(node.send(salted_round()).await.unwrap().unwrap());
    let keep = FleetRelease {
        removed: vec![],
        kept: got.clone(),
        evicted: true,
    };
    node.send(keep).await.unwrap().unwrap();
    node.send(FleetLeaseRelease(Lease::Evict))
        .await
        .unwrap()
        .unwrap();
    got
}

#[actix_rt::test]
async fn the_unsalted_recency_follows_the_fleets_order() {
    let redis = RedisServer::start();
    let a = node(&redis.url(), "a").await;
    // Least recent first: s0 (salted), u1, u0 (locked after u1 was stored), then u2.
    found(&a, "s0", "sa", 10).await;
    found(&a, "u0", "", 10).await;
    found(&a, "u1", "", 10).await;
    lock(&a, &["u0"]).await;
    a.send(FleetUnlock(names(&["u0"]))).await.unwrap().unwrap();
    found(&a, "u2", "", 10).await;
    a.send(FleetSetQuota {
        salt: "sa".into(),
        limit: Some(100),
    })
    .await
    .unwrap()
    .unwrap();
    // No quota for unsalted objects: all of them go, least recent first.
    let want = names(&["u1", "u0", "u2"]);
    assert_eq!(taken_and_kept(&a).await, want, "under plain lru");
    let mut c = config(&redis.url(), "c", DEFAULT_TTL);
    c.order = Some(FleetOrder::IsolatedLru);
    let c = FleetIndex::new(c).start();
    joined(&c, 1).await;
    assert_eq!(
        taken_and_kept(&c).await,
        want,
        "after the order left plain lru"
    );
    // Back to plain lru, and a store under it: the bucket's recency serves again.
    let d = node(&redis.url(), "d").await;
    found(&d, "u3", "", 10).await;
    let got = claimed(d.send(salted_round()).await.unwrap().unwrap());
    assert_eq!(
        got,
        names(&["u1", "u0", "u2", "u3"]),
        "back under plain lru"
    );
}

/// A write's end that carries a round runs it in the same script, after the store: as the
/// round's own call would right after.
#[actix_rt::test]
async fn a_writes_end_starts_the_round_it_makes_due() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    for i in 0..6 {
        found(&a, &format!("k{i}"), "", 10).await;
    }
    async fn write(node: &Addr<FleetIndex>, name: &str) -> (FleetUsage, Round) {
        node.send(writing(&[name], 10)).await.unwrap().unwrap();
        let msg = FleetStoredRound {
            stored: written(vec![obj(name, "", 10)], &[name], 10),
            round: round(100),
        };
        node.send(msg).await.unwrap().unwrap()
    }
    // 70 of 100 after the store: under the watermark, no round.
    let (u, r) = write(&a, "w0").await;
    assert_eq!((u.bytes, u.objects, r), (70, 7, Round::Under));
    // 80 after it: at the watermark, floor(8 x 0.2) = 1 claimed, the least recent; the usage
    // returned counts the claim.
    let (u, r) = write(&a, "w1").await;
    assert_eq!(claimed(r), names(&["k0"]));
    assert_eq!((u.bytes, u.claimed), (80, 10));
    // b's write fills it again while a holds the lease: the store lands, the round is busy.
    let (u, r) = write(&b, "w2").await;
    assert_eq!((u.bytes, r), (90, Round::Busy));
}

/// From FLRU (whose records hold each object's last use) to IsolatedLRU: the join builds the
/// unsalted objects' recency from the records.
#[actix_rt::test]
async fn isolated_lru_after_flru_takes_the_unsalted_by_their_last_use() {
    let redis = RedisServer::start();
    let mut f = config(&redis.url(), "f", DEFAULT_TTL);
    f.order = Some(FleetOrder::Flru {
        bonus: 0.4,
        adaptive: true,
    });
    let f = FleetIndex::new(f).start();
    joined(&f, 1).await;
    found(&f, "s0", "sa", 10).await;
    found(&f, "u0", "", 10).await;
    found(&f, "u1", "", 10).await;
    lock(&f, &["u0"]).await;
    f.send(FleetUnlock(names(&["u0"]))).await.unwrap().unwrap();
    found(&f, "u2", "", 10).await;
    f.send(FleetSetQuota {
        salt: "sa".into(),
        limit: Some(100),
    })
    .await
    .unwrap()
    .unwrap();
    let mut c = config(&redis.url(), "c", DEFAULT_TTL);
    c.order = Some(FleetOrder::IsolatedLru);
    let c = FleetIndex::new(c).start();
    joined(&c, 1).await;
    // Last used: u1 (tick 3), u0 (its hit, 4), u2 (5); s0 is within its quota.
    assert_eq!(taken_and_kept(&c).await, names(&["u1", "u0", "u2"]));
}
