//! Runtime assembly: turns a [`TierConfig`] into running actors.
//!
//! [`Tier::start`] starts, each on an arbiter (thread) of its own, the eviction actor and one
//! backend actor per adapter; the controller starts on the caller's arbiter, so the host's
//! messages to it never cross a thread. Then it subscribes the controller and the eviction actor
//! to every backend's usage events. Hosts talk to [`Tier::controller`] with the messages of
//! [`kvtier_actors::messages`], or use the typed helpers here.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use actix::prelude::*;
use bytes::{Bytes, BytesMut};
use kvtier_actors::backends::fault_inject::FaultInjectStorage;
use kvtier_actors::backends::fs::FsStorage;
#[cfg(feature = "hfbucket")]
use kvtier_actors::backends::hfbucket::HfStorage;
use kvtier_actors::backends::memory::MemoryStorage;
#[cfg(feature = "s3")]
use kvtier_actors::backends::s3::S3Storage;
use kvtier_actors::config::EvictionPolicy;
use kvtier_actors::eviction::{AttachBackend, GetEvictionStats};
use kvtier_actors::{
    AdapterHandle, AdapterIndex, BackendActor, BackendError, Bitmap, Controller, DeleteReport,
    EvictionActor, EvictionStats, EvictionTarget, LoadReport, NameFormat, ObjectKey, StatusReport,
    StopController, Storage, StoreReport, SubscribeEvents, TierEvent, UsageEvent, UsageReport,
};

use crate::config::{AdapterSpec, FaultInjectSpec, TierConfig};

/// Why the runtime did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No adapter was configured.
    #[error("no adapters configured")]
    NoAdapters,
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

/// A running kvtier runtime. Dropping it leaves the actors running; call [`Tier::shutdown`].
pub struct Tier {
    controller: Addr<Controller>,
    evictor: Addr<EvictionActor>,
    arbiters: Vec<Arbiter>,
}

impl Tier {
    /// Starts the actors for `config`. Must be called inside a running actix `System`.
    pub async fn start(config: &TierConfig) -> Result<Tier, StartError> {
        if config.adapters.is_empty() {
            return Err(StartError::NoAdapters);
        }
        let mut arbiters = Vec::new();
        let targets: Vec<EvictionTarget> = config
            .adapters
            .iter()
            .enumerate()
            .filter_map(|(i, a)| {
                a.common.eviction.map(|e| EvictionTarget {
                    adapter: i,
                    capacity_bytes: a.common.capacity_bytes(),
                    config: e,
                })
            })
            .collect();
        let targets_ids: Vec<AdapterIndex> = targets
            .iter()
            .filter(|t| t.capacity_bytes > 0 && t.config.eviction_policy == EvictionPolicy::Lru)
            .map(|t| t.adapter)
            .collect();
        let interval = Duration::from_millis(config.eviction_interval_ms);
        let evict_arbiter = Arbiter::new();
        let evictor = EvictionActor::start_in_arbiter(&evict_arbiter.handle(), move |_| {
            EvictionActor::new(targets, interval)
        });
        arbiters.push(evict_arbiter);

        let mut handles = Vec::new();
        for (index, adapter) in config.adapters.iter().enumerate() {
            let capacity = adapter.common.capacity_bytes();
            let format = adapter.common.object_name_format;
            // Only adapters that can evict feed the eviction actor.
            let evicts = targets_ids.contains(&index);
            let subscribers = if evicts {
                vec![evictor.clone().recipient::<UsageEvent>()]
            } else {
                Vec::new()
            };
            let kind = adapter.spec.kind();
            let fail = |source| StartError::Adapter {
                index,
                kind,
                source,
            };
            let (arbiter, handle) = match &adapter.spec {
                AdapterSpec::Memory(_) => {
                    spawn(index, MemoryStorage::new(format), capacity, subscribers)
                }
                #[cfg(feature = "s3")]
                AdapterSpec::S3(c) => spawn(
                    index,
                    S3Storage::open(c, format, capacity).await.map_err(fail)?,
                    capacity,
                    subscribers,
                ),
                #[cfg(feature = "hfbucket")]
                AdapterSpec::HfBucket(c) => spawn(
                    index,
                    HfStorage::open(c, format, capacity).map_err(fail)?,
                    capacity,
                    subscribers,
                ),
                AdapterSpec::Fs(c) => spawn(
                    index,
                    FsStorage::open(c, format).map_err(fail)?,
                    capacity,
                    subscribers,
                ),
                AdapterSpec::FaultInject(f) => spawn(
                    index,
                    open_fault_inject(f, format, capacity).await.map_err(fail)?,
                    capacity,
                    subscribers,
                ),
            };
            arbiters.push(arbiter);
            handles.push(handle);
        }

        // The controller shares the caller's arbiter: host -> controller messages stay on one
        // thread, and only controller -> backend hops cross threads.
        let controller = Controller::new(handles.clone()).start();
        for h in handles.iter().filter(|h| targets_ids.contains(&h.index)) {
            evictor.do_send(AttachBackend {
                adapter: h.index,
                evict: h.evict.clone(),
            });
        }
        Ok(Tier {
            controller,
            evictor,
            arbiters,
        })
    }

    /// The controller, for sending messages directly.
    pub fn controller(&self) -> &Addr<Controller> {
        &self.controller
    }

    /// The eviction actor.
    pub fn evictor(&self) -> &Addr<EvictionActor> {
        &self.evictor
    }

    /// A new channel receiving usage events and completions of submitted operations.
    pub fn events(&self) -> flume::Receiver<TierEvent> {
        let (tx, rx) = flume::unbounded();
        self.controller.do_send(SubscribeEvents(tx));
        rx
    }

    /// Stores objects on every adapter.
    pub async fn store(
        &self,
        keys: Vec<ObjectKey>,
        objects: Vec<Bytes>,
    ) -> Result<StoreReport, MailboxError> {
        self.controller
            .send(kvtier_actors::Store { keys, objects })
            .await
    }

    /// Looks up and locks keys.
    pub async fn lookup_and_lock(&self, keys: Vec<ObjectKey>) -> Result<Bitmap, MailboxError> {
        self.controller
            .send(kvtier_actors::LookupAndLock { keys })
            .await
    }

    /// Loads keys into the caller's buffers.
    pub async fn load(
        &self,
        keys: Vec<ObjectKey>,
        buffers: Vec<BytesMut>,
    ) -> Result<LoadReport, MailboxError> {
        self.controller
            .send(kvtier_actors::Load { keys, buffers })
            .await
    }

    /// Releases locks (fire-and-forget).
    pub fn unlock(&self, keys: Vec<ObjectKey>) {
        self.controller.do_send(kvtier_actors::Unlock { keys });
    }

    /// Deletes keys from every adapter.
    pub async fn delete(&self, keys: Vec<ObjectKey>) -> Result<DeleteReport, MailboxError> {
        self.controller
            .send(kvtier_actors::Delete {
                keys,
                adapter: None,
            })
            .await
    }

    /// Usage of every adapter.
    pub async fn usage(&self) -> Result<UsageReport, MailboxError> {
        self.controller.send(kvtier_actors::GetUsage).await
    }

    /// Status of every adapter.
    pub async fn status(&self) -> Result<StatusReport, MailboxError> {
        self.controller.send(kvtier_actors::GetStatus).await
    }

    /// Eviction counters per adapter (only adapters with an LRU policy and a capacity).
    pub async fn eviction_stats(&self) -> Result<Vec<(AdapterIndex, EvictionStats)>, MailboxError> {
        self.evictor.send(GetEvictionStats).await
    }

    /// Stops every actor of this runtime (their arbiters finish their current work and exit).
    pub fn shutdown(self) {
        self.controller.do_send(StopController);
        for a in self.arbiters {
            a.stop();
        }
    }
}

/// Opens a `fault_inject` adapter: its inner store first (with the outer adapter's name format
/// and capacity), then the wrapper.
async fn open_fault_inject(
    spec: &FaultInjectSpec,
    format: NameFormat,
    capacity: u64,
) -> Result<FaultInjectStorage, BackendError> {
    let inner = open_boxed(&spec.inner.spec, format, capacity)
        .await
        .map_err(|e| BackendError::Io {
            op: "open",
            message: format!("inner {} adapter: {e}", spec.inner.spec.kind()),
        })?;
    Ok(FaultInjectStorage::new(inner, &spec.faults))
}

type BoxedStorage = Box<dyn Storage + Send>;

/// Opens any adapter's storage behind a box (for wrappers, whose inner type is only known at
/// run time).
fn open_boxed(
    spec: &AdapterSpec,
    format: NameFormat,
    capacity: u64,
) -> Pin<Box<dyn Future<Output = Result<BoxedStorage, BackendError>> + '_>> {
    Box::pin(async move {
        Ok(match spec {
            AdapterSpec::Memory(_) => Box::new(MemoryStorage::new(format)) as BoxedStorage,
            AdapterSpec::Fs(c) => Box::new(FsStorage::open(c, format)?),
            #[cfg(feature = "s3")]
            AdapterSpec::S3(c) => Box::new(S3Storage::open(c, format, capacity).await?),
            #[cfg(feature = "hfbucket")]
            AdapterSpec::HfBucket(c) => Box::new(HfStorage::open(c, format, capacity)?),
            AdapterSpec::FaultInject(f) => Box::new(open_fault_inject(f, format, capacity).await?),
        })
    })
}

fn spawn<S: Storage + Send>(
    index: AdapterIndex,
    storage: S,
    capacity: u64,
    subscribers: Vec<actix::Recipient<UsageEvent>>,
) -> (Arbiter, AdapterHandle) {
    let kind = storage.kind();
    let (arbiter, addr) = BackendActor::new(index, storage, capacity, subscribers).spawn();
    (arbiter, AdapterHandle::new(index, kind, &addr))
}
