//! The seam between the generic [`BackendActor`](crate::BackendActor) and a concrete store.
//!
//! A [`Storage`] only moves bytes: it writes, probes, reads, removes and lists objects. Everything
//! with state that the semantics define (lock reference counts, the usage ledger, the set of keys
//! being deleted, events) lives in the backend actor, written once for every backend. A storage
//! is owned by its actor and called from its handlers with `&mut self`; work that takes time is
//! returned as [`Io::Pending`] and finished by the actor when it resolves.

use std::future::Future;
use std::pin::Pin;

use bytes::{Bytes, BytesMut};

use crate::key::ObjectKey;
use crate::messages::KeyPage;

/// A boxed future a storage hands back to its actor (it runs on the actor's arbiter).
pub type IoFuture<T> = Pin<Box<dyn Future<Output = T>>>;

/// The result of a storage operation: available now, or later.
pub enum Io<T> {
    /// Completed synchronously (in-memory work).
    Ready(T),
    /// Completes when the future resolves.
    Pending(IoFuture<T>),
}

impl<T: 'static> Io<T> {
    /// Wraps a future.
    pub fn pending(fut: impl Future<Output = T> + 'static) -> Self {
        Io::Pending(Box::pin(fut))
    }
}

/// Why a storage operation failed. Cloneable so it can travel in replies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// An I/O or transport error.
    #[error("{op} failed: {message}")]
    Io {
        /// The operation (`put`, `get`, `head`, `delete`, `list`, ...).
        op: &'static str,
        /// The underlying error, without secrets.
        message: String,
    },
    /// The store could not be reached (refused, reset, DNS, timeout); counts toward a circuit
    /// breaker.
    #[error("{op} could not reach the store: {message}")]
    Connection {
        /// The operation.
        op: &'static str,
        /// The underlying error.
        message: String,
    },
    /// The backend refuses requests for now (e.g. an open circuit breaker).
    #[error("unavailable: {reason}")]
    Unavailable {
        /// Why.
        reason: String,
    },
    /// The request itself was not acceptable to this backend.
    #[error("invalid request: {reason}")]
    Invalid {
        /// Why.
        reason: String,
    },
    /// The worker running the operation panicked or went away.
    #[error("{op} worker failed: {reason}")]
    Worker {
        /// The operation.
        op: &'static str,
        /// What happened.
        reason: String,
    },
}

impl BackendError {
    /// An [`BackendError::Io`] from any displayable error.
    pub fn io(op: &'static str, err: impl std::fmt::Display) -> Self {
        BackendError::Io {
            op,
            message: err.to_string(),
        }
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

/// What the actor saw complete, for storages that keep caches (e.g. a TTL metadata cache).
#[derive(Debug)]
pub enum Observed<'a> {
    /// These keys were written with these sizes.
    Stored(&'a [ObjectKey], &'a [u64]),
    /// A probe found these sizes (`None`: absent).
    Probed(&'a [ObjectKey], &'a [Option<u64>]),
    /// These keys were removed.
    Removed(&'a [ObjectKey]),
    /// An operation finished with `ok` successful items, `connection_failures` items that
    /// could not reach the store, and `refused` items that were never sent (for circuit
    /// breakers).
    Health {
        /// Items that reached the store (a "not found" counts).
        ok: usize,
        /// Items that failed with [`BackendError::Connection`].
        connection_failures: usize,
        /// Items that failed with [`BackendError::Unavailable`]: refused before any request
        /// was sent (e.g. by an open breaker), so they say nothing about the store.
        refused: usize,
    },
}

/// A concrete object store driven by a [`BackendActor`](crate::BackendActor).
///
/// Results are positional: one per input item, in order.
pub trait Storage: Unpin + 'static {
    /// The adapter type name (`memory`, `fs`, `s3`, `hfbucket`).
    fn kind(&self) -> &'static str;

    /// Writes objects (never empty; the actor rejects empty objects).
    fn put(&mut self, items: Vec<(ObjectKey, Bytes)>) -> Io<Vec<Result<(), BackendError>>>;

    /// Probes sizes: `Some(size)` when present, `None` when absent.
    fn head(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Option<u64>, BackendError>>>;

    /// Reads objects into the buffers (each buffer's length is the expected size); a size
    /// mismatch must leave the buffer unwritten. Buffers are returned in order.
    fn get(
        &mut self,
        items: Vec<(ObjectKey, BytesMut)>,
    ) -> Io<Vec<(BytesMut, Result<Fetched, BackendError>)>>;

    /// Removes objects.
    fn remove(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Removed, BackendError>>>;

    /// Lists keys in object-name order after `cursor`, at most `limit`, optionally of one model.
    fn list(
        &mut self,
        model: Option<String>,
        cursor: Option<String>,
        limit: usize,
    ) -> Io<Result<KeyPage, BackendError>>;

    /// When the actor's ledger is authoritative for lookups (the store has a single writer or a
    /// size cache with no expiry), keys in the ledger are hits without a probe. Default: true.
    fn lookups_trust_ledger(&self) -> bool {
        true
    }

    /// Objects already in the store, oldest first, to rebuild usage and recency at start-up;
    /// `None` when recovery is off.
    fn recover(&mut self) -> Option<Io<Result<Vec<Recovered>, BackendError>>> {
        None
    }

    /// Told what completed, so caches can follow. Default: nothing.
    fn observe(&mut self, _what: Observed<'_>) {}

    /// False when the store cannot serve requests now.
    fn is_healthy(&self) -> bool {
        true
    }

    /// Backend-specific status details (no secrets).
    fn details(&self) -> serde_json::Value;

    /// Releases resources (temporary files, connections) when the actor stops.
    fn close(&mut self) {}
}
