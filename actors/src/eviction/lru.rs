//! `LRU`: evict the least recently used keys first (LMCache's default policy).
//!
//! Stores and lookup hits refresh a key; loads do not (they follow a lookup, which already did).
//! Invariant: every tracked key appears once, ordered from least to most recently used.

use lru::LruCache;

use super::EvictionPolicy;
use crate::key::{BuildDigestHasher, ObjectKey};

/// The LRU policy. It has no settings of its own: when and how much to evict is decided by the
/// adapter's `eviction` table (`trigger_watermark`, `eviction_ratio`), as in LMCache.
pub struct Lru {
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

    fn on_stored(&mut self, key: &ObjectKey, _size: u64) {
        self.order.put(key.clone(), ());
    }

    fn on_accessed(&mut self, key: &ObjectKey) {
        self.order.promote(key);
    }

    fn on_removed(&mut self, key: &ObjectKey) {
        self.order.pop(key);
    }

    fn candidates(&self, n: usize) -> Vec<ObjectKey> {
        self.order
            .iter()
            .rev()
            .take(n)
            .map(|(k, _)| k.clone())
            .collect()
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

    #[test]
    fn least_recent_first_and_access_refreshes() {
        let mut p = Lru::default();
        for i in 0..4 {
            p.on_stored(&key(i), 10);
        }
        p.on_accessed(&key(0));
        p.on_removed(&key(2));
        assert_eq!(p.candidates(10), vec![key(1), key(3), key(0)]);
        p.on_stored(&key(1), 10);
        assert_eq!(p.candidates(1), vec![key(3)]);
        assert_eq!(p.len(), 3);
    }
}
