//! The worker-pool actor: a bounded set of threads for blocking work.
//!
//! Blocking calls (file I/O, the Hugging Face Hub's HTTP API) must never run on an arbiter, where
//! they would stall every actor sharing it. A [`WorkerPool`] is an actix `SyncArbiter` of
//! `num_workers` threads; [`Run`] carries a closure to one of them and replies with its result.
//! A panicking job is caught and reported as [`JobFailed`], and the thread lives on.

use std::panic::{catch_unwind, AssertUnwindSafe};

use actix::prelude::*;

/// The worker-pool actor (one instance per thread of the pool).
#[derive(Debug, Default)]
pub struct WorkerPool;

impl WorkerPool {
    /// Starts a pool of `threads` workers (at least one). Must be called inside a running actix system.
    pub fn start(threads: usize) -> Addr<WorkerPool> {
        SyncArbiter::start(threads.max(1), || WorkerPool)
    }
}

impl Actor for WorkerPool {
    type Context = SyncContext<Self>;
}

/// A job for the pool: runs the closure on a worker thread and replies with its value.
pub struct Run<R: Send + 'static>(pub Box<dyn FnOnce() -> R + Send>);

impl<R: Send + 'static> Run<R> {
    /// Wraps a closure.
    pub fn new(f: impl FnOnce() -> R + Send + 'static) -> Self {
        Run(Box::new(f))
    }
}

impl<R: Send + 'static> Message for Run<R> {
    type Result = Result<R, JobFailed>;
}

/// A job panicked or its pool is gone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("worker job failed: {reason}")]
pub struct JobFailed {
    /// The panic message or mailbox error.
    pub reason: String,
}

impl JobFailed {
    /// This failure as the [`BackendError`](crate::BackendError) of operation `op`.
    pub fn backend_error(&self, op: &'static str) -> crate::BackendError {
        crate::BackendError::worker(op, self.reason.clone())
    }
}

impl<R: Send + 'static> Handler<Run<R>> for WorkerPool {
    type Result = Result<R, JobFailed>;

    fn handle(&mut self, msg: Run<R>, _: &mut SyncContext<Self>) -> Self::Result {
        catch_unwind(AssertUnwindSafe(msg.0)).map_err(|panic| JobFailed {
            reason: panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into()),
        })
    }
}

/// Sends a job and flattens mailbox errors into [`JobFailed`].
pub async fn run_on<R: Send + 'static>(
    pool: &Addr<WorkerPool>,
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, JobFailed> {
    match pool.send(Run::new(f)).await {
        Ok(r) => r,
        Err(e) => Err(JobFailed {
            reason: e.to_string(),
        }),
    }
}

/// Runs `work(ctx, item)` for every item, spread over `workers` jobs on the pool, keeping input
/// order. `failed(i, err)` stands in for item `i` when its job dies (panic or pool gone).
pub fn fan_out<C, I, O>(
    pool: &Addr<WorkerPool>,
    workers: usize,
    ctx: std::sync::Arc<C>,
    items: Vec<I>,
    work: fn(&C, I) -> O,
    failed: impl Fn(usize, &JobFailed) -> O + 'static,
) -> impl std::future::Future<Output = Vec<O>> + 'static
where
    C: Send + Sync + 'static,
    I: Send + 'static,
    O: Send + 'static,
{
    let n = items.len();
    let per_job = n.div_ceil(workers.max(1)).max(1);
    let mut jobs = Vec::new();
    let mut items = items.into_iter();
    let mut start = 0;
    while start < n {
        let chunk: Vec<I> = items.by_ref().take(per_job).collect();
        let len = chunk.len();
        let (ctx, pool) = (ctx.clone(), pool.clone());
        jobs.push(async move {
            let res = run_on(&pool, move || {
                chunk.into_iter().map(|i| work(&ctx, i)).collect::<Vec<O>>()
            })
            .await;
            (start, len, res)
        });
        start += len;
    }
    async move {
        let mut out = Vec::with_capacity(n);
        for (start, len, res) in futures_util::future::join_all(jobs).await {
            match res {
                Ok(v) => out.extend(v),
                Err(e) => out.extend((start..start + len).map(|i| failed(i, &e))),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_rt::test]
    async fn runs_jobs_and_survives_panics() {
        let pool = WorkerPool::start(2);
        assert_eq!(run_on(&pool, || 2 + 2).await, Ok(4));
        let err = run_on(&pool, || -> u32 { panic!("boom") })
            .await
            .unwrap_err();
        assert_eq!(err.reason, "boom");
        let ids: Vec<_> = futures_util::future::join_all(
            (0..4).map(|_| run_on(&pool, || std::thread::current().id())),
        )
        .await;
        assert!(ids.iter().all(|r| r.is_ok()));
        assert_ne!(
            run_on(&pool, || std::thread::current().id()).await.unwrap(),
            std::thread::current().id()
        );
    }
}
