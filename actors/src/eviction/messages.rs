//! The eviction actor's own messages (the runtime's shared vocabulary is in
//! [`crate::messages`]; see there for where each actor's messages live). The actor also
//! handles the backends' [`UsageEvent`](crate::messages::UsageEvent)s.

use actix::prelude::*;

use super::actor::EvictionStats;
use crate::backend::BackendActor;
use crate::config::Quotas;
use crate::key::ObjectKey;
use crate::messages::AdapterIndex;

/// Gives the eviction actor the backend of an adapter (for [`Evict`](crate::messages::Evict) and [`GetUsage`](crate::messages::GetUsage)).
#[derive(Message)]
#[rtype(result = "()")]
pub struct AttachBackend {
    /// The adapter.
    pub adapter: AdapterIndex,
    /// Its backend actor.
    pub backend: Addr<BackendActor>,
}

/// Ask for per-adapter eviction counters.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Vec<(AdapterIndex, EvictionStats)>")]
pub struct GetEvictionStats;

/// The keys of an adapter in eviction order, first victim first, whatever the policy (for
/// tests and diagnostics; the name is historical).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Vec<ObjectKey>")]
pub struct GetLruOrder(pub AdapterIndex);

/// Set (`limit_bytes: Some`) or remove (`None`) the byte quota of a cache salt on an adapter, at
/// run time. The change applies at the next eviction cycle, which this message starts. Replies
/// with the previous limit, or `Err` when the adapter has no eviction actor state.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<Option<u64>, QuotaError>")]
pub struct SetQuota {
    /// The adapter.
    pub adapter: AdapterIndex,
    /// The salt (`""`: unsalted keys).
    pub cache_salt: String,
    /// The new limit in bytes, or `None` to remove the entry (the salt then falls under the
    /// allowlist rule: limit 0).
    pub limit_bytes: Option<u64>,
}

/// Why a quota message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaError {
    /// The adapter does not evict (no `eviction` table, `noop`, or no capacity).
    #[error("adapter #{0} has no eviction policy that evicts")]
    NoEviction(AdapterIndex),
    /// The adapter's policy ignores quotas.
    #[error("adapter #{0} uses the {1} policy; only IsolatedLRU uses quotas")]
    NotIsolated(AdapterIndex, &'static str),
    /// The salt is not a valid cache salt.
    #[error("invalid cache salt: {0}")]
    BadSalt(String),
    /// The adapter's quotas are its fleet's, and the fleet index did not take the change.
    #[error("adapter #{0}: the fleet index did not set the quota: {1}")]
    Fleet(AdapterIndex, String),
}

/// The quotas in force on an adapter (`None` when it has no eviction state).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Option<Quotas>")]
pub struct GetQuotas(pub AdapterIndex);

/// Replies once the adapter's eviction is idle: no round in flight and a check that started
/// after this message finds nothing to evict (or nothing it may evict: the rest is locked; a
/// round already in flight when it came does not answer it, since it planned before). Replies
/// at once for an adapter without eviction. For tests and tools that must observe the settled
/// state without sleeping.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct WhenIdle(pub AdapterIndex);
