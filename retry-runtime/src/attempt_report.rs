//! What an attempt learns about itself while it runs and reports back to the loop.
//!
//! The loop knows the body's replayability from the call's declaration, but only the transport
//! sees the request actually built: a declared-replayable call whose request turns out to carry a
//! streaming body must not be retried. The send path reports that here, before sending, and the
//! loop takes the weakest of the declaration and the report when it decides. The report also
//! carries the attempt's span so integrations can add OpenTelemetry attributes to it even when
//! the user's own span is the current one.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::{Attempt, Replayability};

/// Carried inside the [`Attempt`]: every handle to the attempt (the closure's, the one installed
/// for integrations, the loop's) sees the same report, so reporting allocates nothing.
#[derive(Debug)]
pub(crate) struct AttemptReport {
    replay: AtomicU8,
}

impl Default for AttemptReport {
    fn default() -> Self {
        AttemptReport {
            replay: AtomicU8::new(encode(Replayability::Replayable)),
        }
    }
}

impl Clone for AttemptReport {
    fn clone(&self) -> Self {
        AttemptReport {
            replay: AtomicU8::new(self.replay.load(Ordering::Acquire)),
        }
    }
}

const fn encode(r: Replayability) -> u8 {
    match r {
        Replayability::OneShot => 0,
        Replayability::Reopenable => 1,
        Replayability::Replayable => 2,
    }
}

const fn decode(b: u8) -> Replayability {
    match b {
        0 => Replayability::OneShot,
        1 => Replayability::Reopenable,
        _ => Replayability::Replayable,
    }
}

impl AttemptReport {
    /// The weakest replayability reported so far (`Replayable` when nothing was reported).
    pub(crate) fn replay(&self) -> Replayability {
        decode(self.replay.load(Ordering::Acquire))
    }

    fn downgrade(&self, r: Replayability) {
        self.replay.fetch_min(encode(r), Ordering::AcqRel);
    }

    #[cfg(test)]
    pub(crate) fn downgrade_for_tests(&self) {
        self.downgrade(Replayability::OneShot);
    }
}

impl Attempt {
    /// Reports, for the attempt the current task runs in, that the request it sends has a body
    /// of replayability `replay` (a streaming body is [`Replayability::OneShot`]). The call then
    /// decides with the weakest of its declaration and every report: the current attempt still
    /// runs, but a one-shot body is never retried. The HTTP integration calls this itself.
    /// Outside an attempt it does nothing.
    pub fn report_body(replay: Replayability) {
        Attempt::with_current(|a| {
            if let Some(a) = a {
                a.state.report.downgrade(replay);
            }
        });
    }

    /// The replayability the loop will decide with, as far as this attempt's reports go
    /// (the call's declaration is not included).
    pub fn reported_body(&self) -> Replayability {
        self.state.report.replay()
    }

    /// The attempt's span (`retry.attempt`), to record OpenTelemetry attributes on
    /// (`server.address`, `http.response.status_code`, ...) whatever span is current.
    pub fn span(&self) -> &tracing::Span {
        &self.state.facts.span
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downgrades_are_sticky_and_take_the_weakest() {
        let r = AttemptReport::default();
        assert_eq!(r.replay(), Replayability::Replayable);
        r.downgrade(Replayability::Reopenable);
        assert_eq!(r.replay(), Replayability::Reopenable);
        r.downgrade(Replayability::OneShot);
        r.downgrade(Replayability::Replayable);
        assert_eq!(r.replay(), Replayability::OneShot);
    }
}
