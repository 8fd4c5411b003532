//! The worker pool: a bounded set of threads for blocking work.
//!
//! Blocking calls (file I/O, the Hugging Face Hub's HTTP API) must never run on an arbiter, where
//! they would stall every actor sharing it. A [`WorkerPool`] owns `num_workers` threads that take
//! jobs from one channel; [`run_on`] carries a closure to one of them and resolves to its result.
//! A panicking job is caught and reported as [`JobFailed`], and the thread lives on.
//!
//! Invariants:
//! - **No thread outlives its pool.** The pool is a handle shared by clones; when the last clone
//!   is dropped (the backend that owns it stops with its arbiter), the channel closes, every
//!   worker finishes the job it is running and exits, and the drop returns once each thread has
//!   been joined. So [`Tier::close`](../../kvtier/struct.Tier.html), which joins the backends'
//!   arbiters, also waits for their pools. (actix's `SyncArbiter`, which this replaced, let its
//!   threads exit some time after the tier had closed.)
//! - Jobs queued when the pool goes away still run before the workers exit; a job sent after
//!   that fails at once with [`JobFailed`].
//! - The only shared state is the job channel (`flume`) and each job's one-shot reply.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A job as the workers see it: it runs the closure and sends the reply itself.
type Job = Box<dyn FnOnce() + Send>;

/// A pool of worker threads for blocking jobs (see the module docs). Cheap to clone: clones
/// share the threads, and the last one to go joins them.
#[derive(Debug, Clone)]
pub(crate) struct WorkerPool {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    jobs: Option<flume::Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    /// Starts a pool of `threads` workers (at least one), named `kvtier-worker-<i>`.
    ///
    /// # Panics
    /// If the operating system refuses to create a thread.
    pub(crate) fn start(threads: usize) -> WorkerPool {
        let (tx, rx) = flume::unbounded::<Job>();
        let threads = (0..threads.max(1))
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("kvtier-worker-{i}"))
                    .spawn(move || {
                        while let Ok(job) = rx.recv() {
                            job();
                        }
                    })
                    .expect("spawn a kvtier worker thread")
            })
            .collect();
        WorkerPool {
            shared: Arc::new(Shared {
                jobs: Some(tx),
                threads,
            }),
        }
    }

    /// Queues `job`; false when the pool has stopped taking jobs.
    fn execute(&self, job: Job) -> bool {
        match &self.shared.jobs {
            Some(jobs) => jobs.send(job).is_ok(),
            None => false,
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Closing the channel ends each worker's loop once the queue is empty.
        self.jobs.take();
        let me = std::thread::current().id();
        for t in self.threads.drain(..) {
            // A worker never joins itself (it would wait forever); it exits right after.
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

/// A job panicked or its pool is gone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("worker job failed: {reason}")]
pub(crate) struct JobFailed {
    /// The panic message, or why the job never ran.
    pub reason: String,
}

impl JobFailed {
    /// This failure as the [`BackendError`](crate::BackendError) of operation `op`.
    pub(crate) fn backend_error(&self, op: &'static str) -> crate::BackendError {
        crate::BackendError::worker(op, self.reason.clone())
    }
}

/// Runs `f` on one of the pool's threads and resolves to its value, or to [`JobFailed`] if it
/// panicked or the pool is gone.
pub(crate) async fn run_on<R: Send + 'static>(
    pool: &WorkerPool,
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, JobFailed> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let result = catch_unwind(AssertUnwindSafe(f)).map_err(|panic| JobFailed {
            reason: panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into()),
        });
        let _ = tx.send(result);
    });
    if !pool.execute(job) {
        return Err(JobFailed {
            reason: "the worker pool has stopped".into(),
        });
    }
    rx.await.unwrap_or_else(|_| {
        Err(JobFailed {
            reason: "the worker pool stopped before the job ran".into(),
        })
    })
}

/// Runs `work(ctx, item)` for every item, spread over `workers` jobs on the pool, keeping input
/// order. `failed(i, err)` stands in for item `i` when its job dies (panic or pool gone).
pub(crate) fn fan_out<C, I, O>(
    pool: &WorkerPool,
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

    /// Dropping the last handle joins every worker: when it returns, the thread that ran the
    /// last job has exited (its thread-local destructors have run), after the job finished.
    #[test]
    fn the_last_handle_joins_the_threads() {
        use std::sync::atomic::{AtomicBool, Ordering};

        struct OnExit(Arc<AtomicBool>);
        impl Drop for OnExit {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        thread_local! {
            static GUARD: std::cell::RefCell<Option<OnExit>> = const { std::cell::RefCell::new(None) };
        }

        let pool = WorkerPool::start(2);
        let exited = Arc::new(AtomicBool::new(false));
        let (started_tx, started_rx) = flume::bounded(1);
        let (go_tx, go_rx) = flume::bounded::<()>(1);
        let flag = exited.clone();
        assert!(pool.execute(Box::new(move || {
            GUARD.with(|g| *g.borrow_mut() = Some(OnExit(flag)));
            started_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        })));
        started_rx.recv().unwrap();
        go_tx.send(()).unwrap();
        drop(pool);
        assert!(
            exited.load(Ordering::SeqCst),
            "the worker thread was still running after the pool was dropped"
        );
    }
}
