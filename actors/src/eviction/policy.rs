//! The policy seam: the [`EvictionPolicy`] trait every policy implements (one file each:
//! `lru.rs`, `arc.rs`, `isolated_lru.rs`, `flru.rs`, `noop.rs`), what a plan is made
//! from ([`Pressure`]), LMCache's watermark rule ([`global_round`], [`ratio_group`]) and the
//! factory that builds the configured policy ([`policy`]).
//!
//! Invariants every policy keeps are on the trait. A policy is plain data: the eviction actor
//! (or the simulator) owns it and feeds it events in order; it has no lock and no I/O.

use super::state::SizeBook;
use super::{arc, flru, isolated_lru, lru, noop};
use crate::config::{
    bytes_for_ratio, keys_for_ratio, EvictionConfig, EvictionPolicy as PolicyName, EvictionUnit,
    FlruAdmission,
};
use crate::key::ObjectKey;
use crate::messages::{DeleteCause, EvictGroup};

/// How many candidates beyond a group's budget are offered, so locked keys can be skipped.
pub(crate) const EXTRA_CANDIDATES: usize = 1024;

/// What decides which keys go first. Fed with an adapter's usage events, in order (each batch
/// in the order of the request that caused it); asked for a round's plan.
///
/// Invariants every policy keeps: a key is tracked from its first `on_stored` until its
/// `on_removed`; `victims` names only tracked keys, each once, first victim first; `len` is
/// the number of tracked keys. Unknown keys given to `on_accessed` or `on_removed` are ignored.
pub(crate) trait EvictionPolicy: Send + 'static {
    /// The policy's name as configured (`LRU`, `ARC`, `IsolatedLRU`, `FLRU`, `noop`).
    fn name(&self) -> &'static str;
    /// Keys were written (or re-written), in request order. Their sizes are in the book.
    fn on_stored(&mut self, keys: &[ObjectKey]);
    /// Lookups hit these keys, or a [`Touch`](crate::messages::Touch) marked them, in request
    /// order.
    fn on_accessed(&mut self, keys: &[ObjectKey]);
    /// The keys are gone, all for `cause` ([`DeleteCause::Evicted`]: a round removed them; a
    /// policy that keeps ghosts of its evictions keeps them for these only).
    fn on_removed(&mut self, keys: &[ObjectKey], cause: DeleteCause);
    /// Every tracked key in eviction order, first victim first.
    fn victims(&self) -> Box<dyn Iterator<Item = &ObjectKey> + '_>;
    /// Keys tracked.
    fn len(&self) -> usize;
    /// True when nothing is tracked.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The round to run now, if any: by default LMCache's global watermark rule over
    /// [`victims`](Self::victims) (see [`global_round`]).
    fn plan(&mut self, pressure: &Pressure<'_>, book: &SizeBook) -> Vec<EvictGroup> {
        global_round(self.victims(), self.len(), pressure, book)
    }
}

/// What a plan is made from: the adapter's usage as the backend reported it and its settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pressure<'a> {
    /// Bytes used (the backend ledger's total).
    pub used_bytes: u64,
    /// Capacity in bytes (0: no capacity).
    pub capacity_bytes: u64,
    /// The adapter's eviction settings, quotas included (as changed at run time).
    pub config: &'a EvictionConfig,
}

impl Pressure<'_> {
    /// True when usage is at or above `trigger_watermark × capacity` (never without capacity).
    pub(crate) fn over_watermark(&self) -> bool {
        self.capacity_bytes > 0
            && self.used_bytes as f64 >= self.config.trigger_watermark * self.capacity_bytes as f64
    }
}

/// LMCache's global rule: nothing under the watermark; else one group of `victims` sized by
/// `eviction_ratio` of the `tracked` keys (or of the used bytes, with `eviction_unit = "bytes"`).
///
/// With `eviction_unit = "bytes"` a round also catches up: when stores outran eviction and the
/// usage is past the watermark, it frees at least down to where a round started exactly at the
/// watermark would end (`watermark × capacity × (1 − ratio)`). Without that, small rounds (the
/// 0.5 % of `FLRU`) fall behind a fast writer, one round per store batch, and the tier
/// grows past its capacity. The `keys` unit keeps LMCache's rule exactly.
pub(crate) fn global_round<'a>(
    victims: impl Iterator<Item = &'a ObjectKey>,
    tracked: usize,
    pressure: &Pressure<'_>,
    book: &SizeBook,
) -> Vec<EvictGroup> {
    if !pressure.over_watermark() {
        return Vec::new();
    }
    let c = pressure.config;
    let used = pressure.used_bytes;
    let mut ratio = c.eviction_ratio;
    if c.eviction_unit == EvictionUnit::Bytes && used > 0 && ratio > 0.0 {
        let floor = c.trigger_watermark * pressure.capacity_bytes as f64 * (1.0 - ratio);
        ratio = ratio.max((used as f64 - floor) / used as f64).min(1.0);
    }
    ratio_group(victims, tracked, used, ratio, c.eviction_unit, book)
        .into_iter()
        .collect()
}

/// One group over `victims`: `floor(keys × ratio)` keys (unit `keys`) or enough keys to free
/// `ceil(bytes × ratio)` bytes (unit `bytes`), plus [`EXTRA_CANDIDATES`] spares for locked keys.
pub(crate) fn ratio_group<'a>(
    victims: impl Iterator<Item = &'a ObjectKey>,
    keys: usize,
    bytes: u64,
    ratio: f64,
    unit: EvictionUnit,
    book: &SizeBook,
) -> Option<EvictGroup> {
    match unit {
        EvictionUnit::Keys => {
            let count = keys_for_ratio(ratio, keys);
            if count == 0 {
                return None;
            }
            let candidates: Vec<ObjectKey> =
                victims.take(count + EXTRA_CANDIDATES).cloned().collect();
            (!candidates.is_empty()).then_some(EvictGroup {
                candidates,
                max_keys: count,
                min_bytes: 0,
            })
        }
        EvictionUnit::Bytes => {
            let target = bytes_for_ratio(ratio, bytes);
            if target == 0 {
                return None;
            }
            let (mut acc, mut extra) = (0u64, 0usize);
            let mut candidates = Vec::new();
            for k in victims {
                if acc >= target {
                    if extra == EXTRA_CANDIDATES {
                        break;
                    }
                    extra += 1;
                }
                acc += book.size(k).unwrap_or(0);
                candidates.push(k.clone());
            }
            (!candidates.is_empty()).then(|| EvictGroup {
                max_keys: candidates.len(),
                candidates,
                min_bytes: target,
            })
        }
    }
}

/// A new policy of the configured name, with the settings of its own that `config` holds.
pub(super) fn policy(config: &EvictionConfig) -> Box<dyn EvictionPolicy> {
    match config.eviction_policy {
        PolicyName::Lru => Box::new(lru::Lru::default()),
        PolicyName::Arc => Box::new(arc::Arc::default()),
        PolicyName::IsolatedLru => Box::new(isolated_lru::IsolatedLru::default()),
        PolicyName::Flru => Box::new(flru::Flru::new(
            config.flru_bonus(),
            match config.flru_admission.unwrap_or_default() {
                FlruAdmission::Adaptive => &flru::MODES,
                FlruAdmission::Rates => &flru::RATE_LOW_MODE,
            },
        )),
        PolicyName::Noop => Box::new(noop::Noop),
    }
}
