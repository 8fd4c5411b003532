//! The eviction actor, and the eviction policies (one file each, behind `EvictionPolicy`).
//!
//! It subscribes to the usage events of every backend whose adapter has an `eviction` policy
//! (and a capacity, except for `IsolatedLRU`, which is driven by quotas). Per adapter it keeps a
//! [`PolicyState`]: the policy (recency, frequency, whatever it orders by), fed by the events
//! in the order the backend published them, and a `SizeBook` of the tracked keys' sizes and
//! per-salt bytes built from the same events. The adapter's total usage is the backend's: every
//! event carries the ledger's total, and after a round it asks with [`GetUsage`](crate::messages::GetUsage). The size book
//! only mirrors the event stream (for byte budgets and per-salt quotas); it is never reconciled
//! against the ledger, because the events are the ledger's changes in order.
//!
//! A round is planned by the policy (`EvictionPolicy::plan`); the global policies (`LRU`,
//! `ARC`, `FLRU`) follow LMCache's watermark rule: when usage reaches
//! `trigger_watermark × capacity`, remove `floor(n × eviction_ratio)` keys (at least 1 when the
//! ratio is > 0), or with `eviction_unit = "bytes"` keys until `ceil(used × ratio)` bytes are
//! freed. `IsolatedLRU` plans one budget per cache salt over its quota. The backend skips
//! locked keys and keys it does not hold, which stay candidates for the next round: **no
//! policy can evict a locked key**, because only the backend removes and it checks the lock.
//!
//! Checks run after every store event, after a round that removed something (once the
//! round's `Deleted` event has been applied, so the next plan never sees removed keys), after a
//! quota change, and on a timer. At most one round per adapter is in flight.
//!
//! The simulator of `kvtier bench --simulate` drives the same [`PolicyState`] with a model
//! ledger, so what it measures is this code.
//!
//! The files: `policy.rs` (the trait, the watermark rule, the factory), `state.rs` (a policy
//! with its size book and settings), `actor.rs` (the actor and its handlers), `messages.rs`
//! (the messages only this actor answers), and one file per policy.

mod actor;
mod arc;
mod flru;
mod isolated_lru;
mod lru;
mod messages;
mod noop;
mod policy;
mod state;

pub use actor::{EvictionActor, EvictionStats, EvictionTarget};
pub(crate) use flru::{in_shadow_sample, BONUS_PER_USE as FLRU_BONUS_PER_USE};
pub use messages::{
    AttachBackend, GetEvictionStats, GetLruOrder, GetQuotas, QuotaError, SetQuota, WhenIdle,
};
pub(crate) use policy::{global_round, ratio_group, EvictionPolicy, Pressure, EXTRA_CANDIDATES};
pub use state::PolicyState;
pub(crate) use state::SizeBook;
