//! The seam between the [`BackendActor`](crate::BackendActor) and a concrete store.
//!
//! A [`Storage`] only moves bytes: it writes, probes, reads, removes and lists objects. Everything
//! with state that the semantics define (lock reference counts, the usage ledger, the set of keys
//! being deleted, events) lives in the backend actor, written once for every backend. A storage
//! is owned by its actor (as a `Box<dyn Storage>`: one virtual call per batch) and called from
//! its handlers with `&mut self`.
//!
//! # Completion
//! Work that takes time is returned as a pending [`Io`]. When it resolves, the actor applies its
//! result on its own thread, and a storage that keeps state (a circuit breaker, a metadata
//! cache, a credential signer) gets `&mut` access to itself at that moment through
//! [`Io::then`] / `Io::pending_then`, running where the actor already holds the storage, so
//! no lock. Request futures may also share state with their storage; each storage's module
//! docs name exactly what: the `s3` storage's share a semaphore, one atomic (when the bucket
//! was last seen), and on its direct path a channel on which a request whose credentials were
//! refused hands fresh ones back (the storage reads it at its next batch); the `hfbucket`
//! storage's worker jobs share none of its state (they return what they learnt with their
//! results). Invariant: an [`Io`] is resolved against the storage that made it (a wrapper such
//! as `fault_inject` projects with [`Io::within`]); resolving it against another storage panics.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

use crate::buffer::LoadBuf;
use crate::key::ObjectKey;
use crate::messages::KeyPage;

/// A step that finishes an operation, given the storage that started it.
pub(crate) type Finish<T> = Box<dyn FnOnce(&mut dyn Any) -> T>;

/// A boxed future a storage hands back to its actor (it runs on the actor's arbiter).
pub(crate) type IoFuture<T> = Pin<Box<dyn Future<Output = Finish<T>>>>;

/// The result of a storage operation: available now, or later; either way possibly finished
/// by a closure that gets the storage back.
pub struct Io<T>(pub(crate) IoState<T>);

/// The states of an [`Io`].
pub(crate) enum IoState<T> {
    /// Completed synchronously.
    Ready(T),
    /// Completed, but the storage still has to see it (applied at once by the actor).
    Deferred(Finish<T>),
    /// Completes when the future resolves; then the finish step runs on the storage.
    Pending(IoFuture<T>),
}

impl<T: 'static> Io<T> {
    /// A result available now.
    pub fn ready(value: T) -> Self {
        Io(IoState::Ready(value))
    }

    /// A result a future produces.
    pub fn pending(fut: impl Future<Output = T> + 'static) -> Self {
        Io(IoState::Pending(Box::pin(async move {
            let v = fut.await;
            Box::new(move |_: &mut dyn Any| v) as Finish<T>
        })))
    }

    #[cfg(any(feature = "s3", feature = "hfbucket"))]
    /// A future's output `A`, finished into `T` by `then` on the storage `S` that made it.
    pub(crate) fn pending_then<S: Any, A: 'static>(
        fut: impl Future<Output = A> + 'static,
        then: impl FnOnce(&mut S, A) -> T + 'static,
    ) -> Self {
        Io::pending(fut).then(then)
    }

    /// Transforms the result (no access to the storage).
    pub fn map<U: 'static>(self, f: impl FnOnce(T) -> U + 'static) -> Io<U> {
        Io(match self.0 {
            IoState::Ready(v) => IoState::Ready(f(v)),
            IoState::Deferred(g) => IoState::Deferred(Box::new(move |s| f(g(s)))),
            IoState::Pending(fut) => IoState::Pending(Box::pin(async move {
                let g = fut.await;
                Box::new(move |s: &mut dyn Any| f(g(s))) as Finish<U>
            })),
        })
    }

    /// Finishes the result on the storage `S` that made it, when it completes (for a ready
    /// result: as soon as the actor has it).
    pub fn then<S: Any, U: 'static>(self, f: impl FnOnce(&mut S, T) -> U + 'static) -> Io<U> {
        let apply = move |s: &mut dyn Any, v: T| {
            let s = s
                .downcast_mut::<S>()
                .expect("an Io is resolved against the storage that made it");
            f(s, v)
        };
        Io(match self.0 {
            IoState::Ready(v) => IoState::Deferred(Box::new(move |s| apply(s, v))),
            IoState::Deferred(g) => IoState::Deferred(Box::new(move |s| {
                let v = g(s);
                apply(s, v)
            })),
            IoState::Pending(fut) => IoState::Pending(Box::pin(async move {
                let g = fut.await;
                Box::new(move |s: &mut dyn Any| {
                    let v = g(s);
                    apply(s, v)
                }) as Finish<U>
            })),
        })
    }

    /// An inner storage's `Io` as one of its wrapper `O`: `project` finds the inner storage
    /// in the wrapper when the result is finished.
    pub fn within<O: Any>(self, project: fn(&mut O) -> &mut dyn Any) -> Io<T> {
        let lift = move |g: Finish<T>| -> Finish<T> {
            Box::new(move |s: &mut dyn Any| {
                let o = s
                    .downcast_mut::<O>()
                    .expect("an Io is resolved against the storage that made it");
                g(project(o))
            })
        };
        Io(match self.0 {
            IoState::Ready(v) => IoState::Ready(v),
            IoState::Deferred(g) => IoState::Deferred(lift(g)),
            IoState::Pending(fut) => IoState::Pending(Box::pin(async move { lift(fut.await) })),
        })
    }

    /// True when the result is available without waiting.
    pub fn is_ready(&self) -> bool {
        !matches!(self.0, IoState::Pending(_))
    }

    /// Resolves on `storage` (the one that made it): for tests and wrappers that drive a
    /// storage directly.
    pub async fn resolve(self, storage: &mut dyn Any) -> T {
        match self.0 {
            IoState::Ready(v) => v,
            IoState::Deferred(g) => g(storage),
            IoState::Pending(fut) => (fut.await)(storage),
        }
    }
}

/// What kind of failure a [`BackendError`] is: what a caller (or a circuit breaker, or a
/// metrics label) can act on without parsing the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The object (or the bucket) does not exist where it had to.
    NotFound,
    /// Credentials were refused or lack a permission.
    Permission,
    /// The store asked us to slow down (429, 503 SlowDown); counts toward a breaker once the
    /// retries are spent.
    Throttled,
    /// The store answered with a server error (5xx other than 503) after the retries; counts
    /// toward a breaker.
    Server,
    /// The bucket itself is missing (S3 `NoSuchBucket`, a deleted or misnamed bucket): no
    /// request can succeed, so a breaker opens at once.
    BucketMissing,
    /// The store could not be reached (refused, reset, DNS, TLS); counts toward a breaker.
    Connection,
    /// An attempt ran out of time.
    Timeout,
    /// The store answered with bytes or metadata that do not add up (checksum, length).
    Corrupt,
    /// The backend refuses requests for now (an open circuit breaker), before any request.
    Unavailable,
    /// The request itself was not acceptable to this backend (bad key, bad size, bad config).
    Invalid,
    /// A worker job panicked or its pool went away.
    Worker,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// The kind's name, as in metrics labels and JSON (`not_found`, `connection`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::Permission => "permission",
            ErrorKind::Throttled => "throttled",
            ErrorKind::Server => "server",
            ErrorKind::BucketMissing => "bucket_missing",
            ErrorKind::Connection => "connection",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Worker => "worker",
            ErrorKind::Other => "other",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a storage operation failed: a kind, the operation, a message without secrets, and the
/// underlying error when there is one. Cloneable (the source is shared) so it can travel in
/// replies to several waiters.
#[derive(Clone)]
#[non_exhaustive]
pub struct BackendError {
    kind: ErrorKind,
    op: &'static str,
    message: String,
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

impl BackendError {
    /// An error of `kind` in operation `op` (`put`, `get`, `head`, `delete`, `list`, ...).
    pub fn new(kind: ErrorKind, op: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind,
            op,
            message: message.into(),
            source: None,
        }
    }

    /// Keeps `source` as the underlying error (shown by `Error::source`, not in the message).
    pub(crate) fn with_source(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        self.source = Some(std::sync::Arc::new(source));
        self
    }

    /// An [`ErrorKind::Other`] error from any displayable error.
    pub(crate) fn io(op: &'static str, err: impl std::fmt::Display) -> Self {
        Self::new(ErrorKind::Other, op, err.to_string())
    }

    /// A local I/O error, kept as the source; its kind follows the `io::ErrorKind`.
    pub(crate) fn from_io(op: &'static str, err: std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let kind = match err.kind() {
            K::NotFound => ErrorKind::NotFound,
            K::PermissionDenied => ErrorKind::Permission,
            K::TimedOut => ErrorKind::Timeout,
            K::ConnectionRefused | K::ConnectionReset | K::ConnectionAborted | K::NotConnected => {
                ErrorKind::Connection
            }
            K::InvalidData | K::UnexpectedEof => ErrorKind::Corrupt,
            _ => ErrorKind::Other,
        };
        Self::new(kind, op, err.to_string()).with_source(err)
    }

    /// The store could not be reached.
    pub(crate) fn connection(op: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Connection, op, message)
    }

    /// Refused before any request was sent (e.g. by an open breaker).
    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, "request", message)
    }

    /// The request was not acceptable.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, "request", message)
    }

    /// A worker job died.
    pub(crate) fn worker(op: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Worker, op, message)
    }

    #[cfg(any(feature = "s3", feature = "hfbucket"))]
    /// Whether this failure says something about the store's health, for a circuit breaker:
    /// the store could not be reached, did not answer in time, or kept answering 5xx or
    /// throttling after the retries (see [`crate::breaker`]).
    pub(crate) fn counts_against_store(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Connection
                | ErrorKind::Timeout
                | ErrorKind::Throttled
                | ErrorKind::Server
                | ErrorKind::BucketMissing
        )
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The operation.
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// The message (no secrets, no source).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error for operation `op`, with `context` before its message.
    pub fn context(mut self, context: impl std::fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (op, m) = (self.op, &self.message);
        match self.kind {
            ErrorKind::Connection => write!(f, "{op} could not reach the store: {m}"),
            ErrorKind::Unavailable => write!(f, "unavailable: {m}"),
            ErrorKind::Invalid => write!(f, "invalid request: {m}"),
            ErrorKind::Worker => write!(f, "{op} worker failed: {m}"),
            ErrorKind::Other => write!(f, "{op} failed: {m}"),
            kind => write!(f, "{op} failed ({kind}): {m}"),
        }
    }
}

impl std::fmt::Debug for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendError")
            .field("kind", &self.kind)
            .field("op", &self.op)
            .field("message", &self.message)
            .field("source", &self.source.as_ref().map(|s| s.to_string()))
            .finish()
    }
}

impl PartialEq for BackendError {
    /// Equal kind, operation and message (sources are not compared).
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.op == other.op && self.message == other.message
    }
}

impl Eq for BackendError {}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(any(feature = "s3", feature = "hfbucket"))]
/// The kind of failure an HTTP status stands for (S3 and the Hub alike).
pub(crate) fn status_kind(status: u16) -> ErrorKind {
    match status {
        401 | 403 => ErrorKind::Permission,
        404 => ErrorKind::NotFound,
        408 => ErrorKind::Timeout,
        429 | 503 => ErrorKind::Throttled,
        400..=499 => ErrorKind::Invalid,
        500..=599 => ErrorKind::Server,
        _ => ErrorKind::Other,
    }
}

/// Result of reading one object into its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetched {
    /// The buffer holds the object.
    Hit,
    /// There is no such object.
    Absent,
    /// The object exists with another size; the buffer was not written.
    SizeMismatch {
        /// The object's size.
        actual: u64,
    },
    /// The object has the right size but its bytes do not match the checksum stored with it:
    /// a miss (the buffer holds wrong bytes and must not be read).
    Corrupt {
        /// The CRC32C stored with the object.
        expected: u32,
        /// The CRC32C of the bytes read.
        actual: u32,
    },
}

/// What a [`Storage::verify`] found for one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Its bytes match the checksum stored with it.
    Intact,
    /// Its bytes do not match: why.
    Corrupt(String),
    /// It carries no checksum (written by LMCache, or with checksums off), or the store has
    /// no way to check it: read, but not checked.
    Unverifiable,
    /// There is no such object (any more).
    Absent,
}

/// Result of removing one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    /// It existed and is gone.
    Yes,
    /// It did not exist.
    Absent,
    /// The request succeeded but the store does not say whether it existed (S3 `DeleteObject`).
    Unknown,
}

/// A key found when rebuilding the index at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The key.
    pub key: ObjectKey,
    /// Its size in bytes.
    pub size: u64,
    /// Last modification, seconds since the epoch (orders recency).
    pub modified: u64,
}

/// A concrete object store driven by a [`BackendActor`](crate::BackendActor).
///
/// Results are positional: one per input item, in order. A storage that keeps state learns
/// how its operations ended through [`Io::then`] (see the module docs).
pub trait Storage: Any + Send + Unpin {
    /// The adapter type name (`memory`, `fs`, `s3`, `hfbucket`).
    fn kind(&self) -> &'static str;

    /// Writes objects (never empty; the actor rejects empty objects).
    fn put(&mut self, items: Vec<(ObjectKey, Bytes)>) -> Io<Vec<Result<(), BackendError>>>;

    /// Probes sizes: `Some(size)` when present, `None` when absent. `known[i]` is the size the
    /// actor's ledger holds for `keys[i]` (`None`: not in the ledger); a storage whose ledger is
    /// authoritative (a single writer, or a size cache that cannot go stale) may answer from it
    /// without a request; see `answer_known`. The keys are borrowed: a storage clones only
    /// those it must probe.
    fn head(
        &mut self,
        keys: &[ObjectKey],
        known: &[Option<u64>],
    ) -> Io<Vec<Result<Option<u64>, BackendError>>>;

    /// Reads objects into the buffers (each buffer's length is the expected size); a size
    /// mismatch must leave the buffer unwritten. The buffers are lent: drop each when done
    /// with it (they find their way back to the actor, see [`crate::buffer`]).
    fn get(&mut self, items: Vec<(ObjectKey, LoadBuf)>) -> Io<Vec<Result<Fetched, BackendError>>>;

    /// Reads every object whole and checks it against the checksum stored with it (for
    /// `kvtier scrub`); heavy work belongs on the storage's worker pool. The default: every
    /// object is [`Verdict::Unverifiable`] (the store has nothing to check against).
    fn verify(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Verdict, BackendError>>> {
        Io::ready(keys.iter().map(|_| Ok(Verdict::Unverifiable)).collect())
    }

    /// Removes objects.
    fn remove(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Removed, BackendError>>>;

    /// Lists keys in object-name order after `cursor`, at most `limit`, optionally of one model.
    fn list(
        &mut self,
        model: Option<String>,
        cursor: Option<String>,
        limit: usize,
    ) -> Io<Result<KeyPage, BackendError>>;

    /// Objects already in the store, oldest first, to rebuild usage and recency at start-up;
    /// `None` when recovery is off.
    fn recover(&mut self) -> Option<Io<Result<Vec<Recovered>, BackendError>>> {
        None
    }

    /// False when the store cannot serve requests now.
    fn is_healthy(&self) -> bool {
        self.unhealthy().is_none()
    }

    /// Why the store cannot serve requests now (an open circuit breaker, a missing bucket,
    /// refused credentials, an unreachable endpoint), or `None` when it can.
    fn unhealthy(&self) -> Option<String> {
        None
    }

    /// A health check, run when status is asked for: a cheap request that tells whether the
    /// store can serve (the bucket exists, the credentials are accepted, the endpoint answers),
    /// whose outcome the storage keeps (through [`Io::then`]) for [`Storage::unhealthy`].
    /// Bounded in time. The default has nothing to check.
    fn probe(&mut self) -> Io<()> {
        Io::ready(())
    }

    /// Backend-specific status details (no secrets).
    fn details(&self) -> serde_json::Value;

    /// The identity of the bucket this storage writes to, for fleet mode: a tier with a
    /// `[fleet]` joins the fleet's index for a host's storage that returns one, and nodes whose
    /// storages return the same identity share its capacity, locks and recency (see
    /// docs/fleet.md). The default, `None`: the storage's objects are the process's own, and
    /// it never joins (as the `memory` adapter).
    fn fleet_identity(&self) -> Option<String> {
        None
    }

    /// Releases resources (temporary files, connections) when the actor stops.
    fn close(&mut self) {}

    /// Receives the adapter's metrics (once, before any I/O), for what only the storage sees:
    /// retries by cause, breaker state, Hub requests by route, metadata cache results.
    fn attach_metrics(&mut self, metrics: crate::metrics::AdapterMetrics) {
        let _ = metrics;
    }
}

/// Answers the keys the ledger knows from their known sizes, and the others with `probe`
/// (called only when some key is unknown); results keep input order.
pub(crate) fn answer_known(
    keys: &[ObjectKey],
    known: &[Option<u64>],
    probe: impl FnOnce(Vec<ObjectKey>) -> Io<Vec<Result<Option<u64>, BackendError>>>,
) -> Io<Vec<Result<Option<u64>, BackendError>>> {
    if known.iter().all(|s| s.is_some_and(|s| s > 0)) {
        // The common case for a warm tier: one pass, no probe.
        return Io::ready(known.iter().map(|s| Ok(*s)).collect());
    }
    let mut out: Vec<Option<Result<Option<u64>, BackendError>>> = Vec::with_capacity(keys.len());
    let mut unknown = Vec::new();
    let mut at = Vec::new();
    for (i, (key, known)) in keys.iter().zip(known).enumerate() {
        match known {
            Some(size) if *size > 0 => out.push(Some(Ok(Some(*size)))),
            _ => {
                out.push(None);
                unknown.push(key.clone());
                at.push(i);
            }
        }
    }
    if unknown.is_empty() {
        return Io::ready(out.into_iter().map(|r| r.unwrap_or(Ok(None))).collect());
    }
    probe(unknown).map(move |probed| {
        for (i, r) in at.into_iter().zip(probed) {
            out[i] = Some(r);
        }
        out.into_iter().map(|r| r.unwrap_or(Ok(None))).collect()
    })
}
