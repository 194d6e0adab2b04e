//! What the throttle reports: a `WARN` event when it starts refusing attempts locally, an
//! `INFO` event when it admits every attempt again.

use std::sync::atomic::Ordering;

use super::Throttle;

impl Throttle {
    /// Emits the state-change event when the throttle starts refusing, or stops.
    #[inline]
    pub(super) fn note_state(&self, throttling: bool) {
        if self.throttling.load(Ordering::Relaxed) != throttling {
            self.change_state(throttling);
        }
    }

    #[cold]
    fn change_state(&self, throttling: bool) {
        if self.throttling.swap(throttling, Ordering::Relaxed) == throttling {
            return;
        }
        match throttling {
            true => tracing::warn!(
                target: "retry_runtime::throttle",
                upstream = %self.name,
                state = "throttling",
                "the upstream accepts less than it gets: refusing part of the attempts locally"
            ),
            false => tracing::info!(
                target: "retry_runtime::throttle",
                upstream = %self.name,
                state = "open",
                "the upstream accepts what it gets again: admitting every attempt"
            ),
        }
    }
}
