//! `FLRU`: kvtier's frequency-boosted LRU for prefix caches (not an LMCache policy).
//!
//! Every key has a priority, and the lowest goes first:
//!
//! ```text
//! priority = clock at the key's last touch + bonus × capacity × (uses − 1)
//! ```
//!
//! The clock counts key touches (a store or a lookup hit of one key is one tick); `capacity` is
//! the largest number of keys the policy has held at once (the tier's size in keys once it has
//! filled); `uses` is how often the key was stored or hit, including the times before an
//! eviction: a bounded [`History`] remembers the use count of keys that left. So a key used
//! `n` times stays as if it had been touched `bonus × (n − 1)` capacities later than it
//! was: LRU for keys used once, a frequency bonus for keys a workload keeps coming back to.
//!
//! **Admission.** A key stored for the first time (no count in the history) is *placed* in one
//! of three ways ([`Placement`]): at its touch as above; one capacity of clock earlier; or
//! below every key used more than once, so it stays only until the next round and is kept
//! for good only if it comes back while the history still remembers it (admission on the
//! second use). Which one pays depends on the workload: on Mooncake's traces most new chunks
//! are never used again and holding them costs the chunks that are; on multi-turn
//! conversations a new turn is what the next turn needs.
//!
//! **Rates.** Two more [`Mode`]s order the tier by a different score, computed when a round is
//! planned (it changes with time, so it is not kept in a sorted map):
//!
//! ```text
//! rate  = (uses − 1 + a) / (clock − first use + β × capacity)
//! score = rate × exp(−(clock − last touch) × rate / k)
//! ```
//!
//! `rate` is a key's uses per tick of clock over its whole life (first use from the history),
//! with `a` uses credited before the first ([`RatePrior`]: [`RATE_PRIOR_USES_LOW`] or
//! [`RATE_PRIOR_USES_HIGH`]) and [`RATE_PRIOR_CAPACITIES`] capacities added to its age so a
//! young key's few uses do not make a high rate; the second factor lets a key go once it has
//! been silent for about `k` ([`RATE_SILENCE`]) of the uses its rate expects. On Mooncake's
//! synthetic trace, where documents are asked about again at rates that differ by document and
//! drift over the trace, this keeps the popular documents of the moment better than FLRU's
//! bonus; the low prior treats new keys as nearly dead (the trace's reality), the high prior
//! as keys used a few times (workloads where every key comes back once). The real tier
//! recomputes its rate order every [`RATE_REFRESH`] capacities of touches and between two
//! computations offers none of the keys touched since.
//!
//! **Choosing.** The policy runs one *shadow tier* per mode ([`MODES`]: three placements, two
//! priors): each ranks the keys of one sixteenth of the key space (by digest,
//! [`SHADOW_SAMPLE`]) in a tier of one sixteenth of the capacity, and counts its hits with a
//! decay of [`SHADOW_HORIZON`] shadow capacities; the tier runs in LRU placement unless another
//! shadow has [`SHADOW_MARGIN`] more recent hits than the LRU one, and then in the mode of the
//! best shadow. `eviction.flru_admission = "rates"` ([`RATE_LOW_MODE`]) keeps the low-prior
//! rate order without shadows, for a user whose trace says it pays (the margin keeps the
//! adaptive choice in LRU placement where the rate order leads by less than
//! [`SHADOW_MARGIN`]). Sampled shadows estimate a tier's hit ratio well from a small share of
//! its keys (the idea of SHARDS, Waldspurger et al., FAST '15); they cost five small rankings,
//! not five tiers.
//!
//! Why this shape (measured on Mooncake's synthetic and conversation traces and on synthetic
//! multi-turn, used-twice and Zipf workloads, see docs/benchmarks.md, "Eviction policies"):
//!
//! * most chunks are never requested again, and a chunk requested a second time is likely
//!   requested again: the bonus keeps those through the long gaps between their uses, which
//!   plain LRU cannot;
//! * the first reuse of a chunk often comes long after its first store (beyond the tier's
//!   size), so the use count must survive eviction: that is the history;
//! * the order must be **prefix-consistent**: a request that uses chunk `i` of a prefix also
//!   uses chunks `0..i`, so a later chunk is never more recent nor more used than an earlier one
//!   of its prefix, and the priority (increasing in both) never ranks a chunk above its
//!   predecessors. Keys within a batch are touched in reverse request order (as `LRU` does),
//!   so the first chunk of a request is the most recent. Policies that order by frequency
//!   classes first (evict every once-used key before any twice-used one) break this on
//!   multi-turn conversations and fall far below LRU there; this one does not. A placement
//!   applies to every new chunk of a batch alike, so it keeps the order along the chunks a
//!   request stores. The rate score does not guarantee this order (a young suffix can have a
//!   higher rate than an old prefix); that is one reason the shadows, which count what each
//!   order actually hits, decide when it is used.
//!
//! The bonus ([`BONUS_PER_USE`] by default, `eviction.flru_bonus_per_use`) trades the two
//! kinds of workload: larger keeps more of the popular chunks of Mooncake's traces, smaller
//! suits chunks that are used a fixed few times (docs/benchmarks.md, "Eviction policies"). Its
//! defaults (`trigger_watermark` [`crate::config::FLRU_WATERMARK`], `eviction_ratio`
//! [`crate::config::FLRU_RATIO`] of the bytes) keep the tier full.
//!
//! Invariants: in every ranking (the tier's and each shadow's), every tracked key is in `order`
//! exactly once, under the priority stored in `resident`, whatever the mode (so a change of
//! mode needs no rebuild); a key is in `resident` or in that ranking's history, never both; a
//! key's first use is never after its last touch; the real tier's cached rate order is only
//! read through `resident` (keys gone, or touched since it was computed, are skipped); a
//! history holds at most `2 × HISTORY_FACTOR × capacity` (at least `2 × MIN_HISTORY`, scaled
//! by the sample for a shadow) names; a shadow holds at most `max(1, capacity /
//! SHADOW_SAMPLE)` keys after each use, all with digests that are multiples of
//! [`SHADOW_SAMPLE`].

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash};

use super::{global_round, EvictionPolicy, Pressure, SizeBook};
use crate::key::{BuildDigestHasher, ObjectKey};
use crate::messages::{DeleteCause, EvictGroup};

/// The default bonus of one use beyond the first, in capacities of clock (see the module
/// docs; `eviction.flru_bonus_per_use` changes it).
pub(crate) const BONUS_PER_USE: f64 = 0.4;

/// The largest use count that earns a bonus: a key used this often is as safe as it gets, so a
/// key that was hot once and then never again leaves after at most
/// `bonus × (MAX_USES − 1)` capacities of clock.
pub(super) const MAX_USES: u8 = 16;

/// The history keeps the use counts of up to this many times `capacity` departed keys per
/// generation (two generations).
pub(super) const HISTORY_FACTOR: usize = 16;

/// The smallest history generation, in names.
pub(super) const MIN_HISTORY: usize = 4096;

/// The shadows rank the keys whose digest is a multiple of this, in a tier this many times
/// smaller than the real one.
pub(super) const SHADOW_SAMPLE: u64 = 16;

/// Whether the shadows sample `key` (its digest is a multiple of [`SHADOW_SAMPLE`]). A fleet
/// node sends this with each key it touches in the index, so the index's shadows rank the keys
/// one node's would (the index sees names, not digests).
pub(crate) fn in_shadow_sample(key: &ObjectKey) -> bool {
    <BuildDigestHasher>::default()
        .hash_one(key)
        .is_multiple_of(SHADOW_SAMPLE)
}

/// A shadow's hit count decays by `1 / (SHADOW_HORIZON × shadow capacity)` per sampled use, so
/// it reflects about the last `SHADOW_HORIZON` tier-fulls of traffic.
pub(super) const SHADOW_HORIZON: f64 = 8.0;

/// Another placement replaces LRU placement only when its shadow has this much more (relative)
/// recent hits: LRU placement is the one that is never below LRU, so a noisy lead does not move
/// the tier off it (on a trace whose workload changes halfway, a margin of 0 fell to 0.99× LRU
/// at 40 %; docs/benchmarks.md, "Eviction policies").
pub(super) const SHADOW_MARGIN: f64 = 0.05;

/// One touch of the clock, in priority units (fine enough that a small capacity's fraction of
/// a tick still counts).
const TICK: u64 = 1024;

/// A capacity of `capacity` keys (at least 1) in priority units of clock.
fn in_clock(capacity: usize) -> f64 {
    capacity.max(1) as f64 * TICK as f64
}

/// Priorities of keys placed at their touch or demoted start here, so a demoted key never
/// goes below 0 and keys placed last (their clock only) stay below all of them.
const BASE: u64 = 1 << 56;

/// Use counts of keys that left the tier, by 64-bit key digest, in two generations: when the
/// current one is full it becomes the previous one and the oldest is dropped, so names are
/// forgotten in roughly the order they were written. A digest collision merges two keys' counts,
/// which only shifts a priority.
#[derive(Debug, Default)]
pub(super) struct History {
    current: HashMap<u64, Seen>,
    previous: HashMap<u64, Seen>,
}

/// What the history remembers of a departed key.
#[derive(Debug, Clone, Copy)]
struct Seen {
    uses: u8,
    /// Clock of its first known use.
    first: u64,
}

impl History {
    /// Takes what is remembered of `digest` out of the history.
    fn take(&mut self, digest: u64) -> Option<Seen> {
        match self.current.remove(&digest) {
            Some(c) => {
                self.previous.remove(&digest);
                Some(c)
            }
            None => self.previous.remove(&digest),
        }
    }

    /// Remembers `seen` for `digest`, rotating generations of at most `limit` names.
    fn put(&mut self, digest: u64, seen: Seen, limit: usize) {
        if self.current.len() >= limit {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(digest, seen);
    }

    #[cfg(test)]
    /// Names remembered.
    pub(super) fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    #[cfg(test)]
    /// True when no name is remembered.
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where a key goes in the order on its first known use (no count in the history).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Placement {
    /// At its touch, as LRU places it.
    Recent,
    /// One capacity of clock before its touch.
    Demoted,
    /// Below every key used more than once (new keys among themselves in LRU order): the key
    /// stays until the next round.
    Last,
}

/// What orders a tier (the real one or a shadow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// FLRU's priority, new keys placed so.
    Flru(Placement),
    /// The estimated request rate, discounted by silence (module docs, "Rates"); new keys are
    /// placed as LRU places them in the FLRU order kept beside it.
    Rates(RatePrior),
}

/// The uses a key is credited with before its first in `Rates` mode (`a` in the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RatePrior {
    /// [`RATE_PRIOR_USES_LOW`]: a new key ranks far below a key used twice.
    Low,
    /// [`RATE_PRIOR_USES_HIGH`]: a new key ranks as a key used a few times.
    High,
}

impl RatePrior {
    /// The prior in uses.
    pub(super) fn uses(self) -> f64 {
        match self {
            RatePrior::Low => RATE_PRIOR_USES_LOW,
            RatePrior::High => RATE_PRIOR_USES_HIGH,
        }
    }
}

impl Mode {
    /// Where a new key goes in the FLRU order.
    fn placement(self) -> Placement {
        match self {
            Mode::Flru(p) => p,
            Mode::Rates(_) => Placement::Recent,
        }
    }
}

/// The modes the shadows compare with `eviction.flru_admission = "adaptive"`, in order of
/// preference on a tie (the first, LRU placement, is the baseline the others need a margin
/// over).
pub(super) const MODES: [Mode; 5] = [
    Mode::Flru(Placement::Recent),
    Mode::Flru(Placement::Demoted),
    Mode::Flru(Placement::Last),
    Mode::Rates(RatePrior::Low),
    Mode::Rates(RatePrior::High),
];

/// The rate order with the low prior alone, without shadows (`flru_admission = "rates"`).
pub(super) const RATE_LOW_MODE: [Mode; 1] = [MODES[3]];

/// `Rates`: the low prior ([`RatePrior::Low`]).
pub(super) const RATE_PRIOR_USES_LOW: f64 = 0.1;

/// `Rates`: the high prior ([`RatePrior::High`]).
pub(super) const RATE_PRIOR_USES_HIGH: f64 = 3.0;

/// `Rates`: capacities of clock added to a key's age in its rate (`β` in the module docs), so a
/// young key's few uses do not make a high rate.
pub(super) const RATE_PRIOR_CAPACITIES: f64 = 2.0;

/// `Rates`: how many expected uses a key may miss before its score has fallen by `1/e` (`k` in
/// the module docs).
pub(super) const RATE_SILENCE: f64 = 0.7;

/// `Rates`: the real tier's rate order is recomputed once this share of a capacity of touches
/// has passed since the last one (keys touched since are not offered until then).
pub(super) const RATE_REFRESH: f64 = 1.0 / 64.0;

/// `Rates`: the real tier's rate order holds the lowest `capacity / 16` keys and this many
/// more (four times what one refresh period evicts, plus two rounds' spares for locked keys);
/// when a round finds none of them left to offer, the order is recomputed.
pub(super) const RATE_ORDER_EXTRA: usize = 2 * super::EXTRA_CANDIDATES;

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The key's place in `order`: (priority, clock of its last touch as tie-break).
    slot: (u64, u64),
    uses: u8,
    /// Clock of the key's first known use (kept through the history).
    first: u64,
}

impl Entry {
    /// The key's estimated request rate now, discounted by its silence (module docs, "Rates"):
    /// the lower, the sooner it goes.
    fn rate_score(&self, clock: u64, capacity: usize, prior: f64) -> f64 {
        let capacity = in_clock(capacity);
        let since_first = clock.saturating_sub(self.first) as f64;
        let since_last = clock.saturating_sub(self.slot.1) as f64;
        let rate =
            (f64::from(self.uses) - 1.0 + prior) / (since_first + RATE_PRIOR_CAPACITIES * capacity);
        rate * (-since_last * rate / RATE_SILENCE).exp()
    }
}

/// The order of one set of keys (the tier's, or a shadow's): priorities, use counts and the
/// history of departed keys. `K` names a key: the key itself for the tier, its digest for a
/// shadow (both hash as the digest).
#[derive(Debug)]
struct Ranking<K> {
    order: BTreeMap<(u64, u64), K>,
    resident: HashMap<K, Entry, BuildDigestHasher<K>>,
    history: History,
    clock: u64,
}

impl<K> Default for Ranking<K> {
    fn default() -> Self {
        Self {
            order: BTreeMap::new(),
            resident: HashMap::default(),
            history: History::default(),
            clock: 0,
        }
    }
}

/// What a touch needs besides the key.
#[derive(Debug, Clone, Copy)]
struct Touch {
    /// The key's digest (its name in the history).
    digest: u64,
    /// Whether an untracked key is taken in (a store) or ignored (a lookup hit).
    admit: bool,
    /// The capacity in keys that bonus and demotion are measured in.
    capacity: usize,
    bonus_per_use: f64,
    /// Where the key goes if this is its first known use.
    placement: Placement,
}

impl<K: Clone + Eq + Hash + nohash_hasher::IsEnabled> Ranking<K> {
    /// One use of `key`: a tracked key gains a use, an untracked one brings its history's
    /// count. Returns whether the key was tracked (a hit).
    fn touch(&mut self, key: &K, t: Touch) -> bool {
        self.clock += TICK;
        let (uses, first, hit) = match self.resident.get(key) {
            Some(e) => {
                self.order.remove(&e.slot);
                (e.uses.saturating_add(1), e.first, true)
            }
            None if t.admit => match self.history.take(t.digest) {
                Some(seen) => (seen.uses.saturating_add(1), seen.first, false),
                None => (1, self.clock, false),
            },
            None => return false,
        };
        let capacity = in_clock(t.capacity);
        let placement = if uses > 1 {
            Placement::Recent
        } else {
            t.placement
        };
        let priority = match placement {
            Placement::Recent => {
                let extra = f64::from(uses.min(MAX_USES) - 1);
                BASE + self.clock + (t.bonus_per_use * capacity * extra) as u64
            }
            Placement::Demoted => BASE + self.clock - (capacity as u64).min(BASE),
            Placement::Last => self.clock,
        };
        let slot = (priority, self.clock);
        self.order.insert(slot, key.clone());
        self.resident
            .insert(key.clone(), Entry { slot, uses, first });
        hit
    }

    /// The `first` tracked keys with the lowest [`Entry::rate_score`] now, lowest first (older
    /// last touch first on a tie): a linear selection, then a sort of those only.
    fn by_rate(&self, capacity: usize, prior: RatePrior, first: usize) -> Vec<(f64, u64, &K)> {
        let prior = prior.uses();
        let mut v: Vec<(f64, u64, &K)> = self
            .resident
            .iter()
            .map(|(k, e)| (e.rate_score(self.clock, capacity, prior), e.slot.1, k))
            .collect();
        let order =
            |a: &(f64, u64, &K), b: &(f64, u64, &K)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
        if first < v.len() {
            v.select_nth_unstable_by(first, order);
            v.truncate(first);
        }
        v.sort_unstable_by(order);
        v
    }

    /// `key` (with this digest) left: its use count goes to the history, of at most `limit`
    /// names a generation.
    fn remove(&mut self, key: &K, digest: u64, limit: usize) {
        if let Some(e) = self.resident.remove(key) {
            self.order.remove(&e.slot);
            let seen = Seen {
                uses: e.uses,
                first: e.first,
            };
            self.history.put(digest, seen, limit);
        }
    }
}

/// A shadow tier: the sampled keys' digests ranked in one mode, and its recent hits.
#[derive(Debug)]
struct Shadow {
    ranking: Ranking<u64>,
    mode: Mode,
    /// Hits, decayed per sampled use (see [`SHADOW_HORIZON`]).
    score: f64,
}

impl Shadow {
    /// Evicts down to `cap` keys: the first of the FLRU order, or in `Rates` mode the lowest
    /// rates, `cap / 128` more at a time so the ranking is not recomputed on every miss.
    fn evict(&mut self, cap: usize, limit: usize) {
        if self.ranking.resident.len() <= cap {
            return;
        }
        match self.mode {
            Mode::Flru(_) => {
                while self.ranking.resident.len() > cap {
                    let Some(d) = self.ranking.order.first_key_value().map(|(_, d)| *d) else {
                        break;
                    };
                    self.ranking.remove(&d, d, limit);
                }
            }
            Mode::Rates(prior) => {
                let extra = self.ranking.resident.len() - cap + cap / 128;
                let gone: Vec<u64> = self
                    .ranking
                    .by_rate(cap, prior, extra)
                    .into_iter()
                    .map(|(_, _, d)| *d)
                    .collect();
                for d in gone {
                    self.ranking.remove(&d, d, limit);
                }
            }
        }
    }
}

/// The shadows of a tier, one per mode compared.
#[derive(Debug)]
struct Shadows(Vec<Shadow>);

impl Shadows {
    fn new(modes: &[Mode]) -> Self {
        Self(
            modes
                .iter()
                .map(|m| Shadow {
                    ranking: Ranking::default(),
                    mode: *m,
                    score: 0.0,
                })
                .collect(),
        )
    }

    /// One use (store or lookup hit of the tier) of the key with this digest, the tier being
    /// `capacity` keys: a sampled key is a use of every shadow, which counts a hit if it holds
    /// the key, stores it on a miss and evicts down to its capacity.
    fn touch(&mut self, digest: u64, capacity: usize, bonus_per_use: f64) {
        if !digest.is_multiple_of(SHADOW_SAMPLE) {
            return;
        }
        let cap = (capacity / SHADOW_SAMPLE as usize).max(1);
        let keep = 1.0 - 1.0 / (SHADOW_HORIZON * cap as f64);
        let limit = (HISTORY_FACTOR * cap).max(MIN_HISTORY / SHADOW_SAMPLE as usize);
        for s in &mut self.0 {
            let t = Touch {
                digest,
                admit: true,
                capacity: cap,
                bonus_per_use,
                placement: s.mode.placement(),
            };
            let hit = s.ranking.touch(&digest, t);
            s.score = s.score * keep + if hit { 1.0 } else { 0.0 };
            s.evict(cap, limit);
        }
    }

    /// LRU placement (the first shadow's) unless another shadow has more than
    /// `1 + SHADOW_MARGIN` times its recent hits; then the one of those with the most.
    fn best(&self) -> Mode {
        let (lru, others) = self.0.split_first().expect("one shadow per mode");
        let mut best = lru;
        for s in others {
            if s.score > lru.score * (1.0 + SHADOW_MARGIN) && s.score > best.score {
                best = s;
            }
        }
        best.mode
    }
}

/// The real tier's rate order, as of one clock (see [`RATE_REFRESH`]).
#[derive(Debug, Default)]
struct RateOrder {
    at: u64,
    prior: Option<RatePrior>,
    keys: Vec<ObjectKey>,
}

/// The FLRU policy. Its settings are the bonus per use (`eviction.flru_bonus_per_use`) and
/// which modes shadows choose from (`eviction.flru_admission`).
pub(super) struct Flru {
    ranking: Ranking<ObjectKey>,
    shadows: Option<Shadows>,
    capacity: usize,
    hasher: BuildDigestHasher,
    bonus_per_use: f64,
    /// The mode without shadows.
    fixed: Mode,
    rate_order: RateOrder,
    /// The mode the last batch ran in (logged when it changes).
    last_mode: Option<Mode>,
}

impl Default for Flru {
    fn default() -> Self {
        Self::new(BONUS_PER_USE, &MODES)
    }
}

impl Flru {
    /// A policy whose keys gain `bonus_per_use` capacities of clock per use beyond the first
    /// (0: plain LRU order), in the mode whose shadow finds the most hits among `modes` (its
    /// first is the baseline). With one mode there are no shadows and that mode is always in
    /// force; with none, [`Mode::Flru`] with [`Placement::Recent`].
    pub(super) fn new(bonus_per_use: f64, modes: &[Mode]) -> Self {
        Self {
            ranking: Ranking::default(),
            shadows: (modes.len() > 1).then(|| Shadows::new(modes)),
            capacity: 0,
            hasher: BuildDigestHasher::default(),
            bonus_per_use,
            fixed: modes
                .first()
                .copied()
                .unwrap_or(Mode::Flru(Placement::Recent)),
            rate_order: RateOrder::default(),
            last_mode: None,
        }
    }

    #[cfg(test)]
    /// The history of departed keys (for tests and diagnostics).
    pub(super) fn history(&self) -> &History {
        &self.ranking.history
    }

    #[cfg(test)]
    /// The use count the policy holds for a tracked key.
    pub(super) fn uses(&self, key: &ObjectKey) -> Option<u8> {
        self.ranking.resident.get(key).map(|e| e.uses)
    }

    /// The mode in force: what orders the tier and where new keys go.
    pub(super) fn mode(&self) -> Mode {
        self.shadows.as_ref().map_or(self.fixed, Shadows::best)
    }

    #[cfg(test)]
    /// Where keys stored for the first time go now in the FLRU order.
    pub(super) fn placement(&self) -> Placement {
        self.mode().placement()
    }

    /// One batch of events (`admit`: a store, else lookup hits), in request order, touched
    /// last first; new keys of the batch all get the placement in force at its start.
    fn batch(&mut self, keys: &[ObjectKey], admit: bool) {
        let mode = self.mode();
        if self.last_mode != Some(mode) {
            tracing::debug!(?mode, "FLRU: the shadows chose another mode");
            self.last_mode = Some(mode);
        }
        let placement = mode.placement();
        for key in keys.iter().rev() {
            let digest = self.hasher.hash_one(key);
            if let Some(s) = &mut self.shadows {
                s.touch(digest, self.capacity, self.bonus_per_use);
            }
            let t = Touch {
                digest,
                admit,
                capacity: self.capacity,
                bonus_per_use: self.bonus_per_use,
                placement,
            };
            self.ranking.touch(key, t);
        }
    }

    /// The `Rates` candidates of a round: the cached rate order less the keys gone or touched
    /// since it was computed.
    fn rate_candidates(&self) -> impl Iterator<Item = &ObjectKey> + '_ {
        let at = self.rate_order.at;
        self.rate_order.keys.iter().filter(move |k| {
            self.ranking
                .resident
                .get(*k)
                .is_some_and(|e| e.slot.1 <= at)
        })
    }

    fn refresh_rate_order(&mut self, prior: RatePrior) {
        let keys = self
            .ranking
            .by_rate(self.capacity, prior, RATE_ORDER_EXTRA + self.capacity / 16)
            .into_iter()
            .map(|(_, _, k)| k.clone())
            .collect();
        self.rate_order = RateOrder {
            at: self.ranking.clock,
            prior: Some(prior),
            keys,
        };
    }
}

impl EvictionPolicy for Flru {
    fn name(&self) -> &'static str {
        "FLRU"
    }

    fn on_stored(&mut self, keys: &[ObjectKey]) {
        self.batch(keys, true);
        self.capacity = self.capacity.max(self.ranking.resident.len());
    }

    fn on_accessed(&mut self, keys: &[ObjectKey]) {
        self.batch(keys, false);
    }

    fn on_removed(&mut self, keys: &[ObjectKey], _: DeleteCause) {
        let limit = (HISTORY_FACTOR * self.capacity).max(MIN_HISTORY);
        for key in keys {
            let d = self.hasher.hash_one(key);
            self.ranking.remove(key, d, limit);
        }
    }

    fn victims(&self) -> Box<dyn Iterator<Item = &ObjectKey> + '_> {
        match self.mode() {
            Mode::Flru(_) => Box::new(self.ranking.order.values()),
            Mode::Rates(prior) => Box::new(
                self.ranking
                    .by_rate(self.capacity, prior, usize::MAX)
                    .into_iter()
                    .map(|(_, _, k)| k),
            ),
        }
    }

    /// LMCache's watermark rule over [`victims`](Self::victims), except that in `Rates` mode
    /// the rate order is recomputed only every [`RATE_REFRESH`] capacities of touches (or when
    /// nothing of it is left to offer), not on every plan.
    fn plan(&mut self, pressure: &Pressure<'_>, book: &SizeBook) -> Vec<EvictGroup> {
        if !pressure.over_watermark() {
            return Vec::new();
        }
        let Mode::Rates(prior) = self.mode() else {
            return global_round(self.ranking.order.values(), self.len(), pressure, book);
        };
        let period = (in_clock(self.capacity) * RATE_REFRESH) as u64;
        if self.ranking.clock.saturating_sub(self.rate_order.at) >= period
            || self.rate_order.keys.is_empty()
            || self.rate_order.prior != Some(prior)
        {
            self.refresh_rate_order(prior);
        }
        let groups = global_round(self.rate_candidates(), self.len(), pressure, book);
        if !groups.is_empty() {
            return groups;
        }
        self.refresh_rate_order(prior);
        global_round(self.rate_candidates(), self.len(), pressure, book)
    }

    fn len(&self) -> usize {
        self.ranking.resident.len()
    }
}

#[cfg(test)]
mod tests;
