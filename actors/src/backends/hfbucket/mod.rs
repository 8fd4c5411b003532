//! The `hfbucket` backend: objects in a Hugging Face Storage Bucket.
//!
//! Object paths are the bucket prefix, one `/`, and the percent-encoded object name. Stores
//! upload through Xet and register the files with batch `addFile` lines; after any failure
//! they ask `paths-info` which objects landed and count exactly those. Lookups go through a TTL
//! metadata cache (negative results cached; TTL 0 disables it) and batched `paths-info` for the
//! rest. Loads follow `resolve` and stream the bytes straight into the caller's buffer. All
//! blocking Hub calls run on the adapter's worker pool.

mod config;
pub mod hub;
mod storage;
pub mod xet;

pub use config::{BucketHandle, HandleError, HfBucketConfig, DEFAULT_HF_ENDPOINT};
pub use storage::HfStorage;
