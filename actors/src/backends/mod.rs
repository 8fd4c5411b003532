//! The concrete stores, one folder each: `memory` (in-process) and `fs` (a local directory).
//!
//! Each implements [`Storage`](crate::Storage) and is driven by a
//! [`BackendActor`](crate::BackendActor); its `config.rs` holds its specific fields.

pub mod fs;
pub mod memory;
