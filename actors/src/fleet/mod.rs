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
//! - **Locks**: `locks[name]` is the sum over live nodes of `held:NODE[name]`. A name is never
//!   both locked and claimed for deletion: [`FleetClaim`] skips locked names, and
//!   [`FleetLockNames`] refuses claimed ones. So a key locked on any node is never deleted by
//!   a node that claims before it deletes.
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
//!   ([`FleetWriting`]). A release forgets each object its node deleted, and taints a name
//!   that some node is writing meanwhile (that write may have landed before the delete); the
//!   writer's [`FleetStored`] does not add a tainted name. So the index never says an object
//!   is in the store because of a write that a deletion may have removed: a lookup probes the
//!   store for it instead.
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
mod messages;
mod scripts;
mod shards;
#[cfg(test)]
mod tests;

use std::rc::Rc;
use std::time::Duration;

use actix::fut::{ready, wrap_future};
use actix::prelude::*;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError, Value};

use crate::config::Secret;
use call::{load_library, Call};
pub use messages::*;
use scripts::{Func, Scripts};
pub(crate) use shards::{FleetShards, Standing};

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
    /// The tick of the last store or lookup hit (`LRU`, and `IsolatedLRU`, whose rounds use
    /// each salt's recency).
    Lru,
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
    /// `kvtier:{IDENTITY}:` and its usage hash (the key a cluster routes by).
    prefix: Rc<str>,
    usage_key: Rc<str>,
    status: FleetStatus,
    /// The server took the scripts' library at the last join: calls are `FCALL`s (else
    /// `EVALSHA`, a server without functions).
    functions: bool,
    /// Names unlocked by [`FleetUnlockSoon`], sent before the next call; a flush of them is
    /// due after [`UNLOCK_FLUSH`] when `flush_due`.
    unlocks: Vec<String>,
    flush_due: bool,
    /// Who hears of this actor's standing (joined or not): the [`FleetShards`] router of a
    /// bucket split over several tags.
    standing: Option<(Recipient<Standing>, usize)>,
}

impl FleetIndex {
    /// A fleet index actor; it connects and joins once started, and keeps trying every
    /// heartbeat period while the index is unreachable.
    pub(crate) fn new(config: IndexConfig) -> Self {
        let prefix: Rc<str> = format!("kvtier:{{{}}}:", config.identity).into();
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
            unlocks: Vec::new(),
            flush_due: false,
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
        let Some(mut conn) = self.conn.clone().filter(|_| self.status.joined) else {
            let reason = self.status.reason.clone().unwrap_or_default();
            return Box::pin(ready(Err(FleetError::Unreachable(reason))));
        };
        let unlocks = self.queued_unlocks();
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

    /// Sends the queued unlocks now, if any are left.
    fn flush_unlocks(&mut self, ctx: &mut Context<Self>) {
        self.flush_due = false;
        if let Some(args) = self.queued_unlocks() {
            ctx.spawn(self.run(|s| &s.unlock, args, |_| Ok(())).map(|_, _, _| ()));
        }
    }

    /// The unlock script's arguments for the queued unlocks (this node, then the names),
    /// taken off the queue; `None` when it is empty.
    fn queued_unlocks(&mut self) -> Option<Vec<String>> {
        (!self.unlocks.is_empty()).then(|| {
            let mut args = vec![self.config.node.clone()];
            args.append(&mut self.unlocks);
            args
        })
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
        self.set_joined(false);
    }

    fn ttl_ms(&self) -> String {
        self.config.ttl.as_millis().to_string()
    }

    /// One heartbeat: connect and join when not joined, else renew liveness (and join again if
    /// this node was reaped).
    fn beat(&mut self, ctx: &mut Context<Self>) {
        if self.connecting {
            return;
        }
        let args = vec![self.config.node.clone(), self.ttl_ms()];
        if let (Some(conn), true) = (self.conn.clone(), self.status.joined) {
            let fut = self.run(|s| &s.beat, args, parse_int);
            ctx.spawn(fut.map(|res, act, ctx| match res {
                Ok(-1) => {
                    tracing::warn!(node = %act.config.node, "fleet: this node had lapsed; joining again");
                    act.set_joined(false);
                    act.join(conn, ctx);
                }
                Ok(n) => act.status.nodes = n.max(0) as u64,
                Err(_) => {}
            }));
            return;
        }
        if let Some(conn) = self.conn.clone() {
            self.join(conn, ctx);
            return;
        }
        let Some(client) = self.client.clone() else {
            return;
        };
        self.connecting = true;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.config.timeout))
            .set_response_timeout(Some(self.config.timeout));
        let key = self.usage_key.clone();
        let connect = async move { connect_owner(client, &key, &config).await };
        ctx.spawn(wrap_future(connect).map(|res, act: &mut Self, ctx| {
            act.connecting = false;
            match res {
                Ok(conn) => {
                    act.conn = Some(conn.clone());
                    act.join(conn, ctx);
                }
                Err(e) => act.alone(e.to_string()),
            }
        }));
    }

    /// Joins, or joins again after a lost connection: the first join of this process drops
    /// what an earlier process with this node id held; a later one keeps this process's locks.
    fn join(&mut self, mut conn: MultiplexedConnection, ctx: &mut Context<Self>) {
        self.connecting = true;
        let (scripts, key, prefix) = (
            self.scripts.clone(),
            self.usage_key.clone(),
            self.prefix.clone(),
        );
        let (node, ttl) = (self.config.node.clone(), self.ttl_ms());
        let fresh = u8::from(self.status.joins == 0);
        let quotas: Vec<String> = self
            .config
            .quotas
            .0
            .iter()
            .flat_map(|(salt, limit)| [salt.clone(), limit.to_string()])
            .collect();
        let name = client_name(&node);
        let order = self.config.order.map(FleetOrder::wire).unwrap_or_default();
        let layout = self
            .config
            .layout
            .map(|s| s.to_string())
            .unwrap_or_default();
        let call = async move {
            // The connection carries the node's name, so `CLIENT LIST` tells the nodes apart
            // (for operators, and for a test that cuts one node off). A server or proxy that
            // refuses `CLIENT SETNAME` changes nothing else.
            let _: Result<(), RedisError> = redis::cmd("CLIENT")
                .arg("SETNAME")
                .arg(name)
                .query_async(&mut conn)
                .await;
            let functions = load_library(&mut conn, &scripts).await;
            let call = Call {
                scripts,
                key,
                prefix,
                functions,
            };
            let args = vec![node, ttl, fresh.to_string(), order.clone(), layout];
            let args = args.into_iter().chain(quotas).collect();
            let v = call.run(&mut conn, None, |s| &s.join, args).await?;
            let (n, before) = redis::from_redis_value::<(i64, String)>(v)?;
            Ok::<_, RedisError>((n, before, order, functions))
        };
        ctx.spawn(wrap_future(call).map(|res, act: &mut Self, _| {
            act.connecting = false;
            match res {
                Ok((n, before, order, functions)) => {
                    act.functions = functions;
                    if !order.is_empty() && before != order {
                        tracing::warn!(
                            node = %act.config.node,
                            %before,
                            now = %order,
                            "fleet: this node changed the bucket's eviction order; every node \
                             on one bucket should have one eviction policy"
                        );
                    }
                    act.status.reason = None;
                    act.status.nodes = n.max(0) as u64;
                    act.status.joins += 1;
                    act.set_joined(true);
                    tracing::info!(node = %act.config.node, nodes = n, "fleet: joined the index");
                }
                Err(e) => {
                    // A refused join (another shard count, say) leaves the node alone too,
                    // saying why; the next heartbeat tries again.
                    if let FleetError::Index(reason) = act.failed(&e) {
                        act.alone(reason);
                    }
                }
            }
        }));
    }
}

/// Connects to the server that holds `key`: the configured one or, in a Redis or Valkey
/// cluster, the master its `MOVED` redirect names (followed at most 3 times; a call that
/// meets another redirect later reconnects the same way).
async fn connect_owner(
    mut client: redis::Client,
    key: &str,
    config: &AsyncConnectionConfig,
) -> Result<MultiplexedConnection, RedisError> {
    let mut hops = 0;
    loop {
        let mut conn = client
            .get_multiplexed_async_connection_with_config(config)
            .await?;
        let probe: Result<Value, RedisError> =
            redis::cmd("EXISTS").arg(key).query_async(&mut conn).await;
        let Err(e) = probe else {
            return Ok(conn);
        };
        match e
            .redirect_node()
            .and_then(|(addr, _)| redirected(&client, addr))
        {
            Some(next) if hops < 3 => {
                hops += 1;
                client = next;
            }
            _ => return Ok(conn),
        }
    }
}

/// `client`'s settings (credentials, TLS, database) at another `host:port`.
fn redirected(client: &redis::Client, addr: &str) -> Option<redis::Client> {
    use redis::ConnectionAddr;
    let (host, port) = addr.rsplit_once(':')?;
    let (host, port) = (host.to_string(), port.parse().ok()?);
    let info = client.get_connection_info().clone();
    let addr = match info.addr() {
        ConnectionAddr::Tcp(..) => ConnectionAddr::Tcp(host, port),
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => return None,
    };
    redis::Client::open(info.set_addr(addr)).ok()
}

impl Actor for FleetIndex {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.beat(ctx);
        ctx.run_interval(self.config.ttl / 3, |act, ctx| act.beat(ctx));
    }
}

/// The connection name of a node: `kvtier-NODE`, with anything but letters, digits and
/// `-_.:` replaced by `_` (a name may not hold spaces).
fn client_name(node: &str) -> String {
    let clean: String = node
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.:".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("kvtier-{clean}")
}

fn bad_reply(what: &str, v: &Value) -> FleetError {
    FleetError::Index(format!("unexpected reply to {what}: {v:?}"))
}

fn parse_int(v: Value) -> Result<i64, FleetError> {
    match v {
        Value::Int(n) => Ok(n),
        other => Err(bad_reply("an integer script", &other)),
    }
}

fn parse_count(v: Value) -> Result<u64, FleetError> {
    parse_int(v).map(|n| n.max(0) as u64)
}

fn parse_strings(what: &str, v: Value) -> Result<Vec<String>, FleetError> {
    redis::from_redis_value::<Vec<String>>(v.clone()).map_err(|_| bad_reply(what, &v))
}

/// `args`, then per object its name, salt, size and whether the shadows sample it (`1` or
/// `0`).
fn object_args(mut args: Vec<String>, objects: Vec<FleetObject>) -> Vec<String> {
    args.reserve(objects.len() * 4);
    for o in objects {
        args.extend([o.name, o.salt, o.size.to_string(), flag(o.sampled)]);
    }
    args
}

/// `args`, then per name the name and whether the shadows sample it (`1` or `0`).
fn name_args(mut args: Vec<String>, names: Vec<FleetName>) -> Vec<String> {
    args.reserve(names.len() * 2);
    for n in names {
        args.extend([n.name, flag(n.sampled)]);
    }
    args
}

/// A flag as a script argument.
fn flag(b: bool) -> String {
    u8::from(b).to_string()
}

fn parse_round(v: Value) -> Result<Round, FleetError> {
    let Value::Array(items) = &v else {
        return Err(bad_reply("round", &v));
    };
    match items.first() {
        Some(Value::Int(0)) => Ok(Round::Under),
        Some(Value::Int(-1)) => Ok(Round::Busy),
        Some(Value::Int(1)) => {
            let flat = parse_strings("round", Value::Array(items[1..].to_vec()))?;
            Ok(Round::Claimed(
                flat.chunks_exact(2)
                    .map(|p| (p[0].clone(), p[1].parse().unwrap_or(0)))
                    .collect(),
            ))
        }
        _ => Err(bad_reply("round", &v)),
    }
}

fn parse_usage(v: Value) -> Result<FleetUsage, FleetError> {
    let flat = parse_strings("usage", v)?;
    let mut u = FleetUsage::default();
    for pair in flat.chunks_exact(2) {
        let n = pair[1].parse::<i64>().unwrap_or(0).max(0) as u64;
        match pair[0].as_str() {
            "bytes" => u.bytes = n,
            "objects" => u.objects = n,
            f if f.starts_with("pending:") => u.pending += n,
            f if f.starts_with("quota:") => {
                u.quotas.insert(f["quota:".len()..].to_string(), n);
            }
            f => {
                if let Some(salt) = f.strip_prefix("salt:") {
                    if n > 0 {
                        u.by_salt.insert(salt.to_string(), n);
                    }
                }
            }
        }
    }
    Ok(u)
}

impl Handler<FleetStored> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<FleetUsage, FleetError>>;

    fn handle(&mut self, msg: FleetStored, _: &mut Self::Context) -> Self::Result {
        let mut args = vec![
            self.config.node.clone(),
            u8::from(msg.written).to_string(),
            msg.ended_bytes.to_string(),
            msg.ended_names.len().to_string(),
        ];
        args.extend(msg.ended_names);
        self.run(|s| &s.stored, object_args(args, msg.objects), parse_usage)
    }
}

impl Handler<FleetWriting> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<Announced, FleetError>>;

    fn handle(&mut self, msg: FleetWriting, _: &mut Self::Context) -> Self::Result {
        let mut args = vec![
            self.config.node.clone(),
            msg.bytes.to_string(),
            msg.limit.unwrap_or(0).to_string(),
        ];
        args.extend(msg.names);
        self.run(
            |s| &s.writing,
            args,
            |v| match v {
                Value::Array(mut items) if !items.is_empty() => {
                    let started = parse_int(items.remove(0))? == 1;
                    let usage = parse_usage(Value::Array(items))?;
                    Ok(Announced { started, usage })
                }
                v => Err(bad_reply("writing", &v)),
            },
        )
    }
}

impl Handler<FleetLockNames> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<Vec<FleetLock>, FleetError>>;

    fn handle(&mut self, msg: FleetLockNames, _: &mut Self::Context) -> Self::Result {
        let args = name_args(vec![self.config.node.clone()], msg.0);
        self.run(
            |s| &s.lock,
            args,
            |v| {
                let codes = redis::from_redis_value::<Vec<i64>>(v.clone())
                    .map_err(|_| bad_reply("lock", &v))?;
                Ok(codes
                    .into_iter()
                    .map(|c| match c {
                        c if c < 0 => FleetLock::Deleting,
                        0 => FleetLock::Unknown,
                        size => FleetLock::Known(size as u64),
                    })
                    .collect())
            },
        )
    }
}

impl Handler<FleetUnlock> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<(), FleetError>>;

    fn handle(&mut self, msg: FleetUnlock, _: &mut Self::Context) -> Self::Result {
        let mut args = self
            .queued_unlocks()
            .unwrap_or_else(|| vec![self.config.node.clone()]);
        args.extend(msg.0);
        self.run(|s| &s.unlock, args, |_| Ok(()))
    }
}

impl Handler<FleetUnlockSoon> for FleetIndex {
    type Result = ();

    fn handle(&mut self, msg: FleetUnlockSoon, ctx: &mut Self::Context) {
        self.unlocks.extend(msg.0);
        if !self.flush_due {
            self.flush_due = true;
            ctx.run_later(UNLOCK_FLUSH, |act, ctx| act.flush_unlocks(ctx));
        }
    }
}

impl Handler<FleetTouch> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<(), FleetError>>;

    fn handle(&mut self, msg: FleetTouch, _: &mut Self::Context) -> Self::Result {
        self.run(|s| &s.touch, name_args(Vec::new(), msg.0), |_| Ok(()))
    }
}

impl FleetIndex {
    fn lease_args(&self, lease: Lease) -> Vec<String> {
        let (name, ttl) = match lease {
            Lease::Evict => ("lease", self.config.ttl),
            Lease::Listing(period) => ("listing", period),
        };
        vec![
            self.config.node.clone(),
            ttl.as_millis().to_string(),
            name.to_string(),
        ]
    }
}

impl Handler<FleetLease> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<bool, FleetError>>;

    fn handle(&mut self, msg: FleetLease, _: &mut Self::Context) -> Self::Result {
        let args = self.lease_args(msg.0);
        self.run(|s| &s.lease, args, |v| parse_int(v).map(|n| n == 1))
    }
}

impl Handler<FleetLeaseRelease> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<(), FleetError>>;

    fn handle(&mut self, msg: FleetLeaseRelease, _: &mut Self::Context) -> Self::Result {
        let mut args = self.lease_args(msg.0);
        args.remove(1);
        self.run(|s| &s.lease_release, args, |_| Ok(()))
    }
}

#[cfg(test)]
impl Handler<FleetCandidates> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<Vec<(String, u64)>, FleetError>>;

    fn handle(&mut self, msg: FleetCandidates, _: &mut Self::Context) -> Self::Result {
        let args = vec![msg.limit.to_string(), msg.scan.max(msg.limit).to_string()];
        self.run(
            |s| &s.candidates,
            args,
            |v| {
                let flat = parse_strings("candidates", v)?;
                Ok(flat
                    .chunks_exact(2)
                    .map(|p| (p[0].clone(), p[1].parse().unwrap_or(0)))
                    .collect())
            },
        )
    }
}

impl Handler<FleetRound> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<Round, FleetError>>;

    fn handle(&mut self, msg: FleetRound, _: &mut Self::Context) -> Self::Result {
        let args = vec![
            self.config.node.clone(),
            self.config.ttl.as_millis().to_string(),
            msg.capacity.to_string(),
            msg.watermark.to_string(),
            msg.ratio.to_string(),
            if msg.per_salt { "per_salt" } else { "capacity" }.to_string(),
            msg.ahead.to_string(),
            u8::from(msg.catch_up).to_string(),
            msg.waiting.to_string(),
        ];
        self.run(|s| &s.round, args, parse_round)
    }
}

impl Handler<FleetSetQuota> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<Option<u64>, FleetError>>;

    fn handle(&mut self, msg: FleetSetQuota, _: &mut Self::Context) -> Self::Result {
        let mut args = vec![msg.salt];
        args.extend(msg.limit.map(|l| l.to_string()));
        self.run(
            |s| &s.quota,
            args,
            |v| parse_int(v).map(|old| u64::try_from(old).ok()),
        )
    }
}

impl Handler<FleetClaim> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<Vec<String>, FleetError>>;

    fn handle(&mut self, msg: FleetClaim, _: &mut Self::Context) -> Self::Result {
        let mut args = vec![self.config.node.clone()];
        args.extend(msg.0);
        self.run(|s| &s.claim, args, |v| parse_strings("claim", v))
    }
}

impl Handler<FleetRelease> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<FleetUsage, FleetError>>;

    fn handle(&mut self, msg: FleetRelease, _: &mut Self::Context) -> Self::Result {
        let mut args = vec![
            self.config.node.clone(),
            u8::from(msg.evicted).to_string(),
            msg.removed.len().to_string(),
        ];
        args.extend(msg.removed);
        args.extend(msg.kept);
        self.run(|s| &s.release, args, parse_usage)
    }
}

impl Handler<FleetVanished> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<FleetUsage, FleetError>>;

    fn handle(&mut self, msg: FleetVanished, _: &mut Self::Context) -> Self::Result {
        self.run(|s| &s.vanished, msg.0, parse_usage)
    }
}

impl Handler<FleetSyncStart> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<u64, FleetError>>;

    fn handle(&mut self, _: FleetSyncStart, _: &mut Self::Context) -> Self::Result {
        let args = vec![self.config.node.clone()];
        self.run(|s| &s.sync_start, args, parse_count)
    }
}

impl Handler<FleetSyncPage> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<u64, FleetError>>;

    fn handle(&mut self, msg: FleetSyncPage, _: &mut Self::Context) -> Self::Result {
        let args = object_args(vec![self.config.node.clone()], msg.0);
        self.run(|s| &s.sync_page, args, parse_count)
    }
}

impl Handler<FleetSyncEnd> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<FleetUsage, FleetError>>;

    fn handle(&mut self, msg: FleetSyncEnd, _: &mut Self::Context) -> Self::Result {
        let args = vec![self.config.node.clone(), msg.start.to_string()];
        self.run(|s| &s.sync_end, args, parse_usage)
    }
}

impl Handler<GetFleetUsage> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<FleetUsage, FleetError>>;

    fn handle(&mut self, _: GetFleetUsage, _: &mut Self::Context) -> Self::Result {
        self.run(|s| &s.usage, Vec::new(), parse_usage)
    }
}

impl Handler<GetFleetStatus> for FleetIndex {
    type Result = MessageResult<GetFleetStatus>;

    fn handle(&mut self, _: GetFleetStatus, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.status.clone())
    }
}
