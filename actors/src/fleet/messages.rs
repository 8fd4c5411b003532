//! The fleet index actor's messages. Each is one script on the index (one round trip per
//! batch); each replies `Err(FleetError::Unreachable)` at once while the index is unreachable,
//! so a node serves alone without waiting on it.

use std::collections::BTreeMap;

use actix::prelude::*;
use serde::Serialize;

/// An object the node has stored: its name in the bucket, its cache salt (`""`: none) and size,
/// and whether `FLRU`'s shadows sample its key (see [`FleetName`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FleetObject {
    pub(crate) name: String,
    pub(crate) salt: String,
    pub(crate) size: u64,
    pub(crate) sampled: bool,
}

/// A name a node touches in the index (a lookup's lock, a touch), and whether `FLRU`'s shadows
/// sample its key: the node decides by the key's digest, as one node's shadows do, so the
/// index's shadows rank the same keys (it sees only names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FleetName {
    pub(crate) name: String,
    pub(crate) sampled: bool,
}

/// The fleet's usage of one bucket, as the index holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct FleetUsage {
    /// Bytes of every object the fleet knows.
    pub(crate) bytes: u64,
    /// Number of those objects.
    pub(crate) objects: u64,
    /// Bytes per cache salt (`""`: unsalted).
    pub(crate) by_salt: BTreeMap<String, u64>,
    /// Bytes live nodes are writing (announced with [`FleetWriting`], not yet stored).
    pub(crate) pending: u64,
    /// Bytes of the objects claimed for deletion and not released yet (counted in `bytes`
    /// until their release): a round is due by `bytes − claimed`, as [`FleetRound`] decides.
    pub(crate) claimed: u64,
    /// The fleet's `IsolatedLRU` quotas: salt → limit in bytes.
    pub(crate) quotas: BTreeMap<String, u64>,
    /// With the bucket split over `S` hash tags ([`FleetShards`](super::FleetShards)): `S` ×
    /// the fullest tag's [stored](Self::stored) bytes, and `S` × its stored plus pending
    /// bytes. Each tag evicts against `capacity / S`, so these (not the totals) say when a
    /// round is due; `None` with one tag.
    pub(crate) fullest: Option<(u64, u64)>,
}

impl FleetUsage {
    /// The bytes a round counts as stored: those of every object the fleet knows, less those
    /// claimed for deletion (as [`FleetRound`] decides).
    pub(crate) fn stored(&self) -> u64 {
        self.bytes.saturating_sub(self.claimed)
    }
}

/// Why the fleet index did not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum FleetError {
    /// No connection to the index (the reason names what failed; never the URL's password).
    #[error("fleet index unreachable: {0}")]
    Unreachable(String),
    /// The index answered with an error.
    #[error("fleet index error: {0}")]
    Index(String),
}

/// The outcome of locking one name in the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FleetLock {
    /// Locked; the index knows the object and its size: no probe of the store is needed.
    Known(u64),
    /// Locked; the index does not know the object: probe the store (and unlock on a miss).
    Unknown,
    /// Not locked: a node is deleting it.
    Deleting,
}

/// Records objects now in the store (sizes, salts, recency): this node's writes (`written`)
/// or objects a probe found. `ended_names` and `ended_bytes` end this node's writes announced
/// with [`FleetWriting`] (written or failed). A written object that a deletion removed while
/// it was being written is not added (see [`FleetRelease`]). Replies with the fleet's usage.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<FleetUsage, FleetError>")]
pub(crate) struct FleetStored {
    pub(crate) objects: Vec<FleetObject>,
    pub(crate) written: bool,
    pub(crate) ended_names: Vec<String>,
    pub(crate) ended_bytes: u64,
}

impl FleetStored {
    /// Objects a probe found in the store (no write of this node's ends).
    pub(crate) fn found(objects: Vec<FleetObject>) -> Self {
        Self {
            objects,
            written: false,
            ended_names: Vec::new(),
            ended_bytes: 0,
        }
    }
}

/// A write's [`FleetStored`] and, in the same script, the [`FleetRound`] this node would start
/// next (as the round's own call would right after): a write that fills the bucket costs one
/// call fewer. Replies with the usage after both and what the round found.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<(FleetUsage, Round), FleetError>")]
pub(crate) struct FleetStoredRound {
    pub(crate) stored: FleetStored,
    pub(crate) round: FleetRound,
}

/// This node starts writing these objects, `bytes` in all: eviction rounds count the bytes
/// with the fleet's usage until [`FleetStored`] ends them (or the node is reaped), so a round
/// can start before they land; a deletion that removes one of the names meanwhile keeps the
/// write's [`FleetStored`] from adding that name (the write takes an epoch in the index, which
/// the [`FleetIndex`](super::FleetIndex) gives back with its `STORED`).
///
/// With a `limit`, the write is announced only if the bucket's footprint stays within it: the
/// bytes of every object the index knows (objects claimed for deletion included, since the
/// bucket holds them until their DELETE completes), plus the bytes every live node is writing,
/// plus these. Otherwise nothing is recorded and the reply says the bucket is full: the node
/// waits for a round's deletes and asks again (see `fleet.write_wait_ms`).
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<Announced, FleetError>")]
pub(crate) struct FleetWriting {
    pub(crate) names: Vec<String>,
    pub(crate) bytes: u64,
    /// The most bytes the bucket may hold with this write (`None`: no limit).
    pub(crate) limit: Option<u64>,
}

/// The reply to [`FleetWriting`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Announced {
    /// The write was announced (`false`: it would take the bucket past the limit; nothing was
    /// recorded).
    pub(crate) started: bool,
    /// The fleet's usage after the script.
    pub(crate) usage: FleetUsage,
}

/// Locks names for this node; one outcome per name, in order.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<Vec<FleetLock>, FleetError>")]
pub(crate) struct FleetLockNames(pub(crate) Vec<FleetName>);

/// Releases one lock per name held by this node, now (with any unlocks queued by
/// [`FleetUnlockSoon`] before them).
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<(), FleetError>")]
pub(crate) struct FleetUnlock(pub(crate) Vec<String>);

/// Releases one lock per name held by this node with the node's next call to the index (in
/// the same round trip, before it), or after [`UNLOCK_FLUSH`](super::UNLOCK_FLUSH) when no
/// call comes sooner. What a lookup's misses and a host's unlocks send: a lock held that much
/// longer only defers the eviction of its object, and a request saves a round trip.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub(crate) struct FleetUnlockSoon(pub(crate) Vec<String>);

/// Refreshes the fleet recency of names (lookup hits that did not lock through the index).
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<(), FleetError>")]
pub(crate) struct FleetTouch(pub(crate) Vec<FleetName>);

/// Which lease of the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// The eviction round's: one round at a time in the fleet; lapses after the node's `ttl`.
    Evict,
    /// The bucket listing's: one listing per period in the fleet; lapses after the period.
    Listing(std::time::Duration),
}

/// Takes or renews a lease of the bucket; `Ok(true)` when this node holds it.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Result<bool, FleetError>")]
pub(crate) struct FleetLease(pub(crate) Lease);

/// Gives a lease up, if this node holds it.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Result<(), FleetError>")]
pub(crate) struct FleetLeaseRelease(pub(crate) Lease);

/// Up to `limit` eviction candidates by fleet recency, oldest first, none locked or being
/// deleted by any node, among the `scan` oldest names; with their sizes (what a round would
/// take; tests only).
#[cfg(test)]
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Result<Vec<(String, u64)>, FleetError>")]
pub(crate) struct FleetCandidates {
    pub(crate) limit: usize,
    pub(crate) scan: usize,
}

/// Starts an eviction round of the bucket, in one script (see `round.lua` under scripts/ for the
/// exact rule). The objects the index knows, less those claimed by rounds in flight, are
/// *stored*; with the bytes nodes are writing they are *landing*. A round is due when stored
/// reaches `watermark × capacity` (LMCache's rule: `floor(objects × ratio)` plus what brings
/// it back to the watermark) or landing reaches `ahead × capacity` (at least what brings it
/// back under). When one is due and no other node holds the eviction lease, the script takes the
/// lease and claims the victims by fleet recency. Usage is read in the same script as the
/// claims, so a round's size follows every node's stores and writes up to that moment. The
/// holder gives the lease up with [`FleetLeaseRelease`] when its rounds end.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Result<Round, FleetError>")]
pub(crate) struct FleetRound {
    pub(crate) capacity: u64,
    pub(crate) watermark: f64,
    pub(crate) ratio: f64,
    /// `IsolatedLRU`: each cache salt against its quota in the index (none: 0, LMCache's
    /// allowlist rule), victims by that salt's own fleet recency; `capacity` plays no part.
    pub(crate) per_salt: bool,
    /// The share of the capacity the bytes landing are kept under (`fleet.landing_mark`, by
    /// default [`landing_mark`]).
    pub(crate) ahead: f64,
    /// `eviction_unit = "bytes"`: a round past the watermark frees at least down to
    /// `watermark × capacity × (1 − ratio)`, as one node's does; else (`keys`) it takes
    /// LMCache's `floor(objects × ratio)` alone.
    pub(crate) catch_up: bool,
    /// Bytes this node waits to write because the bucket is full (see [`FleetWriting`]):
    /// counted as landing, so the round makes room for them.
    pub(crate) waiting: u64,
}

/// The share of the capacity under which a fleet's rounds keep the bytes *landing* (stored
/// plus being written) unless `fleet.landing_mark` says otherwise. When writes wait for room
/// (`waits`: `fleet.write_wait_ms` > 0), the capacity itself: a write that would take the
/// bucket past it waits until the deletes are done, and the bucket holds what one node's would
/// (docs/fleet.md, "Writes wait for room", has the figures). Otherwise halfway between the
/// watermark and the capacity: a claimed object counts as freed from its claim while the
/// bucket holds it until its DELETE completes, and the margin is room for the deletes in
/// flight.
pub(crate) fn landing_mark(watermark: f64, waits: bool) -> f64 {
    if waits {
        1.0
    } else {
        (1.0 + watermark.min(1.0)) / 2.0
    }
}

/// Sets (`Some`) or removes (`None`) the fleet's `IsolatedLRU` quota of a cache salt; replies
/// with the previous limit. Every node's rounds use it from then on.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<Option<u64>, FleetError>")]
pub(crate) struct FleetSetQuota {
    pub(crate) salt: String,
    pub(crate) limit: Option<u64>,
}

/// What [`FleetRound`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Round {
    /// Usage is under the watermark: no round (the lease was not taken).
    Under,
    /// Another node holds the eviction lease.
    Busy,
    /// This node holds the lease and has claimed these objects (name, size), least recent
    /// first; none when every candidate is locked or being deleted.
    Claimed(Vec<(String, u64)>),
}

/// Claims the deletion of names: replies with those no node locks and none is deleting. No
/// node locks a claimed name until it is released.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<Vec<String>, FleetError>")]
pub(crate) struct FleetClaim(pub(crate) Vec<String>);

/// Ends claims: `removed` were deleted from the store (forgotten, and recorded as gone: a write
/// of the name announced before now may have landed before the delete, so its [`FleetStored`]
/// does not add it and a lookup probes the store), `kept` were not. Replies with the fleet's
/// usage.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<FleetUsage, FleetError>")]
pub(crate) struct FleetRelease {
    pub(crate) removed: Vec<String>,
    pub(crate) kept: Vec<String>,
    /// The removal was an eviction round's (ARC keeps the ghosts of evicted objects only).
    pub(crate) evicted: bool,
}

/// Forgets names a load found missing from the store. Replies with the fleet's usage.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<FleetUsage, FleetError>")]
pub(crate) struct FleetVanished(pub(crate) Vec<String>);

/// Starts a listing of the bucket (see [`FleetSyncPage`]); replies with the fleet clock's tick.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Result<u64, FleetError>")]
pub(crate) struct FleetSyncStart;

/// One page of the bucket's listing: marks the objects seen and adds those the index lacks
/// (as least recent). Replies with the number added.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<u64, FleetError>")]
pub(crate) struct FleetSyncPage(pub(crate) Vec<FleetObject>);

/// Ends a listing started at `start`: forgets what it did not see and nothing has touched
/// since (unlocked, not being deleted). Replies with the fleet's usage.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Result<FleetUsage, FleetError>")]
pub(crate) struct FleetSyncEnd {
    pub(crate) start: u64,
}

/// The fleet's usage.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Result<FleetUsage, FleetError>")]
pub(crate) struct GetFleetUsage;

/// This node's view of the index: whether it is joined, the live nodes it last saw, and why it
/// is not joined.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "FleetStatus")]
pub(crate) struct GetFleetStatus;

/// A node's view of the fleet index (in [`Status`](crate::messages::Status) of an adapter
/// with `[fleet]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FleetStatus {
    /// This node's id in the fleet.
    pub node: String,
    /// True while the node is connected and joined; false: it serves alone (local ledger,
    /// probes of the store, no deletions) and keeps trying to join.
    pub joined: bool,
    /// Live nodes on this bucket at the last heartbeat (this one included).
    pub nodes: u64,
    /// Why the node is not joined (unset while joined).
    pub reason: Option<String>,
    /// Times the node (re)joined.
    pub joins: u64,
    /// Bytes of this node's writes waiting for room in the full bucket (see
    /// `fleet.write_wait_ms`); 0 when none waits.
    pub waiting_bytes: u64,
    /// This node's writes that waited for room and were made within the capacity.
    pub writes_waited: u64,
    /// This node's writes made past the capacity because their wait ran out
    /// (`kvtier_fleet_write_waits{outcome="over"}`).
    pub writes_over: u64,
}
