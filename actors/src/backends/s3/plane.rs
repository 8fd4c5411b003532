//! The data plane: how one request reaches the store. Two implement it: [`Direct`] (S3's REST
//! API on our hyper client, signed by us) and [`Sdk`] (aws-sdk-s3). The storage chooses one per
//! batch, in one place (`S3Storage::plane`), and request code calls only this trait, so no
//! request matches on the path it takes.
//!
//! Listing and `DeleteObjects` always go through the SDK (they are not on the hot path).

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

use super::direct::Direct;
use super::sdk::Sdk;
use crate::storage::{BackendError, Fetched};

/// A data request in flight (boxed: the plane is a trait object).
pub(super) type PlaneFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, BackendError>> + Send + 'a>>;

/// One S3 data plane (see the module docs). Object names are full (key prefix included).
pub(super) trait DataPlane: Send + Sync {
    /// PUTs `data` as `object`.
    fn put<'a>(&'a self, object: &'a str, data: Bytes) -> PlaneFuture<'a, ()>;
    /// The size of `object` when it exists and is not empty; `None` on a 404 (which may also
    /// mean a missing bucket: see [`super::bucket`]).
    fn head<'a>(&'a self, object: &'a str) -> PlaneFuture<'a, Option<u64>>;
    /// Reads `object` into `buf`: a hit only when its size is `buf.len()`, never a partial copy.
    fn get<'a>(&'a self, object: &'a str, buf: &'a mut [u8]) -> PlaneFuture<'a, Fetched>;
    /// Whether the bucket exists (`HeadBucket`: 404 no, 403 yes).
    fn bucket_exists(&self) -> PlaneFuture<'_, bool>;
    /// The health check's GET of `object`: `Ok` when the store answers that it serves
    /// (`NoSuchKey` included).
    fn probe<'a>(&'a self, object: &'a str) -> PlaneFuture<'a, ()>;
}

impl DataPlane for Direct {
    fn put<'a>(&'a self, object: &'a str, data: Bytes) -> PlaneFuture<'a, ()> {
        Box::pin(Direct::put(self, object, data))
    }
    fn head<'a>(&'a self, object: &'a str) -> PlaneFuture<'a, Option<u64>> {
        Box::pin(Direct::head(self, object))
    }
    fn get<'a>(&'a self, object: &'a str, buf: &'a mut [u8]) -> PlaneFuture<'a, Fetched> {
        Box::pin(Direct::get(self, object, buf))
    }
    fn bucket_exists(&self) -> PlaneFuture<'_, bool> {
        Box::pin(Direct::bucket_exists(self))
    }
    fn probe<'a>(&'a self, object: &'a str) -> PlaneFuture<'a, ()> {
        Box::pin(async move { Direct::get(self, object, &mut []).await.map(|_| ()) })
    }
}

impl DataPlane for Sdk {
    fn put<'a>(&'a self, object: &'a str, data: Bytes) -> PlaneFuture<'a, ()> {
        Box::pin(Sdk::put(self, object, data))
    }
    fn head<'a>(&'a self, object: &'a str) -> PlaneFuture<'a, Option<u64>> {
        Box::pin(Sdk::head(self, object))
    }
    fn get<'a>(&'a self, object: &'a str, buf: &'a mut [u8]) -> PlaneFuture<'a, Fetched> {
        Box::pin(Sdk::get(self, object, buf))
    }
    fn bucket_exists(&self) -> PlaneFuture<'_, bool> {
        Box::pin(Sdk::bucket_exists(self))
    }
    fn probe<'a>(&'a self, object: &'a str) -> PlaneFuture<'a, ()> {
        Box::pin(Sdk::probe(self, object))
    }
}
