//! Runtime assembly: turns a [`TierConfig`] into running actors.
//!
//! [`Tier::start`] starts, each on an arbiter (thread) of its own, the eviction actor and one
//! backend actor per adapter; the controller starts on the caller's arbiter, so the host's
//! messages to it never cross a thread. Then it subscribes the controller and the eviction actor
//! to every backend's usage events. Hosts talk to [`Tier::controller`] with the messages of
//! [`kvtier_actors::messages`], or use the typed helpers here.
//!
//! Invariant: no arbiter outlives its tier. A start that fails stops and joins the arbiters it
//! had already started before it returns its [`StartError`] (a host that retries a start does
//! not gather threads); [`Tier::close`] returns once every arbiter's thread has exited, so the
//! backends' stop hooks (an `hfbucket` adapter removes its working directory) have run.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use kvtier_actors::backends::fault_inject::FaultInjectStorage;
use kvtier_actors::backends::fs::FsStorage;
#[cfg(feature = "hfbucket")]
use kvtier_actors::backends::hfbucket::HfStorage;
use kvtier_actors::backends::memory::MemoryStorage;
#[cfg(feature = "s3")]
use kvtier_actors::backends::s3::S3Storage;
use kvtier_actors::buffer::{lend, lend_sources};
use kvtier_actors::config::{CommonConfig, FieldError, Quotas};
use kvtier_actors::eviction::{
    AttachBackend, GetEvictionStats, GetLruOrder, GetQuotas, QuotaError, SetQuota, WhenIdle,
};
use kvtier_actors::metrics::{AdapterMetrics, Metrics};
use kvtier_actors::{
    AdapterHandle, AdapterIndex, BackendActor, BackendError, Bitmap, Controller, DeleteReport,
    EvictionActor, EvictionStats, EvictionTarget, KeyPage, ListKeys, LoadBuf, LoadReport,
    LoadTarget, MissReason, NameFormat, ObjectKey, Op, OpResult, StatusReport, StopController,
    Storage, StoreReport, StoreSource, Submit, SubscribeEvents, TakeResult, TaskId, TierEvent,
    UsageEvent, UsageReport, Verify, VerifyReport,
};
use prometheus_client::registry::Registry;

use crate::config::{AdapterSpec, TierConfig};

/// Why a request through the [`Tier`] facade failed as a whole (per-key outcomes are in the
/// reports: [`StoreReport`], [`LoadReport`], [`DeleteReport`]).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TierError {
    /// The runtime has been closed (or its controller stopped): nothing will answer.
    #[error("the kvtier runtime has stopped")]
    Stopped,
    /// The adapter refused or failed the request as a whole (listing, verifying).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A quota change was refused.
    #[error(transparent)]
    Quota(#[from] QuotaError),
}

impl From<MailboxError> for TierError {
    fn from(_: MailboxError) -> Self {
        TierError::Stopped
    }
}

/// Why the runtime did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// No adapter was configured.
    #[error("no adapters configured")]
    NoAdapters,
    /// The common fields of a host-provided storage's adapter are invalid.
    #[error("adapter #{index} ({kind}): {source}")]
    Invalid {
        /// The adapter's position.
        index: AdapterIndex,
        /// Its storage's type.
        kind: &'static str,
        /// The field and what is wrong with it.
        source: FieldError,
    },
    /// An adapter's store could not be opened.
    #[error("adapter #{index} ({kind}): {source}")]
    Adapter {
        /// The adapter's position.
        index: AdapterIndex,
        /// Its type.
        kind: &'static str,
        /// What failed.
        source: BackendError,
    },
}

/// A running kvtier runtime. Dropping it leaves the actors running: call [`Tier::close`],
/// which returns once every thread the tier started has exited.
pub struct Tier {
    controller: Addr<Controller>,
    evictor: Addr<EvictionActor>,
    arbiters: Vec<Arbiter>,
    /// The registry the metrics went to, when the tier made its own.
    registry: Option<Arc<Registry>>,
    /// Adapters whose `IsolatedLRU` quotas are their fleet's: quota messages go to their
    /// backend (and on to the index), not to the eviction actor.
    fleet_quotas: std::collections::HashMap<AdapterIndex, Addr<BackendActor>>,
}

impl Tier {
    /// Starts the actors for `config`. Must be called inside a running actix `System`.
    ///
    /// With `config.metrics` (the default) the actors record into a registry of the tier's
    /// own: read it with [`Tier::metrics_text`] or [`Tier::registry`]. [`Tier::builder`] also
    /// takes storages the host brings and the host's own metrics registry.
    pub async fn start(config: &TierConfig) -> Result<Tier, StartError> {
        Tier::builder(config.clone()).start().await
    }

    /// Starts the actors for `config`, recording metrics into the host's `registry` (under
    /// `kvtier_`), whatever `config.metrics` says: a host that passes a registry wants them.
    pub async fn start_with_registry(
        config: &TierConfig,
        registry: &mut Registry,
    ) -> Result<Tier, StartError> {
        Tier::builder(config.clone())
            .registry(registry)
            .start()
            .await
    }

    /// A builder: the adapters of `config`, then any storage the host adds with
    /// [`TierBuilder::storage`].
    pub fn builder(config: TierConfig) -> TierBuilder<'static> {
        TierBuilder {
            config,
            custom: Vec::new(),
            registry: None,
        }
    }

    async fn start_inner(
        config: &TierConfig,
        custom: Vec<(CommonConfig, Box<dyn Storage>)>,
        metrics: Option<Metrics>,
    ) -> Result<Tier, StartError> {
        // Every adapter: its common fields, and its storage still to open (configured) or
        // already there (the host's), in index order.
        let (commons, storages): (Vec<CommonConfig>, Vec<Box<dyn Storage>>) =
            custom.into_iter().unzip();
        let mut slots: Vec<(&CommonConfig, Slot<'_>)> = config
            .adapters
            .iter()
            .map(|a| (&a.common, Slot::Spec(&a.spec)))
            .collect();
        slots.extend(commons.iter().map(|c| (c, Slot::Ready)));
        // Fleet mode: each adapter with a shared bucket gets the fleet's index, which then
        // drives its eviction (the eviction actor does not).
        // A host's storage joins when it names its bucket (`Storage::fleet_identity`).
        let custom_ids: Vec<Option<String>> = storages.iter().map(|s| s.fleet_identity()).collect();
        let mut custom_ids = custom_ids.into_iter();
        let identities: Vec<Option<String>> = slots
            .iter()
            .map(|(_, slot)| match (&config.fleet, slot) {
                (Some(_), Slot::Spec(spec)) => spec.fleet_identity(),
                (Some(_), Slot::Ready) => custom_ids.next().flatten(),
                (None, _) => None,
            })
            .collect();
        let mut ready = storages.into_iter();
        if slots.is_empty() {
            return Err(StartError::NoAdapters);
        }
        let mut arbiters = Vec::new();
        let targets: Vec<EvictionTarget> = slots
            .iter()
            .enumerate()
            .filter(|(i, _)| identities[*i].is_none())
            .filter_map(|(i, (common, _))| {
                common.eviction.clone().map(|e| EvictionTarget {
                    adapter: i,
                    capacity_bytes: common.capacity_bytes(),
                    config: e,
                })
            })
            .collect();
        let targets_ids: Vec<AdapterIndex> = targets
            .iter()
            .filter(|t| t.evicts())
            .map(|t| t.adapter)
            .collect();
        let interval = Duration::from_millis(config.eviction_interval_ms);
        let evict_arbiter = Arbiter::new();
        let evictor = EvictionActor::start_in_arbiter(&evict_arbiter.handle(), move |_| {
            EvictionActor::new(targets, interval)
        });
        arbiters.push(evict_arbiter);

        let mut handles = Vec::new();
        let mut fleet_quotas = std::collections::HashMap::new();
        for (index, (common, slot)) in slots.iter().enumerate() {
            let capacity = common.capacity_bytes();
            let format = common.object_name_format;
            // Only adapters that can evict feed the eviction actor.
            let subscribers = if targets_ids.contains(&index) {
                vec![evictor.clone().recipient::<UsageEvent>()]
            } else {
                Vec::new()
            };
            let opened = match slot {
                Slot::Spec(spec) => open_storage(spec, format, capacity).await,
                Slot::Ready => Ok(ready.next().expect("one storage per Ready slot")),
            };
            let kind = match slot {
                Slot::Spec(spec) => spec.kind(),
                Slot::Ready => opened.as_ref().map_or("custom", |s| s.kind()),
            };
            let storage = match opened {
                Ok(storage) => storage,
                Err(source) => {
                    // The adapters opened so far, and the eviction actor, stop with the start.
                    stop_and_join(arbiters).await;
                    return Err(StartError::Adapter {
                        index,
                        kind,
                        source,
                    });
                }
            };
            let adapter_metrics = metrics.as_ref().map_or_else(AdapterMetrics::off, |m| {
                m.adapter(index, kind, common.name.as_deref())
            });
            let mut backend = BackendActor::new(index, storage, capacity, subscribers)
                .with_name_format(format)
                .with_metrics(adapter_metrics);
            if let (Some(fleet), Some(identity)) = (&config.fleet, &identities[index]) {
                let eviction = common
                    .eviction
                    .as_ref()
                    .filter(|e| e.eviction_policy != kvtier_actors::config::EvictionPolicy::Noop);
                backend = backend.with_fleet(fleet, identity.clone(), eviction, interval);
            }
            let (arbiter, addr) = backend.spawn();
            arbiters.push(arbiter);
            let isolated = common.eviction.as_ref().is_some_and(|e| {
                e.eviction_policy == kvtier_actors::config::EvictionPolicy::IsolatedLru
            });
            if config.fleet.is_some() && identities[index].is_some() && isolated {
                fleet_quotas.insert(index, addr.clone());
            }
            handles.push(AdapterHandle::new(index, kind, addr));
        }

        // The controller shares the caller's arbiter: host -> controller messages stay on one
        // thread, and only controller -> backend hops cross threads.
        let controller = Controller::new(handles.clone()).start();
        for h in handles.iter().filter(|h| targets_ids.contains(&h.index)) {
            evictor.do_send(AttachBackend {
                adapter: h.index,
                backend: h.addr.clone(),
            });
        }
        Ok(Tier {
            controller,
            evictor,
            arbiters,
            registry: None,
            fleet_quotas,
        })
    }

    /// The tier's own metrics registry (`None` with metrics off, or when the host passed its
    /// own to [`Tier::start_with_registry`]).
    pub fn registry(&self) -> Option<&Arc<Registry>> {
        self.registry.as_ref()
    }

    /// The tier's own metrics in the Prometheus text format (OpenMetrics), as `/metrics`
    /// serves them; `None` when [`Tier::registry`] is.
    pub fn metrics_text(&self) -> Option<String> {
        self.registry.as_deref().map(kvtier_actors::metrics::encode)
    }

    /// The controller, for sending messages directly.
    pub fn controller(&self) -> &Addr<Controller> {
        &self.controller
    }

    /// The eviction actor.
    pub fn evictor(&self) -> &Addr<EvictionActor> {
        &self.evictor
    }

    /// A new channel receiving usage events and completion notices of submitted operations
    /// (results are taken with [`Tier::take_result`]).
    pub fn events(&self) -> flume::Receiver<TierEvent> {
        let (tx, rx) = flume::unbounded();
        self.controller.do_send(SubscribeEvents(tx));
        rx
    }

    /// Starts an operation without waiting for it; its result waits for [`Tier::take_result`],
    /// and every event channel gets `TierEvent::Completed { task }` when it is there.
    pub async fn submit(&self, op: Op) -> Result<TaskId, TierError> {
        Ok(self.controller.send(Submit(op)).await?)
    }

    /// The result of a submitted operation, exactly once (`None` before it finished, after it
    /// was taken, or when it was dropped unclaimed).
    pub async fn take_result(&self, task: TaskId) -> Result<Option<OpResult>, TierError> {
        Ok(self.controller.send(TakeResult(task)).await?)
    }

    /// Stores objects on every adapter.
    pub async fn store(
        &self,
        keys: Vec<ObjectKey>,
        objects: Vec<Bytes>,
    ) -> Result<StoreReport, TierError> {
        Ok(self
            .controller
            .send(kvtier_actors::Store { keys, objects })
            .await?)
    }

    /// Stores objects read straight from host memory (any [`StoreSource`], e.g. a
    /// [`HostRegion`](kvtier_actors::HostRegion) of a pinned arena), without a copy. Returns
    /// once kvtier holds no reference to any source any more, so the host may reuse them.
    pub async fn store_from<S: StoreSource>(
        &self,
        keys: Vec<ObjectKey>,
        sources: Vec<S>,
    ) -> Result<StoreReport, TierError> {
        let (objects, released) = lend_sources(sources);
        let report = self
            .controller
            .send(kvtier_actors::Store { keys, objects })
            .await;
        released.wait().await;
        Ok(report?)
    }

    /// Looks up and locks keys.
    pub async fn lookup_and_lock(&self, keys: Vec<ObjectKey>) -> Result<Bitmap, TierError> {
        Ok(self
            .controller
            .send(kvtier_actors::LookupAndLock { keys })
            .await?)
    }

    /// Loads keys into the caller's buffers (any [`LoadTarget`]: `BytesMut`, `Vec<u8>`, a
    /// [`HostRegion`](kvtier_actors::HostRegion)), written in place. Every buffer comes back in
    /// the report, in order, even from a stopped runtime (which misses every key); get the
    /// original type back with [`LoadReport::into_parts`].
    pub async fn load<B: LoadTarget>(&self, keys: Vec<ObjectKey>, buffers: Vec<B>) -> LoadReport {
        self.load_bufs(keys, buffers.into_iter().map(LoadBuf::new).collect())
            .await
    }

    /// [`Tier::load`] with buffers already wrapped (possibly of several target types).
    pub async fn load_bufs(&self, keys: Vec<ObjectKey>, buffers: Vec<LoadBuf>) -> LoadReport {
        let n = keys.len();
        let (lent, mut home) = lend(buffers);
        let (hits, misses) = match self
            .controller
            .send(kvtier_actors::Load {
                keys,
                buffers: lent,
            })
            .await
        {
            Ok(r) => {
                home.settle(r.buffers.into_iter().enumerate());
                (r.hits, r.misses)
            }
            Err(_) => (
                Bitmap::zeros(n),
                (0..n).map(|i| (i, MissReason::NotServed)).collect(),
            ),
        };
        LoadReport::new(hits, home.collect().await, misses)
    }

    /// Releases locks (fire-and-forget).
    pub fn unlock(&self, keys: Vec<ObjectKey>) {
        self.controller.do_send(kvtier_actors::Unlock { keys });
    }

    /// Deletes keys from every adapter.
    pub async fn delete(&self, keys: Vec<ObjectKey>) -> Result<DeleteReport, TierError> {
        Ok(self
            .controller
            .send(kvtier_actors::Delete {
                keys,
                adapter: None,
            })
            .await?)
    }

    /// Usage of every adapter.
    pub async fn usage(&self) -> Result<UsageReport, TierError> {
        Ok(self.controller.send(kvtier_actors::GetUsage).await?)
    }

    /// Status of every adapter.
    pub async fn status(&self) -> Result<StatusReport, TierError> {
        Ok(self.controller.send(kvtier_actors::GetStatus).await?)
    }

    /// Eviction counters per adapter (only adapters with an LRU policy and a capacity).
    pub async fn eviction_stats(&self) -> Result<Vec<(AdapterIndex, EvictionStats)>, TierError> {
        Ok(self.evictor.send(GetEvictionStats).await?)
    }

    /// Returns once adapter `adapter`'s eviction is idle: no round in flight, and a check finds
    /// nothing (more) it may evict. At once for an adapter without eviction. Tools and tests
    /// use it to observe the settled state instead of sleeping.
    pub async fn when_idle(&self, adapter: AdapterIndex) -> Result<(), TierError> {
        Ok(self.evictor.send(WhenIdle(adapter)).await?)
    }

    /// Stops every actor of this runtime (their arbiters finish their current work and exit)
    /// and returns once the
    /// controller has stopped and every arbiter's thread has exited: each backend has been
    /// dropped and its stop hook has run (an `hfbucket` adapter's working directory is gone, no
    /// file of an `fs` adapter is still open). Operations still in flight end without an
    /// answer (`TierError::Stopped`, or misses for a load): await them first. The wait for the
    /// threads runs on tokio's blocking pool, so the caller's arbiter keeps serving.
    pub async fn close(self) {
        // An answer, or an error because the controller had stopped already: either way it
        // takes no more messages.
        let _ = self.controller.send(StopController).await;
        stop_and_join(self.arbiters).await;
    }

    /// Marks keys as just used, moving no bytes: every adapter that holds a key publishes it as
    /// accessed, so eviction refreshes its recency as for a lookup hit; no storage call, no
    /// lock. Fire-and-forget, and ordered before any request sent to this tier after it.
    pub fn touch(&self, keys: Vec<ObjectKey>) {
        self.controller.do_send(kvtier_actors::Touch { keys });
    }

    /// One page of an adapter's stored keys with their sizes, in object-name order (continue
    /// with the page's `next` as the request's `cursor`).
    pub async fn list_keys(&self, request: ListKeys) -> Result<KeyPage, TierError> {
        Ok(self.controller.send(request).await??)
    }

    /// Reads objects of one adapter whole and checks each against the checksum stored with it
    /// (what `kvtier scrub` does); with `delete_corrupt`, removes the corrupt ones as a delete
    /// would (locked keys are kept).
    pub async fn verify(&self, request: Verify) -> Result<VerifyReport, TierError> {
        Ok(self.controller.send(request).await??)
    }

    /// Sets (`Some`) or removes (`None`) the `IsolatedLRU` byte quota of `cache_salt` on
    /// `adapter`, at run time; the next eviction round, which this starts, applies it. Returns
    /// the previous limit.
    pub async fn set_quota(
        &self,
        adapter: AdapterIndex,
        cache_salt: impl Into<String>,
        limit_bytes: Option<u64>,
    ) -> Result<Option<u64>, TierError> {
        let msg = SetQuota {
            adapter,
            cache_salt: cache_salt.into(),
            limit_bytes,
        };
        Ok(match self.fleet_quotas.get(&adapter) {
            // In a fleet the quota is the fleet's: every node's rounds use it.
            Some(backend) => backend.send(msg).await??,
            None => self.evictor.send(msg).await??,
        })
    }

    /// The quotas in force on `adapter` (`None` when it has no eviction); in a fleet, the
    /// fleet's.
    pub async fn quotas(&self, adapter: AdapterIndex) -> Result<Option<Quotas>, TierError> {
        Ok(match self.fleet_quotas.get(&adapter) {
            Some(backend) => backend.send(GetQuotas(adapter)).await?,
            None => self.evictor.send(GetQuotas(adapter)).await?,
        })
    }

    /// The keys of `adapter` in eviction order, first victim first, whatever the policy (for
    /// diagnostics and tests).
    pub async fn eviction_order(&self, adapter: AdapterIndex) -> Result<Vec<ObjectKey>, TierError> {
        Ok(self.evictor.send(GetLruOrder(adapter)).await?)
    }
}

/// Where an adapter's storage comes from.
enum Slot<'a> {
    /// Opened from its configuration at start.
    Spec(&'a AdapterSpec),
    /// Brought by the host ([`TierBuilder::storage`]).
    Ready,
}

/// Builds a [`Tier`] ([`Tier::builder`]): the configured adapters, then storages the host brings
/// (any [`Storage`] implementation, which gets the same actors, locks, usage accounting and
/// eviction as a built-in one), and where metrics go.
///
/// ```no_run
/// # async fn example(my_storage: Box<dyn kvtier::actors::Storage>) {
/// use kvtier::actors::config::{CommonConfig, EvictionConfig};
/// use kvtier::{AdapterConfig, Tier, TierConfig};
///
/// let config = TierConfig::default().adapter(AdapterConfig::memory());
/// let tier = Tier::builder(config)
///     .storage(my_storage, CommonConfig::default().capacity_gb(64.0).eviction(EvictionConfig::lru()))
///     .start()
///     .await
///     .unwrap();
/// tier.close().await;
/// # }
/// ```
#[must_use = "a builder does nothing until `start`"]
pub struct TierBuilder<'r> {
    config: TierConfig,
    custom: Vec<(CommonConfig, Box<dyn Storage>)>,
    registry: Option<&'r mut Registry>,
}

impl<'r> TierBuilder<'r> {
    /// Adds an adapter on a storage the host brings, after the configured ones (its index is
    /// the number of adapters before it), with `common`'s capacity, eviction and names.
    pub fn storage(mut self, storage: Box<dyn Storage>, common: CommonConfig) -> Self {
        self.custom.push((common, storage));
        self
    }

    /// Records metrics into the host's `registry` (under `kvtier_`), whatever `metrics` in the
    /// configuration says.
    pub fn registry(self, registry: &mut Registry) -> TierBuilder<'_> {
        TierBuilder {
            config: self.config,
            custom: self.custom,
            registry: Some(registry),
        }
    }

    /// Starts the actors. Must be called inside a running actix `System`. On an error,
    /// everything started so far has stopped.
    pub async fn start(self) -> Result<Tier, StartError> {
        let first = self.config.adapters.len();
        for (i, (common, storage)) in self.custom.iter().enumerate() {
            common.validate().map_err(|source| StartError::Invalid {
                index: first + i,
                kind: storage.kind(),
                source,
            })?;
        }
        if let Some(registry) = self.registry {
            let metrics = Metrics::register(registry);
            return Tier::start_inner(&self.config, self.custom, Some(metrics)).await;
        }
        if !self.config.metrics {
            return Tier::start_inner(&self.config, self.custom, None).await;
        }
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let mut tier = Tier::start_inner(&self.config, self.custom, Some(metrics)).await?;
        tier.registry = Some(Arc::new(registry));
        Ok(tier)
    }
}

/// Stops `arbiters` and waits, on the blocking pool, until their threads have exited. A thread
/// that panicked is logged, not propagated: the runtime is being torn down either way.
async fn stop_and_join(arbiters: Vec<Arbiter>) {
    for a in &arbiters {
        a.stop();
    }
    let joined = tokio::task::spawn_blocking(move || {
        arbiters
            .into_iter()
            .map(Arbiter::join)
            .filter(Result::is_err)
            .count()
    })
    .await;
    match joined {
        Ok(0) => {}
        Ok(n) => {
            tracing::warn!("{n} kvtier arbiter thread(s) had panicked before the tier stopped")
        }
        Err(e) => tracing::warn!("waiting for kvtier's arbiter threads failed: {e}"),
    }
}

/// A storage being opened.
type Opening<'a> = Pin<Box<dyn Future<Output = Result<Box<dyn Storage>, BackendError>> + 'a>>;

/// Opens any adapter's storage (a `fault_inject` wraps its inner store, opened the same way
/// with the outer adapter's name format and capacity).
// Without `s3` and `hfbucket`, no store reads the capacity at open.
#[cfg_attr(
    not(any(feature = "s3", feature = "hfbucket")),
    allow(clippy::only_used_in_recursion)
)]
fn open_storage<'a>(spec: &'a AdapterSpec, format: NameFormat, capacity: u64) -> Opening<'a> {
    Box::pin(async move {
        Ok(match spec {
            AdapterSpec::Memory(_) => Box::new(MemoryStorage::new(format)) as Box<dyn Storage>,
            AdapterSpec::Fs(c) => Box::new(FsStorage::open(c, format)?),
            #[cfg(feature = "s3")]
            AdapterSpec::S3(c) => Box::new(S3Storage::open(c, format, capacity).await?),
            #[cfg(feature = "hfbucket")]
            AdapterSpec::HfBucket(c) => Box::new(HfStorage::open(c, format, capacity)?),
            AdapterSpec::FaultInject(f) => {
                let inner = open_storage(&f.inner.spec, format, capacity)
                    .await
                    .map_err(|e| e.context(format!("inner {} adapter", f.inner.spec.kind())))?;
                Box::new(FaultInjectStorage::new(inner, &f.faults))
            }
        })
    })
}
