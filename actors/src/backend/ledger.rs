//! The usage ledger: bytes per key, in total and per cache salt.
//!
//! Invariants: `used` is the sum of `sizes`, and each `by_salt` entry the sum over that salt's
//! keys (a salt whose bytes reach 0 leaves the map); a key counts once, at the size of its
//! last [`Ledger::insert`] (a re-store with another size moves usage by the difference); usage
//! never goes below zero; `seq` is bumped by every change and by nothing else, so two readings
//! with one `seq` saw the same ledger. It is the only record of usage in the runtime (events
//! carry its total); only the backend actor holds one, so it needs no lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::key::{KeyMap, ObjectKey};
use crate::messages::{AdapterIndex, Usage};

/// Bytes accounted per key, in total and per cache salt.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    sizes: KeyMap<u64>,
    used: u64,
    by_salt: HashMap<Option<Arc<str>>, u64>,
    /// Bumped on every change: orders readings of `used` (see [`UsageEvent::ledger_seq`]).
    seq: u64,
}

impl Ledger {
    /// Records a key; returns true when it was new. A changed size moves usage by the difference.
    pub(super) fn insert(&mut self, key: &ObjectKey, size: u64) -> bool {
        self.seq += 1;
        let salt = self
            .by_salt
            .entry(key.cache_salt_arc().cloned())
            .or_default();
        match self.sizes.insert(key.clone(), size) {
            None => {
                self.used += size;
                *salt += size;
                true
            }
            Some(old) => {
                self.used = self.used.saturating_sub(old) + size;
                *salt = salt.saturating_sub(old) + size;
                false
            }
        }
    }

    /// Forgets a key; returns the size it had. Usage never goes below zero.
    pub(super) fn remove(&mut self, key: &ObjectKey) -> Option<u64> {
        let size = self.sizes.remove(key)?;
        self.seq += 1;
        self.used = self.used.saturating_sub(size);
        let salt = key.cache_salt_arc().cloned();
        if let Some(b) = self.by_salt.get_mut(&salt) {
            *b = b.saturating_sub(size);
            if *b == 0 {
                self.by_salt.remove(&salt);
            }
        }
        Some(size)
    }

    /// The size recorded for `key`.
    pub(super) fn get(&self, key: &ObjectKey) -> Option<u64> {
        self.sizes.get(key).copied()
    }

    /// Whether `key` is recorded.
    pub(super) fn contains(&self, key: &ObjectKey) -> bool {
        self.sizes.contains_key(key)
    }

    /// The number of keys recorded.
    pub(super) fn len(&self) -> usize {
        self.sizes.len()
    }

    /// Bytes used, all keys.
    pub(super) fn used(&self) -> u64 {
        self.used
    }

    /// The change count (see [`crate::messages::UsageEvent::ledger_seq`]).
    pub(super) fn seq(&self) -> u64 {
        self.seq
    }

    /// Bytes per cache salt (`""`: no salt), salts with bytes only.
    pub(super) fn by_salt(&self) -> impl Iterator<Item = (&str, u64)> {
        self.by_salt
            .iter()
            .filter(|(_, b)| **b > 0)
            .map(|(s, b)| (s.as_deref().unwrap_or(""), *b))
    }

    /// The usage report of adapter `index` with `capacity_bytes` (fraction `-1.0` when 0).
    pub(super) fn usage(&self, index: AdapterIndex, capacity_bytes: u64) -> Usage {
        let fraction = if capacity_bytes == 0 {
            -1.0
        } else {
            self.used as f64 / capacity_bytes as f64
        };
        Usage {
            adapter: index,
            used_bytes: self.used,
            capacity_bytes,
            ledger_seq: self.seq,
            fraction,
            keys: self.sizes.len(),
            node_used_bytes: None,
            bytes_by_cache_salt: self
                .by_salt()
                .map(|(s, b)| (s.to_owned(), b))
                .collect::<BTreeMap<_, _>>(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(hash: u8, salt: Option<&str>) -> ObjectKey {
        let k = ObjectKey::new("m", 0, vec![hash]).unwrap();
        match salt {
            Some(s) => k.with_salt(s).unwrap(),
            None => k,
        }
    }

    fn salts(l: &Ledger) -> BTreeMap<String, u64> {
        l.by_salt().map(|(s, b)| (s.to_owned(), b)).collect()
    }

    #[test]
    fn new_keys_add_and_restores_move_by_the_difference() {
        let mut l = Ledger::default();
        assert!(l.insert(&key(1, None), 100));
        assert!(l.insert(&key(2, Some("a")), 50));
        assert_eq!((l.used(), l.len()), (150, 2));
        // The same size again: not new, nothing moves.
        assert!(!l.insert(&key(1, None), 100));
        assert_eq!(l.used(), 150);
        // Another size: usage moves by the difference, the key still counts once.
        assert!(!l.insert(&key(1, None), 40));
        assert_eq!((l.used(), l.len(), l.get(&key(1, None))), (90, 2, Some(40)));
        assert_eq!(
            salts(&l),
            BTreeMap::from([("".into(), 40), ("a".into(), 50)])
        );
    }

    #[test]
    fn removal_returns_the_size_and_empties_salts() {
        let mut l = Ledger::default();
        l.insert(&key(1, Some("a")), 10);
        l.insert(&key(2, Some("b")), 20);
        assert_eq!(l.remove(&key(1, Some("a"))), Some(10));
        assert_eq!(l.remove(&key(1, Some("a"))), None);
        assert!(!l.contains(&key(1, Some("a"))));
        assert_eq!(l.used(), 20);
        assert_eq!(salts(&l), BTreeMap::from([("b".into(), 20)]));
        assert!(!l.by_salt.contains_key(&Some(Arc::from("a"))));
    }

    #[test]
    fn seq_counts_changes_only() {
        let mut l = Ledger::default();
        let s0 = l.seq();
        l.insert(&key(1, None), 10);
        let s1 = l.seq();
        assert!(s1 > s0);
        // Removing an unknown key changes nothing, so the count stays.
        assert_eq!(l.remove(&key(9, None)), None);
        assert_eq!(l.seq(), s1);
        l.remove(&key(1, None));
        assert!(l.seq() > s1);
    }

    #[test]
    fn usage_reports_fraction_and_salts() {
        let mut l = Ledger::default();
        l.insert(&key(1, None), 256);
        l.insert(&key(2, Some("s")), 256);
        let u = l.usage(3, 1024);
        assert_eq!((u.adapter, u.used_bytes, u.keys), (3, 512, 2));
        assert_eq!(u.fraction, 0.5);
        assert_eq!(u.ledger_seq, l.seq());
        assert_eq!(u.bytes_by_cache_salt.get("s"), Some(&256));
        assert_eq!(l.usage(3, 0).fraction, -1.0);
    }
}
