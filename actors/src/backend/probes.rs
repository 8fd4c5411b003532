//! What a lookup must know when its probes return: the deletions and writes that started (or,
//! for writes, ended) while any probe was in flight.
//!
//! Invariants: a probe that started at epoch `e` (from [`Probes::start`]) sees every deletion
//! and every write start or end after `e`: [`Probes::deleted_since`] and
//! [`Probes::written_since`] answer true for them; they never answer true for one before `e`.
//! Only events while a probe is in flight are remembered, and the memory is cleared when the
//! last probe ends, so it stays small. Owned by the backend actor; no lock.

use crate::key::{KeyMap, ObjectKey};

/// What a lookup needs to know when its probes return: whether a deletion of one of its keys
/// started after they were sent, and whether a write of one started or ended since. A probe
/// that saw the object before such a deletion must not lock it (the load would miss a locked
/// key), whether the deletion has ended by then or not. A probe that raced a write may have
/// seen the object before or after it, so its size must not overwrite the ledger's (which
/// follows the writes). Only deletions and writes seen while a probe is in flight are
/// remembered, so this stays small.
#[derive(Debug, Default)]
pub(super) struct Probes {
    in_flight: u32,
    /// Counts deletions started and writes started or ended; a probe remembers the count at
    /// its start.
    epoch: u64,
    /// Keys whose deletion started while a probe was in flight, with the epoch it started in.
    deleted: KeyMap<u64>,
    /// Keys whose write started or ended while a probe was in flight, with the latest epoch.
    written: KeyMap<u64>,
}

impl Probes {
    /// A probe starts: returns the epoch to hand to [`Probes::end`].
    pub(super) fn start(&mut self) -> u64 {
        self.in_flight += 1;
        self.epoch
    }

    /// Deletions of `keys` start.
    pub(super) fn deleting<'a>(&mut self, keys: impl Iterator<Item = &'a ObjectKey>) {
        self.epoch += 1;
        if self.in_flight > 0 {
            for k in keys {
                self.deleted.insert(k.clone(), self.epoch);
            }
        }
    }

    /// Writes of `keys` start or end.
    pub(super) fn writing<'a>(&mut self, keys: impl Iterator<Item = &'a ObjectKey>) {
        self.epoch += 1;
        if self.in_flight > 0 {
            for k in keys {
                self.written.insert(k.clone(), self.epoch);
            }
        }
    }

    /// Whether a write of `key` started or ended after the probe that started at `since`.
    pub(super) fn written_since(&self, key: &ObjectKey, since: u64) -> bool {
        self.written.get(key).is_some_and(|&e| e > since)
    }

    /// Whether a deletion of `key` started after the probe that started at `since`.
    pub(super) fn deleted_since(&self, key: &ObjectKey, since: u64) -> bool {
        self.deleted.get(key).is_some_and(|&e| e > since)
    }

    /// A probe ended.
    pub(super) fn end(&mut self) {
        self.in_flight -= 1;
        if self.in_flight == 0 {
            self.deleted.clear();
            self.written.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(hash: u8) -> ObjectKey {
        ObjectKey::new("m", 0, vec![hash]).unwrap()
    }

    #[test]
    fn a_probe_sees_deletions_and_writes_after_its_start_only() {
        let mut p = Probes::default();
        let first = p.start();
        p.deleting([key(1)].iter());
        let second = p.start();
        p.writing([key(2)].iter());
        assert!(p.deleted_since(&key(1), first));
        assert!(
            !p.deleted_since(&key(1), second),
            "started before the second probe"
        );
        assert!(p.written_since(&key(2), first));
        assert!(p.written_since(&key(2), second));
        assert!(!p.deleted_since(&key(2), first));
        assert!(!p.written_since(&key(1), first));
    }

    #[test]
    fn nothing_is_remembered_without_a_probe_and_all_is_forgotten_after_the_last() {
        let mut p = Probes::default();
        p.deleting([key(1)].iter());
        let since = p.start();
        assert!(!p.deleted_since(&key(1), since));
        let other = p.start();
        p.writing([key(3)].iter());
        p.end();
        // One probe still in flight: still remembered.
        assert!(p.written_since(&key(3), other));
        p.end();
        assert!(p.written.is_empty() && p.deleted.is_empty());
        // A later deletion of the same key is new to a later probe.
        let later = p.start();
        p.deleting([key(1)].iter());
        assert!(p.deleted_since(&key(1), later));
    }
}
