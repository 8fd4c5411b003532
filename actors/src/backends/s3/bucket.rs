//! Whether the bucket exists, as far as requests have seen: what makes a HEAD 404 a miss.
//!
//! A HEAD 404 has no body, so it does not tell a missing object from a missing bucket. It is
//! a miss when a request found the bucket within `s3_bucket_check_secs`; otherwise one
//! `HeadBucket` confirms the bucket first ([`BucketCheck::confirm_absent`]). (Chosen over a
//! check at start only, which misses a bucket deleted later, and over a GET or a listing per
//! 404, which cost more than a HEAD of the bucket.)
//!
//! Shared state, exactly: one [`AtomicU64`] (when the bucket was last seen) that every request
//! future of the storage reads and writes with relaxed ordering. Relaxed is enough: it is a
//! hint about time, read and written whole, and no other memory is published through it; a
//! stale read costs at most one extra `HeadBucket`, or one miss that an immediate retry of the
//! bucket check would have turned into a `BucketMissing` error.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::direct::no_such_bucket;
use super::plane::DataPlane;
use crate::storage::{BackendError, ErrorKind};

/// When the bucket was last seen to exist (see the module docs).
pub(super) struct BucketCheck {
    /// Milliseconds since `opened`, plus 1 (0: not yet, or seen missing since).
    seen: AtomicU64,
    opened: Instant,
    /// A HEAD 404 is a miss without asking again for this long after the bucket was seen.
    interval: Duration,
}

impl BucketCheck {
    /// Nothing seen yet; a HEAD 404 counts as a miss for `interval` after a sighting.
    pub(super) fn new(interval: Duration) -> Self {
        Self {
            seen: AtomicU64::new(0),
            opened: Instant::now(),
            interval,
        }
    }

    /// Notes that the bucket exists (a request on it succeeded).
    pub(super) fn exists_now(&self) {
        let ms = self.opened.elapsed().as_millis() as u64 + 1;
        self.seen.store(ms, Ordering::Relaxed);
    }

    /// Notes that the bucket is missing: the next HEAD 404 checks again.
    fn missing(&self) {
        self.seen.store(0, Ordering::Relaxed);
    }

    /// Whether the bucket was seen within the check interval.
    fn seen_recently(&self) -> bool {
        match self.seen.load(Ordering::Relaxed) {
            0 => false,
            ms => {
                let seen = Duration::from_millis(ms - 1);
                self.opened.elapsed().saturating_sub(seen) < self.interval
            }
        }
    }

    /// Takes the answer of one request: a missing bucket must be checked again before the
    /// next HEAD 404 counts as a miss; any other answer shows the bucket exists.
    pub(super) fn follow<T>(&self, r: &Result<T, BackendError>) {
        match r {
            Ok(_) => self.exists_now(),
            Err(e) if e.kind() == ErrorKind::BucketMissing => self.missing(),
            Err(_) => {}
        }
    }

    /// A HEAD answered 404: a miss when the bucket was seen within the check interval or
    /// exists now (one `HeadBucket` on `plane`), else a [`ErrorKind::BucketMissing`] error
    /// naming `bucket`.
    pub(super) async fn confirm_absent(
        &self,
        plane: &dyn DataPlane,
        bucket: &str,
    ) -> Result<Option<u64>, BackendError> {
        if self.seen_recently() {
            return Ok(None);
        }
        if plane.bucket_exists().await? {
            self.exists_now();
            Ok(None)
        } else {
            self.missing();
            Err(no_such_bucket("head", bucket, "HeadBucket answered 404"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sighting_lasts_the_interval_and_a_missing_bucket_ends_it() {
        let check = BucketCheck::new(Duration::from_secs(3600));
        assert!(!check.seen_recently(), "nothing seen yet");
        check.follow(&Ok::<(), BackendError>(()));
        assert!(check.seen_recently());
        check.follow(&Err::<(), _>(BackendError::io("get", "reset")));
        assert!(
            check.seen_recently(),
            "other errors say nothing about the bucket"
        );
        check.follow(&Err::<(), _>(no_such_bucket("get", "b", "NoSuchBucket")));
        assert!(!check.seen_recently());
        let never = BucketCheck::new(Duration::ZERO);
        never.exists_now();
        assert!(!never.seen_recently());
    }
}
