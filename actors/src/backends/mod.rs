//! The concrete stores, one folder each: `memory` (in-process), `fs` (a local directory), `s3`
//! (S3-compatible object stores) and `hfbucket` (Hugging Face Storage Buckets), plus
//! `fault_inject`, which wraps any of them and injects faults.
//!
//! Each implements [`Storage`](crate::Storage) and is driven by a
//! [`BackendActor`](crate::BackendActor); its `config.rs` holds its specific fields.
//!
//! `s3` and `hfbucket` exist only with the crate features of the same names (both default);
//! `memory`, `fs` and `fault_inject` are always built.

pub mod fault_inject;
pub mod fs;
#[cfg(feature = "hfbucket")]
pub mod hfbucket;
pub mod memory;
#[cfg(feature = "s3")]
pub mod s3;
