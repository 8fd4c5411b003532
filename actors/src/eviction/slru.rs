//! `SLRU`: kvtier's segmented LRU for prefix caches (not an LMCache policy).
//!
//! Built on three facts of KV-cache traffic (see BENCHMARKS.md, "Eviction policies"): most
//! chunks are never requested again; a chunk requested a second time is very likely requested
//! again; and the last chunk of a request is rarely reused (the next turn of a conversation
//! diverges there). Resident keys are in one of three segments:
//!
//! * `tail`: the last key of a stored batch, seen once: the first to go;
//! * `probation`: other keys seen once (stored, not yet hit);
//! * `protected`: keys hit again (a lookup hit or a second store), or stored again soon after
//!   a round evicted them from probation (their name is kept in a bounded `ghost` list; the
//!   `Deleted` event's cause, [`DeleteCause::Evicted`], tells an eviction from other removals).
//!
//! Victims: `tail` (least recent first), then `probation` while it holds more than
//! [`PROBATION_SHARE`] of the resident keys (or `protected` is empty), then `protected`, each in
//! LRU order. Within a batch keys are handled in reverse request order, so a request's later
//! chunks go before its first ones. The ghost list holds at most as many names as the largest
//! resident count seen.
//!
//! Its defaults (`trigger_watermark` [`crate::config::SLRU_WATERMARK`], `eviction_ratio`
//! [`crate::config::SLRU_RATIO`] of the bytes) keep the tier nearly full instead of LMCache's
//! 64–80 %. Invariant: a key is in at most one segment or the ghost list.

use lru::LruCache;

use super::{global_round, EvictionPolicy, Pressure, SizeBook};
use crate::key::{BuildDigestHasher, ObjectKey};
use crate::messages::{DeleteCause, EvictGroup};

type List = LruCache<ObjectKey, (), BuildDigestHasher>;

fn list() -> List {
    LruCache::unbounded_with_hasher(BuildDigestHasher::default())
}

/// Largest share of resident keys `probation` keeps before `protected` keys are evicted.
pub const PROBATION_SHARE: f64 = 0.25;

/// The SLRU policy. No settings of its own beyond the `eviction` table.
pub struct Slru {
    tail: List,
    probation: List,
    protected: List,
    ghost: List,
    capacity: usize,
}

impl Default for Slru {
    fn default() -> Self {
        Self {
            tail: list(),
            probation: list(),
            protected: list(),
            ghost: list(),
            capacity: 0,
        }
    }
}

impl Slru {
    /// Sizes of `tail`, `probation`, `protected`, `ghost` (for tests and diagnostics).
    pub fn segment_sizes(&self) -> [usize; 4] {
        [
            self.tail.len(),
            self.probation.len(),
            self.protected.len(),
            self.ghost.len(),
        ]
    }

    fn resident(&self) -> usize {
        self.tail.len() + self.probation.len() + self.protected.len()
    }

    /// A second touch: into `protected`, or refresh there.
    fn touch(&mut self, key: &ObjectKey) -> bool {
        if self.protected.contains(key) {
            self.protected.promote(key);
            true
        } else if self.probation.pop(key).is_some() || self.tail.pop(key).is_some() {
            self.protected.put(key.clone(), ());
            true
        } else {
            false
        }
    }
}

impl EvictionPolicy for Slru {
    fn name(&self) -> &'static str {
        "SLRU"
    }

    fn on_stored(&mut self, keys: &[ObjectKey]) {
        for (i, key) in keys.iter().enumerate().rev() {
            if self.touch(key) {
                continue;
            }
            if self.ghost.pop(key).is_some() {
                self.protected.put(key.clone(), ());
            } else if i + 1 == keys.len() && keys.len() > 1 {
                self.tail.put(key.clone(), ());
            } else {
                self.probation.put(key.clone(), ());
            }
        }
        self.capacity = self.capacity.max(self.resident());
    }

    fn on_accessed(&mut self, keys: &[ObjectKey]) {
        for key in keys.iter().rev() {
            self.touch(key);
        }
    }

    fn on_removed(&mut self, keys: &[ObjectKey], cause: DeleteCause) {
        for key in keys {
            self.tail.pop(key);
            self.protected.pop(key);
            if self.probation.pop(key).is_some() && cause == DeleteCause::Evicted {
                self.ghost.put(key.clone(), ());
            } else {
                self.ghost.pop(key);
            }
        }
        while self.ghost.len() > self.capacity && self.ghost.pop_lru().is_some() {}
    }

    fn victims(&self) -> Box<dyn Iterator<Item = &ObjectKey> + '_> {
        let tail = self.tail.iter().rev().map(|(k, _)| k);
        let mut prob = self.probation.iter().rev().map(|(k, _)| k);
        let mut prot = self.protected.iter().rev().map(|(k, _)| k);
        let (mut vp, mut vm) = (self.probation.len(), self.protected.len());
        let rest = std::iter::from_fn(move || {
            if vp > 0 && (vm == 0 || vp as f64 > PROBATION_SHARE * (vp + vm) as f64) {
                vp -= 1;
                return prob.next();
            }
            if vm > 0 {
                vm -= 1;
                return prot.next();
            }
            None
        });
        Box::new(tail.chain(rest))
    }

    fn len(&self) -> usize {
        self.resident()
    }

    fn plan(&mut self, pressure: &Pressure<'_>, book: &SizeBook) -> Vec<EvictGroup> {
        global_round(self.victims(), self.len(), pressure, book)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u8) -> ObjectKey {
        ObjectKey::new("m", 0, vec![i]).unwrap()
    }

    #[test]
    fn tail_then_probation_then_protected() {
        let mut p = Slru::default();
        p.on_stored(&[key(0), key(1), key(2), key(3)]);
        p.on_accessed(&[key(0)]);
        assert_eq!(p.segment_sizes(), [1, 2, 1, 0]);
        let order: Vec<ObjectKey> = p.victims().cloned().collect();
        assert_eq!(order, vec![key(3), key(2), key(1), key(0)]);
    }

    #[test]
    fn a_ghost_comes_back_protected() {
        let mut p = Slru::default();
        p.on_stored(&[key(0), key(1), key(2)]);
        p.on_removed(&[key(1)], DeleteCause::Evicted);
        assert_eq!(p.segment_sizes(), [1, 1, 0, 1]);
        p.on_stored(&[key(1)]);
        assert_eq!(p.segment_sizes(), [1, 1, 1, 0]);
    }

    #[test]
    fn a_plain_delete_leaves_no_ghost() {
        let mut p = Slru::default();
        p.on_stored(&[key(0), key(1), key(2)]);
        p.on_removed(&[key(1)], DeleteCause::Deleted);
        assert_eq!(p.segment_sizes(), [1, 1, 0, 0]);
        p.on_stored(&[key(1)]);
        assert_eq!(
            p.segment_sizes(),
            [1, 2, 0, 0],
            "back in probation, not protected"
        );
    }
}
