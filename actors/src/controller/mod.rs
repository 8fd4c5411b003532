//! The controller actor: the front door of the runtime.
//!
//! It forwards every operation to the per-adapter backend actors and merges their replies:
//! a store goes to every adapter (one outcome each); a lookup asks every adapter and the first
//! adapter in configuration order that has a key wins, while locks taken on later adapters for
//! that key are released at once; a load reads each key from the adapter that holds its lock;
//! an unlock goes to that adapter; a touch goes to every adapter. With several adapters the controller remembers which adapter
//! holds each lock, in its own state. It also relays usage events, and completions of
//! [`Submit`]ted operations, to hosts that prefer polling a `flume` channel.
//!
//! A [`Submit`]ted operation's result is kept in the controller's own state until the host
//! takes it with [`TakeResult`], exactly once; event channels only get a
//! [`TierEvent::Completed`] notice, so no listener can take another's result (see
//! [`crate::task_results`] for the bound on unclaimed results).

mod messages;

use actix::prelude::*;
use futures_util::future::join_all;

use crate::backend::BackendActor;
use crate::buffer::{lend, LoadBuf};
use crate::key::{KeyMap, ObjectKey};
use crate::messages::*;
use crate::storage::{BackendError, ErrorKind};
use crate::task_results::TaskResults;
pub use messages::*;

/// One running backend actor, whatever its storage: its address and identity.
#[derive(Clone)]
pub struct AdapterHandle {
    /// Position in the configuration.
    pub index: AdapterIndex,
    /// Adapter type name.
    pub kind: String,
    /// The backend actor (also for the eviction actor and usage subscriptions).
    pub addr: Addr<BackendActor>,
}

impl AdapterHandle {
    /// The handle of a running backend actor.
    pub fn new(index: AdapterIndex, kind: &str, addr: Addr<BackendActor>) -> Self {
        Self {
            index,
            kind: kind.to_owned(),
            addr,
        }
    }

    fn unavailable(&self, err: MailboxError) -> String {
        format!(
            "adapter #{} ({}): actor unavailable: {err}",
            self.index, self.kind
        )
    }
}

/// The controller actor. See the module docs.
pub struct Controller {
    adapters: Vec<AdapterHandle>,
    /// With several adapters: who holds each lock, and how many times.
    holders: KeyMap<Vec<(AdapterIndex, u32)>>,
    listeners: Vec<flume::Sender<TierEvent>>,
    /// Whether the backends have been asked for usage events.
    subscribed: bool,
    next_task: TaskId,
    /// Results of submitted operations, until taken.
    results: TaskResults,
}

impl Controller {
    /// A controller over these adapters (in configuration order).
    pub fn new(adapters: Vec<AdapterHandle>) -> Self {
        Self {
            adapters,
            holders: KeyMap::default(),
            listeners: Vec::new(),
            subscribed: false,
            next_task: 0,
            results: TaskResults::default(),
        }
    }

    fn emit(&mut self, make: impl Fn() -> TierEvent) {
        self.listeners.retain(|l| l.send(make()).is_ok());
    }

    fn hold(&mut self, key: &ObjectKey, adapter: AdapterIndex) {
        let entry = self.holders.entry(key.clone()).or_default();
        match entry.iter_mut().find(|(a, _)| *a == adapter) {
            Some((_, n)) => *n += 1,
            None => entry.push((adapter, 1)),
        }
    }

    /// Releases one lock on `key`; returns the adapter that held it.
    fn release(&mut self, key: &ObjectKey) -> Option<AdapterIndex> {
        let entry = self.holders.get_mut(key)?;
        let (adapter, n) = entry.first_mut()?;
        let adapter = *adapter;
        *n -= 1;
        if *n == 0 {
            entry.remove(0);
            if entry.is_empty() {
                self.holders.remove(key);
            }
        }
        Some(adapter)
    }

    fn holder(&self, key: &ObjectKey) -> Option<AdapterIndex> {
        self.holders.get(key)?.first().map(|(a, _)| *a)
    }

    /// Sends `msg` to adapter `index`'s backend actor and passes its reply on; a missing
    /// adapter or a stopped backend actor is a [`BackendError`].
    fn forward<M, R>(&self, index: AdapterIndex, msg: M) -> ResponseFuture<Result<R, BackendError>>
    where
        M: Message<Result = Result<R, BackendError>> + Send + 'static,
        R: Send + 'static,
        BackendActor: Handler<M>,
    {
        let target = self.adapter(index).cloned();
        Box::pin(async move {
            let a = target?;
            a.addr
                .send(msg)
                .await
                .map_err(|e| BackendError::unavailable(a.unavailable(e)))?
        })
    }

    fn adapter(&self, index: AdapterIndex) -> Result<&AdapterHandle, BackendError> {
        self.adapters.get(index).ok_or_else(|| {
            BackendError::invalid(format!(
                "no adapter #{index} (there are {})",
                self.adapters.len()
            ))
        })
    }
}

impl Actor for Controller {
    type Context = Context<Self>;
}

impl Handler<Store> for Controller {
    type Result = ResponseFuture<StoreReport>;

    fn handle(&mut self, msg: Store, _: &mut Context<Self>) -> Self::Result {
        let adapters = self.adapters.clone();
        Box::pin(async move {
            let sends = adapters.iter().map(|a| a.addr.send(msg.clone()));
            let replies = join_all(sends).await;
            let mut report = StoreReport::default();
            for (a, reply) in adapters.iter().zip(replies) {
                match reply {
                    Ok(r) => report.adapters.extend(r.adapters),
                    Err(e) => {
                        let error = a.unavailable(e);
                        let failed = msg
                            .keys
                            .iter()
                            .map(|k| FailedKey {
                                key: k.clone(),
                                kind: ErrorKind::Unavailable,
                                error: error.clone(),
                            })
                            .collect();
                        report.adapters.push((
                            a.index,
                            StoreOutcome {
                                failed,
                                ..Default::default()
                            },
                        ));
                    }
                }
            }
            report
        })
    }
}

impl Handler<LookupAndLock> for Controller {
    type Result = ResponseActFuture<Self, Bitmap>;

    fn handle(&mut self, msg: LookupAndLock, _: &mut Context<Self>) -> Self::Result {
        let n = msg.keys.len();
        if self.adapters.len() == 1 {
            // One adapter holds every lock: nothing to remember.
            let send = self.adapters[0].addr.send(msg);
            return Box::pin(
                async move { send.await.unwrap_or_else(|_| Bitmap::zeros(n)) }.into_actor(self),
            );
        }
        let sends: Vec<_> = self
            .adapters
            .iter()
            .map(|a| a.addr.send(msg.clone()))
            .collect();
        let keys = msg.keys;
        Box::pin(
            join_all(sends)
                .into_actor(self)
                .map(move |replies, act, _| {
                    let maps: Vec<Bitmap> = replies
                        .into_iter()
                        .map(|r| r.unwrap_or_else(|_| Bitmap::zeros(n)))
                        .collect();
                    let mut hits = Bitmap::zeros(n);
                    let mut release: Vec<Vec<ObjectKey>> = vec![Vec::new(); act.adapters.len()];
                    for (i, key) in keys.iter().enumerate() {
                        let mut winner = None;
                        for (a, map) in maps.iter().enumerate() {
                            if !map.get(i) {
                                continue;
                            }
                            if winner.is_none() {
                                winner = Some(a);
                            } else {
                                release[a].push(key.clone());
                            }
                        }
                        if let Some(a) = winner {
                            hits.set(i, true);
                            act.hold(key, a);
                        }
                    }
                    for (a, keys) in release.into_iter().enumerate() {
                        if !keys.is_empty() {
                            act.adapters[a].addr.do_send(Unlock { keys });
                        }
                    }
                    hits
                }),
        )
    }
}

impl Handler<Load> for Controller {
    type Result = ResponseFuture<LoadReport>;

    fn handle(&mut self, msg: Load, _: &mut Context<Self>) -> Self::Result {
        let n = msg.keys.len();
        if msg.buffers.len() != n {
            return Box::pin(async move { LoadReport::missed(n, msg.buffers) });
        }
        // Lent: whatever happens to an adapter, every buffer comes back here (crate::buffer).
        let (lent, mut home) = lend(msg.buffers);
        if self.adapters.len() == 1 {
            let send = self.adapters[0].addr.send(Load {
                keys: msg.keys,
                buffers: lent,
            });
            return Box::pin(async move {
                let (hits, misses) = match send.await {
                    Ok(r) => {
                        home.settle(r.buffers.into_iter().enumerate());
                        (r.hits, r.misses)
                    }
                    Err(_) => (
                        Bitmap::zeros(n),
                        (0..n).map(|i| (i, MissReason::NotServed)).collect(),
                    ),
                };
                LoadReport::new(hits, home.collect().await, misses)
            });
        }
        // Keys with a lock are read from its holder; the others from each adapter in turn.
        let holders: Vec<Option<AdapterIndex>> = msg.keys.iter().map(|k| self.holder(k)).collect();
        let adapters = self.adapters.clone();
        Box::pin(async move {
            let mut hits = Bitmap::zeros(n);
            let mut reasons = vec![MissReason::NotServed; n];
            let mut slots: Vec<Option<LoadBuf>> = lent.into_iter().map(Some).collect();
            let mut pending: Vec<usize> = Vec::new();
            let mut by_adapter: Vec<Vec<usize>> = vec![Vec::new(); adapters.len()];
            for (i, h) in holders.iter().enumerate() {
                match h {
                    Some(a) => by_adapter[*a].push(i),
                    None => pending.push(i),
                }
            }
            for (a, adapter) in adapters.iter().enumerate() {
                let mut batch = std::mem::take(&mut by_adapter[a]);
                batch.append(&mut pending);
                if batch.is_empty() {
                    continue;
                }
                let keys = batch.iter().map(|&i| msg.keys[i].clone()).collect();
                let buffers = batch
                    .iter()
                    .map(|&i| {
                        slots[i]
                            .take()
                            .expect("every buffer is here between rounds")
                    })
                    .collect();
                match adapter.addr.send(Load { keys, buffers }).await {
                    Ok(r) => {
                        for (j, reason) in r.misses {
                            reasons[batch[j]] = reason;
                        }
                        for ((&i, hit), buf) in batch.iter().zip(r.hits.iter()).zip(r.buffers) {
                            slots[i] = Some(buf);
                            if hit {
                                hits.set(i, true);
                            } else if holders[i].is_none() {
                                pending.push(i);
                            }
                        }
                    }
                    Err(_) => {
                        for &i in &batch {
                            reasons[i] = MissReason::NotServed;
                        }
                        // The adapter is gone: its buffers come home; lend them to the next.
                        for (i, buf) in home.recall(batch.len()).await {
                            slots[i] = Some(home.lend_again(i, buf));
                        }
                        pending.extend(batch.iter().filter(|&&i| holders[i].is_none()));
                    }
                }
            }
            home.settle(
                slots
                    .into_iter()
                    .enumerate()
                    .filter_map(|(i, b)| b.map(|b| (i, b))),
            );
            let misses = hits
                .iter()
                .zip(reasons)
                .enumerate()
                .filter(|(_, (hit, _))| !hit)
                .map(|(i, (_, reason))| (i, reason))
                .collect();
            LoadReport::new(hits, home.collect().await, misses)
        })
    }
}

impl Handler<Unlock> for Controller {
    type Result = ();

    fn handle(&mut self, msg: Unlock, _: &mut Context<Self>) {
        if self.adapters.len() == 1 {
            self.adapters[0].addr.do_send(msg);
            return;
        }
        let mut per: Vec<Vec<ObjectKey>> = vec![Vec::new(); self.adapters.len()];
        for key in msg.keys {
            if let Some(a) = self.release(&key) {
                per[a].push(key);
            }
        }
        for (a, keys) in per.into_iter().enumerate() {
            if !keys.is_empty() {
                self.adapters[a].addr.do_send(Unlock { keys });
            }
        }
    }
}

impl Handler<Touch> for Controller {
    type Result = ();

    fn handle(&mut self, msg: Touch, _: &mut Context<Self>) {
        // Every adapter: each marks the keys it holds (sent now, so before any later operation).
        for a in &self.adapters {
            a.addr.do_send(msg.clone());
        }
    }
}

impl Handler<Delete> for Controller {
    type Result = ResponseFuture<DeleteReport>;

    fn handle(&mut self, msg: Delete, _: &mut Context<Self>) -> Self::Result {
        let targets: Vec<AdapterHandle> = match msg.adapter {
            Some(i) => self.adapters.get(i).cloned().into_iter().collect(),
            None => self.adapters.clone(),
        };
        Box::pin(async move {
            let replies = join_all(targets.iter().map(|a| a.addr.send(msg.clone()))).await;
            let mut report = DeleteReport::default();
            for (a, r) in targets.iter().zip(replies) {
                match r {
                    Ok(r) => report.adapters.extend(r.adapters),
                    Err(_) => report.adapters.push((a.index, Vec::new())),
                }
            }
            report
        })
    }
}

impl Handler<GetUsage> for Controller {
    type Result = ResponseFuture<UsageReport>;

    fn handle(&mut self, msg: GetUsage, _: &mut Context<Self>) -> Self::Result {
        let sends: Vec<_> = self.adapters.iter().map(|a| a.addr.send(msg)).collect();
        Box::pin(async move {
            UsageReport {
                adapters: join_all(sends)
                    .await
                    .into_iter()
                    .filter_map(Result::ok)
                    .flat_map(|r| r.adapters)
                    .collect(),
            }
        })
    }
}

impl Handler<GetStatus> for Controller {
    type Result = ResponseFuture<StatusReport>;

    fn handle(&mut self, msg: GetStatus, _: &mut Context<Self>) -> Self::Result {
        let adapters = self.adapters.clone();
        Box::pin(async move {
            let replies = join_all(adapters.iter().map(|a| a.addr.send(msg))).await;
            let mut report = StatusReport::default();
            for (a, r) in adapters.iter().zip(replies) {
                match r {
                    Ok(r) => report.adapters.extend(r.adapters),
                    Err(e) => report.adapters.push(Status {
                        adapter: a.index,
                        kind: a.kind.clone(),
                        is_healthy: false,
                        reason: Some(a.unavailable(e).to_string()),
                        locked_keys: 0,
                        details: serde_json::json!({ "error": a.unavailable(e) }),
                        fleet: None,
                    }),
                }
            }
            report
        })
    }
}

impl Handler<ListKeys> for Controller {
    type Result = ResponseFuture<Result<KeyPage, BackendError>>;

    fn handle(&mut self, msg: ListKeys, _: &mut Context<Self>) -> Self::Result {
        self.forward(msg.adapter, msg)
    }
}

impl Handler<Verify> for Controller {
    type Result = ResponseFuture<Result<VerifyReport, BackendError>>;

    fn handle(&mut self, msg: Verify, _: &mut Context<Self>) -> Self::Result {
        self.forward(msg.adapter, msg)
    }
}

impl Handler<UsageEvent> for Controller {
    type Result = ();

    fn handle(&mut self, msg: UsageEvent, _: &mut Context<Self>) {
        if !self.listeners.is_empty() {
            self.emit(|| TierEvent::Usage(msg.clone()));
        }
    }
}

impl Handler<SubscribeEvents> for Controller {
    type Result = ();

    fn handle(&mut self, msg: SubscribeEvents, ctx: &mut Context<Self>) {
        // Backends send usage events here only once a host listens.
        if !self.subscribed {
            self.subscribed = true;
            for a in &self.adapters {
                a.addr.do_send(SubscribeUsage(ctx.address().recipient()));
            }
        }
        self.listeners.push(msg.0);
    }
}

impl Handler<StopController> for Controller {
    type Result = ();

    fn handle(&mut self, _: StopController, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

impl Handler<Submit> for Controller {
    type Result = MessageResult<Submit>;

    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) -> Self::Result {
        let task = self.next_task;
        self.next_task += 1;
        let me = ctx.address();
        let run = async move {
            let res = match msg.0 {
                Op::Store(m) => me.send(m).await.map(OpResult::Store),
                Op::LookupAndLock(m) => me.send(m).await.map(OpResult::LookupAndLock),
                Op::Load(m) => me.send(m).await.map(OpResult::Load),
                Op::Delete(m) => me.send(m).await.map(OpResult::Delete),
            };
            res.unwrap_or_else(|e| OpResult::Failed(e.to_string()))
        };
        ctx.spawn(run.into_actor(self).map(move |result, act, _| {
            // The result is kept for its taker; listeners only hear that it is there.
            act.results.insert(task, result);
            act.emit(|| TierEvent::Completed { task });
        }));
        MessageResult(task)
    }
}

impl Handler<TakeResult> for Controller {
    type Result = MessageResult<TakeResult>;

    fn handle(&mut self, msg: TakeResult, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.results.take(msg.0))
    }
}
