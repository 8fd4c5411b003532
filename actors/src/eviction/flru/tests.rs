//! Tests of FLRU: priorities, the use history, the shadows and the adaptive mode, checked
//! against the policy's documented rules.

use super::*;

/// The three placements without the rate modes: what the shadows choose from when the
/// rates are left out, to test the placement shadows alone.
const PLACEMENT_MODES: [Mode; 3] = [MODES[0], MODES[1], MODES[2]];

fn key(i: u32) -> ObjectKey {
    ObjectKey::new("m", 0, i.to_be_bytes().to_vec()).unwrap()
}

fn order(p: &Flru) -> Vec<ObjectKey> {
    p.victims().cloned().collect()
}

#[test]
fn once_used_keys_go_in_lru_order_and_a_batch_tail_first() {
    let mut p = Flru::default();
    p.on_stored(&[key(0), key(1), key(2)]);
    p.on_stored(&[key(3)]);
    assert_eq!(order(&p), vec![key(2), key(1), key(0), key(3)]);
    assert_eq!(p.len(), 4);
}

/// Keys 0..8 stored one by one, key 0 hit, key 8 stored, with this bonus: the last two
/// keys of the order.
fn last_two_after_a_hit(bonus: f64) -> Vec<ObjectKey> {
    let mut p = Flru::new(bonus, &MODES[..1]);
    for i in 0..8 {
        p.on_stored(&[key(i)]);
    }
    p.on_accessed(&[key(0)]);
    p.on_stored(&[key(8)]);
    assert_eq!(p.uses(&key(0)), Some(2));
    order(&p)[7..].to_vec()
}

#[test]
fn a_reused_key_outlives_newer_keys_used_once() {
    // Capacity 8 and a bonus of 0.25: one more use is worth 2 ticks of clock, so key 0
    // (touched at tick 9, +2) ranks after key 8 (tick 10).
    assert_eq!(last_two_after_a_hit(0.25), [key(8), key(0)]);
}

#[test]
fn without_a_bonus_the_order_is_lru() {
    assert_eq!(last_two_after_a_hit(0.0), [key(0), key(8)]);
}

#[test]
fn an_evicted_key_comes_back_with_its_uses() {
    let mut p = Flru::default();
    p.on_stored(&[key(0), key(1)]);
    p.on_accessed(&[key(0)]);
    p.on_removed(&[key(0)], DeleteCause::Evicted);
    assert_eq!(p.uses(&key(0)), None);
    assert_eq!(p.history().len(), 1);
    p.on_stored(&[key(0)]);
    assert_eq!(p.uses(&key(0)), Some(3));
    assert!(p.history().is_empty());
    // A lookup hit of an unknown key does not admit it.
    p.on_accessed(&[key(7)]);
    assert_eq!(p.uses(&key(7)), None);
    assert_eq!(p.len(), 2);
}

#[test]
fn a_shared_prefix_outranks_the_suffixes() {
    // Two requests share the first two chunks: the shared chunks, used twice, go last, the
    // first chunk last of all; the suffixes, used once, go first, the older first.
    let mut p = Flru::default();
    for i in 100..108 {
        p.on_stored(&[key(i)]);
    }
    p.on_stored(&[key(0), key(1), key(2)]);
    p.on_accessed(&[key(0), key(1)]);
    p.on_stored(&[key(3)]);
    assert_eq!(order(&p)[8..], [key(2), key(3), key(1), key(0)]);
}

/// Runs `requests` (each a chunk chain) against `p` as a tier of `capacity` keys runs it:
/// found keys are hits, the rest is stored, then the first victims go until the capacity
/// holds. Returns the hits.
fn drive(p: &mut Flru, capacity: usize, requests: impl IntoIterator<Item = Vec<u32>>) -> usize {
    let mut hits = 0;
    for r in requests {
        let keys: Vec<ObjectKey> = r.into_iter().map(key).collect();
        let (found, missing): (Vec<_>, Vec<_>) =
            keys.into_iter().partition(|k| p.uses(k).is_some());
        hits += found.len();
        p.on_accessed(&found);
        p.on_stored(&missing);
        while p.len() > capacity {
            let first = p.victims().next().cloned().unwrap();
            p.on_removed(&[first], DeleteCause::Evicted);
        }
    }
    hits
}

/// A hot set of 64 keys, each request one of them and 64 keys never seen again, for
/// `rounds` passes over the hot set (4 tiers of 1024 keys per pass).
fn hot_and_scan(rounds: u32) -> impl Iterator<Item = Vec<u32>> {
    let mut fresh = 1_000_000;
    (0..rounds).flat_map(|_| 0..64).map(move |h| {
        let mut r = vec![h];
        r.extend(fresh..fresh + 64);
        fresh += 64;
        r
    })
}

/// Each key stored once and looked up once, half a tier later: a chain used twice.
fn used_twice(n: u32, start: u32) -> impl Iterator<Item = Vec<u32>> {
    (0..n).flat_map(move |i| {
        let mut r = vec![vec![start + i]];
        if i >= 256 {
            r.push(vec![start + i - 256]);
        }
        r
    })
}

#[test]
fn shadows_place_new_keys_last_when_they_are_never_reused_and_back_when_they_are() {
    // The three placements alone (`PLACEMENT_MODES`). A tier of 1024 keys,
    // so the shadows hold 64 sampled keys each. Against a scan of keys used once, LRU
    // placement loses the hot set; the shadows see it and place new keys last, and the hot
    // set is hit. Then a workload of keys reused once, half a tier later, where a key
    // placed last is gone before its reuse: back to LRU placement.
    let mut adaptive = Flru::new(BONUS_PER_USE, &PLACEMENT_MODES);
    let mut lru = Flru::new(BONUS_PER_USE, &MODES[..1]);
    let a = drive(&mut adaptive, 1024, hot_and_scan(8));
    let l = drive(&mut lru, 1024, hot_and_scan(8));
    assert_eq!(adaptive.placement(), Placement::Last);
    assert_eq!(lru.placement(), Placement::Recent);
    assert!(a > 2 * l.max(1), "adaptive {a} hits, LRU placement {l}");
    let twice = drive(&mut adaptive, 1024, used_twice(20_000, 2_000_000));
    assert_eq!(adaptive.placement(), Placement::Recent);
    assert!(twice > 15_000, "{twice} of 19,744 reuses hit");
}

/// Keys used twice, the second use 450 keys (900 touches) after the first, in a tier of
/// 1,024 keys. FLRU's bonus keeps the keys already used twice (dead here) and pushes out
/// the ones still waiting for their second use (741 of 19,550 reuses hit with the
/// placements alone); the high rate prior ranks the waiting ones above them.
#[test]
fn rate_shadows_follow_a_workload_where_every_key_is_used_twice() {
    let (capacity, gap) = (1024, 450);
    let mut adaptive = Flru::default();
    let mut placements = Flru::new(BONUS_PER_USE, &PLACEMENT_MODES);
    let a = drive(&mut adaptive, capacity, used_twice_after(20_000, gap));
    let p = drive(&mut placements, capacity, used_twice_after(20_000, gap));
    assert_eq!(adaptive.mode(), Mode::Rates(RatePrior::High));
    assert!(a > p + p / 4, "rates {a} hits, placements {p}");
}

/// Each key stored once and looked up once, `gap` keys later.
fn used_twice_after(n: u32, gap: u32) -> impl Iterator<Item = Vec<u32>> {
    (0..n).flat_map(move |i| {
        let mut r = vec![vec![3_000_000 + i]];
        if i >= gap {
            r.push(vec![3_000_000 + i - gap]);
        }
        r
    })
}

#[test]
fn rates_rank_by_uses_over_age_and_let_a_silent_key_go() {
    // A tier of 100 keys; one capacity is 100 touches of clock.
    let (capacity, c) = (100, 100 * TICK);
    let now = 10 * c;
    let entry = |uses, first, last| Entry {
        slot: (0, last),
        uses,
        first,
    };
    let hot = entry(5, 0, now);
    let new = entry(1, now, now);
    let silent = entry(5, 0, 0);
    let low = |e: &Entry| e.rate_score(now, capacity, RATE_PRIOR_USES_LOW);
    let high = |e: &Entry| e.rate_score(now, capacity, RATE_PRIOR_USES_HIGH);
    // Low prior: a key used 5 times over 10 capacities outranks a new key, which outranks
    // a key used as often but silent for 10 capacities (about 4.9 expected uses missed).
    assert!(low(&hot) > low(&new));
    assert!(low(&new) > low(&silent));
    // High prior: the new key counts as used 3 times in a young life, above the hot key.
    assert!(high(&new) > high(&hot));
    // The score only falls with silence and rises with uses.
    assert!(low(&entry(5, 0, now / 2)) < low(&hot));
    assert!(low(&entry(6, 0, now)) > low(&hot));
}

#[test]
fn a_rates_round_offers_the_lowest_rates_and_not_keys_touched_since_its_order() {
    use crate::config::{EvictionConfig, EvictionPolicy as Name};
    let mut p = Flru::new(0.0, &[Mode::Rates(RatePrior::Low)]);
    let mut book = SizeBook::default();
    // Key 0 is used four times, keys 1..640 once, oldest first. A capacity of 640 keys
    // recomputes the order every 10 touches.
    for i in 0..640 {
        p.on_stored(&[key(i)]);
        book.insert(&key(i), 10);
        if i < 3 {
            p.on_accessed(&[key(0)]);
        }
    }
    assert_eq!(p.mode(), Mode::Rates(RatePrior::Low));
    let order = order(&p);
    // Every tracked key once, as the trait's invariant asks of `victims`.
    let distinct: std::collections::HashSet<_> = order.iter().collect();
    assert_eq!((order.len(), distinct.len()), (640, 640));
    assert_eq!(order.last(), Some(&key(0)));
    assert_eq!(order.first(), Some(&key(1)));
    let config = EvictionConfig::with_policy(Name::Flru);
    let full = Pressure {
        used_bytes: 6400,
        capacity_bytes: 6400,
        config: &config,
    };
    assert_eq!(p.plan(&full, &book)[0].candidates[0], key(1));
    // Key 1 is used now: until the order is recomputed it is not offered at all.
    p.on_accessed(&[key(1)]);
    let groups = p.plan(&full, &book);
    assert_eq!(groups[0].candidates[0], key(2));
    assert!(!groups[0].candidates.contains(&key(1)));
    assert!(groups[0].candidates.contains(&key(0)));
    let under = Pressure {
        used_bytes: 10,
        ..full
    };
    assert!(p.plan(&under, &book).is_empty());
}

#[test]
fn another_mode_needs_a_margin_over_lru_placement() {
    let mut s = Shadows::new(&MODES);
    let mut with = |scores: [f64; 5]| {
        for (shadow, score) in s.0.iter_mut().zip(scores) {
            shadow.score = score;
        }
        s.best()
    };
    let (recent, last) = (Mode::Flru(Placement::Recent), Mode::Flru(Placement::Last));
    let (demoted, high) = (Mode::Flru(Placement::Demoted), Mode::Rates(RatePrior::High));
    for (scores, want) in [
        ([0.0; 5], recent),
        ([100.0, 90.0, 104.0, 104.9, 0.0], recent),
        ([100.0, 90.0, 106.0, 0.0, 0.0], last),
        ([100.0, 110.0, 106.0, 0.0, 0.0], demoted),
        ([100.0, 110.0, 106.0, 111.0, 120.0], high),
    ] {
        assert_eq!(with(scores), want, "{scores:?}");
    }
}

#[test]
fn the_history_is_bounded() {
    let mut p = Flru::default();
    for i in 0..(3 * MIN_HISTORY as u32) {
        p.on_stored(&[key(i)]);
        p.on_removed(&[key(i)], DeleteCause::Evicted);
    }
    assert!(p.history().len() <= 2 * MIN_HISTORY);
    assert!(p.history().len() >= MIN_HISTORY);
}
