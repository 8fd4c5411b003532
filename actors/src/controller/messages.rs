//! The controller's own messages and the types they carry: operations submitted without
//! waiting ([`Submit`], [`TakeResult`]), event channels ([`SubscribeEvents`], [`TierEvent`])
//! and [`StopController`]. The operations it forwards to the backends are the shared
//! vocabulary of [`crate::messages`].

use actix::prelude::*;

use crate::messages::*;

/// Identifies an operation sent with [`Submit`].
pub type TaskId = u64;

/// An operation for [`Submit`].
#[derive(Debug)]
pub enum Op {
    /// A [`Store`].
    Store(Store),
    /// A [`LookupAndLock`].
    LookupAndLock(LookupAndLock),
    /// A [`Load`].
    Load(Load),
    /// A [`Delete`].
    Delete(Delete),
}

/// The result of a submitted operation.
#[derive(Debug)]
pub enum OpResult {
    /// Of a store.
    Store(StoreReport),
    /// Of a lookup.
    LookupAndLock(Bitmap),
    /// Of a load.
    Load(LoadReport),
    /// Of a delete.
    Delete(DeleteReport),
    /// The controller went away before answering.
    Failed(String),
}

/// What a host's event channel receives. Every channel receives every event.
#[derive(Debug, Clone)]
pub enum TierEvent {
    /// A backend's usage event.
    Usage(UsageEvent),
    /// A submitted operation finished: its result waits for [`TakeResult`]`(task)`.
    Completed {
        /// The id [`Submit`] replied with.
        task: TaskId,
    },
}

/// Start an operation without waiting for it: the reply is a [`TaskId`] at once. When the
/// operation finishes, its result is kept for [`TakeResult`] and every subscribed channel gets
/// [`TierEvent::Completed`] with the task id.
#[derive(Debug, Message)]
#[rtype(result = "TaskId")]
pub struct Submit(pub Op);

/// Take the result of a [`Submit`]ted operation: `Some` exactly once, after it finished;
/// `None` before that, after it was taken, for an unknown id, or when it was dropped unclaimed
/// (see `crate::task_results`).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Option<OpResult>")]
pub struct TakeResult(pub TaskId);

/// Subscribe a channel to usage events and completions.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SubscribeEvents(pub flume::Sender<TierEvent>);

/// Stop the controller (sent by `Tier::shutdown`).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct StopController;
