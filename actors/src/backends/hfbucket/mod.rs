//! The `hfbucket` backend: objects in a Hugging Face Storage Bucket.
//!
//! Object paths are the bucket prefix, one `/`, and the percent-encoded object name. Stores
//! upload through Xet and register the files with batch `addFile` lines; after any failure
//! they ask `paths-info` which objects landed and count exactly those. Lookups go through a TTL
//! metadata cache (negative results cached; TTL 0 disables it) and batched `paths-info` for the
//! rest. Loads read each object out of the Xet CAS by its `xetHash` straight into the
//! caller's buffer, with kvtier's own reconstruction reader (or, with `xet_load_path =
//! "hf-xet"`, one long-lived Xet download-stream group); the hashes come from the store, a
//! lookup, or one `paths-info` per load batch. That path was measured faster than
//! `resolve` (see docs/benchmarks.md); `resolve` (302 → bytes into the buffer) remains the fallback
//! when no Xet reader can be opened or a Xet read fails. All blocking Hub calls and Xet
//! transfers run on the adapter's worker pool.

mod cas;
mod config;
mod hub;
#[cfg(feature = "internals")]
pub mod probe;
mod storage;
mod upload;
mod xet;

pub use config::{
    BucketHandle, HandleError, HfBucketConfig, XetChunking, XetCompression, XetLoadPath,
    XetStorePath,
};
pub use storage::HfStorage;
