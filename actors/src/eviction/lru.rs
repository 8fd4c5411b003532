//! `LRU`: evict the least recently used keys first (LMCache's default policy).
//!
//! Stores and lookup hits refresh a key; loads do not (they follow a lookup, which already did).
//! Within one batch, keys are refreshed in reverse request order, as LMCache does, so the last
//! chunk of a request is the first of its batch to go: a prefix match needs the first chunks,
//! and evicting a first chunk would make every later chunk of the request unreachable.
//!
//! Invariant: every tracked key appears once, ordered from least to most recently used.

use lru::LruCache;

use super::EvictionPolicy;
use crate::key::{BuildDigestHasher, ObjectKey};
use crate::messages::DeleteCause;

/// The LRU policy. It has no settings of its own: when and how much to evict is decided by the
/// adapter's `eviction` table (`trigger_watermark`, `eviction_ratio`, `eviction_unit`), as in
/// LMCache.
pub(super) struct Lru {
    order: LruCache<ObjectKey, (), BuildDigestHasher>,
}

impl Default for Lru {
    fn default() -> Self {
        Self {
            order: LruCache::unbounded_with_hasher(BuildDigestHasher::default()),
        }
    }
}

impl EvictionPolicy for Lru {
    fn name(&self) -> &'static str {
        "LRU"
    }

    fn on_stored(&mut self, keys: &[ObjectKey]) {
        for key in keys.iter().rev() {
            self.order.put(key.clone(), ());
        }
    }

    fn on_accessed(&mut self, keys: &[ObjectKey]) {
        for key in keys.iter().rev() {
            self.order.promote(key);
        }
    }

    fn on_removed(&mut self, keys: &[ObjectKey], _: DeleteCause) {
        for key in keys {
            self.order.pop(key);
        }
    }

    fn victims(&self) -> Box<dyn Iterator<Item = &ObjectKey> + '_> {
        Box::new(self.order.iter().rev().map(|(k, _)| k))
    }

    fn len(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u8) -> ObjectKey {
        ObjectKey::new("m", 0, vec![i]).unwrap()
    }

    fn order(p: &Lru) -> Vec<ObjectKey> {
        p.victims().cloned().collect()
    }

    #[test]
    fn least_recent_first_and_access_refreshes() {
        let mut p = Lru::default();
        for i in 0..4 {
            p.on_stored(&[key(i)]);
        }
        p.on_accessed(&[key(0)]);
        p.on_removed(&[key(2)], DeleteCause::Evicted);
        assert_eq!(order(&p), vec![key(1), key(3), key(0)]);
        p.on_stored(&[key(1)]);
        assert_eq!(order(&p)[0], key(3));
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn a_batch_goes_tail_first() {
        let mut p = Lru::default();
        p.on_stored(&[key(0), key(1), key(2)]);
        assert_eq!(order(&p), vec![key(2), key(1), key(0)]);
        p.on_stored(&[key(9)]);
        p.on_accessed(&[key(0), key(1)]);
        assert_eq!(order(&p), vec![key(2), key(9), key(1), key(0)]);
    }
}
