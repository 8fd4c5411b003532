//! What the eviction actor holds per adapter: the policy with its [`SizeBook`] and settings
//! ([`PolicyState`]), fed by the adapter's usage events in order. The offline simulator of
//! `kvtier bench --simulate` drives the same type with a model ledger.
//!
//! Invariants: the size book mirrors the event stream (a key is in it from its `Stored` event
//! until its `Deleted` one, at its last size), and so do the policy's tracked keys; neither is
//! reconciled against the backend's ledger, because the events are the ledger's changes in
//! order. Plain data owned by one actor; no lock.

use std::collections::HashMap;

use super::policy::{policy, EvictionPolicy, Pressure};
use crate::config::{EvictionConfig, Quotas};
use crate::key::{KeyMap, ObjectKey};
use crate::messages::{DeleteCause, EvictGroup};

/// Sizes of the tracked keys and bytes per cache salt (`""` for unsalted keys), built from the
/// usage events. Invariant: the bytes recorded for salt `s` are the sum of the sizes of the tracked keys of `s`.
#[derive(Debug, Default)]
pub(crate) struct SizeBook {
    sizes: KeyMap<u64>,
    by_salt: HashMap<String, (u64, usize)>,
}

impl SizeBook {
    /// Records (or replaces) the size of a key.
    pub(crate) fn insert(&mut self, key: &ObjectKey, size: u64) {
        let old = self.sizes.insert(key.clone(), size);
        let e = self
            .by_salt
            .entry(key.cache_salt().unwrap_or("").to_owned())
            .or_default();
        match old {
            Some(o) => e.0 = e.0 - o + size,
            None => {
                e.0 += size;
                e.1 += 1;
            }
        }
    }

    /// Forgets a key; returns its size.
    pub(crate) fn remove(&mut self, key: &ObjectKey) -> Option<u64> {
        let size = self.sizes.remove(key)?;
        let salt = key.cache_salt().unwrap_or("");
        if let Some(e) = self.by_salt.get_mut(salt) {
            e.0 -= size;
            e.1 -= 1;
            if e.1 == 0 {
                self.by_salt.remove(salt);
            }
        }
        Some(size)
    }

    /// The size of a tracked key.
    pub(crate) fn size(&self, key: &ObjectKey) -> Option<u64> {
        self.sizes.get(key).copied()
    }

    /// Every salt with tracked keys, with its bytes and key count, sorted by salt.
    pub(crate) fn salts(&self) -> Vec<(&str, u64, usize)> {
        let mut v: Vec<_> = self
            .by_salt
            .iter()
            .map(|(s, (b, n))| (s.as_str(), *b, *n))
            .collect();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        v
    }

    #[cfg(test)]
    /// Bytes of every tracked key.
    pub(crate) fn total_bytes(&self) -> u64 {
        self.by_salt.values().map(|e| e.0).sum()
    }
}

/// One adapter's policy with its size book and settings: what the eviction actor holds per
/// adapter, and what the offline simulator drives. Feed it the events in order; ask it for
/// a plan with the backend's usage.
pub struct PolicyState {
    policy: Box<dyn EvictionPolicy>,
    book: SizeBook,
    config: EvictionConfig,
}

impl PolicyState {
    /// A fresh state for these settings.
    pub fn new(config: EvictionConfig) -> Self {
        Self {
            policy: policy(&config),
            book: SizeBook::default(),
            config,
        }
    }

    /// The policy's name.
    pub fn name(&self) -> &'static str {
        self.policy.name()
    }

    /// The settings in force (quotas as changed at run time).
    pub(crate) fn config(&self) -> &EvictionConfig {
        &self.config
    }

    /// Keys were stored with these sizes (request order).
    pub fn stored(&mut self, keys: &[ObjectKey], sizes: &[u64]) {
        for (k, s) in keys.iter().zip(sizes) {
            self.book.insert(k, *s);
        }
        self.policy.on_stored(keys);
    }

    /// Lookups hit these keys (request order).
    pub fn accessed(&mut self, keys: &[ObjectKey]) {
        self.policy.on_accessed(keys);
    }

    /// The keys are gone, for `cause`.
    pub fn removed(&mut self, keys: &[ObjectKey], cause: DeleteCause) {
        for k in keys {
            self.book.remove(k);
        }
        self.policy.on_removed(keys, cause);
    }

    /// The round to run now (empty: none), given the backend's usage and capacity.
    pub fn plan(&mut self, used_bytes: u64, capacity_bytes: u64) -> Vec<EvictGroup> {
        let pressure = Pressure {
            used_bytes,
            capacity_bytes,
            config: &self.config,
        };
        self.policy.plan(&pressure, &self.book)
    }

    /// Sets (`Some`) or removes (`None`) the quota of a cache salt; returns the previous one.
    /// Only `IsolatedLRU` reads quotas; the change applies at the next plan.
    pub(crate) fn set_quota(&mut self, cache_salt: &str, limit_bytes: Option<u64>) -> Option<u64> {
        match limit_bytes {
            Some(l) => self.config.quotas.0.insert(cache_salt.to_owned(), l),
            None => self.config.quotas.0.remove(cache_salt),
        }
    }

    /// The quotas in force.
    pub(crate) fn quotas(&self) -> &Quotas {
        &self.config.quotas
    }

    /// Every tracked key in eviction order.
    pub(crate) fn order(&self) -> Vec<ObjectKey> {
        self.policy.victims().cloned().collect()
    }

    /// Keys tracked.
    pub fn len(&self) -> usize {
        self.policy.len()
    }

    /// True when nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.policy.is_empty()
    }
}
