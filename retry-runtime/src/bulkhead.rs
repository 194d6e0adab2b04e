//! The bulkhead: at most `n` attempts in flight to one upstream.
//!
//! A slow upstream holds every caller's attempt open; without a limit a burst of callers becomes
//! a burst of connections and queued requests that the upstream serves long after its callers
//! gave up. The bulkhead admits an attempt only while fewer than `n` are in flight; one that
//! finds it full waits for a slot, but never past the point where its operation's deadline would
//! leave it less than the minimum attempt budget (then it fails as [`BulkheadFull`]). The slot is
//! given back as soon as the attempt ends, before any backoff.
//!
//! [`BulkheadFull`]: crate::Error::BulkheadFull

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// At most `max` attempts in flight; see the module docs.
#[derive(Debug)]
pub(crate) struct Bulkhead {
    slots: Arc<Semaphore>,
    max: usize,
}

/// One attempt's place in the bulkhead, given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot(#[allow(dead_code)] OwnedSemaphorePermit);

impl Bulkhead {
    /// A bulkhead of `max` slots (the configuration guarantees at least one).
    pub(crate) fn new(max: usize) -> Self {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Bulkhead {
            slots: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// A slot now, if one is free.
    pub(crate) fn try_enter(&self) -> Option<Slot> {
        self.slots.clone().try_acquire_owned().ok().map(Slot)
    }

    /// A slot as soon as one frees up, or `None` at `until`.
    pub(crate) async fn enter_until(&self, until: Instant) -> Option<Slot> {
        let wait = self.slots.clone().acquire_owned();
        match tokio::time::timeout_at(until, wait).await {
            Ok(Ok(permit)) => Some(Slot(permit)),
            // Timed out (the semaphore is never closed).
            _ => None,
        }
    }

    /// Attempts in flight now.
    pub(crate) fn in_flight(&self) -> usize {
        self.max - self.slots.available_permits().min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_full_bulkhead_admits_the_next_attempt_when_a_slot_frees_up_or_never_past_until() {
        let bulkhead = Bulkhead::new(1);
        let first = bulkhead.try_enter().expect("a free slot");
        assert_eq!(bulkhead.in_flight(), 1);
        assert!(bulkhead.try_enter().is_none(), "full");
        let until = Instant::now() + Duration::from_millis(50);
        assert!(
            bulkhead.enter_until(until).await.is_none(),
            "no slot freed in time"
        );
        assert_eq!(Instant::now(), until, "gave up exactly at `until`");
        let waiting = bulkhead.enter_until(Instant::now() + Duration::from_secs(1));
        drop(first);
        assert!(waiting.await.is_some(), "the freed slot goes to the waiter");
        assert_eq!(bulkhead.in_flight(), 0, "given back on drop");
    }
}
