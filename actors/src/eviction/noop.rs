//! `noop`: never evict (LMCache's `noop`). Tracks nothing, so it costs nothing.

use super::EvictionPolicy;
use crate::key::ObjectKey;

/// The policy that never evicts. No settings.
#[derive(Debug, Default)]
pub struct Noop;

impl EvictionPolicy for Noop {
    fn name(&self) -> &'static str {
        "noop"
    }

    fn on_stored(&mut self, _: &ObjectKey, _: u64) {}

    fn on_accessed(&mut self, _: &ObjectKey) {}

    fn on_removed(&mut self, _: &ObjectKey) {}

    fn candidates(&self, _: usize) -> Vec<ObjectKey> {
        Vec::new()
    }

    fn len(&self) -> usize {
        0
    }
}
