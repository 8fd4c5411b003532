//! Results of [`Submit`](crate::Submit)ted operations, kept by the controller until the host
//! takes them with [`TakeResult`](crate::TakeResult).
//!
//! Invariants:
//! * A result is handed out at most once: taking it removes it.
//! * Results do not depend on event listeners: however many channels listen, in whatever
//!   order, none of them receives a result (they get a
//!   [`TierEvent::Completed`](crate::TierEvent::Completed) notice with the task id only).
//! * At most `capacity` unclaimed results are kept. Past that the oldest (lowest task id) is
//!   dropped, with a warning, so a host that never takes its results cannot grow the controller
//!   without bound; taking a dropped result gives `None`, as for an unknown id. A dropped
//!   [`Load`](crate::Load) result drops its buffers with it.

use std::collections::BTreeMap;

use crate::controller::{OpResult, TaskId};

/// How many unclaimed results the controller keeps before dropping the oldest.
pub(crate) const DEFAULT_UNCLAIMED_RESULTS: usize = 4096;

/// Finished results by task id, bounded. Owned by the controller actor.
#[derive(Debug)]
pub(crate) struct TaskResults {
    results: BTreeMap<TaskId, OpResult>,
    capacity: usize,
    dropped: u64,
}

impl Default for TaskResults {
    fn default() -> Self {
        Self::new(DEFAULT_UNCLAIMED_RESULTS)
    }
}

impl TaskResults {
    /// An empty store keeping at most `capacity` unclaimed results (at least 1).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            results: BTreeMap::new(),
            capacity: capacity.max(1),
            dropped: 0,
        }
    }

    /// Keeps the result of `task`, dropping the oldest unclaimed one when full.
    pub(crate) fn insert(&mut self, task: TaskId, result: OpResult) {
        self.results.insert(task, result);
        while self.results.len() > self.capacity {
            let Some((old, _)) = self.results.pop_first() else {
                break;
            };
            self.dropped += 1;
            tracing::warn!(
                task = old,
                capacity = self.capacity,
                dropped = self.dropped,
                "dropped an unclaimed Submit result: take results with TakeResult"
            );
        }
    }

    /// Removes and returns the result of `task`; `None` when it has not finished, was already
    /// taken, was dropped, or never existed.
    pub(crate) fn take(&mut self, task: TaskId) -> Option<OpResult> {
        self.results.remove(&task)
    }

    #[cfg(test)]
    /// Number of unclaimed results.
    pub(crate) fn len(&self) -> usize {
        self.results.len()
    }

    #[cfg(test)]
    /// True when no result is waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.results.is_empty()
    }

    #[cfg(test)]
    /// Results dropped unclaimed so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(task: TaskId) -> OpResult {
        OpResult::Failed(format!("t{task}"))
    }

    fn text(r: Option<OpResult>) -> Option<String> {
        match r? {
            OpResult::Failed(s) => Some(s),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn taken_exactly_once() {
        let mut r = TaskResults::default();
        r.insert(4, failed(4));
        r.insert(5, failed(5));
        assert_eq!(text(r.take(5)).as_deref(), Some("t5"));
        assert_eq!(text(r.take(5)), None);
        assert_eq!(text(r.take(6)), None, "unknown id");
        assert_eq!(text(r.take(4)).as_deref(), Some("t4"));
        assert!(r.is_empty());
    }

    #[test]
    fn bounded_dropping_the_oldest() {
        let mut r = TaskResults::new(2);
        for t in [7, 8, 9] {
            r.insert(t, failed(t));
        }
        assert_eq!((r.len(), r.dropped()), (2, 1));
        assert_eq!(text(r.take(7)), None, "the oldest went");
        assert_eq!(text(r.take(8)).as_deref(), Some("t8"));
        assert_eq!(text(r.take(9)).as_deref(), Some("t9"));
        assert_eq!(TaskResults::new(0).capacity, 1);
    }
}
