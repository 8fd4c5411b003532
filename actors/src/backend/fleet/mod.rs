//! The backend actor's side of fleet mode: many processes on one bucket, one
//! [`FleetIndex`](crate::fleet) per hash tag of the bucket's index behind one
//! [`FleetShards`] router per adapter (see those modules for the index's invariants).
//!
//! With a fleet, the backend keeps every rule of the module docs locally and adds:
//! - **Lookups** lock in the index first (one script for the batch). A key another node is
//!   deleting is a miss; a key the index knows is answered from it, with no probe of the store;
//!   the rest is probed as without a fleet. Locks of keys that then miss are released in the
//!   index at once; a hit's index lock is held until this node's [`Unlock`].
//! - **Deletes and evictions** claim their keys in the index first and remove only the keys
//!   claimed (no node locks them, none is deleting them), then release the claims, saying which
//!   objects are gone. While the index is unreachable nothing is deleted: a lock on another
//!   node cannot be seen, and a key locked anywhere is never deleted.
//! - **Stores** are announced to the index before they are written, and tell it the objects
//!   written when they end (size, salt, recency); a key found by a probe that the index did
//!   not know is added the same way. A write that would take the bucket's footprint past the
//!   capacity waits (at most `fleet.write_wait_ms`, then it is written anyway) while this
//!   node's rounds make room for it: the bucket stays within its capacity, as far as the index
//!   knows it.
//! - **Eviction** of the bucket is the fleet's: usage is the index's total, and when it reaches
//!   the watermark (or the bytes landing, waiting writes included, reach the landing mark) a
//!   node that finds it so takes the index's eviction lease (the holder's rounds may overlap;
//!   the lease is given up when the last ends) and removes unlocked objects of the whole
//!   fleet, whichever node stored them, in the policy's order: LMCache's
//!   `floor(objects × ratio)`, or what brings landing under the mark, at least 1 (see
//!   [`FleetRound`]). The eviction actor does not drive an adapter with a fleet.
//! - **Listing**: one node per period (the holder of the listing lease, which lapses after
//!   the period) lists the bucket every `listing_interval_secs` (and a node that finds the
//!   index empty while it holds objects lists at once): objects the index lacks (other
//!   writers', or an index that lost its data) are added as least recent, and objects it holds
//!   that the listing did not see are forgotten unless stored, hit, locked or being deleted
//!   since the listing started.
//! - **Alone**: while the index is unreachable, lookups and loads go on with the local ledger
//!   and probes, stores are written (and not counted in the index), and nothing is deleted or
//!   evicted; the index actor rejoins on its own. Locks taken while alone are local only.

use actix::fut::{ready, wrap_future};
use actix::prelude::*;

use super::write_queue::{BatchId, Item};
use super::BackendActor;
use crate::config::{
    EvictionConfig, EvictionPolicy, EvictionUnit, FleetConfig, FlruAdmission, Quotas,
};
use crate::eviction::{in_shadow_sample, GetQuotas, QuotaError, SetQuota};
use crate::fleet::*;
use crate::key::{KeyMap, NameFormat, ObjectKey};
use crate::messages::{DeleteCause, ListKeys};

mod rounds;

/// What the backend keeps for fleet mode.
pub(super) struct FleetLink {
    /// The index actors' settings until they start (in the backend's `started`), and the
    /// hash tags the bucket's index is split over (`fleet.shards`).
    pending: Option<(IndexConfig, u32)>,
    /// The index's router, on the backend's arbiter.
    pub(super) index: Option<Addr<FleetShards>>,
    /// This node's index locks per key (one per lookup hit that locked through the index).
    held: KeyMap<u32>,
    /// The fleet's usage as the index last answered.
    pub(super) usage: Option<FleetUsage>,
    /// Watermark and ratio of fleet eviction (`None`: this adapter does not evict).
    evict: Option<(f64, f64)>,
    /// `eviction_unit = "bytes"`: rounds catch up to the watermark (see [`FleetRound`]).
    catch_up: bool,
    /// The share of the capacity rounds keep the bytes landing under: `fleet.landing_mark`,
    /// else [`landing_mark`].
    landing: f64,
    /// `IsolatedLRU`: rounds go salt by salt against the fleet's quotas.
    per_salt: bool,
    /// The longest a write waits for room in a full bucket (`fleet.write_wait_ms`; `None`:
    /// writes do not wait).
    write_wait: Option<std::time::Duration>,
    /// Bytes of this node's writes waiting for room (counted as landing by its rounds).
    waiting: u64,
    /// Writes that waited for room and were made within the capacity, and those made past
    /// it when the wait ran out (as the metric counts them; `status` shows both).
    waited: (u64, u64),
    /// Period of the usage refresh and eviction check.
    interval: std::time::Duration,
    /// This node's fleet eviction rounds in flight.
    rounds: usize,
    /// This node took the eviction lease in a round and has not given it up.
    leased: bool,
    /// Releases of eviction rounds' deletes sent and not answered: each answer's usage decides
    /// whether another round follows (see `rounds`), and the lease is given up only once none
    /// is left.
    releasing: usize,
    /// Period of the bucket listing that corrects the index (`None`: off).
    listing: Option<std::time::Duration>,
    /// A listing is in flight; when the last one started.
    syncing: bool,
    last_sync: Option<std::time::Instant>,
}

impl FleetLink {
    /// The link of an adapter whose bucket is `identity`.
    pub(super) fn new(
        config: &FleetConfig,
        identity: String,
        eviction: Option<&EvictionConfig>,
        interval: std::time::Duration,
    ) -> Self {
        Self {
            pending: Some((
                IndexConfig {
                    url: config.index.clone(),
                    node: config.resolved_node_id(),
                    identity,
                    ttl: DEFAULT_TTL,
                    timeout: std::time::Duration::from_secs(2),
                    metrics: crate::metrics::AdapterMetrics::off(),
                    quotas: eviction.map(|e| e.quotas.clone()).unwrap_or_default(),
                    order: eviction.and_then(|e| match e.eviction_policy {
                        EvictionPolicy::Flru => Some(FleetOrder::Flru {
                            bonus: e.flru_bonus(),
                            adaptive: e.flru_admission != Some(FlruAdmission::Rates),
                        }),
                        EvictionPolicy::Arc => Some(FleetOrder::Arc),
                        EvictionPolicy::Lru => Some(FleetOrder::Lru),
                        EvictionPolicy::IsolatedLru => Some(FleetOrder::IsolatedLru),
                        EvictionPolicy::Noop => None,
                    }),
                    layout: None,
                },
                config.shards,
            )),
            index: None,
            held: KeyMap::default(),
            usage: None,
            evict: eviction.map(|e| (e.trigger_watermark, e.eviction_ratio)),
            catch_up: eviction.is_some_and(|e| e.eviction_unit == EvictionUnit::Bytes),
            landing: config.landing_mark.unwrap_or_else(|| {
                landing_mark(
                    eviction.map_or(1.0, |e| e.trigger_watermark),
                    config.write_wait_ms > 0,
                )
            }),
            per_salt: eviction.is_some_and(|e| e.eviction_policy == EvictionPolicy::IsolatedLru),
            write_wait: (config.write_wait_ms > 0)
                .then(|| std::time::Duration::from_millis(config.write_wait_ms)),
            waiting: 0,
            waited: (0, 0),
            interval,
            rounds: 0,
            leased: false,
            releasing: 0,
            listing: (config.listing_interval_secs > 0)
                .then(|| std::time::Duration::from_secs(config.listing_interval_secs)),
            syncing: false,
            last_sync: None,
        }
    }
}

/// The most eviction rounds of one node in flight at once (they overlap when stores of the
/// whole fleet outrun one round's deletes; each claims only what the others have not).
const MAX_ROUNDS: usize = 4;

/// What the index records of a stored object: its name, salt and size, and whether `FLRU`'s
/// shadows sample its key.
fn fleet_object(key: &ObjectKey, format: NameFormat, size: u64) -> FleetObject {
    FleetObject {
        name: key.object_name(format),
        salt: key.cache_salt().unwrap_or("").to_string(),
        size,
        sampled: in_shadow_sample(key),
    }
}

/// How soon a write that found the bucket full asks the index again.
const WRITE_RETRY: std::time::Duration = std::time::Duration::from_millis(20);

/// Objects per listed page sent to the index in one script.
const SYNC_PAGE: usize = 1000;

/// The least time between two listings started because the index was found empty.
const EMPTY_INDEX_RESYNC: std::time::Duration = std::time::Duration::from_secs(5);

/// Removes the objects a fleet eviction round claimed (sent by the backend to itself, so the
/// deletion runs as a handler): names that are keys this node may remove now are deleted and
/// their claims released, saying which are gone; the others (busy here, locked while alone, or
/// not keys of this adapter's naming) are released at once, kept. Replies with how many the
/// store removed.
#[derive(Message)]
#[rtype(result = "usize")]
pub(super) struct FleetEvict(pub(super) Vec<(String, u64)>);

impl Handler<FleetEvict> for BackendActor {
    type Result = ActorResponse<Self, usize>;

    fn handle(&mut self, msg: FleetEvict, ctx: &mut Context<Self>) -> Self::Result {
        let mut sizes = KeyMap::default();
        let mut keys = Vec::new();
        let mut kept = Vec::new();
        for (name, size) in msg.0 {
            match ObjectKey::parse(&name, self.format) {
                Ok(k) if self.removable(&k) && !sizes.contains_key(&k) => {
                    sizes.insert(k.clone(), size);
                    keys.push(k);
                }
                _ => kept.push(name),
            }
        }
        if !kept.is_empty() {
            self.fleet_release_names(Vec::new(), kept, false, ctx);
        }
        let metrics = self.metrics.clone();
        self.delete_claimed(keys, sizes, DeleteCause::Evicted, ctx, move |removed| {
            metrics.evicted(removed.len(), removed.iter().map(|(_, b)| b).sum());
            removed.len()
        })
    }
}

/// A fleet adapter with `IsolatedLRU`: the quota is the fleet's, kept in the index (the
/// eviction actor does not drive this adapter); the next round, which this starts, applies it.
impl Handler<SetQuota> for BackendActor {
    type Result = ResponseActFuture<Self, Result<Option<u64>, QuotaError>>;

    fn handle(&mut self, msg: SetQuota, _: &mut Context<Self>) -> Self::Result {
        let adapter = msg.adapter;
        let Some(index) = self.fleet_quota_index() else {
            return Box::pin(ready(Err(QuotaError::NoEviction(adapter))));
        };
        if let Err(e) = crate::key::validate_salt(&msg.cache_salt) {
            return Box::pin(ready(Err(QuotaError::BadSalt(e.to_string()))));
        }
        let set = FleetSetQuota {
            salt: msg.cache_salt,
            limit: msg.limit_bytes,
        };
        Box::pin(
            wrap_future::<_, Self>(index.send(set)).map(move |res, act, ctx| {
                let old = match res {
                    Ok(Ok(old)) => old,
                    Ok(Err(e)) => return Err(QuotaError::Fleet(adapter, e.to_string())),
                    Err(e) => return Err(QuotaError::Fleet(adapter, e.to_string())),
                };
                act.fleet_refresh(ctx);
                Ok(old)
            }),
        )
    }
}

/// The fleet's quotas, as the index has them now (as last read while it is unreachable).
impl Handler<GetQuotas> for BackendActor {
    type Result = ResponseActFuture<Self, Option<Quotas>>;

    fn handle(&mut self, _: GetQuotas, _: &mut Context<Self>) -> Self::Result {
        let Some(index) = self.fleet_quota_index() else {
            return Box::pin(ready(None));
        };
        Box::pin(
            wrap_future::<_, Self>(index.send(GetFleetUsage)).map(|res, act, _| {
                let usage = match res {
                    Ok(Ok(u)) => Some(u),
                    _ => act.fleet.as_ref().and_then(|l| l.usage.clone()),
                };
                usage.map(|u| Quotas(u.quotas))
            }),
        )
    }
}

impl BackendActor {
    /// Puts this adapter in fleet mode (see the module docs): `identity` names its bucket, which
    /// every node with the same identity shares; `eviction` (if any) is run over the fleet.
    pub fn with_fleet(
        mut self,
        config: &FleetConfig,
        identity: String,
        eviction: Option<&EvictionConfig>,
        interval: std::time::Duration,
    ) -> Self {
        self.fleet = Some(FleetLink::new(config, identity, eviction, interval));
        self
    }

    /// Starts the index actor on this arbiter and the fleet timer (from `started`).
    pub(super) fn start_fleet(&mut self, ctx: &mut Context<Self>) {
        let Some(link) = self.fleet.as_mut() else {
            return;
        };
        let Some((mut config, shards)) = link.pending.take() else {
            return;
        };
        config.metrics = self.metrics.clone();
        link.index = Some(FleetShards::start(config, shards));
        ctx.run_interval(link.interval, |act, ctx| act.fleet_refresh(ctx));
        if let Some(period) = link.listing {
            ctx.run_interval(period, |act, ctx| act.fleet_sync(ctx));
        }
    }

    /// Lists the bucket into the index (run by the holder of the listing lease; see
    /// [`FleetConfig::listing_interval_secs`]): objects the index lacks are added, objects it
    /// holds that the listing did not see (and nothing touched meanwhile) are forgotten.
    fn fleet_sync(&mut self, ctx: &mut Context<Self>) {
        let Some(index) = self.fleet_index() else {
            return;
        };
        let Some(link) = self.fleet.as_mut() else {
            return;
        };
        let Some(period) = link.listing.filter(|_| !link.syncing) else {
            return;
        };
        link.syncing = true;
        link.last_sync = Some(std::time::Instant::now());
        let (me, adapter, format) = (ctx.address(), self.index, self.format);
        let sync = async move {
            if !matches!(
                index.send(FleetLease(Lease::Listing(period))).await,
                Ok(Ok(true))
            ) {
                return None;
            }
            let start = index.send(FleetSyncStart).await.ok()?.ok()?;
            let mut cursor = None;
            loop {
                let list = ListKeys {
                    model: None,
                    cursor,
                    page_size: SYNC_PAGE,
                    adapter,
                };
                let page = me.send(list).await.ok()?.ok()?;
                let objects = page
                    .entries
                    .into_iter()
                    .map(|(k, size)| fleet_object(&k, format, size))
                    .collect();
                index.send(FleetSyncPage(objects)).await.ok()?.ok()?;
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            index.send(FleetSyncEnd { start }).await.ok()?.ok()
        };
        ctx.spawn(wrap_future::<_, Self>(sync).map(|res, act, ctx| {
            if let Some(link) = act.fleet.as_mut() {
                link.syncing = false;
            }
            match res {
                Some(usage) => act.fleet_usage(usage, ctx),
                None => tracing::debug!(adapter = act.index, "fleet: no listing this time"),
            }
        }));
    }

    /// The index, when this adapter's `IsolatedLRU` quotas are its fleet's.
    fn fleet_quota_index(&self) -> Option<Addr<FleetShards>> {
        self.fleet
            .as_ref()
            .filter(|l| l.per_salt && l.evict.is_some())
            .and_then(|l| l.index.clone())
    }

    /// The index, when this adapter has a fleet.
    pub(super) fn fleet_index(&self) -> Option<Addr<FleetShards>> {
        self.fleet.as_ref().and_then(|f| f.index.clone())
    }

    pub(super) fn names(&self, keys: &[ObjectKey]) -> Vec<String> {
        keys.iter().map(|k| k.object_name(self.format)).collect()
    }

    /// The keys' object names, each with whether `FLRU`'s shadows sample it (for the index's
    /// locks and touches, which count as uses).
    pub(super) fn fleet_names(&self, keys: &[ObjectKey]) -> Vec<FleetName> {
        keys.iter()
            .map(|k| FleetName {
                name: k.object_name(self.format),
                sampled: in_shadow_sample(k),
            })
            .collect()
    }

    /// After a lookup that locked through the index (`locked[i]`: key `i` holds an index lock):
    /// hits keep their index lock, the others release it now.
    pub(super) fn fleet_after_lookup(
        &mut self,
        keys: &[ObjectKey],
        locked: &[bool],
        hits: &crate::messages::Bitmap,
    ) {
        let Some(index) = self.fleet_index() else {
            return;
        };
        let mut release = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            if !locked[i] {
                continue;
            }
            if hits.get(i) {
                let link = self.fleet.as_mut().expect("fleet_index was Some");
                *link.held.entry(key.clone()).or_default() += 1;
            } else {
                release.push(key.object_name(self.format));
            }
        }
        if !release.is_empty() {
            index.do_send(FleetUnlockSoon(release));
        }
    }

    /// Releases this node's index locks of `keys` (one per key, as [`Unlock`] does locally).
    pub(super) fn fleet_unlock(&mut self, keys: &[ObjectKey]) {
        let Some(index) = self.fleet_index() else {
            return;
        };
        let format = self.format;
        let link = self.fleet.as_mut().expect("fleet_index was Some");
        let mut names = Vec::new();
        for key in keys {
            if let Some(n) = link.held.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    link.held.remove(key);
                }
                names.push(key.object_name(format));
            }
        }
        if !names.is_empty() {
            index.do_send(FleetUnlockSoon(names));
        }
    }

    /// Tells the index about objects a probe found in the store.
    pub(super) fn fleet_found(
        &mut self,
        keys: &[ObjectKey],
        sizes: &[u64],
        ctx: &mut Context<Self>,
    ) {
        if let Some(index) = self.fleet_index() {
            let msg = self.fleet_stored_msg((keys, sizes), None);
            self.fleet_ask(index.send(msg), ctx);
        }
    }

    /// What tells the index about objects now in the store: this node's writes that ended
    /// (`written`: every key of the write and their bytes; `ok` the ones written, with their
    /// sizes), or objects a probe found (`written` is `None`).
    pub(super) fn fleet_stored_msg(
        &self,
        ok: (&[ObjectKey], &[u64]),
        written: Option<(&[ObjectKey], u64)>,
    ) -> FleetStored {
        let objects =
            ok.0.iter()
                .zip(ok.1)
                .map(|(k, &size)| fleet_object(k, self.format, size))
                .collect();
        match written {
            None => FleetStored::found(objects),
            Some((keys, bytes)) => FleetStored {
                objects,
                written: true,
                ended_names: self.names(keys),
                ended_bytes: bytes,
            },
        }
    }

    /// Sends a write's [`FleetStored`], then answers the stores it completed (whether or not
    /// the index answered: alone, stores go on). With a round of this node's due to start
    /// after it (this node evicts, and fewer than [`MAX_ROUNDS`] of its rounds are in
    /// flight), the round runs in the same call ([`FleetStoredRound`]): the script starts it
    /// only when the usage after the store says one is due, so a write that fills the bucket
    /// costs one call fewer.
    pub(super) fn fleet_written(
        &mut self,
        index: Addr<FleetShards>,
        msg: FleetStored,
        complete: Vec<BatchId>,
        ctx: &mut Context<Self>,
    ) {
        let Some(round) = self.fleet_round_msg() else {
            ctx.spawn(
                wrap_future::<_, Self>(index.send(msg)).map(move |res, act, ctx| {
                    if let Ok(Ok(usage)) = res {
                        act.fleet_usage(usage, ctx);
                    }
                    act.answer_stores(complete);
                }),
            );
            return;
        };
        let send = index.send(FleetStoredRound { stored: msg, round });
        ctx.spawn(wrap_future::<_, Self>(send).map(move |res, act, ctx| {
            let found = match res {
                Ok(Ok((usage, round))) => {
                    act.fleet_usage_seen(usage);
                    Some(round)
                }
                _ => None,
            };
            act.answer_stores(complete);
            act.fleet_round_found(found, ctx);
        }));
    }

    /// The most bytes the bucket may hold with a write of `bytes` that has waited since
    /// `since` (see [`FleetWriting`]): the capacity, while the write may still wait; `None`
    /// when writes do not wait here (no wait configured, no eviction by capacity), when the
    /// write alone is larger than the capacity, or when its wait ran out.
    fn fleet_write_limit(&self, bytes: u64, since: Option<std::time::Instant>) -> Option<u64> {
        let link = self.fleet.as_ref()?;
        let wait = link.write_wait?;
        let capacity = self.capacity_bytes;
        let by_capacity = link.evict.is_some() && !link.per_salt && capacity > 0;
        let expired = since.is_some_and(|t| t.elapsed() >= wait);
        (by_capacity && bytes <= capacity && !expired).then_some(capacity)
    }

    /// Announces a write to the index (see [`FleetWriting`]), then makes it. The announcement
    /// comes first so that a deletion elsewhere that may remove this write's object taints its
    /// name; and the reply's usage counts the bytes, so a round can start while they are in
    /// flight. While the index is unreachable, the write is made at once (alone, writes go
    /// on). `since`: when this write first found the bucket full (`None` for its first
    /// announcement). While the index says the bucket is full, the write's bytes count as this
    /// node's waiting bytes (its rounds make room for them; `status` shows them), and it asks
    /// again after [`WRITE_RETRY`]; once the wait has run out, it is announced without a limit
    /// and made.
    pub(super) fn fleet_write(
        &mut self,
        index: Addr<FleetShards>,
        items: Vec<Item>,
        since: Option<std::time::Instant>,
        ctx: &mut Context<Self>,
    ) {
        let names = items
            .iter()
            .map(|(_, k, _)| k.object_name(self.format))
            .collect();
        let bytes = items.iter().map(|(_, _, o)| o.len() as u64).sum();
        let limit = self.fleet_write_limit(bytes, since);
        let announce = index.send(FleetWriting {
            names,
            bytes,
            limit,
        });
        ctx.spawn(wrap_future::<_, Self>(announce).map(move |res, act, ctx| {
            let refused = matches!(res, Ok(Ok(Announced { started: false, .. })));
            // Made after a wait: within the capacity, or past it (no limit) once it ran out.
            let made_after_wait =
                since.is_some() && matches!(res, Ok(Ok(Announced { started: true, .. })));
            if let Some(link) = act.fleet.as_mut() {
                match (since.is_some(), refused) {
                    (false, true) => link.waiting += bytes,
                    (true, false) => link.waiting -= bytes,
                    _ => {}
                }
                if made_after_wait {
                    let (within, over) = &mut link.waited;
                    *if limit.is_some() { within } else { over } += 1;
                }
            }
            if made_after_wait {
                act.metrics.fleet_write_waited(limit.is_none());
            }
            let Ok(Ok(Announced { started, usage })) = res else {
                act.write_items(items, ctx);
                return;
            };
            act.fleet_usage(usage, ctx);
            if started {
                act.write_items(items, ctx);
                return;
            }
            let since = since.unwrap_or_else(std::time::Instant::now);
            ctx.run_later(WRITE_RETRY, move |act, ctx| match act.fleet_index() {
                Some(index) => act.fleet_write(index, items, Some(since), ctx),
                None => {
                    if let Some(link) = act.fleet.as_mut() {
                        link.waiting -= bytes;
                    }
                    act.write_items(items, ctx);
                }
            });
        }));
    }

    /// Sends a request whose reply is the fleet's usage, and checks it when it comes.
    fn fleet_ask(
        &mut self,
        request: impl std::future::Future<Output = Result<Result<FleetUsage, FleetError>, MailboxError>>
            + 'static,
        ctx: &mut Context<Self>,
    ) {
        ctx.spawn(wrap_future::<_, Self>(request).map(|res, act, ctx| {
            if let Ok(Ok(usage)) = res {
                act.fleet_usage(usage, ctx);
            }
        }));
    }

    /// Records the fleet's usage and checks whether the bucket needs an eviction round.
    pub(super) fn fleet_usage(&mut self, usage: FleetUsage, ctx: &mut Context<Self>) {
        self.fleet_usage_seen(usage);
        self.fleet_check(ctx);
    }

    /// Records the fleet's usage as read (the gauge, and the figures the next check reads).
    fn fleet_usage_seen(&mut self, usage: FleetUsage) {
        self.metrics.fleet_usage(usage.bytes);
        if let Some(link) = self.fleet.as_mut() {
            link.usage = Some(usage);
        }
    }

    /// Claims `keys` in the index, then `then` with the claimed ones (none while the index is
    /// unreachable: nothing is deleted then) and the refused ones.
    pub(super) fn fleet_claim<R: 'static>(
        &mut self,
        index: Addr<FleetShards>,
        keys: Vec<ObjectKey>,
        then: impl FnOnce(
                Vec<ObjectKey>,
                Vec<ObjectKey>,
                &mut Self,
                &mut Context<Self>,
            ) -> ResponseActFuture<Self, R>
            + 'static,
    ) -> ResponseActFuture<Self, R> {
        let names = self.names(&keys);
        Box::pin(
            wrap_future::<_, Self>(index.send(FleetClaim(names.clone()))).then(
                move |res, act, ctx| {
                    let claimed: std::collections::HashSet<String> = match res {
                        Ok(Ok(c)) => c.into_iter().collect(),
                        _ => Default::default(),
                    };
                    let (go, refused): (Vec<_>, Vec<_>) = keys
                        .into_iter()
                        .zip(names)
                        .partition(|(_, n)| claimed.contains(n));
                    then(
                        go.into_iter().map(|(k, _)| k).collect(),
                        refused.into_iter().map(|(k, _)| k).collect(),
                        act,
                        ctx,
                    )
                },
            ),
        )
    }

    /// Ends claims: `gone` are no longer in the store (removed for `cause`), `kept` are.
    pub(super) fn fleet_release(
        &mut self,
        gone: Vec<ObjectKey>,
        kept: Vec<ObjectKey>,
        cause: DeleteCause,
        ctx: &mut Context<Self>,
    ) {
        if self.fleet.is_none() {
            return;
        }
        let (gone, kept) = (self.names(&gone), self.names(&kept));
        self.fleet_release_names(gone, kept, cause == DeleteCause::Evicted, ctx);
    }

    /// [`fleet_release`](Self::fleet_release) by object name.
    fn fleet_release_names(
        &mut self,
        removed: Vec<String>,
        kept: Vec<String>,
        evicted: bool,
        ctx: &mut Context<Self>,
    ) {
        let Some(index) = self.fleet_index() else {
            return;
        };
        let msg = FleetRelease {
            removed,
            kept,
            evicted,
        };
        if evicted {
            if let Some(link) = self.fleet.as_mut() {
                link.releasing += 1;
            }
        }
        ctx.spawn(
            wrap_future::<_, Self>(index.send(msg)).map(move |res, act, ctx| {
                if act.fleet.is_none() {
                    return;
                }
                let answered = matches!(res, Ok(Ok(_)));
                if let Ok(Ok(usage)) = res {
                    act.fleet_usage_seen(usage);
                }
                // A round's deletes: the usage read after them says whether the next follows.
                if let (true, Some(link)) = (evicted, act.fleet.as_mut()) {
                    link.releasing = link.releasing.saturating_sub(1);
                    if answered {
                        act.fleet_check(ctx);
                    }
                    act.fleet_rounds_done(ctx);
                }
            }),
        );
    }

    /// Tells the index that loads found these objects missing.
    pub(super) fn fleet_vanished(&mut self, keys: &[ObjectKey]) {
        if let Some(index) = self.fleet_index() {
            index.do_send(FleetVanished(self.names(keys)));
        }
    }

    /// The fleet status for [`GetStatus`](crate::messages::GetStatus), when this adapter has a
    /// fleet.
    pub(super) fn fleet_status(&self) -> ResponseActFuture<Self, Option<FleetStatus>> {
        match self.fleet_index() {
            None => Box::pin(ready(None)),
            Some(index) => Box::pin(wrap_future::<_, Self>(index.send(GetFleetStatus)).map(
                |res, act, _| {
                    let (waiting, (waited, over)) = act
                        .fleet
                        .as_ref()
                        .map_or((0, (0, 0)), |l| (l.waiting, l.waited));
                    res.ok().map(|s| FleetStatus {
                        waiting_bytes: waiting,
                        writes_waited: waited,
                        writes_over: over,
                        ..s
                    })
                },
            )),
        }
    }
}
