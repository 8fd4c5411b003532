//! How a [`FleetIndex`] reaches its server and stays joined: the heartbeat, the connection
//! (to the master that holds the tag's slot, following a cluster's `MOVED`) and the join.
//!
//! Invariants:
//! - At most one connect or join is under way (`connecting`); a heartbeat that finds one does
//!   nothing, so a slow server never gets two joins from one node at once.
//! - Only the first join of a process drops what an earlier process with this node id held (a
//!   restart); a join after a lost connection keeps this process's locks.
//! - A refused join (another shard count, say) leaves the node alone with the server's reason;
//!   the next heartbeat tries again.

use actix::fut::wrap_future;
use actix::prelude::*;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError, Value};

use super::call::{load_library, Call};
use super::handlers::parse_int;
use super::{FleetError, FleetIndex, FleetOrder};

impl FleetIndex {
    fn ttl_ms(&self) -> String {
        self.config.ttl.as_millis().to_string()
    }

    /// One heartbeat: connect and join when not joined, else renew liveness (and join again if
    /// this node was reaped).
    pub(super) fn beat(&mut self, ctx: &mut Context<Self>) {
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
