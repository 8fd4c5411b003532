//! kvtier's actors: keys, messages, the controller, the backend actors, eviction, the worker
//! pool, and the backends.
//!
//! ```text
//!   host ──► Controller ──► BackendActor<MemoryStorage>   (own arbiter)
//!               │      ├──► BackendActor<FsStorage> ──► WorkerPool (blocking file I/O)
//!               │      └──► ...
//!               ▲                 │ UsageEvent
//!               └──── events ─────┴──► EvictionActor ──► Evict ──► BackendActor
//! ```
//!
//! All state lives inside actors; nothing here takes a lock.
//!
//! Features `s3` and `hfbucket` (both default) build `backends::s3` and `backends::hfbucket`
//! with their dependencies; `memory`, `fs` and `fault_inject` are always built. The fleet index
//! (`[fleet]`, many processes on one bucket) is always built.

#![warn(missing_docs)]
#![warn(unreachable_pub)]

mod backend;
pub mod backends;
#[cfg(any(feature = "s3", feature = "hfbucket"))]
mod breaker;
pub mod buffer;
pub mod config;
mod controller;
pub mod eviction;
mod fleet;
pub mod key;
pub mod messages;
pub mod metrics;
#[cfg(any(feature = "s3", feature = "hfbucket"))]
mod retry;
pub mod storage;
mod task_results;
mod worker_pool;

pub use backend::BackendActor;
pub use buffer::{HostRegion, LoadBuf, LoadTarget, StoreSource};
pub use controller::{
    AdapterHandle, Controller, Op, OpResult, StopController, Submit, SubscribeEvents, TakeResult,
    TaskId, TierEvent,
};
pub use eviction::{EvictionActor, EvictionStats, EvictionTarget};
pub use fleet::FleetStatus;
pub use key::{KeyError, NameFormat, ObjectKey};
pub use messages::*;
pub use storage::{BackendError, ErrorKind, Storage, Verdict};
