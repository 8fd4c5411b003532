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
//!   multi-turn conversations and fall far below LRU there; this one does not.
//!
//! The bonus ([`BONUS_PER_USE`] by default, `eviction.flru_bonus_per_use`) trades the two
//! kinds of workload: larger keeps more of the popular chunks of Mooncake's traces, smaller
//! suits chunks that are used a fixed few times (BENCHMARKS.md has the sweep). Its defaults
//! (`trigger_watermark` [`crate::config::SLRU_WATERMARK`], `eviction_ratio`
//! [`crate::config::SLRU_RATIO`] of the bytes) keep the tier nearly full.
//!
//! Invariants: every tracked key is in `order` exactly once, under the priority stored in
//! `resident`; a key is in `resident` or in the history, never both; the history holds at most
//! `2 × HISTORY_FACTOR × capacity` (at least `2 × MIN_HISTORY`) names.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use super::EvictionPolicy;
use crate::key::{BuildDigestHasher, KeyMap, ObjectKey};

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

/// One touch of the clock, in priority units (fine enough that a small capacity's fraction of
/// a tick still counts).
const TICK: u64 = 1024;

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

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The key's place in `order`: (priority, clock of its last touch as tie-break).
    slot: (u64, u64),
    uses: u8,
}

/// The FLRU policy. Its one setting is the bonus per use (`eviction.flru_bonus_per_use`).
pub struct Flru {
    order: BTreeMap<(u64, u64), ObjectKey>,
    resident: KeyMap<Entry>,
    history: History,
    clock: u64,
    capacity: usize,
    hasher: BuildDigestHasher,
    bonus_per_use: f64,
}

impl Default for Flru {
    fn default() -> Self {
        Self::new(BONUS_PER_USE)
    }
}

impl Flru {
    /// A policy whose keys gain `bonus_per_use` capacities of clock per use beyond the first
    /// (0: plain LRU order).
    pub fn new(bonus_per_use: f64) -> Self {
        Self {
            order: BTreeMap::new(),
            resident: KeyMap::default(),
            history: History::default(),
            clock: 0,
            capacity: 0,
            hasher: BuildDigestHasher::default(),
            bonus_per_use,
        }
    }

    /// The history of departed keys (for tests and diagnostics).
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The use count the policy holds for a tracked key.
    pub fn uses(&self, key: &ObjectKey) -> Option<u8> {
        self.resident.get(key).map(|e| e.uses)
    }

    /// The bonus of `uses`, in [`TICK`]s.
    fn bonus(&self, uses: u8) -> u64 {
        let extra = f64::from(uses.min(MAX_USES).saturating_sub(1));
        (self.bonus_per_use * self.capacity.max(1) as f64 * extra * TICK as f64) as u64
    }

    /// One use of `key`: known keys gain a use, new keys bring their history's count.
    fn touch(&mut self, key: &ObjectKey, admit: bool) {
        self.clock += TICK;
        let uses = match self.resident.get(key) {
            Some(e) => {
                self.order.remove(&e.slot);
                e.uses.saturating_add(1)
            }
            None if admit => {
                let d = self.hasher.hash_one(key);
                self.history.take(d).saturating_add(1)
            }
            None => return,
        };
        let slot = (self.clock + self.bonus(uses), self.clock);
        self.order.insert(slot, key.clone());
        self.resident.insert(key.clone(), Entry { slot, uses });
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
        self.capacity = self.capacity.max(self.resident.len());
    }

    fn on_accessed(&mut self, keys: &[ObjectKey]) {
        for key in keys.iter().rev() {
            self.touch(key, false);
        }
    }

    fn on_removed(&mut self, keys: &[ObjectKey]) {
        let limit = (HISTORY_FACTOR * self.capacity).max(MIN_HISTORY);
        for key in keys {
            if let Some(e) = self.resident.remove(key) {
                self.order.remove(&e.slot);
                let d = self.hasher.hash_one(key);
                self.history.put(d, e.uses, limit);
            }
        }
    }

    fn victims(&self) -> Box<dyn Iterator<Item = &ObjectKey> + '_> {
        Box::new(self.order.values())
    }

    fn len(&self) -> usize {
        self.resident.len()
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
        let mut p = Flru::new(bonus);
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
