//! One bucket's index over several hash tags (`fleet.shards`), so that a Redis or Valkey
//! cluster spreads one bucket over its masters.
//!
//! [`FleetShards`] is what the backend talks to: it takes every fleet message, sends each name
//! to the [`FleetIndex`] of the tag the name hashes to ([`shard_of`](super::placement::shard_of): FNV-1a of the name, the
//! same on every node and platform), and merges the replies. Each tag's actor is a whole index
//! of its own (its connection, to the master that holds its slot; its heartbeat, locks,
//! claims, writes, recency order and eviction lease) over the names it holds, with a slice of
//! the capacity. With one tag (the default) the router sends every message whole to it:
//! exactly the index of one tag.
//!
//! Invariants:
//! - **Exact per name.** A name's lock, claim, write, taint and recency live on its one tag, so
//!   every rule the scripts keep per name holds across tags unchanged: a key locked on any node
//!   is never claimed, a tainted write is not added, a dead node's locks lapse (on each tag,
//!   by that tag's heartbeat).
//! - **One count for the bucket.** Every node must split the bucket over the same count, or
//!   the nodes would look for one name on different tags and miss each other's locks. The
//!   first tag's join checks the count the index recorded (and records it at a first join);
//!   a node that gives another count is never joined there, and a node serves alone (never
//!   deletes) unless every one of its tags is joined ([`Standing`]).
//! - **All or nothing where it matters.** A lookup's locks, a deletion's claims and a write's
//!   announcement that fail on one tag are undone on the others (unlocked, released kept,
//!   ended without objects) and the message fails, as with one tag.
//! - **Capacity by slices, approximate.** Tag `i` of `S` evicts against `capacity / S` (its
//!   `IsolatedLRU` quotas, its write limits and waiting bytes the same share), so the bucket's
//!   total stays within the capacity whenever every tag does; a tag fuller than the others
//!   evicts before the bucket's total reaches the watermark ([`FleetUsage::fullest`]), so the
//!   order is LRU's per tag, not over the bucket. A write's bytes are split over its tags in
//!   proportion to its names (blocks are one size), the same way for its announcement and its
//!   end. Usage is the sum of every tag's last reply.

use actix::fut::{ready, wrap_future};
use actix::prelude::*;
use futures_util::future::join_all;

use super::placement::{shard_identity, shard_of, share, split_bytes};
use super::*;

/// A tag's standing, sent by its [`FleetIndex`] when it joins or is left alone.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub(crate) struct Standing {
    /// The tag's number.
    pub(crate) shard: usize,
    /// Whether it is joined now.
    pub(crate) joined: bool,
}

/// The router of one bucket's tags. See the module docs.
pub(crate) struct FleetShards {
    shards: Vec<Addr<FleetIndex>>,
    /// Each tag's standing, as its actor last reported it (with one tag, unused: the tag
    /// itself refuses while it is not joined).
    joined: Vec<bool>,
    /// Each tag's last usage (the merged usage is their sum).
    last: Vec<FleetUsage>,
    /// Each tag's tick at the start of the listing in flight.
    sync_starts: Vec<u64>,
}

/// One reply per tag asked: the tag and its result.
type Replies<R> = Vec<(usize, Result<R, FleetError>)>;

impl FleetShards {
    /// Starts the tags' index actors and their router on this arbiter: `shards` tags of the
    /// bucket `config.identity`, each with its share of the configured quotas.
    pub(crate) fn start(config: IndexConfig, shards: u32) -> Addr<Self> {
        let n = shards.max(1) as usize;
        Self::create(move |ctx| {
            let me = ctx.address().recipient();
            let shards = (0..n)
                .map(|i| {
                    let mut c = config.clone();
                    c.identity = shard_identity(&config.identity, i, n);
                    c.layout = (i == 0).then_some(n as u32);
                    for limit in c.quotas.0.values_mut() {
                        *limit = share(*limit, i, n);
                    }
                    FleetIndex::new(c).reporting_to(me.clone(), i).start()
                })
                .collect();
            Self {
                shards,
                joined: vec![false; n],
                last: vec![FleetUsage::default(); n],
                sync_starts: vec![0; n],
            }
        })
    }

    fn n(&self) -> usize {
        self.shards.len()
    }

    /// `Err` unless every tag is joined (with several tags: a node with some tags joined
    /// and others not must not act on a part of the bucket).
    fn gate(&self) -> Result<(), FleetError> {
        match self.joined.iter().position(|j| !j) {
            Some(i) if self.n() > 1 => Err(FleetError::Unreachable(format!(
                "hash tag {i} of the bucket's {} is not joined",
                self.n()
            ))),
            _ => Ok(()),
        }
    }

    /// `items` by tag, each with its position in `items`.
    fn split<T>(&self, items: Vec<T>, name: impl Fn(&T) -> &str) -> Vec<Vec<(usize, T)>> {
        let mut out: Vec<Vec<(usize, T)>> = (0..self.n()).map(|_| Vec::new()).collect();
        for (pos, item) in items.into_iter().enumerate() {
            out[shard_of(name(&item), self.n())].push((pos, item));
        }
        out
    }

    /// Names by tag.
    fn split_names(&self, names: Vec<String>) -> Vec<Vec<String>> {
        self.split(names, |n| n.as_str())
            .into_iter()
            .map(|part| part.into_iter().map(|(_, n)| n).collect())
            .collect()
    }

    /// Sends one message per tag (`None`: nothing for that tag) and waits for every reply.
    fn ask<M, R>(&self, msgs: Vec<Option<M>>) -> impl std::future::Future<Output = Replies<R>>
    where
        M: Message<Result = Result<R, FleetError>> + Send + 'static,
        R: Send + 'static,
        FleetIndex: Handler<M>,
    {
        let sends: Vec<_> = msgs
            .into_iter()
            .enumerate()
            .filter_map(|(i, m)| m.map(|m| (i, self.shards[i].send(m))))
            .collect();
        async move {
            join_all(sends.into_iter().map(|(i, send)| async move {
                let res = send.await.unwrap_or_else(|e| {
                    Err(FleetError::Unreachable(format!("index actor gone: {e}")))
                });
                (i, res)
            }))
            .await
        }
    }

    /// Every tag's usage, summed, with the fullest tag's figures when there are several.
    fn merged(&self) -> FleetUsage {
        let mut u = FleetUsage::default();
        for t in &self.last {
            u.bytes += t.bytes;
            u.objects += t.objects;
            u.pending += t.pending;
            u.claimed += t.claimed;
            for (salt, b) in &t.by_salt {
                *u.by_salt.entry(salt.clone()).or_default() += b;
            }
            for (salt, q) in &t.quotas {
                *u.quotas.entry(salt.clone()).or_default() += q;
            }
        }
        if self.n() > 1 {
            let n = self.n() as u64;
            let stored = self.last.iter().map(FleetUsage::stored).max().unwrap_or(0);
            let landing = self.last.iter().map(|t| t.stored() + t.pending).max();
            u.fullest = Some((n * stored, n * landing.unwrap_or(0)));
        }
        u
    }

    /// Records the usage replies and answers with the merged usage, or the first error.
    fn usage_of(&mut self, replies: Replies<FleetUsage>) -> Result<FleetUsage, FleetError> {
        let mut err = None;
        for (i, res) in replies {
            match res {
                Ok(u) => self.last[i] = u,
                Err(e) => err = err.or(Some(e)),
            }
        }
        err.map_or_else(|| Ok(self.merged()), Err)
    }
}

/// The first error among `replies`, else their values in tag order.
fn all_ok<R>(replies: Replies<R>) -> Result<Vec<(usize, R)>, FleetError> {
    replies
        .into_iter()
        .map(|(i, r)| r.map(|v| (i, v)))
        .collect()
}

impl Actor for FleetShards {
    type Context = Context<Self>;
}

impl Handler<Standing> for FleetShards {
    type Result = ();

    fn handle(&mut self, msg: Standing, _: &mut Context<Self>) {
        self.joined[msg.shard] = msg.joined;
    }
}

/// The type of a handler's reply that reads or updates the router's state when it comes.
type Act<T> = ResponseActFuture<FleetShards, Result<T, FleetError>>;

fn refuse<T: 'static>(e: FleetError) -> Act<T> {
    Box::pin(ready(Err(e)))
}

impl Handler<FleetStored> for FleetShards {
    type Result = Act<FleetUsage>;

    fn handle(&mut self, msg: FleetStored, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.gate() {
            return refuse(e);
        }
        let objects = self.split(msg.objects, |o| o.name.as_str());
        let ended = self.split_names(msg.ended_names);
        let counts: Vec<usize> = ended.iter().map(Vec::len).collect();
        let bytes = split_bytes(msg.ended_bytes, &counts);
        let msgs = objects
            .into_iter()
            .zip(ended)
            .zip(bytes)
            .map(|((objects, ended_names), ended_bytes)| {
                (!objects.is_empty() || !ended_names.is_empty()).then(|| FleetStored {
                    objects: objects.into_iter().map(|(_, o)| o).collect(),
                    written: msg.written,
                    ended_names,
                    ended_bytes,
                })
            })
            .collect();
        Box::pin(wrap_future(self.ask(msgs)).map(|r, act: &mut Self, _| act.usage_of(r)))
    }
}

impl Handler<FleetStoredRound> for FleetShards {
    type Result = Act<(FleetUsage, Round)>;

    fn handle(&mut self, msg: FleetStoredRound, ctx: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.gate() {
            return refuse(e);
        }
        let gone = |e: MailboxError| FleetError::Unreachable(format!("index actor gone: {e}"));
        if self.n() == 1 {
            let send = self.shards[0].send(msg);
            return Box::pin(wrap_future(send).map(move |res, act: &mut Self, _| {
                let (usage, round) = res.map_err(gone)??;
                act.last[0] = usage;
                Ok((act.merged(), round))
            }));
        }
        // Over several tags: the store's end on its tags, then the round over the tags that
        // are due, as two messages would.
        let me = ctx.address();
        Box::pin(
            wrap_future(async move {
                me.send(msg.stored).await.map_err(gone)??;
                me.send(msg.round).await.map_err(gone)?
            })
            .map(|round, act: &mut Self, _| round.map(|r| (act.merged(), r))),
        )
    }
}

impl Handler<FleetWriting> for FleetShards {
    type Result = Act<Announced>;

    fn handle(&mut self, msg: FleetWriting, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.gate() {
            return refuse(e);
        }
        let n = self.n();
        let names = self.split_names(msg.names);
        let counts: Vec<usize> = names.iter().map(Vec::len).collect();
        let bytes = split_bytes(msg.bytes, &counts);
        let parts: Vec<_> = names.into_iter().zip(bytes).collect();
        let msgs = parts
            .iter()
            .enumerate()
            .map(|(i, (names, bytes))| {
                (!names.is_empty()).then(|| FleetWriting {
                    names: names.clone(),
                    bytes: *bytes,
                    limit: msg.limit.map(|l| share(l, i, n)),
                })
            })
            .collect();
        Box::pin(
            wrap_future(self.ask(msgs)).map(move |replies, act: &mut Self, _| {
                let mut started = Vec::new();
                let (mut refused, mut err) = (false, None);
                for (i, res) in replies {
                    match res {
                        Ok(a) => {
                            act.last[i] = a.usage;
                            if a.started {
                                started.push(i);
                            } else {
                                refused = true;
                            }
                        }
                        Err(e) => err = err.or(Some(e)),
                    }
                }
                if refused || err.is_some() {
                    // Undo the tags that recorded it: the write asks again (or, on an error,
                    // is made alone), as with one tag.
                    let mut undo: Vec<Option<FleetStored>> = (0..n).map(|_| None).collect();
                    for i in started {
                        let (names, bytes) = parts[i].clone();
                        undo[i] = Some(FleetStored {
                            objects: Vec::new(),
                            written: true,
                            ended_names: names,
                            ended_bytes: bytes,
                        });
                    }
                    let undo = act.ask(undo);
                    actix::spawn(async move {
                        undo.await;
                    });
                }
                match err {
                    Some(e) => Err(e),
                    None => Ok(Announced {
                        started: !refused,
                        usage: act.merged(),
                    }),
                }
            }),
        )
    }
}

impl Handler<FleetLockNames> for FleetShards {
    type Result = Act<Vec<FleetLock>>;

    fn handle(&mut self, msg: FleetLockNames, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.gate() {
            return refuse(e);
        }
        let total = msg.0.len();
        let parts = self.split(msg.0, |n| n.name.as_str());
        let positions: Vec<Vec<usize>> = parts
            .iter()
            .map(|p| p.iter().map(|(pos, _)| *pos).collect())
            .collect();
        let names: Vec<Vec<String>> = parts
            .iter()
            .map(|p| p.iter().map(|(_, n)| n.name.clone()).collect())
            .collect();
        let msgs = parts
            .into_iter()
            .map(|p| {
                (!p.is_empty()).then(|| FleetLockNames(p.into_iter().map(|(_, n)| n).collect()))
            })
            .collect();
        Box::pin(
            wrap_future(self.ask(msgs)).map(move |replies, act: &mut Self, _| {
                if let Some(e) = replies.iter().find_map(|(_, r)| r.as_ref().err().cloned()) {
                    // Undo the locks the other tags took: the lookup fails whole.
                    for (i, r) in &replies {
                        if r.is_ok() {
                            act.shards[*i].do_send(FleetUnlockSoon(names[*i].clone()));
                        }
                    }
                    return Err(e);
                }
                let mut out = vec![FleetLock::Unknown; total];
                for (i, locks) in all_ok(replies)? {
                    for (pos, lock) in positions[i].iter().zip(locks) {
                        out[*pos] = lock;
                    }
                }
                Ok(out)
            }),
        )
    }
}

impl Handler<FleetUnlock> for FleetShards {
    type Result = Act<()>;

    fn handle(&mut self, msg: FleetUnlock, _: &mut Context<Self>) -> Self::Result {
        let msgs = self
            .split_names(msg.0)
            .into_iter()
            .map(|names| (!names.is_empty()).then_some(FleetUnlock(names)))
            .collect();
        Box::pin(wrap_future(self.ask(msgs)).map(|r, _, _| all_ok(r).map(|_| ())))
    }
}

impl Handler<FleetUnlockSoon> for FleetShards {
    type Result = ();

    fn handle(&mut self, msg: FleetUnlockSoon, _: &mut Context<Self>) {
        for (i, names) in self.split_names(msg.0).into_iter().enumerate() {
            if !names.is_empty() {
                self.shards[i].do_send(FleetUnlockSoon(names));
            }
        }
    }
}

impl Handler<FleetTouch> for FleetShards {
    type Result = Act<()>;

    fn handle(&mut self, msg: FleetTouch, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.gate() {
            return refuse(e);
        }
        let msgs = self
            .split(msg.0, |n| n.name.as_str())
            .into_iter()
            .map(|p| (!p.is_empty()).then(|| FleetTouch(p.into_iter().map(|(_, n)| n).collect())))
            .collect();
        Box::pin(wrap_future(self.ask(msgs)).map(|r, _, _| all_ok(r).map(|_| ())))
    }
}

impl FleetShards {
    /// The tags a lease lives on: the listing's on the first, the eviction lease on each (a
    /// tag's rounds take its own).
    fn lease_msgs<M: Clone>(&self, lease: Lease, msg: M) -> Vec<Option<M>> {
        (0..self.n())
            .map(|i| (i == 0 || lease == Lease::Evict).then(|| msg.clone()))
            .collect()
    }
}

impl Handler<FleetLease> for FleetShards {
    type Result = Act<bool>;

    fn handle(&mut self, msg: FleetLease, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.gate() {
            return refuse(e);
        }
        let msgs = self.lease_msgs(msg.0, msg);
        Box::pin(
            wrap_future(self.ask(msgs))
                .map(|r, _, _| all_ok(r).map(|held| held.into_iter().all(|(_, h)| h))),
        )
    }
}

impl Handler<FleetLeaseRelease> for FleetShards {
    type Result = Act<()>;

    fn handle(&mut self, msg: FleetLeaseRelease, _: &mut Context<Self>) -> Self::Result {
        let msgs = self.lease_msgs(msg.0, msg);
        Box::pin(wrap_future(self.ask(msgs)).map(|r, _, _| all_ok(r).map(|_| ())))
    }
}

impl Handler<FleetRound> for FleetShards {
    type Result = Act<Round>;

    fn handle(&mut self, msg: FleetRound, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.gate() {
            return refuse(e);
        }
        let n = self.n();
        let msgs: Vec<Option<FleetRound>> = (0..n)
            .map(|i| {
                let round = FleetRound {
                    capacity: share(msg.capacity, i, n),
                    waiting: share(msg.waiting, i, n),
                    ..msg
                };
                (n == 1 || self.due(i, &round)).then_some(round)
            })
            .collect();
        if msgs.iter().all(Option::is_none) {
            return Box::pin(ready(Ok(Round::Under)));
        }
        Box::pin(wrap_future(self.ask(msgs)).map(|replies, _, _| {
            // Claimed objects must be deleted and released, whatever the other tags said.
            let (mut claimed, mut any_claim, mut busy, mut err) = (Vec::new(), false, false, None);
            for (_, r) in replies {
                match r {
                    Ok(Round::Claimed(v)) => {
                        any_claim = true;
                        claimed.extend(v);
                    }
                    Ok(Round::Busy) => busy = true,
                    Ok(Round::Under) => {}
                    Err(e) => err = err.or(Some(e)),
                }
            }
            match (any_claim, err) {
                (true, _) => Ok(Round::Claimed(claimed)),
                (false, Some(e)) => Err(e),
                (false, None) if busy => Ok(Round::Busy),
                (false, None) => Ok(Round::Under),
            }
        }))
    }
}

impl FleetShards {
    /// Whether tag `i`'s last usage says its `round` may be due (as the backend's check does
    /// for the bucket): a tag under both marks is not asked, so a round costs a call only on
    /// the tags that fill up. `IsolatedLRU` rounds (per salt) go to every tag.
    fn due(&self, i: usize, round: &FleetRound) -> bool {
        let (u, cap) = (&self.last[i], round.capacity as f64);
        let stored = u.stored();
        round.per_salt
            || stored as f64 >= round.watermark * cap
            || (stored + u.pending + round.waiting) as f64 >= round.ahead * cap
    }
}

impl Handler<FleetSetQuota> for FleetShards {
    type Result = Act<Option<u64>>;

    fn handle(&mut self, msg: FleetSetQuota, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.gate() {
            return refuse(e);
        }
        let n = self.n();
        let msgs = (0..n)
            .map(|i| {
                Some(FleetSetQuota {
                    salt: msg.salt.clone(),
                    limit: msg.limit.map(|l| share(l, i, n)),
                })
            })
            .collect();
        Box::pin(wrap_future(self.ask(msgs)).map(|r, _, _| {
            let old: Vec<Option<u64>> = all_ok(r)?.into_iter().map(|(_, o)| o).collect();
            Ok(old
                .iter()
                .any(Option::is_some)
                .then(|| old.iter().flatten().sum()))
        }))
    }
}

impl Handler<FleetClaim> for FleetShards {
    type Result = Act<Vec<String>>;

    fn handle(&mut self, msg: FleetClaim, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.gate() {
            return refuse(e);
        }
        let msgs = self
            .split_names(msg.0)
            .into_iter()
            .map(|names| (!names.is_empty()).then_some(FleetClaim(names)))
            .collect();
        Box::pin(
            wrap_future(self.ask(msgs)).map(|replies, act: &mut Self, _| {
                if let Some(e) = replies.iter().find_map(|(_, r)| r.as_ref().err().cloned()) {
                    // Release the claims the other tags granted, kept: nothing is deleted.
                    for (i, r) in replies {
                        if let Ok(kept) = r {
                            act.shards[i].do_send(FleetRelease {
                                removed: Vec::new(),
                                kept,
                                evicted: false,
                            });
                        }
                    }
                    return Err(e);
                }
                Ok(all_ok(replies)?.into_iter().flat_map(|(_, c)| c).collect())
            }),
        )
    }
}

impl Handler<FleetRelease> for FleetShards {
    type Result = Act<FleetUsage>;

    fn handle(&mut self, msg: FleetRelease, _: &mut Context<Self>) -> Self::Result {
        let removed = self.split_names(msg.removed);
        let kept = self.split_names(msg.kept);
        let msgs = removed
            .into_iter()
            .zip(kept)
            .map(|(removed, kept)| {
                (!removed.is_empty() || !kept.is_empty()).then_some(FleetRelease {
                    removed,
                    kept,
                    evicted: msg.evicted,
                })
            })
            .collect();
        Box::pin(wrap_future(self.ask(msgs)).map(|r, act: &mut Self, _| act.usage_of(r)))
    }
}

impl Handler<FleetVanished> for FleetShards {
    type Result = Act<FleetUsage>;

    fn handle(&mut self, msg: FleetVanished, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.gate() {
            return refuse(e);
        }
        let msgs = self
            .split_names(msg.0)
            .into_iter()
            .map(|names| (!names.is_empty()).then_some(FleetVanished(names)))
            .collect();
        Box::pin(wrap_future(self.ask(msgs)).map(|r, act: &mut Self, _| act.usage_of(r)))
    }
}

impl Handler<FleetSyncStart> for FleetShards {
    type Result = Act<u64>;

    fn handle(&mut self, _: FleetSyncStart, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.gate() {
            return refuse(e);
        }
        let msgs = (0..self.n()).map(|_| Some(FleetSyncStart)).collect();
        Box::pin(wrap_future(self.ask(msgs)).map(|r, act: &mut Self, _| {
            for (i, start) in all_ok(r)? {
                act.sync_starts[i] = start;
            }
            Ok(act.sync_starts[0])
        }))
    }
}

impl Handler<FleetSyncPage> for FleetShards {
    type Result = Act<u64>;

    fn handle(&mut self, msg: FleetSyncPage, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.gate() {
            return refuse(e);
        }
        let msgs = self
            .split(msg.0, |o| o.name.as_str())
            .into_iter()
            .map(|p| {
                (!p.is_empty()).then(|| FleetSyncPage(p.into_iter().map(|(_, o)| o).collect()))
            })
            .collect();
        Box::pin(
            wrap_future(self.ask(msgs))
                .map(|r, _, _| Ok(all_ok(r)?.into_iter().map(|(_, added)| added).sum())),
        )
    }
}

/// Ends the listing on every tag, each from its own tick at [`FleetSyncStart`] (with one tag,
/// the message's).
impl Handler<FleetSyncEnd> for FleetShards {
    type Result = Act<FleetUsage>;

    fn handle(&mut self, msg: FleetSyncEnd, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.gate() {
            return refuse(e);
        }
        let n = self.n();
        let msgs = (0..n)
            .map(|i| {
                let start = if n == 1 {
                    msg.start
                } else {
                    self.sync_starts[i]
                };
                Some(FleetSyncEnd { start })
            })
            .collect();
        Box::pin(wrap_future(self.ask(msgs)).map(|r, act: &mut Self, _| act.usage_of(r)))
    }
}

impl Handler<GetFleetUsage> for FleetShards {
    type Result = Act<FleetUsage>;

    fn handle(&mut self, _: GetFleetUsage, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.gate() {
            return refuse(e);
        }
        let msgs = (0..self.n()).map(|_| Some(GetFleetUsage)).collect();
        Box::pin(wrap_future(self.ask(msgs)).map(|r, act: &mut Self, _| act.usage_of(r)))
    }
}

/// The node's standing over every tag: joined when all are, the first tag's reason otherwise,
/// the most live nodes any tag saw.
impl Handler<GetFleetStatus> for FleetShards {
    type Result = ResponseFuture<FleetStatus>;

    fn handle(&mut self, _: GetFleetStatus, _: &mut Context<Self>) -> Self::Result {
        let sends: Vec<_> = self.shards.iter().map(|s| s.send(GetFleetStatus)).collect();
        Box::pin(async move {
            let all: Vec<FleetStatus> = join_all(sends)
                .await
                .into_iter()
                .filter_map(Result::ok)
                .collect();
            let mut status = all.first().cloned().unwrap_or_else(|| FleetStatus {
                node: String::new(),
                joined: false,
                nodes: 0,
                reason: Some("index actor gone".into()),
                joins: 0,
                waiting_bytes: 0,
                writes_waited: 0,
                writes_over: 0,
            });
            for (i, s) in all.iter().enumerate().skip(1) {
                status.joined &= s.joined;
                status.nodes = status.nodes.max(s.nodes);
                if status.reason.is_none() {
                    status.reason = s.reason.as_ref().map(|r| format!("hash tag {i}: {r}"));
                }
            }
            status
        })
    }
}
