//! `FLRU`: kvtier's frequency-boosted LRU for prefix caches (not an LMCache policy).
//!
//! Every key has a priority, and the lowest goes first:
//!
//! ```text
//! priority = clock at the key's last touch + bonus × capacity × (uses − 1)
//! ```
//!
//! The clock counts key touches (a store or a lookup hit of one key is one tick); `capacity` is
//! the largest number of keys the policy has held at once (the tier's size in keys once it has
//! filled); `uses` is how often the key was stored or hit, including the times before an
//! eviction: a bounded [`History`] remembers the use count of keys that left. So a key used
//! `n` times stays as if it had been touched `bonus × (n − 1)` capacities later than it
//! was: LRU for keys used once, a frequency bonus for keys a workload keeps coming back to.
//!
//! **Admission.** A key stored for the first time (no count in the history) is *placed* in one
//! of three ways ([`Placement`]): at its touch as above; one capacity of clock earlier; or
//! below every key used more than once, so it stays only until the next round and is kept
//! for good only if it comes back while the history still remembers it (admission on the
//! second use). Which one pays depends on the workload: on Mooncake's traces most new chunks
//! are never used again and holding them costs the chunks that are; on multi-turn
//! conversations a new turn is what the next turn needs. So the policy runs three *shadow
//! tiers*, one per placement: each ranks the keys of one sixteenth of the key space (by
//! digest, [`SHADOW_SAMPLE`]) in a tier of one sixteenth of the capacity, and counts its hits
//! with a decay of [`SHADOW_HORIZON`] shadow capacities; new keys of the real tier are placed
//! as LRU places them unless another shadow has [`SHADOW_MARGIN`] more recent hits than the LRU
//! one, and then as the best shadow places them. `eviction.flru_admission =
//! "lru"` turns this off. Sampled shadows estimate a tier's hit ratio well from a small share
//! of its keys (the idea of SHARDS, Waldspurger et al., FAST '15); they cost three small
//! rankings, not three tiers.
//!
//! Why this shape (measured on Mooncake's synthetic and conversation traces and on synthetic
//! multi-turn, used-twice and Zipf workloads, see BENCHMARKS.md, "FLRU"):
//!
//! * most chunks are never requested again, and a chunk requested a second time is likely
//!   requested again: the bonus keeps those through the long gaps between their uses, which
//!   plain LRU cannot;
//! * the first reuse of a chunk often comes long after its first store (beyond the tier's
//!   size), so the use count must survive eviction: that is the history;
//! * the order must be **prefix-consistent**: a request that uses chunk `i` of a prefix also
//!   uses chunks `0..i`, so a later chunk is never more recent nor more used than an earlier one
//!   of its prefix, and the priority (increasing in both) never ranks a chunk above its
//!   predecessors. Keys within a batch are touched in reverse request order (as `LRU` does),
//!   so the first chunk of a request is the most recent. Policies that order by frequency
//!   classes first (evict every once-used key before any twice-used one) break this on
//!   multi-turn conversations and fall far below LRU there; this one does not. A placement
//!   applies to every new chunk of a batch alike, so it keeps the order along the chunks a
//!   request stores.
//!
//! The bonus ([`BONUS_PER_USE`] by default, `eviction.flru_bonus_per_use`) trades the two
//! kinds of workload: larger keeps more of the popular chunks of Mooncake's traces, smaller
//! suits chunks that are used a fixed few times (BENCHMARKS.md has the sweep). Its defaults
//! (`trigger_watermark` [`crate::config::FLRU_WATERMARK`], `eviction_ratio`
//! [`crate::config::FLRU_RATIO`] of the bytes) keep the tier full.
//!
//! Invariants: in every ranking (the tier's and each shadow's), every tracked key is in `order`
//! exactly once, under the priority stored in `resident`; a key is in `resident` or in that
//! ranking's history, never both; a history holds at most `2 × HISTORY_FACTOR × capacity` (at
//! least `2 × MIN_HISTORY`, scaled by the sample for a shadow) names; a shadow holds at most
//! `max(1, capacity / SHADOW_SAMPLE)` keys, all with digests that are multiples of
//! [`SHADOW_SAMPLE`].

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash};

use super::EvictionPolicy;
use crate::key::{BuildDigestHasher, ObjectKey};

/// The default bonus of one use beyond the first, in capacities of clock (see the module
/// docs; `eviction.flru_bonus_per_use` changes it).
pub const BONUS_PER_USE: f64 = 0.4;

/// The largest use count that earns a bonus: a key used this often is as safe as it gets, so a
/// key that was hot once and then never again leaves after at most
/// `bonus × (MAX_USES − 1)` capacities of clock.
pub const MAX_USES: u8 = 16;

/// The history keeps the use counts of up to this many times `capacity` departed keys per
/// generation (two generations).
pub const HISTORY_FACTOR: usize = 16;

/// The smallest history generation, in names.
pub const MIN_HISTORY: usize = 4096;

/// The shadows rank the keys whose digest is a multiple of this, in a tier this many times
/// smaller than the real one.
pub const SHADOW_SAMPLE: u64 = 16;

/// A shadow's hit count decays by `1 / (SHADOW_HORIZON × shadow capacity)` per sampled use, so
/// it reflects about the last `SHADOW_HORIZON` tier-fulls of traffic.
pub const SHADOW_HORIZON: f64 = 8.0;

/// Another placement replaces LRU placement only when its shadow has this much more (relative)
/// recent hits: LRU placement is the one that is never below LRU, so a noisy lead does not move
/// the tier off it (on a trace whose workload changes halfway, a margin of 0 fell to 0.99× LRU
/// at 40 %; BENCHMARKS.md, "Admission by shadow tiers").
pub const SHADOW_MARGIN: f64 = 0.05;

/// One touch of the clock, in priority units (fine enough that a small capacity's fraction of
/// a tick still counts).
const TICK: u64 = 1024;

/// Priorities of keys placed at their touch or demoted start here, so a demoted key never
/// goes below 0 and keys placed last (their clock only) stay below all of them.
const BASE: u64 = 1 << 56;

/// Use counts of keys that left the tier, by 64-bit key digest, in two generations: when the
/// current one is full it becomes the previous one and the oldest is dropped, so names are
/// forgotten in roughly the order they were written. A digest collision merges two keys' counts,
/// which only shifts a priority.
#[derive(Debug, Default)]
pub struct History {
    current: HashMap<u64, u8>,
    previous: HashMap<u64, u8>,
}

impl History {
    /// Takes the count of `digest` out of the history (0 if it is not there).
    fn take(&mut self, digest: u64) -> u8 {
        match self.current.remove(&digest) {
            Some(c) => {
                self.previous.remove(&digest);
                c
            }
            None => self.previous.remove(&digest).unwrap_or(0),
        }
    }

    /// Remembers `count` for `digest`, rotating generations of at most `limit` names.
    fn put(&mut self, digest: u64, count: u8, limit: usize) {
        if self.current.len() >= limit {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(digest, count);
    }

    /// Names remembered.
    pub fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    /// True when no name is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where a key goes in the order on its first known use (no count in the history).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// At its touch, as LRU places it.
    Recent,
    /// One capacity of clock before its touch.
    Demoted,
    /// Below every key used more than once (new keys among themselves in LRU order): the key
    /// stays until the next round.
    Last,
}

/// The placements the shadows compare, in order of preference on a tie.
pub const PLACEMENTS: [Placement; 3] = [Placement::Recent, Placement::Demoted, Placement::Last];

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The key's place in `order`: (priority, clock of its last touch as tie-break).
    slot: (u64, u64),
    uses: u8,
}

/// The order of one set of keys (the tier's, or a shadow's): priorities, use counts and the
/// history of departed keys. `K` names a key: the key itself for the tier, its digest for a
/// shadow (both hash as the digest).
#[derive(Debug)]
struct Ranking<K> {
    order: BTreeMap<(u64, u64), K>,
    resident: HashMap<K, Entry, BuildDigestHasher>,
    history: History,
    clock: u64,
}

impl<K> Default for Ranking<K> {
    fn default() -> Self {
        Self {
            order: BTreeMap::new(),
            resident: HashMap::default(),
            history: History::default(),
            clock: 0,
        }
    }
}

/// What a touch needs besides the key.
#[derive(Debug, Clone, Copy)]
struct Touch {
    /// The key's digest (its name in the history).
    digest: u64,
    /// Whether an untracked key is taken in (a store) or ignored (a lookup hit).
    admit: bool,
    /// The capacity in keys that bonus and demotion are measured in.
    capacity: usize,
    bonus_per_use: f64,
    /// Where the key goes if this is its first known use.
    placement: Placement,
}

impl<K: Clone + Eq + Hash> Ranking<K> {
    /// One use of `key`: a tracked key gains a use, an untracked one brings its history's
    /// count. Returns whether the key was tracked (a hit).
    fn touch(&mut self, key: &K, t: Touch) -> bool {
        self.clock += TICK;
        let (uses, hit) = match self.resident.get(key) {
            Some(e) => {
                self.order.remove(&e.slot);
                (e.uses.saturating_add(1), true)
            }
            None if t.admit => (self.history.take(t.digest).saturating_add(1), false),
            None => return false,
        };
        let capacity = t.capacity.max(1) as f64 * TICK as f64;
        let placement = if uses > 1 {
            Placement::Recent
        } else {
            t.placement
        };
        let priority = match placement {
            Placement::Recent => {
                let extra = f64::from(uses.min(MAX_USES) - 1);
                BASE + self.clock + (t.bonus_per_use * capacity * extra) as u64
            }
            Placement::Demoted => BASE + self.clock - (capacity as u64).min(BASE),
            Placement::Last => self.clock,
        };
        let slot = (priority, self.clock);
        self.order.insert(slot, key.clone());
        self.resident.insert(key.clone(), Entry { slot, uses });
        hit
    }

    /// `key` (with this digest) left: its use count goes to the history, of at most `limit`
    /// names a generation.
    fn remove(&mut self, key: &K, digest: u64, limit: usize) {
        if let Some(e) = self.resident.remove(key) {
            self.order.remove(&e.slot);
            self.history.put(digest, e.uses, limit);
        }
    }
}

/// A shadow tier: the sampled keys' digests ranked with one placement, and its recent hits.
#[derive(Debug)]
struct Shadow {
    ranking: Ranking<u64>,
    placement: Placement,
    /// Hits, decayed per sampled use (see [`SHADOW_HORIZON`]).
    score: f64,
}

/// The shadows of a tier, one per entry of [`PLACEMENTS`].
#[derive(Debug)]
struct Shadows(Vec<Shadow>);

impl Shadows {
    fn new() -> Self {
        Self(
            PLACEMENTS
                .iter()
                .map(|p| Shadow {
                    ranking: Ranking::default(),
                    placement: *p,
                    score: 0.0,
                })
                .collect(),
        )
    }

    /// One use (store or lookup hit of the tier) of the key with this digest, the tier being
    /// `capacity` keys: a sampled key is a use of every shadow, which stores it on a miss and
    /// evicts down to its capacity.
    fn touch(&mut self, digest: u64, capacity: usize, bonus_per_use: f64) {
        if digest % SHADOW_SAMPLE != 0 {
            return;
        }
        let cap = (capacity / SHADOW_SAMPLE as usize).max(1);
        let keep = 1.0 - 1.0 / (SHADOW_HORIZON * cap as f64);
        let limit = (HISTORY_FACTOR * cap).max(MIN_HISTORY / SHADOW_SAMPLE as usize);
        for s in &mut self.0 {
            let t = Touch {
                digest,
                admit: true,
                capacity: cap,
                bonus_per_use,
                placement: s.placement,
            };
            let hit = s.ranking.touch(&digest, t);
            s.score = s.score * keep + if hit { 1.0 } else { 0.0 };
            while s.ranking.resident.len() > cap {
                let Some((_, d)) = s.ranking.order.first_key_value().map(|(k, d)| (*k, *d)) else {
                    break;
                };
                s.ranking.remove(&d, d, limit);
            }
        }
    }

    /// LRU placement (the first shadow's) unless another shadow has more than
    /// `1 + SHADOW_MARGIN` times its recent hits; then the one of those with the most.
    fn best(&self) -> Placement {
        let (lru, others) = self.0.split_first().expect("one shadow per placement");
        let mut best = lru;
        for s in others {
            if s.score > lru.score * (1.0 + SHADOW_MARGIN) && s.score > best.score {
                best = s;
            }
        }
        best.placement
    }
}

/// The FLRU policy. Its settings are the bonus per use (`eviction.flru_bonus_per_use`) and
/// whether shadows choose where new keys go (`eviction.flru_admission`).
pub struct Flru {
    ranking: Ranking<ObjectKey>,
    shadows: Option<Shadows>,
    capacity: usize,
    hasher: BuildDigestHasher,
    bonus_per_use: f64,
}

impl Default for Flru {
    fn default() -> Self {
        Self::new(BONUS_PER_USE, true)
    }
}

impl Flru {
    /// A policy whose keys gain `bonus_per_use` capacities of clock per use beyond the first
    /// (0: plain LRU order); with `adaptive`, new keys are placed where the shadows find the
    /// most hits, without, always at their touch.
    pub fn new(bonus_per_use: f64, adaptive: bool) -> Self {
        Self {
            ranking: Ranking::default(),
            shadows: adaptive.then(Shadows::new),
            capacity: 0,
            hasher: BuildDigestHasher::default(),
            bonus_per_use,
        }
    }

    /// The history of departed keys (for tests and diagnostics).
    pub fn history(&self) -> &History {
        &self.ranking.history
    }

    /// The use count the policy holds for a tracked key.
    pub fn uses(&self, key: &ObjectKey) -> Option<u8> {
        self.ranking.resident.get(key).map(|e| e.uses)
    }

    /// Where keys stored for the first time go now.
    pub fn placement(&self) -> Placement {
        self.shadows
            .as_ref()
            .map_or(Placement::Recent, Shadows::best)
    }

    fn touch(&mut self, key: &ObjectKey, admit: bool) {
        let digest = self.hasher.hash_one(key);
        let placement = self.placement();
        if let Some(s) = &mut self.shadows {
            s.touch(digest, self.capacity, self.bonus_per_use);
        }
        let t = Touch {
            digest,
            admit,
            capacity: self.capacity,
            bonus_per_use: self.bonus_per_use,
            placement,
        };
        self.ranking.touch(key, t);
    }
}

impl EvictionPolicy for Flru {
    fn name(&self) -> &'static str {
        "FLRU"
    }

    fn on_stored(&mut self, keys: &[ObjectKey]) {
        for key in keys.iter().rev() {
            self.touch(key, true);
        }
        self.capacity = self.capacity.max(self.ranking.resident.len());
    }

    fn on_accessed(&mut self, keys: &[ObjectKey]) {
        for key in keys.iter().rev() {
            self.touch(key, false);
        }
    }

    fn on_removed(&mut self, keys: &[ObjectKey]) {
        let limit = (HISTORY_FACTOR * self.capacity).max(MIN_HISTORY);
        for key in keys {
            let d = self.hasher.hash_one(key);
            self.ranking.remove(key, d, limit);
        }
    }

    fn victims(&self) -> Box<dyn Iterator<Item = &ObjectKey> + '_> {
        Box::new(self.ranking.order.values())
    }

    fn len(&self) -> usize {
        self.ranking.resident.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut p = Flru::new(bonus, false);
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
        p.on_removed(&[key(0)]);
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
                p.on_removed(&[first]);
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
        // A tier of 1024 keys, so the shadows hold 64 sampled keys each. Against a scan of keys
        // used once, LRU placement loses the hot set; the shadows see it and place new keys
        // last, and the hot set is hit. Then a workload of keys reused once, half a tier
        // later, where a key placed last is gone before its reuse: back to LRU placement.
        let mut adaptive = Flru::default();
        let mut lru = Flru::new(BONUS_PER_USE, false);
        let a = drive(&mut adaptive, 1024, hot_and_scan(8));
        let l = drive(&mut lru, 1024, hot_and_scan(8));
        assert_eq!(adaptive.placement(), Placement::Last);
        assert_eq!(lru.placement(), Placement::Recent);
        assert!(a > 2 * l.max(1), "adaptive {a} hits, LRU placement {l}");
        let twice = drive(&mut adaptive, 1024, used_twice(20_000, 2_000_000));
        assert_eq!(adaptive.placement(), Placement::Recent);
        assert!(twice > 15_000, "{twice} of 19,744 reuses hit");
    }

    #[test]
    fn another_placement_needs_a_margin_over_lru_placement() {
        let mut s = Shadows::new();
        let mut with = |scores: [f64; 3]| {
            for (shadow, score) in s.0.iter_mut().zip(scores) {
                shadow.score = score;
            }
            s.best()
        };
        assert_eq!(with([0.0, 0.0, 0.0]), Placement::Recent);
        assert_eq!(with([100.0, 90.0, 104.0]), Placement::Recent);
        assert_eq!(with([100.0, 90.0, 106.0]), Placement::Last);
        assert_eq!(with([100.0, 110.0, 106.0]), Placement::Demoted);
    }

    #[test]
    fn the_history_is_bounded() {
        let mut p = Flru::default();
        for i in 0..(3 * MIN_HISTORY as u32) {
            p.on_stored(&[key(i)]);
            p.on_removed(&[key(i)]);
        }
        assert!(p.history().len() <= 2 * MIN_HISTORY);
        assert!(p.history().len() >= MIN_HISTORY);
    }
}
