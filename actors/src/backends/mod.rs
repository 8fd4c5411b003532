//! The concrete stores, one folder each: `memory` (in-process), `fs` (a local directory) and
//! `s3` (S3-compatible object stores).
//!
//! Each implements [`Storage`](crate::Storage) and is driven by a
//! [`BackendActor`](crate::BackendActor); its `config.rs` holds its specific fields.

pub mod fs;
pub mod hfbucket;
pub mod memory;
pub mod s3;
