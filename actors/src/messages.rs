//! The backends' vocabulary: the operations every backend actor answers and the controller
//! answers too (it forwards them), their replies, and the usage events backends publish.
//!
//! Messages live **one module per actor**: this one for the backend actors (and so for the
//! controller's forwarded operations); the controller's own messages (submitting without
//! waiting, event channels, stopping) in `crate::controller`'s `messages.rs`; the eviction
//! actor's own (attaching backends, stats, quotas, [`WhenIdle`](crate::eviction::WhenIdle))
//! in [`crate::eviction`]'s `messages.rs`. Each is re-exported where its actor is.
//!
//! The vocabulary is symmetric: the [`Controller`](crate::Controller) and every backend actor
//! answer the same operations ([`Store`], [`LookupAndLock`], [`Load`], [`Unlock`], [`Touch`],
//! [`Delete`], [`GetUsage`], [`GetStatus`], [`ListKeys`], [`Verify`]). A backend replies for
//! itself; the controller replies per adapter (or, for lookups and loads, merged across
//! adapters). Backends also answer [`Evict`] (from the eviction actor) and
//! `SubscribeUsage`, and publish [`UsageEvent`]s to their subscribers (the eviction actor and
//! the controller, which relays them to host channels); a `Deleted` event carries its
//! [`DeleteCause`].

use std::collections::BTreeMap;
use std::fmt;

use actix::prelude::*;
use bytes::Bytes;
use serde::Serialize;

use crate::buffer::LoadBuf;
use crate::key::ObjectKey;
use crate::storage::ErrorKind;

/// Position of an adapter in the configuration (0-based); also its identity in replies and events.
pub type AdapterIndex = usize;

/// One bit per key, in request order.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Bitmap(Vec<bool>);

impl Bitmap {
    /// All bits clear.
    pub fn zeros(n: usize) -> Self {
        Self(vec![false; n])
    }
    /// Number of bits.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// True when there are no bits.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Bit `i`.
    pub fn get(&self, i: usize) -> bool {
        self.0[i]
    }
    /// Sets bit `i` to `v`.
    pub(crate) fn set(&mut self, i: usize, v: bool) {
        self.0[i] = v;
    }
    /// Number of set bits.
    pub fn count_ones(&self) -> usize {
        self.0.iter().filter(|b| **b).count()
    }
    /// True when every bit is set.
    pub fn all(&self) -> bool {
        self.0.iter().all(|b| *b)
    }
    /// The bits in order.
    pub fn iter(&self) -> impl Iterator<Item = bool> + '_ {
        self.0.iter().copied()
    }
}

impl From<Vec<bool>> for Bitmap {
    fn from(v: Vec<bool>) -> Self {
        Self(v)
    }
}

impl fmt::Debug for Bitmap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0 {
            f.write_str(if *b { "1" } else { "0" })?;
        }
        Ok(())
    }
}

impl fmt::Display for Bitmap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Write every object under its key. Objects must be whole chunks; an empty object is rejected.
///
/// Objects are [`Bytes`]: host memory becomes `Bytes` without a copy through
/// `crate::buffer::store_bytes` or [`crate::buffer::lend_sources`].
#[derive(Debug, Clone, Message)]
#[rtype(result = "StoreReport")]
pub struct Store {
    /// The keys, one per object.
    pub keys: Vec<ObjectKey>,
    /// The chunk bytes, one per key.
    pub objects: Vec<Bytes>,
}

/// One key that could not be stored, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedKey {
    /// The key.
    #[serde(serialize_with = "ser_key")]
    pub key: ObjectKey,
    /// What kind of failure it was.
    pub kind: ErrorKind,
    /// What went wrong, naming the adapter.
    pub error: String,
}

/// What one adapter did with a [`Store`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StoreOutcome {
    /// Keys written (new or re-stored).
    pub stored: usize,
    /// Bytes of the keys written.
    pub stored_bytes: u64,
    /// Bytes of the keys that were new to this adapter; re-storing a stored key adds 0.
    pub new_bytes: u64,
    /// Keys that were not stored.
    pub failed: Vec<FailedKey>,
}

impl StoreOutcome {
    /// True when no key failed.
    pub fn success(&self) -> bool {
        self.failed.is_empty()
    }
}

/// The reply to [`Store`]: one outcome per adapter, in configuration order (a backend answers
/// with its own entry only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[must_use = "a store can fail for some keys and adapters while the call succeeds: check `success()` or the outcomes"]
pub struct StoreReport {
    /// Per adapter: its index and outcome.
    pub adapters: Vec<(AdapterIndex, StoreOutcome)>,
}

impl StoreReport {
    /// True when every adapter stored every key.
    pub fn success(&self) -> bool {
        self.adapters.iter().all(|(_, o)| o.success())
    }
}

/// Find each key and lock it against deletion until [`Unlock`]. Locks are reference counts:
/// two lookups need two unlocks. The reply has one bit per key: found **and** locked.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Bitmap")]
pub struct LookupAndLock {
    /// The keys to look up.
    pub keys: Vec<ObjectKey>,
}

/// Fill caller-owned buffers with the keys' bytes. A buffer's length is the expected object
/// size: an object of another size is a miss and its buffer is left untouched.
///
/// Buffers are any [`crate::buffer::LoadTarget`] (`BytesMut`, `Vec<u8>`, a raw
/// [`crate::buffer::HostRegion`]) wrapped in a [`LoadBuf`]; backends write straight into them.
#[derive(Debug, Message)]
#[rtype(result = "LoadReport")]
pub struct Load {
    /// The keys to load.
    pub keys: Vec<ObjectKey>,
    /// One buffer per key, each already of the chunk's length (e.g. `LoadBuf::zeroed(n)`).
    pub buffers: Vec<LoadBuf>,
}

/// Why a key of a [`Load`] was not loaded. A missed key's buffer may hold partial bytes;
/// only a hit's buffer is the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MissReason {
    /// No object under the key's name: never stored, evicted, or removed by another writer.
    /// The key leaves the ledger if it was there.
    Absent,
    /// An object of another size than the buffer (LMCache's rule: not loaded; it stays).
    WrongSize {
        /// The object's size in bytes.
        actual: u64,
    },
    /// The object's bytes did not match its checksum: not loaded, counted, and removed
    /// (at its last unlock if locked).
    Corrupt,
    /// The request failed (I/O, timeout, refused credentials, a key the backend cannot name,
    /// …); the object may still be there.
    Failed(ErrorKind),
    /// Not asked: the runtime or the adapter had stopped, or the request's keys and buffers
    /// differed in number.
    NotServed,
}

impl fmt::Display for MissReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Absent => f.write_str("absent"),
            Self::WrongSize { actual } => write!(f, "wrong size ({actual} bytes stored)"),
            Self::Corrupt => f.write_str("corrupt (checksum mismatch)"),
            Self::Failed(kind) => write!(f, "failed ({kind:?})"),
            Self::NotServed => f.write_str("not served"),
        }
    }
}

/// The reply to [`Load`]: which keys were loaded, why the others were not, and the buffers
/// handed back.
///
/// Invariants: `buffers` are the request's buffers, every one, in request order, with their
/// original lengths, whatever happened (hit, miss, an adapter that died, several adapters).
/// Nothing in kvtier holds or writes a buffer once it is in a reply. `misses` holds exactly
/// the positions whose `hits` bit is 0, ascending, each with one reason (with several
/// adapters, the last adapter asked gives it).
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct LoadReport {
    /// One bit per key: loaded completely.
    pub hits: Bitmap,
    /// The caller's buffers, in request order.
    pub buffers: Vec<LoadBuf>,
    /// Why each missed key missed: (position in the request, reason), ascending positions.
    pub misses: Vec<(usize, MissReason)>,
}

impl LoadReport {
    /// A report from its parts; `misses` as the field says (checked in debug builds).
    pub fn new(hits: Bitmap, buffers: Vec<LoadBuf>, misses: Vec<(usize, MissReason)>) -> Self {
        debug_assert!(
            misses.iter().map(|m| m.0).eq(hits
                .iter()
                .enumerate()
                .filter(|(_, h)| !h)
                .map(|(i, _)| i)),
            "misses must list exactly the zero bits of hits, ascending"
        );
        Self {
            hits,
            buffers,
            misses,
        }
    }

    /// Every key missed: the buffers go back as they came. The one way to answer a load that
    /// could not be served.
    pub(crate) fn missed(keys: usize, buffers: Vec<LoadBuf>) -> Self {
        Self {
            hits: Bitmap::zeros(keys),
            buffers,
            misses: (0..keys).map(|i| (i, MissReason::NotServed)).collect(),
        }
    }

    /// Why the key at position `i` missed; `None` for a hit (or a position past the end).
    pub fn miss_reason(&self, i: usize) -> Option<MissReason> {
        self.misses
            .binary_search_by_key(&i, |m| m.0)
            .ok()
            .map(|p| self.misses[p].1)
    }

    /// The hits and the buffers as the type the caller lent (`Err(self)` if any buffer is not
    /// a `T`).
    pub fn into_parts<T: crate::buffer::LoadTarget>(self) -> Result<(Bitmap, Vec<T>), Self> {
        if !self.buffers.iter().all(|b| b.is::<T>()) {
            return Err(self);
        }
        let buffers = self
            .buffers
            .into_iter()
            .map(|b| b.downcast::<T>().expect("checked"))
            .collect();
        Ok((self.hits, buffers))
    }
}

/// Release one lock on each key. Never fails; unknown keys are ignored.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct Unlock {
    /// The keys to unlock.
    pub keys: Vec<ObjectKey>,
}

/// Mark keys as just used, without moving any bytes: each adapter publishes
/// [`UsageEventKind::Accessed`] for the keys it holds (its ledger knows them and no deletion of
/// them is under way), so eviction refreshes their recency as for a lookup hit. No storage call,
/// no lock taken; keys an adapter does not hold are ignored. Fire-and-forget, never fails.
///
/// Ordering: the `Accessed` event is published when the backend handles the message, before
/// any operation sent to the same controller after it (mailboxes are first-in first-out).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct Touch {
    /// The keys to mark as used.
    pub keys: Vec<ObjectKey>,
}

/// Remove keys. Locked keys and keys with a store in flight are skipped; unknown keys are
/// no-ops. The reply names exactly the keys removed.
#[derive(Debug, Clone, Message)]
#[rtype(result = "DeleteReport")]
pub struct Delete {
    /// The keys to remove.
    pub keys: Vec<ObjectKey>,
    /// At the controller: only this adapter (`None`: every adapter). Backends ignore it.
    pub adapter: Option<AdapterIndex>,
}

/// Remove keys found corrupt: a [`Delete`] whose event says [`DeleteCause::Corrupt`]. Sent by
/// a backend actor to itself (after a load or a [`Verify`]); the same rules as [`Delete`].
#[derive(Debug, Clone, Message)]
#[rtype(result = "DeleteReport")]
pub(crate) struct RemoveCorrupt {
    /// The keys to remove.
    pub(crate) keys: Vec<ObjectKey>,
}

/// Keys removed, per adapter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteReport {
    /// Per adapter: its index and the keys it removed.
    pub adapters: Vec<(AdapterIndex, Vec<ObjectKey>)>,
}

impl DeleteReport {
    /// Every key removed, across adapters.
    pub fn all_keys(&self) -> impl Iterator<Item = &ObjectKey> {
        self.adapters.iter().flat_map(|(_, k)| k.iter())
    }
}

/// Sent by the eviction actor: remove keys group by group, each taken in order from its
/// `candidates` (first victim first), skipping locked ones, ones with a store in flight and
/// ones the backend does not hold.
///
/// The reply names the keys removed with the bytes each freed.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Vec<(ObjectKey, u64)>")]
pub struct Evict {
    /// The groups, in order; each has its own budget (one per cache salt for `IsolatedLRU`,
    /// one for the global policies).
    pub groups: Vec<EvictGroup>,
}

impl Evict {
    /// One group: up to `count` of `candidates`, no byte target.
    pub fn keys(candidates: Vec<ObjectKey>, count: usize) -> Self {
        Self {
            groups: vec![EvictGroup {
                candidates,
                max_keys: count,
                min_bytes: 0,
            }],
        }
    }
}

impl Evict {
    /// The keys this round removes, in order: each group's candidates are taken while its
    /// budget lasts; `removable` gives the size of a key that can go now (held, unlocked, no
    /// store or delete in flight), or `None` to skip it. A key is taken at most once. The
    /// backend and the offline simulator both select with this.
    pub fn select(self, mut removable: impl FnMut(&ObjectKey) -> Option<u64>) -> Vec<ObjectKey> {
        let mut taken_keys: Vec<ObjectKey> = Vec::new();
        let mut seen = crate::key::KeySet::default();
        for group in self.groups {
            let (mut taken, mut freed) = (0usize, 0u64);
            for k in group.candidates {
                if taken >= group.max_keys || (group.min_bytes > 0 && freed >= group.min_bytes) {
                    break;
                }
                let Some(size) = removable(&k) else {
                    continue;
                };
                if !seen.insert(k.clone()) {
                    continue;
                }
                taken += 1;
                freed += size;
                taken_keys.push(k);
            }
        }
        taken_keys
    }
}

/// One budget of an [`Evict`] round: the backend removes `candidates` in order until
/// `max_keys` are removed or, when `min_bytes` > 0, until the removed keys freed at least
/// `min_bytes`, or the candidates run out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvictGroup {
    /// Candidates, first victim first.
    pub candidates: Vec<ObjectKey>,
    /// How many keys to remove at most.
    pub max_keys: usize,
    /// Stop once this many bytes are freed (0: no byte target, only `max_keys`).
    pub min_bytes: u64,
}

/// Ask for capacity accounting.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "UsageReport")]
pub struct GetUsage;

/// One adapter's capacity accounting.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Usage {
    /// Adapter index.
    pub adapter: AdapterIndex,
    /// Bytes of the objects this adapter knows of.
    pub used_bytes: u64,
    /// `max_capacity_gb × 1024³`; 0 disables eviction.
    pub capacity_bytes: u64,
    /// The ledger's change counter (orders this reading against usage events).
    pub ledger_seq: u64,
    /// `used / capacity`, or `-1.0` when the capacity is 0.
    pub fraction: f64,
    /// Number of objects known.
    pub keys: usize,
    /// Bytes per cache salt (`""` for unsalted keys); only positive entries.
    pub bytes_by_cache_salt: BTreeMap<String, u64>,
    /// With `[fleet]` (and the index answering): this node's own figure, from its ledger, while
    /// `used_bytes`, `keys`, `fraction` and `bytes_by_cache_salt` are the whole fleet's on the
    /// bucket. `None` without a fleet, or while the node is alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_used_bytes: Option<u64>,
}

/// Usage of every adapter (a backend answers with one entry).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UsageReport {
    /// Per adapter, in configuration order.
    pub adapters: Vec<Usage>,
}

/// Ask for health and details.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "StatusReport")]
pub struct GetStatus;

/// One adapter's health.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    /// Adapter index.
    pub adapter: AdapterIndex,
    /// Adapter type (`memory`, `fs`, `s3`, `hfbucket`, ...).
    pub kind: String,
    /// False when the backend cannot currently serve requests.
    pub is_healthy: bool,
    /// Why it cannot (`None` when healthy): an open circuit breaker and its last failure, a
    /// missing bucket, refused credentials, an unreachable endpoint.
    pub reason: Option<String>,
    /// Keys currently locked (distinct keys).
    pub locked_keys: usize,
    /// Backend-specific details (paths, circuit-breaker state, request counters, ...).
    pub details: serde_json::Value,
    /// With `[fleet]`: this node's view of the fleet index (joined, live nodes, why alone).
    /// A node that is alone still serves (`is_healthy` is the store's health).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<crate::fleet::FleetStatus>,
}

/// Status of every adapter.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StatusReport {
    /// Per adapter, in configuration order.
    pub adapters: Vec<Status>,
}

impl StatusReport {
    /// True when every adapter is healthy.
    pub fn is_healthy(&self) -> bool {
        self.adapters.iter().all(|s| s.is_healthy)
    }
}

/// Read objects whole and check each against the checksum stored with it (`kvtier scrub`).
/// The checks run on the backend's worker pool. With `delete_corrupt`, the corrupt objects
/// are removed as a [`Delete`] would (locked and busy keys are kept, and usage follows).
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<VerifyReport, crate::BackendError>")]
pub struct Verify {
    /// The keys to check.
    pub keys: Vec<ObjectKey>,
    /// Remove the objects found corrupt.
    pub delete_corrupt: bool,
    /// At the controller: which adapter.
    pub adapter: AdapterIndex,
}

/// What a [`Verify`] found, per key in request order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Each key and its verdict (or why it could not be read).
    pub results: Vec<(
        ObjectKey,
        Result<crate::storage::Verdict, crate::BackendError>,
    )>,
    /// The corrupt keys removed (with `delete_corrupt`).
    pub deleted: Vec<ObjectKey>,
}

/// List stored keys in object-name order, a page at a time.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<KeyPage, crate::BackendError>")]
pub struct ListKeys {
    /// Only keys of this model (`None`: all).
    pub model: Option<String>,
    /// Continue after this cursor (from [`KeyPage::next`]).
    pub cursor: Option<String>,
    /// Most entries in the page (0 means the default of 500).
    pub page_size: usize,
    /// At the controller: which adapter to list.
    pub adapter: AdapterIndex,
}

/// One page of keys with their sizes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPage {
    /// Keys and sizes in bytes.
    pub entries: Vec<(ObjectKey, u64)>,
    /// Cursor for the next page, if there is one.
    pub next: Option<String>,
}

/// What happened to the keys of one adapter; published by backend actors.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct UsageEvent {
    /// The adapter the event is about.
    pub adapter: AdapterIndex,
    /// The adapter's usage in bytes right after the event (its ledger's total: the one source
    /// of usage in the runtime).
    pub used_bytes: u64,
    /// The ledger's change counter at that moment: of two readings of `used_bytes` (events,
    /// [`Usage`] replies), the one with the higher counter is the newer.
    pub ledger_seq: u64,
    /// What happened.
    pub kind: UsageEventKind,
}

/// The kinds of [`UsageEvent`].
#[derive(Debug, Clone)]
pub enum UsageEventKind {
    /// Keys were written (or found at start-up or by a lookup), with their sizes.
    /// Refreshes recency.
    Stored {
        /// The keys.
        keys: Vec<ObjectKey>,
        /// Their sizes, one per key.
        sizes: Vec<u64>,
    },
    /// Keys were hit by a lookup, or [`Touch`]ed (not sent for loads). Refreshes recency.
    Accessed {
        /// The keys.
        keys: Vec<ObjectKey>,
    },
    /// Keys were removed, with the sizes that were accounted for them, and why.
    Deleted {
        /// The keys.
        keys: Vec<ObjectKey>,
        /// Their sizes, one per key.
        sizes: Vec<u64>,
        /// Why they went (one cause per event).
        cause: DeleteCause,
    },
}

/// Why keys left an adapter: the cause a [`UsageEventKind::Deleted`] carries, so a policy
/// can tell its own evictions (which ARC remembers as ghosts) from other removals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DeleteCause {
    /// An eviction round removed them ([`Evict`]).
    Evicted,
    /// A [`Delete`] removed them (a host's request).
    Deleted,
    /// Their objects failed their checksum (on a load, or [`Verify`] with `delete_corrupt`)
    /// and were removed.
    Corrupt,
    /// A load found them gone from the store (removed behind the adapter's back).
    Vanished,
}

impl DeleteCause {
    /// The cause in snake case (`"evicted"`, `"deleted"`, `"corrupt"`, `"vanished"`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeleteCause::Evicted => "evicted",
            DeleteCause::Deleted => "deleted",
            DeleteCause::Corrupt => "corrupt",
            DeleteCause::Vanished => "vanished",
        }
    }
}

/// Register another recipient of a backend's [`UsageEvent`]s.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct SubscribeUsage(pub Recipient<UsageEvent>);

fn ser_key<S: serde::Serializer>(k: &ObjectKey, s: S) -> Result<S::Ok, S::Error> {
    crate::key::KeyView::from(k).serialize(s)
}
