//! kvtier: an embeddable, actor-based runtime for the L2 tier of an LLM KV cache.
//!
//! A serving process hands kvtier fixed-size KV chunks; kvtier stores them as objects in remote
//! or local stores, finds and locks them again, loads them into caller-owned buffers, accounts
//! for capacity and evicts least-recently-used objects past a watermark. Objects use LMCache MP's
//! names and raw bytes, so either can read what the other wrote.
//!
//! * [`config`]: the layered, strict configuration (TOML, environment, LMCache JSON).
//! * [`tier`]: [`Tier::start`] assembles the actors from a configuration.
//! * [`logging`]: a log filter that keeps dependencies from printing credentials.
//! * [`kvtier_actors`] (re-exported as [`actors`]): keys, messages, actors and backends.
//!
//! Cargo features, both on by default: `s3` (the `s3` adapter) and `hfbucket` (the `hfbucket`
//! adapter); each turns on the feature of the same name in `kvtier-actors`. Without them
//! (`--no-default-features`) the runtime has the `memory`, `fs` and `fault_inject` adapters, and
//! a configuration naming `s3` or `hfbucket` is a [`ConfigError`] that names the missing feature.
//! The `kvtier` command line and its bench are the crate `kvtier-cli` (`cli/`), not library API:
//! a host that embeds this crate compiles none of their dependencies.
//!
//! ```no_run
//! use bytes::{Bytes, BytesMut};
//! use kvtier::{AdapterConfig, ObjectKey, Tier, TierConfig};
//!
//! #[actix::main]
//! async fn main() {
//!     let config = TierConfig::with_adapters(vec![AdapterConfig::memory()]);
//!     let tier = Tier::start(&config).await.unwrap();
//!     let key = ObjectKey::new("llama", 0, vec![1u8, 2, 3]).unwrap();
//!     tier.store(vec![key.clone()], vec![Bytes::from(vec![7u8; 4096])]).await.unwrap();
//!     assert!(tier.lookup_and_lock(vec![key.clone()]).await.unwrap().all());
//!     let report = tier.load(vec![key.clone()], vec![BytesMut::zeroed(4096)]).await;
//!     assert!(report.hits.all());
//!     tier.unlock(vec![key]);
//!     tier.close().await;
//! }
//! ```

#![warn(missing_docs)]

/// The README's Rust examples, compiled by `cargo test --doc` so they stay true to the API
/// (its other code blocks are marked `text`, `sh` or `toml`).
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// `docs/architecture.md`'s Rust examples (the host API), compiled by `cargo test --doc` like
/// the README's. Every file in `docs/` with a Rust block gets such an item; the others mark
/// their blocks `text`, `sh`, `toml`, `json`, `python` or `yaml`.
#[doc = include_str!("../docs/architecture.md")]
#[cfg(doctest)]
pub struct ArchitectureDoctests;

pub mod config;
pub mod logging;
pub mod tier;

pub use config::{
    AdapterConfig, AdapterSpec, ConfigError, ConfigSources, FaultInjectSpec, TierConfig,
};
pub use kvtier_actors as actors;
pub use kvtier_actors::backends::fs::FsConfig;
#[cfg(feature = "hfbucket")]
pub use kvtier_actors::backends::hfbucket::HfBucketConfig;
#[cfg(feature = "s3")]
pub use kvtier_actors::backends::s3::S3Config;
pub use kvtier_actors::config::{
    CommonConfig, EvictionConfig, EvictionPolicy, FleetConfig, Quotas,
};
pub use kvtier_actors::{
    BackendError, Bitmap, Delete, ErrorKind, FleetStatus, GetStatus, GetUsage, HostRegion, KeyPage,
    ListKeys, Load, LoadBuf, LoadReport, LoadTarget, LookupAndLock, MissReason, NameFormat,
    ObjectKey, Storage, Store, StoreReport, StoreSource, TierEvent, Unlock, UsageEvent, Verify,
    VerifyReport,
};
pub use tier::{StartError, Tier, TierBuilder, TierError};
