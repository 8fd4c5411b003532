//! Keys the adapter's name format cannot name (a non-zero `object_group_id` in the `seed`
//! format, see [`ObjectKey::check_name_format`]) never reach the storage: a store fails for that
//! key, a lookup and a load miss (the buffer comes back untouched), a delete skips it.
//!
//! Invariant: [`merge_unnameable`] puts each refused item back at the position it had in the
//! request, so results stay aligned with keys.

use super::BackendActor;
use crate::buffer::LoadBuf;
use crate::key::ObjectKey;
use crate::storage::{BackendError, Fetched};

impl BackendActor {
    /// Whether the storage can name `key` in its format.
    pub(super) fn nameable(&self, key: &ObjectKey) -> bool {
        key.check_name_format(self.format).is_ok()
    }

    /// `Ok` for a key the storage can name; otherwise the per-key error of a refused store.
    pub(super) fn check_nameable(&self, key: &ObjectKey) -> Result<(), String> {
        key.check_name_format(self.format)
            .map_err(|e| self.context(&BackendError::invalid(e.to_string())))
    }

    /// Splits a load's items into those the storage can name and, with their positions, the
    /// others (their lent buffers are dropped here untouched, and go home; see
    /// [`merge_unnameable`]).
    pub(super) fn split_unnameable(
        &self,
        items: Vec<(ObjectKey, LoadBuf)>,
    ) -> (Vec<(ObjectKey, LoadBuf)>, Vec<Unnameable>) {
        if items.iter().all(|(k, _)| self.nameable(k)) {
            return (items, Vec::new());
        }
        let mut named = Vec::with_capacity(items.len());
        let mut refused = Vec::new();
        for (i, (key, buf)) in items.into_iter().enumerate() {
            match self.check_nameable(&key) {
                Ok(()) => named.push((key, buf)),
                Err(reason) => refused.push((i, BackendError::invalid(reason))),
            }
        }
        (named, refused)
    }
}

/// A load item kept from the storage: its position, and why.
pub(super) type Unnameable = (usize, BackendError);

/// Puts the items [`BackendActor::split_unnameable`] kept from the storage back at their
/// positions, as failed reads (misses that leave the ledger alone).
pub(super) fn merge_unnameable(
    mut results: Vec<Result<Fetched, BackendError>>,
    unnameable: Vec<Unnameable>,
) -> Vec<Result<Fetched, BackendError>> {
    // Ascending positions: each insert lands where the request had it.
    for (i, err) in unnameable {
        results.insert(i, Err(err));
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_items_go_back_to_their_positions() {
        let results = vec![Ok(Fetched::Hit), Ok(Fetched::Absent)];
        let refused = vec![
            (0, BackendError::invalid("a")),
            (2, BackendError::invalid("b")),
        ];
        let merged = merge_unnameable(results, refused);
        assert_eq!(merged.len(), 4);
        assert!(merged[0].is_err());
        assert!(matches!(merged[1], Ok(Fetched::Hit)));
        assert!(merged[2].is_err());
        assert!(matches!(merged[3], Ok(Fetched::Absent)));
    }
}
