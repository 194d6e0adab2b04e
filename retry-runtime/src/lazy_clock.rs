//! A call's clock starts the first time something needs it.
//!
//! Reading the clock costs about 25 ns on a virtual machine, as much as a whole call through a
//! retry crate that has no deadline. Yet a call that opened its own scope and whose first
//! attempt completes in its first poll needs no time at all: its deadline is "the upstream's
//! deadline after the call starts", its first attempt's timeout is known without the clock, and
//! it is counted in the budget and the breaker in batches (`hot.rs`). So that call's start is
//! read the first time anything asks for it: the attempt's timer when the attempt first waits,
//! [`Attempt::deadline`](crate::Attempt::deadline) and its siblings, a nested call opening the
//! scope, or the loop after a failure.
//!
//! The cost of starting late is the synchronous work of the first poll (building the request:
//! microseconds) not counted against the deadline; under tokio's paused clock, nothing.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

/// When an attempt started: read already, or read the first time it is asked for.
#[derive(Debug, Clone, Default)]
pub(crate) struct Start(OnceLock<Instant>);

impl Start {
    /// A start read already.
    pub(crate) fn at(now: Instant) -> Self {
        Start(OnceLock::from(now))
    }

    /// A start not read yet.
    pub(crate) fn unread() -> Self {
        Start(OnceLock::new())
    }

    /// The start, read now if nothing read it before.
    pub(crate) fn get(&self) -> Instant {
        *self.0.get_or_init(Instant::now)
    }

    /// The start, if something read it.
    pub(crate) fn read(&self) -> Option<Instant> {
        self.0.get().copied()
    }
}

/// A deadline: fixed, or a duration after a start not read yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// An absolute deadline.
    At(Instant),
    /// This long after the call's first attempt starts.
    AfterStart(Duration),
}

impl Deadline {
    /// The absolute deadline, reading `start` if it depends on it.
    pub(crate) fn resolve(self, start: &Start) -> Instant {
        match self {
            Deadline::At(at) => at,
            Deadline::AfterStart(after) => start.get() + after,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_start_is_read_once_when_first_asked() {
        let start = Start::unread();
        assert_eq!(start.read(), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        let first = start.get();
        assert_eq!(first, Instant::now(), "read when asked, not when made");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(start.get(), first, "then fixed");
        let deadline = Deadline::AfterStart(Duration::from_secs(5));
        assert_eq!(deadline.resolve(&start), first + Duration::from_secs(5));
        let fixed = Deadline::At(first);
        assert_eq!(
            fixed.resolve(&Start::unread()),
            first,
            "a fixed deadline reads nothing"
        );
    }
}
