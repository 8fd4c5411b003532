//! Fleet eviction rounds on the backend: the timer that reads the fleet's usage, the check of
//! the watermark and the landing mark, and one round (take or renew the eviction lease, claim
//! the policy's victims of the whole fleet, delete them, release the claims, give the lease up
//! when this node's last round ends).
//!
//! Invariants (see [`super`]): a round deletes only what it claimed, so never a key locked on
//! any node; at most one node holds the lease, and this node gives it up when its last round
//! ends (`rounds` counts them); nothing is deleted while the index is unreachable.

use actix::fut::wrap_future;
use actix::prelude::*;

use super::*;

impl BackendActor {
    /// The timer: reads the fleet's usage (other nodes' stores move it), then checks.
    pub(in crate::backend) fn fleet_refresh(&mut self, ctx: &mut Context<Self>) {
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

    /// Starts a fleet eviction round when usage, as this node last read it, says one is due
    /// (the objects the index knows reached the watermark, or with the bytes being written
    /// they reach the landing mark), unless [`MAX_ROUNDS`] of this node's rounds are in
    /// flight. The round's script decides with the index's figures at that moment, so an
    /// extra attempt costs one round trip.
    pub(in crate::backend) fn fleet_check(&mut self, ctx: &mut Context<Self>) {
        let capacity = self.capacity_bytes;
        let Some(link) = self.fleet.as_ref() else {
            return;
        };
        let (Some((watermark, _)), Some(usage)) = (link.evict, link.usage.as_ref()) else {
            return;
        };
        // The script decides with the index's figures; this node asks when its last reading
        // says a round is due (see `FleetRound`).
        let due = if link.per_salt {
            usage.by_salt.iter().any(|(salt, &bytes)| {
                let quota = usage.quotas.get(salt).copied().unwrap_or(0);
                bytes > 0 && bytes as f64 >= watermark * quota as f64
            })
        } else {
            // With several hash tags, each evicts against its share of the capacity: the
            // fullest one decides.
            let stored = usage.stored();
            let (stored, landing) = usage.fullest.unwrap_or((stored, stored + usage.pending));
            capacity > 0
                && (stored as f64 >= watermark * capacity as f64
                    || (landing + link.waiting) as f64 >= link.landing * capacity as f64)
        };
        // (`fleet_round` starts none while MAX_ROUNDS are in flight.)
        if due {
            self.fleet_round(ctx);
        }
    }

    /// One fleet eviction round: one script reads the fleet's usage (less what rounds in
    /// flight have claimed), takes or renews the lease and claims the victims
    /// ([`FleetRound`]); this node deletes them and releases the claims. The release answers
    /// with the usage after the deletes, and another round follows when that usage says one is
    /// due ([`fleet_check`](Self::fleet_check); the script decides again, with the index's
    /// figures then), so a round that brings the bucket under the watermark costs no further
    /// call; the holder's rounds overlap (up to [`MAX_ROUNDS`]) when stores outrun one round's
    /// deletes, and the lease is given up when the last one and its release have ended (so
    /// the next round runs on whichever node finds the bucket full first). A write's end
    /// carries the round in its own call instead ([`FleetStoredRound`], see
    /// [`fleet_written`](Self::fleet_written)).
    pub(in crate::backend) fn fleet_round(&mut self, ctx: &mut Context<Self>) {
        let Some(index) = self.fleet_index() else {
            return;
        };
        let Some(msg) = self.fleet_round_msg() else {
            return;
        };
        ctx.spawn(
            wrap_future::<_, Self>(index.send(msg))
                .map(|res, act, ctx| act.fleet_round_found(res.ok().and_then(Result::ok), ctx)),
        );
    }

    /// The round this node would start now, counted as in flight; `None` when it does not
    /// evict or [`MAX_ROUNDS`] of its rounds are in flight.
    pub(in crate::backend) fn fleet_round_msg(&mut self) -> Option<FleetRound> {
        let capacity = self.capacity_bytes;
        let link = self.fleet.as_mut()?;
        let (watermark, ratio) = link.evict?;
        if link.rounds >= MAX_ROUNDS {
            return None;
        }
        link.rounds += 1;
        Some(FleetRound {
            capacity,
            watermark,
            ratio,
            per_salt: link.per_salt,
            ahead: link.landing,
            catch_up: link.catch_up,
            waiting: link.waiting,
        })
    }

    /// What a round of [`fleet_round_msg`](Self::fleet_round_msg) found (`None`: no answer):
    /// claimed victims are deleted and released ([`FleetEvict`]), then the round ends.
    pub(in crate::backend) fn fleet_round_found(
        &mut self,
        round: Option<Round>,
        ctx: &mut Context<Self>,
    ) {
        let Some(Round::Claimed(victims)) = round else {
            if let Some(link) = self.fleet.as_mut() {
                link.rounds = link.rounds.saturating_sub(1);
            }
            self.fleet_rounds_done(ctx);
            return;
        };
        let (adapter, claimed, started) = (self.index, victims.len(), std::time::Instant::now());
        let evict = ctx.address().send(FleetEvict(victims));
        ctx.spawn(wrap_future::<_, Self>(evict).map(move |removed, act, ctx| {
            tracing::debug!(
                adapter,
                claimed,
                removed = removed.unwrap_or(0),
                ms = started.elapsed().as_millis() as u64,
                "fleet: eviction round"
            );
            if let Some(link) = act.fleet.as_mut() {
                link.rounds = link.rounds.saturating_sub(1);
                link.leased = true;
            }
            act.fleet_rounds_done(ctx);
        }));
    }

    /// Gives the eviction lease up once this node's rounds and their releases have all ended
    /// (a release's answer may start the next round first, see
    /// [`fleet_round`](Self::fleet_round)).
    pub(in crate::backend) fn fleet_rounds_done(&mut self, ctx: &mut Context<Self>) {
        let Some(link) = self.fleet.as_mut() else {
            return;
        };
        if link.rounds == 0 && link.releasing == 0 && std::mem::take(&mut link.leased) {
            if let Some(index) = self.fleet_index() {
                ctx.spawn(
                    wrap_future::<_, Self>(index.send(FleetLeaseRelease(Lease::Evict)))
                        .map(|_, _, _| ()),
                );
            }
        }
    }
}
