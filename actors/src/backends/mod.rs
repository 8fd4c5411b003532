//! The concrete stores, one folder each: `memory` (in-process), `fs` (a local directory), `s3`
//! (S3-compatible object stores) and `hfbucket` (Hugging Face Storage Buckets), plus
//! `fault_inject`, which wraps any of them and injects faults.
//!
//! Each implements [`Storage`](crate::Storage) and is driven by a
//! [`BackendActor`](crate::BackendActor); its `config.rs` holds its specific fields.

pub mod fault_inject;
pub mod fs;
pub mod hfbucket;
pub mod memory;
pub mod s3;
