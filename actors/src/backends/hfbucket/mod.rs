//! The `hfbucket` backend: objects in a Hugging Face Storage Bucket.
//!
//! Work in progress (issue #4): the configuration and handle parsing are here; the Hub client,
//! Xet uploads and the storage follow.

mod config;
pub mod hub;

pub use config::{BucketHandle, HfBucketConfig, DEFAULT_HF_ENDPOINT};
