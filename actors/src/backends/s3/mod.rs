//! The `s3` backend: objects in an S3-compatible bucket through the official `aws-sdk-s3`.
//!
//! Objects are the raw chunk bytes under the literal object name (after an optional key
//! prefix), so a bucket written by LMCache MP is readable here and the reverse. Store is one PUT
//! per key; lookup uses the actor's ledger as its size cache, then HEAD (200 with a length > 0
//! is a hit, 404 a miss); load is a GET streamed straight into the caller's buffer, size
//! checked; delete is `DeleteObjects` in batches of up to 1000; listing is `ListObjectsV2` with
//! prefix `<model>@`.
//!
//! Requests run on a small multi-threaded tokio runtime owned by the storage, never on the
//! backend actor's arbiter, bounded to `s3_num_io_threads` in flight. The half-open circuit
//! breaker (`crate::breaker`, shared with `hfbucket`) opens after 3 consecutive failures
//! that say the store is unwell (no connection, timeouts, 5xx or `SlowDown` after the retries)
//! and at once on `NoSuchBucket`: requests then fail at once without network traffic; after
//! `circuit_breaker_cooldown_secs` one request is let through as a probe, and an answer closes
//! the breaker again. While the breaker is not closed, lookups do not trust the size cache:
//! every key is probed, so lookups are misses at once (or the half-open probe) instead of
//! locking keys whose loads cannot succeed.
//!
//! A missing bucket is never a missing key: a GET 404 or any other answer whose code is
//! `NoSuchBucket` is an [`ErrorKind::BucketMissing`](crate::storage::ErrorKind::BucketMissing) error naming the bucket. A HEAD 404 has no
//! body, so it is a miss only when a request found the bucket within `s3_bucket_check_secs`;
//! otherwise one `HeadBucket` confirms the bucket first.
//!
//! What is shared between the storage and its request futures, exactly: an `Arc` of immutable
//! settings and the SDK client, a semaphore bounding requests in flight, one atomic timestamp
//! (when the bucket was last seen, `bucket.rs`), and on the direct path the signer each request
//! holds plus a flume channel on which a request whose credentials were refused hands fresh
//! ones back to the storage (`credentials.rs`). The breaker is the storage's alone. No lock.
//!
//! The files: `config.rs` (settings and their defaults), `client.rs` (the SDK client, its
//! HTTP connector and runtime), `http.rs` (the hyper connector), `plane.rs` (the data plane
//! trait: one per batch, direct or SDK), `direct.rs` (the direct plane), `sdk.rs` (the SDK
//! plane, listing, deletes), `credentials.rs` (the direct plane's credentials and their
//! refresh), `bucket.rs` (what a HEAD 404 means), `storage.rs` ([`S3Storage`]); this file
//! only wires them.

mod bucket;
mod client;
mod config;
mod credentials;
mod direct;
mod http;
mod plane;
mod sdk;
mod storage;

pub use config::{
    AddressingStyle, ChecksumMode, DataPath, PayloadSigning, ResolvedEndpoint, S3Config,
};
pub use storage::S3Storage;
