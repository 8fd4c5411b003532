//! `noop`: never evict (LMCache's `noop`). Tracks nothing, so it costs nothing.

use super::{EvictionPolicy, Pressure, SizeBook};
use crate::key::ObjectKey;
use crate::messages::{DeleteCause, EvictGroup};

/// The policy that never evicts. No settings.
#[derive(Debug, Default)]
pub(super) struct Noop;

impl EvictionPolicy for Noop {
    fn name(&self) -> &'static str {
        "noop"
    }

    fn on_stored(&mut self, _: &[ObjectKey]) {}

    fn on_accessed(&mut self, _: &[ObjectKey]) {}

    fn on_removed(&mut self, _: &[ObjectKey], _: DeleteCause) {}

    fn victims(&self) -> Box<dyn Iterator<Item = &ObjectKey> + '_> {
        Box::new(std::iter::empty())
    }

    fn len(&self) -> usize {
        0
    }

    fn plan(&mut self, _: &Pressure<'_>, _: &SizeBook) -> Vec<EvictGroup> {
        Vec::new()
    }
}
