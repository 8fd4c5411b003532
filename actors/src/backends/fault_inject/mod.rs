//! The `fault_inject` backend: wraps another adapter's storage and injects faults, for tests and
//! for users rehearsing outages.
//!
//! Faults, each off by default (see [`FaultInjectConfig`]):
//!
//! * **errors**: each item of a `put`/`head`/`get`/`remove` batch (each `list` call) fails with
//!   probability `error_rates.<op>`; the item never reaches the inner store, so a failed write
//!   wrote nothing and a failed remove removed nothing.
//! * **partial batches**: with `fail_every_nth_item = n`, items `n, 2n, …` of every batch fail
//!   the same way (deterministic, independent of the seed).
//! * **latency**: `latency_ms` delays the reply with a timer on the actor's arbiter; no thread is
//!   blocked, and the actor keeps serving other messages meanwhile.
//! * **dropped replies**: with probability `drop_reply_rate` per call, the inner store does the
//!   work but the reply is lost. The call never resolves on its own: after `reply_timeout_ms`
//!   (counted from the call) it fails, every item with a connection error
//!   ([`ErrorKind::Connection`](crate::ErrorKind::Connection), which a caller cannot tell from
//!   a network timeout, and which counts toward circuit breakers). A
//!   write may therefore have landed although it was reported failed, as with a real timeout;
//!   the inner work is cancelled if it is still running when the timeout fires (the inner
//!   store's own finishing step still runs if its work completed). The buffers of a dropped
//!   `get` go home as soon as the inner store lets go of them.
//! * **corrupted sizes**: with probability `corrupt_size_rate` per item, a `head` reports the
//!   object's size + 1 and a `get` answers [`Fetched::SizeMismatch`] without reading (the
//!   buffer stays untouched).
//! * **corrupted bodies**: with probability `corrupt_body_rate` per forwarded `get` item, one
//!   byte of the body (at an offset drawn from the seed) has a bit flipped in flight, size
//!   kept: the buffer carries the flip ([`LoadBuf`]), and the inner store applies it between
//!   its read and its own check (`fs` with checksums: a [`Fetched::Corrupt`] miss); a store
//!   with no such check lets it through when it lets go of the buffer, and the wrong bytes are
//!   served. This is what "no end-to-end check" means, made visible.
//!
//! Faults are drawn from a [`SmallRng`] seeded with `seed` (drawn at start when absent and
//! reported in `status`), in request order, so one seed and one request sequence reproduce the
//! same faults. Start-up index recovery, health and `close` pass straight through; the inner
//! store's results are finished on the inner store ([`Io::within`]).
//! `details()` reports the inner adapter's details and a counter per fault kind and operation.
//!
//! The inner storage is a `Box<dyn Storage>` rather than a type parameter: which store is
//! wrapped (and whether it is itself a `fault_inject`) is only known from the configuration at
//! run time, and [`Storage`] is object-safe for this reason. The cost is one virtual call per
//! batch, which is nothing next to the I/O behind it.

mod config;

use std::any::Any;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

pub use config::{FaultInjectConfig, Latency, PerOp};

use crate::buffer::LoadBuf;
use crate::key::ObjectKey;
use crate::messages::KeyPage;
use crate::storage::{
    BackendError, Fetched, Finish, Io, IoState, Recovered, Removed, Storage, Verdict,
};

/// Counters of the faults injected, per kind and operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct FaultCounters {
    /// Items (calls for `list`) failed by `error_rates`.
    pub errors: PerOp<u64>,
    /// Items failed by `fail_every_nth_item`.
    pub nth_item_failures: PerOp<u64>,
    /// Calls whose reply was dropped (each failed after `reply_timeout_ms`).
    pub dropped_replies: PerOp<u64>,
    /// Items selected for a corrupted size (`head` and `get` only).
    pub corrupted_sizes: PerOp<u64>,
    /// Bodies changed in flight, size kept (`get` only).
    pub corrupted_bodies: PerOp<u64>,
    /// Calls whose reply was delayed by `latency_ms`.
    pub delayed: PerOp<u64>,
}

impl FaultCounters {
    /// Faults injected in total (errors, partial-batch failures, dropped replies and corrupted
    /// sizes; delays are not counted).
    pub(crate) fn total(&self) -> u64 {
        [
            self.errors,
            self.nth_item_failures,
            self.dropped_replies,
            self.corrupted_sizes,
            self.corrupted_bodies,
        ]
        .iter()
        .flat_map(|p| p.named())
        .map(|(_, n)| n)
        .sum()
    }
}

fn slot<'a, T>(p: &'a mut PerOp<T>, op: &str) -> &'a mut T {
    match op {
        "put" => &mut p.put,
        "head" => &mut p.head,
        "get" => &mut p.get,
        "remove" => &mut p.remove,
        _ => &mut p.list,
    }
}

/// What happens to one item of a batch.
enum Fate {
    /// Sent to the inner store.
    Forward,
    /// Sent to the inner store; its size is corrupted on the way back (`head`).
    ForwardCorrupt,
    /// Not sent: fails with this error.
    Fail(BackendError),
    /// Not sent: its size is reported wrong (`get`).
    Corrupt,
}

/// Storage that injects faults into another. See the module docs.
pub struct FaultInjectStorage {
    inner: Box<dyn Storage>,
    cfg: FaultInjectConfig,
    seed: u64,
    rng: SmallRng,
    counters: FaultCounters,
}

impl FaultInjectStorage {
    /// Wraps `inner` with the faults of `cfg` (already validated).
    pub fn new(inner: Box<dyn Storage>, cfg: &FaultInjectConfig) -> Self {
        let seed = cfg.seed.unwrap_or_else(rand::random);
        Self {
            inner,
            cfg: cfg.clone(),
            seed,
            rng: SmallRng::seed_from_u64(seed),
            counters: FaultCounters::default(),
        }
    }

    /// The faults injected so far.
    pub fn counters(&self) -> FaultCounters {
        self.counters
    }

    /// The seed in use.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    fn draw(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen_bool(p)
    }

    /// Decides the fate of each of `n` items of an `op` batch. `corrupt` is the fate of an item
    /// chosen for size corruption (`None`: the operation has no sizes to corrupt).
    fn plan(&mut self, op: &'static str, n: usize, corrupt: Option<fn() -> Fate>) -> Vec<Fate> {
        let rate = self
            .cfg
            .error_rates
            .named()
            .iter()
            .find(|(o, _)| *o == op)
            .map_or(0.0, |(_, r)| *r);
        let nth = self.cfg.fail_every_nth_item as usize;
        (0..n)
            .map(|i| {
                if nth > 0 && (i + 1).is_multiple_of(nth) {
                    *slot(&mut self.counters.nth_item_failures, op) += 1;
                    return Fate::Fail(BackendError::io(
                        op,
                        format!(
                            "injected fault: item {} of the batch (fail_every_nth_item = {nth})",
                            i + 1
                        ),
                    ));
                }
                if self.draw(rate) {
                    *slot(&mut self.counters.errors, op) += 1;
                    return Fate::Fail(BackendError::io(
                        op,
                        format!("injected fault (error_rates.{op} = {rate})"),
                    ));
                }
                if let Some(make) = corrupt {
                    if self.draw(self.cfg.corrupt_size_rate) {
                        *slot(&mut self.counters.corrupted_sizes, op) += 1;
                        return make();
                    }
                }
                Fate::Forward
            })
            .collect()
    }

    /// Finishes a call: waits for the inner result (if any), applies a dropped reply or the
    /// latency, and assembles the reply. Stays synchronous when nothing delays it.
    /// A batch whose items either fail here or go to the inner store, with no other fault
    /// than errors, partial batches, latency and dropped replies (`put`, `remove`).
    fn plain_batch<I, T: Clone + 'static>(
        &mut self,
        op: &'static str,
        items: Vec<I>,
        call: impl FnOnce(&mut Box<dyn Storage>, Vec<I>) -> Io<Vec<Result<T, BackendError>>>,
    ) -> Io<Vec<Result<T, BackendError>>> {
        let n = items.len();
        let plan = self.plan(op, n, None);
        let (forward, fates) = split(items, plan);
        let inner = (!forward.is_empty()).then(|| call(&mut self.inner, forward));
        self.finish(
            op,
            inner,
            move |res| {
                merge(
                    fates,
                    res.unwrap_or_default(),
                    fail_only,
                    |_, r| r,
                    |_| Err(missing_result(op)),
                )
            },
            move |e| vec![Err(e); n],
        )
    }

    fn finish<T: 'static, R: 'static>(
        &mut self,
        op: &'static str,
        inner: Option<Io<T>>,
        assemble: impl FnOnce(Option<T>) -> R + 'static,
        dropped: impl FnOnce(BackendError) -> R + 'static,
    ) -> Io<R> {
        let drop_reply = self.draw(self.cfg.drop_reply_rate);
        let latency = self.cfg.latency_ms.of(op);
        if drop_reply {
            *slot(&mut self.counters.dropped_replies, op) += 1;
        } else if latency > 0 {
            *slot(&mut self.counters.delayed, op) += 1;
        }
        // The inner result is finished on the inner store, found in this wrapper.
        let inner = inner.map(|io| io.within(inner_of));
        if !drop_reply && latency == 0 {
            return match inner {
                None => Io::ready(assemble(None)),
                Some(io) => io.map(move |v| assemble(Some(v))),
            };
        }
        let timeout = Duration::from_millis(self.cfg.reply_timeout_ms);
        Io(IoState::Pending(Box::pin(async move {
            let started = Instant::now();
            let result = async move {
                match inner.map(|io| io.0) {
                    None => None,
                    Some(IoState::Ready(v)) => {
                        Some(Box::new(move |_: &mut dyn Any| v) as Finish<T>)
                    }
                    Some(IoState::Deferred(g)) => Some(g),
                    Some(IoState::Pending(fut)) => Some(fut.await),
                }
            };
            if drop_reply {
                // The reply never comes: only the caller's timeout ends the call.
                let done = actix_rt::time::timeout(timeout, result)
                    .await
                    .ok()
                    .flatten();
                actix_rt::time::sleep(timeout.saturating_sub(started.elapsed())).await;
                let err = BackendError::connection(
                    op,
                    format!(
                        "no reply within {} ms (injected: reply dropped)",
                        timeout.as_millis()
                    ),
                );
                return Box::new(move |s: &mut dyn Any| {
                    if let Some(g) = done {
                        let _discarded = g(s);
                    }
                    dropped(err)
                }) as Finish<R>;
            }
            let finish = result.await;
            actix_rt::time::sleep(Duration::from_millis(latency)).await;
            Box::new(move |s: &mut dyn Any| assemble(finish.map(|g| g(s)))) as Finish<R>
        })))
    }
}

/// The inner store of a wrapper (for [`Io::within`]).
fn inner_of(s: &mut FaultInjectStorage) -> &mut dyn Any {
    &mut *s.inner as &mut dyn Any
}

/// Splits a batch by plan: the items to forward, and per position the injected fate.
fn split<I>(items: Vec<I>, plan: Vec<Fate>) -> (Vec<I>, Vec<Fate>) {
    let mut forward = Vec::with_capacity(items.len());
    let mut fates = Vec::with_capacity(items.len());
    for (item, fate) in items.into_iter().zip(plan) {
        if matches!(fate, Fate::Forward | Fate::ForwardCorrupt) {
            forward.push(item);
        }
        fates.push(fate);
    }
    (forward, fates)
}

/// Puts the inner results back in request order between the injected ones. `inject` turns an
/// injected fate into a result (`None` for forwarded fates); `missing` stands in for results
/// the inner store did not return (a broken storage; never expected).
fn merge<T>(
    fates: Vec<Fate>,
    inner: Vec<T>,
    mut inject: impl FnMut(usize, Fate) -> Option<T>,
    mut forwarded: impl FnMut(bool, T) -> T,
    missing: impl Fn(usize) -> T,
) -> Vec<T> {
    let mut inner = inner.into_iter();
    fates
        .into_iter()
        .enumerate()
        .map(|(i, fate)| {
            let corrupt = matches!(fate, Fate::ForwardCorrupt);
            match fate {
                Fate::Forward | Fate::ForwardCorrupt => match inner.next() {
                    Some(r) => forwarded(corrupt, r),
                    None => missing(i),
                },
                other => inject(i, other).unwrap_or_else(|| missing(i)),
            }
        })
        .collect()
}

/// [`merge`]'s `inject` for operations whose only injected fate is a failure.
fn fail_only<T>(_: usize, fate: Fate) -> Option<Result<T, BackendError>> {
    match fate {
        Fate::Fail(e) => Some(Err(e)),
        _ => None,
    }
}

fn missing_result(op: &'static str) -> BackendError {
    BackendError::io(op, "the inner store returned fewer results than items")
}

impl Storage for FaultInjectStorage {
    fn kind(&self) -> &'static str {
        "fault_inject"
    }

    fn put(&mut self, items: Vec<(ObjectKey, Bytes)>) -> Io<Vec<Result<(), BackendError>>> {
        self.plain_batch("put", items, |inner, forward| inner.put(forward))
    }

    fn head(
        &mut self,
        keys: &[ObjectKey],
        known: &[Option<u64>],
    ) -> Io<Vec<Result<Option<u64>, BackendError>>> {
        let n = keys.len();
        // Keys the actor's ledger vouches for are answered without a fault, as they are when
        // no wrapper stands between (a ledger hit never reaches a store that trusts it).
        let unknown = known.iter().filter(|k| k.is_none()).count();
        let mut drawn = self
            .plan("head", unknown, Some(|| Fate::ForwardCorrupt))
            .into_iter();
        let plan = known
            .iter()
            .map(|known| match known {
                Some(_) => Fate::Forward,
                None => drawn.next().unwrap_or(Fate::Forward),
            })
            .collect();
        let items: Vec<(ObjectKey, Option<u64>)> =
            keys.iter().cloned().zip(known.iter().copied()).collect();
        let (forward, fates) = split(items, plan);
        let inner = (!forward.is_empty()).then(|| {
            let (fkeys, fknown): (Vec<ObjectKey>, Vec<Option<u64>>) = forward.into_iter().unzip();
            self.inner.head(&fkeys, &fknown)
        });
        self.finish(
            "head",
            inner,
            move |res| {
                merge(
                    fates,
                    res.unwrap_or_default(),
                    fail_only,
                    |corrupt, r| match r {
                        Ok(Some(size)) if corrupt => Ok(Some(size.saturating_add(1))),
                        other => other,
                    },
                    |_| Err(missing_result("head")),
                )
            },
            move |e| vec![Err(e); n],
        )
    }

    /// Buffers of items that are not forwarded are dropped here untouched (they go home).
    fn get(&mut self, items: Vec<(ObjectKey, LoadBuf)>) -> Io<Vec<Result<Fetched, BackendError>>> {
        let n = items.len();
        let plan = self.plan("get", n, Some(|| Fate::Corrupt));
        let mut lens = Vec::with_capacity(n);
        let mut forward = Vec::with_capacity(n);
        for ((key, mut buf), fate) in items.into_iter().zip(&plan) {
            lens.push(buf.len() as u64);
            if matches!(fate, Fate::Forward) {
                if self.draw(self.cfg.corrupt_body_rate) {
                    self.counters.corrupted_bodies.get += 1;
                    buf.inject_flip(self.rng.gen_range(0..buf.len().max(1)));
                }
                forward.push((key, buf));
            }
        }
        let inner = (!forward.is_empty()).then(|| self.inner.get(forward));
        self.finish(
            "get",
            inner,
            move |res| {
                merge(
                    plan,
                    res.unwrap_or_default(),
                    |i, f| match f {
                        Fate::Fail(e) => Some(Err(e)),
                        Fate::Corrupt => Some(Ok(Fetched::SizeMismatch {
                            actual: lens[i] + 1,
                        })),
                        _ => None,
                    },
                    |_, r| r,
                    |_| Err(missing_result("get")),
                )
            },
            move |e| vec![Err(e); n],
        )
    }

    /// Passes through: a scrub sees the inner store as it is (faults are for requests).
    fn verify(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Verdict, BackendError>>> {
        self.inner.verify(keys).within(inner_of)
    }

    fn remove(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Removed, BackendError>>> {
        self.plain_batch("remove", keys, |inner, forward| inner.remove(forward))
    }

    fn list(
        &mut self,
        model: Option<String>,
        cursor: Option<String>,
        limit: usize,
    ) -> Io<Result<KeyPage, BackendError>> {
        let rate = self.cfg.error_rates.list;
        if self.draw(rate) {
            self.counters.errors.list += 1;
            let err = BackendError::io(
                "list",
                format!("injected fault (error_rates.list = {rate})"),
            );
            return self.finish("list", None::<Io<()>>, move |_| Err(err), Err);
        }
        let inner = self.inner.list(model, cursor, limit);
        self.finish(
            "list",
            Some(inner),
            |res| res.unwrap_or_else(|| Err(missing_result("list"))),
            Err,
        )
    }

    fn recover(&mut self) -> Option<Io<Result<Vec<Recovered>, BackendError>>> {
        self.inner.recover().map(|io| io.within(inner_of))
    }

    fn is_healthy(&self) -> bool {
        self.inner.is_healthy()
    }

    fn unhealthy(&self) -> Option<String> {
        self.inner.unhealthy()
    }

    fn probe(&mut self) -> Io<()> {
        self.inner.probe().within(inner_of)
    }

    fn details(&self) -> serde_json::Value {
        serde_json::json!({
            "seed": self.seed,
            "inner": {"kind": self.inner.kind(), "details": self.inner.details()},
            "injected_total": self.counters.total(),
            "injected": self.counters,
            "faults": self.cfg,
        })
    }

    fn close(&mut self) {
        self.inner.close();
    }

    fn attach_metrics(&mut self, metrics: crate::metrics::AdapterMetrics) {
        self.inner.attach_metrics(metrics);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::memory::MemoryStorage;
    use crate::key::NameFormat;

    fn key(i: u32) -> ObjectKey {
        ObjectKey::new("m", 0, i.to_be_bytes().to_vec()).unwrap()
    }

    fn ready<T>(io: Io<T>) -> T {
        match io.0 {
            IoState::Ready(v) => v,
            _ => panic!("expected a synchronous result"),
        }
    }

    fn head(
        s: &mut FaultInjectStorage,
        keys: &[ObjectKey],
    ) -> Vec<Result<Option<u64>, BackendError>> {
        ready(s.head(keys, &vec![None; keys.len()]))
    }

    fn wrap(cfg: FaultInjectConfig) -> FaultInjectStorage {
        FaultInjectStorage::new(Box::new(MemoryStorage::new(NameFormat::Seed)), &cfg)
    }

    #[test]
    fn every_nth_item_fails_and_never_reaches_the_store() {
        let mut s = wrap(FaultInjectConfig {
            fail_every_nth_item: 3,
            ..Default::default()
        });
        let items: Vec<_> = (0..7)
            .map(|i| (key(i), Bytes::from(vec![1u8; 4])))
            .collect();
        let res = ready(s.put(items));
        let failed: Vec<usize> = (0..7).filter(|i| res[*i].is_err()).collect();
        assert_eq!(failed, vec![2, 5]);
        let sizes = head(&mut s, &(0..7).map(key).collect::<Vec<_>>());
        // Items 3 and 6 of this batch fail too (errors, shown as None); keys 2 and 5 were never
        // written.
        let seen: Vec<_> = sizes.iter().map(|r| r.clone().ok().flatten()).collect();
        assert_eq!(
            seen,
            vec![Some(4), Some(4), None, Some(4), Some(4), None, Some(4)]
        );
        assert!(sizes[2].is_err() && sizes[5].is_err());
        assert_eq!(s.counters().nth_item_failures.put, 2);
        assert_eq!(s.counters().nth_item_failures.head, 2);
        assert_eq!(s.counters().total(), 4);
    }

    #[test]
    fn corrupted_sizes_on_head_and_get() {
        let mut s = wrap(FaultInjectConfig {
            corrupt_size_rate: 1.0,
            ..Default::default()
        });
        ready(s.put(vec![(key(1), Bytes::from(vec![9u8; 10]))]));
        assert_eq!(
            head(&mut s, &[key(1), key(2)]),
            vec![Ok(Some(11)), Ok(None)]
        );
        let mut buf = LoadBuf::zeroed(10);
        buf.fill(7);
        let (lent, mut home) = crate::buffer::lend(vec![buf]);
        let out = ready(s.get(vec![(key(1), lent.into_iter().next().unwrap())]));
        assert_eq!(out[0], Ok(Fetched::SizeMismatch { actual: 11 }));
        let back = home.try_collect().expect("the buffer is home");
        assert!(back[0].iter().all(|b| *b == 7), "buffer untouched");
        assert_eq!(s.counters().corrupted_sizes.head, 2);
        assert_eq!(s.counters().corrupted_sizes.get, 1);
    }

    #[test]
    fn same_seed_same_faults() {
        let run = |seed| {
            let mut s = wrap(FaultInjectConfig {
                error_rates: PerOp {
                    put: 0.5,
                    ..Default::default()
                },
                seed: Some(seed),
                ..Default::default()
            });
            let items: Vec<_> = (0..64)
                .map(|i| (key(i), Bytes::from(vec![1u8; 4])))
                .collect();
            ready(s.put(items))
                .iter()
                .map(|r| r.is_ok())
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert_ne!(a, run(8));
        let failed = a.iter().filter(|ok| !**ok).count();
        assert!(
            (10..54).contains(&failed),
            "{failed} of 64 failed at rate 0.5"
        );
    }

    #[test]
    fn rate_zero_is_transparent_and_synchronous() {
        let mut s = wrap(FaultInjectConfig::default());
        assert_eq!(s.kind(), "fault_inject");
        ready(s.put(vec![(key(1), Bytes::from_static(b"abc"))]));
        let (lent, mut home) = crate::buffer::lend(vec![LoadBuf::zeroed(3)]);
        let out = ready(s.get(vec![(key(1), lent.into_iter().next().unwrap())]));
        let back = home.try_collect().expect("the buffer is home");
        assert_eq!(
            (&back[0][..], out[0].clone()),
            (&b"abc"[..], Ok(Fetched::Hit))
        );
        assert_eq!(
            ready(s.remove(vec![key(1), key(2)])),
            vec![Ok(Removed::Yes), Ok(Removed::Absent)]
        );
        assert_eq!(ready(s.list(None, None, 10)).unwrap().entries.len(), 0);
        assert_eq!(s.counters(), FaultCounters::default());
        let d = s.details();
        assert_eq!(d["inner"]["kind"], "memory");
        assert_eq!(d["injected_total"], 0);
    }
}
