//! `ARC`: LMCache's Adaptive Replacement Cache for pressure-driven rounds.
//!
//! Resident keys are split between `T1` (seen once since they became resident: recent) and
//! `T2` (seen again: frequent). `B1` and `B2` keep the names (no data) of keys a round evicted
//! from `T1` and `T2`. A key stored again while in `B1` grows `p`, the target size of `T1`; one
//! in `B2` shrinks it; either way it comes back into `T2`. Semantics follow LMCache's
//! `ARCEvictionPolicy`:
//!
//! * the capacity in keys is the largest resident count seen (rounds ask for a share of the
//!   keys, not a fixed entry count), so `p` is in `[0, capacity]`;
//! * a round takes from `T1` while its (virtual) size is `>= floor(p)`, else from `T2`, and
//!   falls back to the other list when one runs out;
//! * only keys removed by eviction (the `Deleted` event's cause is [`DeleteCause::Evicted`])
//!   enter the ghost lists; any other removal forgets them;
//! * ghost lists are trimmed so `|T1| + |B1| <= capacity` and everything `<= 2 × capacity`;
//! * within a batch, keys are handled in reverse request order (the tail goes first).
//!
//! Invariants: a key is in at most one of the four lists; `victims` yields `T1 ∪ T2` once each.

use lru::LruCache;

use super::{global_round, EvictionPolicy, Pressure, SizeBook};
use crate::key::{BuildDigestHasher, ObjectKey};
use crate::messages::{DeleteCause, EvictGroup};

type List = LruCache<ObjectKey, (), BuildDigestHasher>;

fn list() -> List {
    LruCache::unbounded_with_hasher(BuildDigestHasher::default())
}

/// The ARC policy. No settings of its own (the `eviction` table decides when and how much).
pub(super) struct Arc {
    t1: List,
    t2: List,
    b1: List,
    b2: List,
    /// Target size of `T1`.
    p: f64,
    /// Largest resident count seen.
    capacity: usize,
}

impl Default for Arc {
    fn default() -> Self {
        Self {
            t1: list(),
            t2: list(),
            b1: list(),
            b2: list(),
            p: 0.0,
            capacity: 0,
        }
    }
}

impl Arc {
    #[cfg(test)]
    /// `p`, the target size of `T1` (for tests and diagnostics).
    pub(super) fn target_t1(&self) -> f64 {
        self.p
    }

    #[cfg(test)]
    /// Sizes of `T1`, `T2`, `B1`, `B2` (for tests and diagnostics).
    pub(super) fn list_sizes(&self) -> [usize; 4] {
        [self.t1.len(), self.t2.len(), self.b1.len(), self.b2.len()]
    }

    fn resident(&self) -> usize {
        self.t1.len() + self.t2.len()
    }

    fn trim_ghosts(&mut self) {
        if self.capacity == 0 {
            return;
        }
        while self.t1.len() + self.b1.len() > self.capacity && self.b1.pop_lru().is_some() {}
        while self.resident() + self.b1.len() + self.b2.len() > 2 * self.capacity {
            if self.b2.pop_lru().is_none() && self.b1.pop_lru().is_none() {
                break;
            }
        }
    }

    fn delta(hit: usize, other: usize) -> f64 {
        (other as f64 / hit.max(1) as f64).max(1.0)
    }
}

impl EvictionPolicy for Arc {
    fn name(&self) -> &'static str {
        "ARC"
    }

    fn on_stored(&mut self, keys: &[ObjectKey]) {
        for key in keys.iter().rev() {
            if self.t1.pop(key).is_some() {
                self.t2.put(key.clone(), ());
            } else if self.t2.contains(key) {
                self.t2.promote(key);
            } else if self.b1.contains(key) {
                let d = Self::delta(self.b1.len(), self.b2.len());
                self.p = (self.p + d).min(self.capacity as f64);
                self.b1.pop(key);
                self.t2.put(key.clone(), ());
            } else if self.b2.contains(key) {
                let d = Self::delta(self.b2.len(), self.b1.len());
                self.p = (self.p - d).max(0.0);
                self.b2.pop(key);
                self.t2.put(key.clone(), ());
            } else {
                self.t1.put(key.clone(), ());
            }
            self.capacity = self.capacity.max(self.resident());
            self.trim_ghosts();
        }
    }

    fn on_accessed(&mut self, keys: &[ObjectKey]) {
        for key in keys.iter().rev() {
            if self.t1.pop(key).is_some() {
                self.t2.put(key.clone(), ());
            } else {
                self.t2.promote(key);
            }
        }
    }

    fn on_removed(&mut self, keys: &[ObjectKey], cause: DeleteCause) {
        for key in keys {
            if cause == DeleteCause::Evicted {
                if self.t1.pop(key).is_some() {
                    self.b1.put(key.clone(), ());
                } else if self.t2.pop(key).is_some() {
                    self.b2.put(key.clone(), ());
                }
            } else {
                self.t1.pop(key);
                self.t2.pop(key);
                self.b1.pop(key);
                self.b2.pop(key);
            }
        }
        self.trim_ghosts();
    }

    fn victims(&self) -> Box<dyn Iterator<Item = &ObjectKey> + '_> {
        let mut t1 = self.t1.iter().rev().map(|(k, _)| k);
        let mut t2 = self.t2.iter().rev().map(|(k, _)| k);
        let mut virtual_t1 = self.t1.len();
        let target = self.p.min(self.capacity as f64) as usize;
        Box::new(std::iter::from_fn(move || {
            if virtual_t1 >= target {
                if let Some(k) = t1.next() {
                    virtual_t1 -= 1;
                    return Some(k);
                }
            }
            if let Some(k) = t2.next() {
                return Some(k);
            }
            let k = t1.next()?;
            virtual_t1 = virtual_t1.saturating_sub(1);
            Some(k)
        }))
    }

    fn len(&self) -> usize {
        self.resident()
    }

    fn plan(&mut self, pressure: &Pressure<'_>, book: &SizeBook) -> Vec<EvictGroup> {
        self.capacity = self.capacity.max(self.resident());
        self.p = self.p.min(self.capacity as f64);
        self.trim_ghosts();
        global_round(self.victims(), self.len(), pressure, book)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EvictionConfig;

    fn key(i: u8) -> ObjectKey {
        ObjectKey::new("m", 0, vec![i]).unwrap()
    }

    fn order(p: &Arc) -> Vec<ObjectKey> {
        p.victims().cloned().collect()
    }

    fn evict(p: &mut Arc, book: &SizeBook, n: usize) -> Vec<ObjectKey> {
        let cfg = EvictionConfig::default();
        let pressure = Pressure {
            used_bytes: 100,
            capacity_bytes: 100,
            config: &cfg,
        };
        let g = p.plan(&pressure, book);
        let gone: Vec<ObjectKey> = g[0].candidates.iter().take(n).cloned().collect();
        p.on_removed(&gone, DeleteCause::Evicted);
        gone
    }

    #[test]
    fn second_touch_promotes_and_t1_goes_first() {
        let mut p = Arc::default();
        p.on_stored(&[key(0), key(1), key(2)]);
        p.on_accessed(&[key(1)]);
        assert_eq!(p.list_sizes(), [2, 1, 0, 0]);
        // p = 0: T1 first (tail of the batch first), then T2.
        assert_eq!(order(&p), vec![key(2), key(0), key(1)]);
    }

    #[test]
    fn ghost_hit_in_b1_grows_t1_target_and_b2_shrinks_it() {
        let book = SizeBook::default();
        let mut p = Arc::default();
        p.on_stored(&[key(0), key(1), key(2), key(3)]);
        p.on_accessed(&[key(3)]);
        assert_eq!(evict(&mut p, &book, 1), vec![key(2)]);
        assert_eq!(p.list_sizes(), [2, 1, 1, 0]);
        p.on_stored(&[key(2)]);
        assert_eq!(p.target_t1(), 1.0, "a B1 hit grows p by max(1, |B2|/|B1|)");
        assert_eq!(p.list_sizes(), [2, 2, 0, 0]);
        // |T1| = 2 >= 1: T1 still goes first; then evict from T2 into B2.
        assert_eq!(evict(&mut p, &book, 3), vec![key(1), key(0), key(3)]);
        p.on_stored(&[key(3)]);
        assert_eq!(p.target_t1(), 0.0, "a B2 hit shrinks p");
    }

    #[test]
    fn a_plain_delete_leaves_no_ghost() {
        let mut p = Arc::default();
        p.on_stored(&[key(0), key(1)]);
        p.on_removed(&[key(0)], DeleteCause::Deleted);
        assert_eq!(p.list_sizes(), [1, 0, 0, 0]);
        p.on_stored(&[key(0)]);
        assert_eq!(p.list_sizes(), [2, 0, 0, 0], "back in T1, not T2");
    }
}
