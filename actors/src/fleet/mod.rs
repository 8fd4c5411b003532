//! The fleet index: what every node on one bucket shares, kept in a Redis-protocol server
//! (Redis or Valkey), so that many kvtier processes on one bucket behave as one adapter.
//!
//! One [`FleetIndex`] actor per adapter owns the connection (redis-rs' multiplexed connection:
//! the actor's futures share it, nothing else does) and this node's view: joined or not, the
//! live nodes, why it is alone. Each message is one Lua script on the server
//! ([`scripts`], called as a function of their library: [`call`]), so a batch is one round
//! trip and atomic there; the actor itself holds no object state and takes no lock. The one
//! thing it keeps between messages is the queue of [`FleetUnlockSoon`] names, sent before its
//! next call (same connection, same round trip) or within [`UNLOCK_FLUSH`].
//!
//! Invariants, as the scripts keep them on the server:
//! - **Usage** (`usage`) is the sum of `size` over the objects the index knows, in total and
//!   per cache salt; an object counts once, at its last stored size.
//! - **Locks**: a name is locked while it is in some listed node's `held:NODE`, and it is in
//!   this node's while this actor's count of its locks of the name ([`FleetIndex`]'s
//!   `locks`: counted when a lock is sent, uncounted when refused or unlocked) is positive:
//!   the lock script adds the names it locks, and the name leaves with one `SREM` sent before
//!   this node's next call once its count reaches 0. A name is never both locked and claimed
//!   for deletion: [`FleetClaim`] skips locked names, and [`FleetLockNames`] refuses claimed
//!   ones. So a key locked on any node is never deleted by a node that claims before it
//!   deletes.
//! - **Liveness**: a node is live until `ttl` after its last heartbeat (server time). Any
//!   script that reaps (join, heartbeat) drops the locks, claims and lease of every lapsed node,
//!   so a node that dies releases everything within `ttl` + one heartbeat period of another
//!   node. A process's first join drops whatever an earlier process with its node id held (a
//!   restart). A node that lost its connection and gets it back within `ttl` joins again and
//!   keeps its locks; one that was reaped meanwhile (its heartbeats came too late) has lost
//!   them. No lock outlives its node's liveness.
//! - **Leases**: at most one node holds `lease` (an eviction round) and one `listing`; each
//!   lapses after its TTL if its holder does not give it up (the round's holder does, at the
//!   round's end; the listing's is held for its period).
//! - **Stores racing deletions**: a node announces its writes before it makes them
//!   ([`FleetWriting`]); each announcement takes the next epoch, which this actor keeps per
//!   name until the write's [`FleetStored`] gives it back. A release forgets each object its
//!   node deleted and records its name as gone at the epoch then; a `STORED` does not add a
//!   name gone at or after its write's epoch (the write may have landed before the delete).
//!   So the index never says an object is in the store because of a write that a deletion may
//!   have removed: a lookup probes the store for it instead (see `gone` in [`scripts`]).
//! - **Footprint**: a write announced with a limit ([`FleetWriting`]) is recorded only if the
//!   bytes of every object the index knows (claimed ones included), of every live node's
//!   writes in flight and of this write fit within it; a refused write records nothing.
//! - **Recency** is one logical clock for the fleet (a counter on the server): stores and lookup
//!   hits of every node tick it, and eviction candidates come in the bucket's [`FleetOrder`]
//!   (least recent first for LRU), whose state the same scripts update.
//!
//! The index is a cache of the bucket, never the truth: an object it does not know is probed
//! in the store, and an object it knows that a load finds missing is forgotten
//! ([`FleetVanished`]). While the index is unreachable, every message fails at once with
//! [`FleetError::Unreachable`] and the node serves alone; the heartbeat timer reconnects and
//! joins again without a restart.

mod call;
mod handlers;
mod link;
mod messages;
mod placement;
mod scripts;
mod shards;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use actix::fut::{ready, wrap_future};
use actix::prelude::*;
use redis::aio::MultiplexedConnection;
use redis::{RedisError, Value};

use crate::config::Secret;
use call::Call;
pub use messages::*;
use scripts::{Func, Scripts};
pub(crate) use shards::{FleetShards, Standing};

/// The index's key layout, in every key's name after the bucket's hash tag. A kvtier whose
/// scripts keep other keys, or keys of other types, names another layout, so it never reads
/// (or breaks) an index an older kvtier wrote: that one is left as it is, and the new layout
/// starts empty and fills from the nodes' stores and listings (docs/fleet.md, "Upgrades").
pub(crate) const LAYOUT: &str = "v4";

/// The longest an unlock queued by [`FleetUnlockSoon`] waits for a call to ride with.
pub(crate) const UNLOCK_FLUSH: Duration = Duration::from_millis(10);

/// Liveness of a node after its last heartbeat, by default.
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// Where the index is and who this node is.
#[derive(Debug, Clone)]
pub(crate) struct IndexConfig {
    /// `redis://` or `rediss://` URL of the index (may hold a password: kept secret).
    pub(crate) url: Secret,
    /// This node's id, unique in the fleet.
    pub(crate) node: String,
    /// The bucket's identity (endpoint + bucket + prefix, or base path): nodes with the same
    /// identity share usage, locks, recency and the eviction lease.
    pub(crate) identity: String,
    /// Liveness after the last heartbeat; heartbeats are sent every `ttl / 3`.
    pub(crate) ttl: Duration,
    /// How long one request to the index may take before the node treats it as unreachable.
    pub(crate) timeout: Duration,
    /// The adapter's series: `kvtier_fleet_joined` follows the node's standing.
    pub(crate) metrics: crate::metrics::AdapterMetrics,
    /// This node's configured `IsolatedLRU` quotas, given to the index at each join for the
    /// salts it has none for.
    pub(crate) quotas: crate::config::Quotas,
    /// The eviction order this node gives the index at each join (the last evicting node to
    /// join decides the fleet's); `None` for a node that does not evict, which leaves it.
    pub(crate) order: Option<FleetOrder>,
    /// `Some(S)` on the bucket's first hash tag: the tags its index is split over, which the
    /// join checks against the count the index recorded (and records at a first join);
    /// `None` on its other tags (see [`shards`]).
    pub(crate) layout: Option<u32>,
}

/// The order in which a fleet's rounds take victims, one per bucket, kept in the index
/// (`order`). Every store and lookup hit of any node scores the object in the fleet's
/// `recency` set by it; a round takes the lowest scores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum FleetOrder {
    /// The tick of the last store or lookup hit (`LRU`).
    Lru,
    /// The same, for `IsolatedLRU`, whose rounds take each salt's victims from that salt's own
    /// recency (`srec:SALT`; under `Lru` and `Arc` the unsalted objects' is `recency` itself,
    /// so the index keeps one sorted set fewer per store).
    IsolatedLru,
    /// `FLRU` with its rules (see crate::eviction's FLRU): the priority, the tick of the last
    /// use plus `bonus × capacity × (min(uses, 16) − 1)`, where `capacity` is the most objects
    /// the index has known at once and `uses` and the first use survive an object's eviction in a
    /// history of `max(4096, 16 × capacity)` to `2 ×` that many names; a new object placed
    /// at its touch, one capacity earlier or last, or the rate order, as the mode says. The
    /// five modes' sampled shadows (one in 16 names, in a tier 16 times smaller) live in the
    /// index too and choose the mode from every node's stores and hits.
    Flru {
        /// `eviction.flru_bonus_per_use`.
        bonus: f64,
        /// `eviction.flru_admission`: `true` (`adaptive`) lets the shadows choose the mode;
        /// `false` (`rates`) always orders by rates with the low prior, without shadows.
        adaptive: bool,
    },
    /// LMCache's ARC over the fleet: `t1`/`t2` (resident, seen once or again, by tick),
    /// `b1`/`b2` (ghosts of objects rounds evicted), and the target `arc_p`, all in the
    /// index with LMCache's rules (see crate::eviction's ARC); the capacity in objects is the
    /// most objects the index has known at once.
    Arc,
}

impl FleetOrder {
    /// The order as the index stores it.
    fn wire(self) -> String {
        match self {
            Self::Lru => "lru".into(),
            Self::IsolatedLru => "lru:salts".into(),
            Self::Flru { bonus, adaptive } => {
                format!("flru:{bonus}{}", if adaptive { "" } else { ":rates" })
            }
            Self::Arc => "arc".into(),
        }
    }
}

/// The fleet index actor of one adapter. See the module docs.
pub(crate) struct FleetIndex {
    config: IndexConfig,
    client: Option<redis::Client>,
    conn: Option<MultiplexedConnection>,
    connecting: bool,
    scripts: Rc<Scripts>,
    /// `kvtier:{IDENTITY}:LAYOUT:` and its usage hash (the key a cluster routes by).
    prefix: Rc<str>,
    usage_key: Rc<str>,
    status: FleetStatus,
    /// The server took the scripts' library at the last join: calls are `FCALL`s (else
    /// `EVALSHA`, a server without functions).
    functions: bool,
    /// This node's locks in the index per name: locks asked for (counted when sent, uncounted
    /// when refused) less locks released. The server keeps only whether the count is
    /// positive (the set `held:NODE`), so a lock or unlock of a name held more than once costs
    /// it nothing per count.
    locks: HashMap<String, u32>,
    /// Names whose last lock was released, sent before the next call (see [`call`]); a flush
    /// of them is due after [`UNLOCK_FLUSH`] when `flush_due`.
    unlocks: Vec<String>,
    flush_due: bool,
    /// The epochs of this node's writes in flight, per name, oldest first (see [`FleetWriting`]
    /// and `gone_record` in the scripts): a write's `STORED` gives its epoch so the index can
    /// tell whether a deletion since may have removed it. Cleared when the node goes alone (a
    /// `STORED` then gives epoch 0: no announcement known).
    writes: HashMap<String, VecDeque<u64>>,
    /// Who hears of this actor's standing (joined or not): the [`FleetShards`] router of a
    /// bucket split over several tags.
    standing: Option<(Recipient<Standing>, usize)>,
}

impl FleetIndex {
    /// A fleet index actor; it connects and joins once started, and keeps trying every
    /// heartbeat period while the index is unreachable.
    pub(crate) fn new(config: IndexConfig) -> Self {
        let prefix: Rc<str> = format!("kvtier:{{{}}}:{LAYOUT}:", config.identity).into();
        let usage_key = format!("{prefix}usage").into();
        // The URL is checked here, its error kept without the URL (it may hold a password).
        let (client, reason) = match redis::Client::open(config.url.expose()) {
            Ok(c) => (Some(c), None),
            Err(e) => (
                None,
                Some(format!(
                    "fleet `index` is not a valid redis:// or rediss:// URL ({:?})",
                    e.kind()
                )),
            ),
        };
        config.metrics.fleet_joined(false);
        let status = FleetStatus {
            node: config.node.clone(),
            joined: false,
            nodes: 0,
            reason: reason.or_else(|| Some("not connected yet".into())),
            joins: 0,
            waiting_bytes: 0,
            writes_waited: 0,
            writes_over: 0,
        };
        Self {
            config,
            client,
            conn: None,
            connecting: false,
            scripts: Rc::new(Scripts::new()),
            prefix,
            usage_key,
            status,
            functions: false,
            locks: HashMap::new(),
            unlocks: Vec::new(),
            flush_due: false,
            writes: HashMap::new(),
            standing: None,
        }
    }

    /// Reports this actor's standing (joined or not) to `to`, as tag `shard`, whenever it
    /// changes.
    pub(crate) fn reporting_to(mut self, to: Recipient<Standing>, shard: usize) -> Self {
        self.standing = Some((to, shard));
        self
    }

    /// Records whether this node is joined, for `status`, the metric and the router.
    fn set_joined(&mut self, joined: bool) {
        self.status.joined = joined;
        self.config.metrics.fleet_joined(joined);
        if let Some((to, shard)) = &self.standing {
            to.do_send(Standing {
                shard: *shard,
                joined,
            });
        }
    }

    /// Runs one script with `ARGV[1]` = the prefix and `args` after it, after the unlocks
    /// queued so far (one round trip for both when the server has functions).
    fn run<T: 'static>(
        &mut self,
        pick: fn(&Scripts) -> &Func,
        args: Vec<String>,
        parse: impl FnOnce(Value) -> Result<T, FleetError> + 'static,
    ) -> ResponseActFuture<Self, Result<T, FleetError>> {
        let mut conn = match self.joined_conn() {
            Ok(conn) => conn,
            Err(e) => return Box::pin(ready(Err(e))),
        };
        let unlocks = self
            .queued_unlocks()
            .map(|names| call::unlock_cmd(&self.prefix, &self.config.node, &names));
        let call = Call {
            scripts: self.scripts.clone(),
            key: self.usage_key.clone(),
            prefix: self.prefix.clone(),
            functions: self.functions,
        };
        let fut = async move { call.run(&mut conn, unlocks, pick, args).await };
        Box::pin(
            wrap_future(fut).map(move |res, act: &mut Self, _| match res {
                Ok(v) => parse(v),
                Err(e) => Err(act.failed(&e)),
            }),
        )
    }

    /// The connection while this node is joined; else why it is not, as every message replies
    /// then.
    fn joined_conn(&self) -> Result<MultiplexedConnection, FleetError> {
        self.conn
            .clone()
            .filter(|_| self.status.joined)
            .ok_or_else(|| FleetError::Unreachable(self.status.reason.clone().unwrap_or_default()))
    }

    /// Sends the queued unlocks now, if any are left.
    fn flush_unlocks(&mut self, ctx: &mut Context<Self>) {
        self.flush_due = false;
        ctx.spawn(self.unlock_now().map(|_, _, _| ()));
    }

    /// Sends the queued unlocks now (one `SREM`); `Ok` at once when none is queued. While the
    /// index is unreachable they stay queued, for the first call after the node joins again.
    fn unlock_now(&mut self) -> ResponseActFuture<Self, Result<(), FleetError>> {
        let mut conn = match self.joined_conn() {
            Ok(conn) => conn,
            Err(e) => return Box::pin(ready(Err(e))),
        };
        let Some(names) = self.queued_unlocks() else {
            return Box::pin(ready(Ok(())));
        };
        let cmd = call::unlock_cmd(&self.prefix, &self.config.node, &names);
        let fut = async move { cmd.query_async::<Value>(&mut conn).await };
        Box::pin(
            wrap_future(fut).map(move |res, act: &mut Self, _| match res {
                Ok(_) => Ok(()),
                Err(e) => Err(act.failed(&e)),
            }),
        )
    }

    /// The epoch of this node's oldest write of `name` in flight, now ended (0: none known).
    fn write_ended(&mut self, name: &str) -> u64 {
        let Some(q) = self.writes.get_mut(name) else {
            return 0;
        };
        let epoch = q.pop_front().unwrap_or(0);
        if q.is_empty() {
            self.writes.remove(name);
        }
        epoch
    }

    /// The names of the queued unlocks, taken off the queue; `None` when it is empty.
    fn queued_unlocks(&mut self) -> Option<Vec<String>> {
        (!self.unlocks.is_empty()).then(|| std::mem::take(&mut self.unlocks))
    }

    /// Counts one lock of each name asked for (before the call: a later unlock of the same
    /// name, queued meanwhile, must not release it).
    fn count_locks<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            *self.locks.entry(name.to_string()).or_default() += 1;
        }
    }

    /// Releases one of this node's locks of each name: a name whose count reaches 0 is queued
    /// to leave the node's set in the index; a name it does not hold is ignored. `queue`:
    /// false for a lock the index refused (it never joined the set).
    fn uncount_locks(&mut self, names: impl IntoIterator<Item = String>, queue: bool) {
        for name in names {
            let Some(n) = self.locks.get_mut(&name) else {
                continue;
            };
            *n -= 1;
            if *n == 0 {
                self.locks.remove(&name);
                if queue {
                    self.unlocks.push(name);
                }
            }
        }
    }

    /// Classifies a failed request: a connection that broke or timed out leaves the node alone
    /// until the next heartbeat reconnects.
    fn failed(&mut self, e: &RedisError) -> FleetError {
        let reason = e.to_string();
        // A cluster that moved this tag's slot: reconnect, to the slot's new master.
        if e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.redirect_node().is_some()
        {
            self.conn = None;
            self.alone(reason.clone());
            FleetError::Unreachable(reason)
        } else {
            FleetError::Index(reason)
        }
    }

    fn alone(&mut self, reason: String) {
        if self.status.joined {
            tracing::warn!(node = %self.config.node, %reason, "fleet index unreachable; serving alone");
        }
        self.status.reason = Some(reason);
        self.writes.clear();
        self.set_joined(false);
    }
}

impl Actor for FleetIndex {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.beat(ctx);
        ctx.run_interval(self.config.ttl / 3, |act, ctx| act.beat(ctx));
    }
}
