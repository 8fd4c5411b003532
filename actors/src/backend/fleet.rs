//! The backend actor's side of fleet mode: many processes on one bucket, one
//! [`FleetIndex`](crate::fleet) per adapter (see that module for the index's invariants).
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
//! - **Stores** tell the index the objects written (size, salt, recency); a key found by a
//!   probe that the index did not know is added the same way.
//! - **Eviction** of the bucket is the fleet's: usage is the index's total, and when it reaches
//!   the watermark a node that finds it so takes the index's eviction lease for one round (one
//!   round at a time in the fleet; the lease is given up at the round's end) and removes the
//!   least recently used unlocked objects of the whole fleet, whichever node stored them:
//!   LMCache's `floor(objects × ratio)` (at least 1), plus what brings usage back to the
//!   watermark when it is further above (see `round_size`). The eviction actor does not drive
//!   an adapter with a fleet.
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

use super::BackendActor;
use crate::config::{EvictionConfig, FleetConfig};
use crate::fleet::*;
use crate::key::{KeyMap, NameFormat, ObjectKey};
use crate::messages::{DeleteCause, ListKeys};

/// What the backend keeps for fleet mode.
pub(super) struct FleetLink {
    /// The index actor's settings until it starts (in the backend's `started`).
    pending: Option<IndexConfig>,
    /// The index actor, on the backend's arbiter.
    pub(super) index: Option<Addr<FleetIndex>>,
    /// This node's index locks per key (one per lookup hit that locked through the index).
    held: KeyMap<u32>,
    /// The fleet's usage as the index last answered.
    pub(super) usage: Option<FleetUsage>,
    /// Watermark and ratio of fleet eviction (`None`: this adapter does not evict).
    evict: Option<(f64, f64)>,
    /// Period of the usage refresh and eviction check.
    interval: std::time::Duration,
    /// A fleet eviction round is in flight.
    round: bool,
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
            pending: Some(IndexConfig {
                url: config.index.clone(),
                node: config.resolved_node_id(),
                identity,
                ttl: DEFAULT_TTL,
                timeout: std::time::Duration::from_secs(2),
                metrics: crate::metrics::AdapterMetrics::off(),
            }),
            index: None,
            held: KeyMap::default(),
            usage: None,
            evict: eviction.map(|e| (e.trigger_watermark, e.eviction_ratio)),
            interval,
            round: false,
            listing: (config.listing_interval_secs > 0)
                .then(|| std::time::Duration::from_secs(config.listing_interval_secs)),
            syncing: false,
            last_sync: None,
        }
    }
}

/// Objects per listed page sent to the index in one script.
const SYNC_PAGE: usize = 1000;

/// The least time between two listings started because the index was found empty.
const EMPTY_INDEX_RESYNC: std::time::Duration = std::time::Duration::from_secs(5);

/// Removes the keys a fleet eviction round chose (sent by the backend to itself, so the
/// deletion runs as a handler: claimed, removed, released). Replies with the keys removed.
#[derive(Message)]
#[rtype(result = "Vec<(ObjectKey, u64)>")]
pub(super) struct FleetEvict(pub(super) Vec<ObjectKey>);

impl Handler<FleetEvict> for BackendActor {
    type Result = ActorResponse<Self, Vec<(ObjectKey, u64)>>;

    fn handle(&mut self, msg: FleetEvict, ctx: &mut Context<Self>) -> Self::Result {
        let mut seen = crate::key::KeySet::default();
        let keys: Vec<ObjectKey> = msg
            .0
            .into_iter()
            .filter(|k| self.removable(k) && seen.insert(k.clone()))
            .collect();
        let metrics = self.metrics.clone();
        self.start_delete(keys, DeleteCause::Evicted, ctx, move |removed| {
            metrics.evicted(removed.len(), removed.iter().map(|(_, b)| b).sum());
            removed
        })
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
        let Some(mut config) = link.pending.take() else {
            return;
        };
        config.metrics = self.metrics.clone();
        link.index = Some(FleetIndex::new(config).start());
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
                    .map(|(k, size)| FleetObject {
                        name: k.object_name(format),
                        salt: k.cache_salt().unwrap_or("").to_string(),
                        size,
                    })
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

    /// The index, when this adapter has a fleet.
    pub(super) fn fleet_index(&self) -> Option<Addr<FleetIndex>> {
        self.fleet.as_ref().and_then(|f| f.index.clone())
    }

    pub(super) fn names(&self, keys: &[ObjectKey]) -> Vec<String> {
        keys.iter().map(|k| k.object_name(self.format)).collect()
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
            index.do_send(FleetUnlock(release));
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
            index.do_send(FleetUnlock(names));
        }
    }

    /// Tells the index about objects now in the store (written here, or found by a probe).
    pub(super) fn fleet_stored(
        &mut self,
        keys: &[ObjectKey],
        sizes: &[u64],
        ctx: &mut Context<Self>,
    ) {
        let Some(index) = self.fleet_index() else {
            return;
        };
        let objects = keys
            .iter()
            .zip(sizes)
            .map(|(k, &size)| FleetObject {
                name: k.object_name(self.format),
                salt: k.cache_salt().unwrap_or("").to_string(),
                size,
            })
            .collect();
        ctx.spawn(
            wrap_future::<_, Self>(index.send(FleetStored(objects))).map(|res, act, ctx| {
                if let Ok(Ok(usage)) = res {
                    act.fleet_usage(usage, ctx);
                }
            }),
        );
    }

    /// Records the fleet's usage and checks whether the bucket needs an eviction round.
    pub(super) fn fleet_usage(&mut self, usage: FleetUsage, ctx: &mut Context<Self>) {
        self.metrics.fleet_usage(usage.bytes);
        if let Some(link) = self.fleet.as_mut() {
            link.usage = Some(usage);
        }
        self.fleet_check(ctx);
    }

    /// The timer: reads the fleet's usage (other nodes' stores move it), then checks.
    fn fleet_refresh(&mut self, ctx: &mut Context<Self>) {
        let Some(index) = self.fleet_index() else {
            return;
        };
        ctx.spawn(
            wrap_future::<_, Self>(index.send(GetFleetUsage)).map(|res, act, ctx| {
                if let Ok(Ok(usage)) = res {
                    // An index that knows nothing while this node holds objects has lost its
                    // data (or never had it): rebuild it from the listing.
                    let empty = usage.objects == 0 && act.ledger.len() > 0;
                    act.fleet_usage(usage, ctx);
                    let due = act.fleet.as_ref().is_some_and(|l| {
                        l.last_sync
                            .is_none_or(|t| t.elapsed() >= EMPTY_INDEX_RESYNC)
                    });
                    if empty && due {
                        act.fleet_sync(ctx);
                    }
                }
            }),
        );
    }

    /// Starts a fleet eviction round when usage reached the watermark and none is in flight:
    /// take the lease, ask the least recent unlocked objects, remove them (claimed), read usage.
    fn fleet_check(&mut self, ctx: &mut Context<Self>) {
        let capacity = self.capacity_bytes;
        let Some(index) = self.fleet_index() else {
            return;
        };
        let Some(link) = self.fleet.as_mut() else {
            return;
        };
        let (Some((watermark, ratio)), Some(usage)) = (link.evict, link.usage.as_ref()) else {
            return;
        };
        if link.round || capacity == 0 || (usage.bytes as f64) < watermark * capacity as f64 {
            return;
        }
        link.round = true;
        let limit = round_size(usage, capacity, watermark, ratio);
        let (me, format) = (ctx.address(), self.format);
        let round = async move {
            if !matches!(index.send(FleetLease(Lease::Evict)).await, Ok(Ok(true))) {
                return None;
            }
            let evict = async {
                let scan = limit.saturating_mul(4).saturating_add(64);
                let chosen = index
                    .send(FleetCandidates { limit, scan })
                    .await
                    .ok()?
                    .ok()?;
                let keys = parse_names(chosen.into_iter().map(|(n, _)| n), format);
                let removed = me.send(FleetEvict(keys)).await.ok()?;
                let usage = index.send(GetFleetUsage).await.ok()?.ok()?;
                Some((removed.len(), usage))
            };
            let done = evict.await;
            // The next round runs on whichever node finds the bucket full first.
            let _ = index.send(FleetLeaseRelease(Lease::Evict)).await;
            done
        };
        ctx.spawn(wrap_future::<_, Self>(round).map(|res, act, ctx| {
            if let Some(link) = act.fleet.as_mut() {
                link.round = false;
            }
            // Another round at once only when this one removed something (else the timer).
            if let Some((removed, usage)) = res {
                act.metrics.fleet_usage(usage.bytes);
                if let Some(link) = act.fleet.as_mut() {
                    link.usage = Some(usage);
                }
                if removed > 0 {
                    act.fleet_check(ctx);
                }
            }
        }));
    }

    /// Claims `keys` in the index, then `then` with the claimed ones (none while the index is
    /// unreachable: nothing is deleted then) and the refused ones.
    pub(super) fn fleet_claim<R: 'static>(
        &mut self,
        index: Addr<FleetIndex>,
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

    /// Ends claims: `gone` are no longer in the store, `kept` are.
    pub(super) fn fleet_release(
        &mut self,
        gone: Vec<ObjectKey>,
        kept: Vec<ObjectKey>,
        ctx: &mut Context<Self>,
    ) {
        let Some(index) = self.fleet_index() else {
            return;
        };
        let msg = FleetRelease {
            removed: self.names(&gone),
            kept: self.names(&kept),
        };
        ctx.spawn(wrap_future::<_, Self>(index.send(msg)).map(|res, act, _| {
            if let (Ok(Ok(usage)), Some(link)) = (res, act.fleet.as_mut()) {
                act.metrics.fleet_usage(usage.bytes);
                link.usage = Some(usage);
            }
        }));
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
            Some(index) => Box::pin(
                wrap_future::<_, Self>(index.send(GetFleetStatus)).map(|res, _, _| res.ok()),
            ),
        }
    }
}

/// How many objects a fleet round removes: LMCache's `floor(objects × ratio)` (at least 1),
/// plus, when the fleet is above its watermark by more than that, the objects (at the
/// average size) that bring it back to the watermark. N nodes store N times as fast as one
/// while one node evicts, so rounds of the ratio alone fall behind (docs/fleet.md).
fn round_size(usage: &FleetUsage, capacity: u64, watermark: f64, ratio: f64) -> usize {
    let by_ratio = ((usage.objects as f64 * ratio).floor() as usize).max(1);
    let over = usage.bytes as f64 - watermark * capacity as f64;
    if over <= 0.0 || usage.objects == 0 {
        return by_ratio;
    }
    let average = usage.bytes as f64 / usage.objects as f64;
    by_ratio + (over / average).ceil() as usize
}

/// Keys from object names; names that are not keys in `format` (objects of other writers)
/// are skipped.
fn parse_names(names: impl Iterator<Item = String>, format: NameFormat) -> Vec<ObjectKey> {
    names
        .filter_map(|n| ObjectKey::parse(&n, format).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(bytes: u64, objects: u64) -> FleetUsage {
        FleetUsage {
            bytes,
            objects,
            ..FleetUsage::default()
        }
    }

    #[test]
    fn a_round_is_the_ratio_at_the_watermark_and_catches_up_above_it() {
        // At the watermark (80 of 100 objects of 1 byte): LMCache's floor(80 × 0.2).
        assert_eq!(round_size(&usage(80, 80), 100, 0.8, 0.2), 16);
        // 300 objects on a 100-object bucket: back to 80, then the ratio's 60 more.
        assert_eq!(round_size(&usage(300, 300), 100, 0.8, 0.2), 60 + 220);
        assert_eq!(round_size(&usage(0, 0), 100, 0.8, 0.2), 1);
    }
}
