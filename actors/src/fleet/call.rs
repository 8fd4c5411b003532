//! One call to the index: a script run as a function of the library (`FCALL`) or, on a server
//! without functions, as a script (`EVALSHA`, with redis-rs' fallback to `EVAL`), with any
//! unlocks queued by [`FleetUnlockSoon`](super::FleetUnlockSoon) sent before it (one `SREM`:
//! releasing a lock needs no script, see [`unlock_cmd`]).
//!
//! Invariants: the queued unlocks and the call go in that order on the node's one connection,
//! in one pipeline (one round trip) when the server has functions, so the call sees them. A
//! server that lost the library (a restart, `FUNCTION FLUSH`) gets it again and the call is
//! retried once; nothing else is retried here (a failed call fails its message, and the
//! heartbeat reconnects).

use std::rc::Rc;

use redis::aio::MultiplexedConnection;
use redis::{RedisError, Value};

use super::scripts::{Func, Scripts};

/// What one call to the index needs, moved into its future.
pub(super) struct Call {
    pub(super) scripts: Rc<Scripts>,
    pub(super) key: Rc<str>,
    pub(super) prefix: Rc<str>,
    pub(super) functions: bool,
}

impl Call {
    /// `FCALL` of `func` with the prefix and `args`.
    fn fcall(&self, func: &Func, args: &[String]) -> redis::Cmd {
        let mut c = redis::cmd("FCALL");
        c.arg(&func.function)
            .arg(1)
            .arg(&*self.key)
            .arg(&*self.prefix)
            .arg(args);
        c
    }

    /// Runs `unlocks` (a node's `SREM` of the names whose last lock it released, see
    /// [`unlock_cmd`]) and then `pick`'s script: one pipeline, or with a server without
    /// functions the `SREM` and then an `EVALSHA`. A server that lost the library (a restart,
    /// `FUNCTION FLUSH`) is given it again and the call retried once.
    pub(super) async fn run(
        &self,
        conn: &mut MultiplexedConnection,
        unlocks: Option<redis::Cmd>,
        pick: fn(&Scripts) -> &Func,
        args: Vec<String>,
    ) -> Result<Value, RedisError> {
        let func = pick(&self.scripts);
        if !self.functions {
            if let Some(u) = &unlocks {
                u.query_async::<Value>(conn).await?;
            }
            return self.eval(conn, func, &args).await;
        }
        let mut pipe = redis::pipe();
        if let Some(u) = unlocks {
            pipe.add_command(u).ignore();
        }
        pipe.add_command(self.fcall(func, &args));
        match pipe.query_async::<(Value,)>(conn).await {
            Err(e) if e.to_string().contains("Function not found") => {
                load_library(conn, &self.scripts).await;
                pipe.query_async::<(Value,)>(conn).await.map(|(v,)| v)
            }
            res => res.map(|(v,)| v),
        }
    }

    async fn eval(
        &self,
        conn: &mut MultiplexedConnection,
        func: &Func,
        args: &[String],
    ) -> Result<Value, RedisError> {
        let mut inv = func.eval.key(&*self.key);
        inv.arg(&*self.prefix).arg(args);
        inv.invoke_async::<Value>(conn).await
    }
}

/// The command that releases a node's locks of `names`: they leave its set `held:NODE` (the
/// node counts its own locks of a name, and sends it here when the count reaches 0).
pub(super) fn unlock_cmd(prefix: &str, node: &str, names: &[String]) -> redis::Cmd {
    let mut c = redis::cmd("SREM");
    c.arg(format!("{prefix}held:{node}")).arg(names);
    c
}

/// Gives the server the scripts' library (`FUNCTION LOAD`; one already there under its name,
/// which carries its hash, is the same). `false` when the server has no functions (before
/// Redis 7, Valkey 7.2) or refuses them: the scripts then go by `EVALSHA`.
pub(super) async fn load_library(conn: &mut MultiplexedConnection, scripts: &Scripts) -> bool {
    let res: Result<Value, RedisError> = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(&scripts.library)
        .query_async(conn)
        .await;
    match res {
        Ok(_) => true,
        Err(e) if e.to_string().contains("already exists") => true,
        Err(e) => {
            tracing::info!(error = %e, "fleet: the index takes no functions; scripts go by EVALSHA");
            false
        }
    }
}
