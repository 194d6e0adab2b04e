//! Marks a call keeps of its upstream's throttle between its steps: its own attempts in the
//! window, what the upstream had answered, when it was last asked anything, and its place among
//! the waiting calls.

use std::sync::atomic::Ordering;

use super::Throttle;
use crate::window::Tick;

/// When a call's own attempts were counted by its upstream's throttle (the latest
/// [`Own::KEPT`]): a retry is judged on what the *other* calls met, so the window's count
/// less the call's own attempts still in it. Attempts the throttle never counted (failed to
/// connect, lost to connection rotation, cancelled) are not here, and neither, once the window
/// moved past them, are attempts it has forgotten.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Own {
    counted: [Option<Tick>; Own::KEPT],
    next: usize,
}

impl Own {
    /// How many counts a call keeps: more attempts than that within one window is a call
    /// whose older attempts the window soon forgets anyway.
    const KEPT: usize = 4;

    /// Notes an attempt of the call counted at `tick`.
    #[inline]
    pub(crate) fn counted(&mut self, tick: Tick) {
        self.counted[self.next % Own::KEPT] = Some(tick);
        self.next = self.next.wrapping_add(1);
    }

    /// The call's attempts in `throttle`'s window at `tick`.
    #[inline]
    pub(crate) fn in_window(&self, throttle: &Throttle, tick: Tick) -> u32 {
        let window = throttle.clock.window_of(tick);
        self.counted
            .iter()
            .flatten()
            .filter(|counted| window.contains(&counted.nanos()))
            .count() as u32
    }
}

/// A mark of what the upstream had answered (accepted and failed attempts, ever) at some
/// instant: see [`Throttle::failing_all_since`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Answers {
    pub(super) accepted: u64,
    pub(super) failed: u64,
}

impl Throttle {
    /// What the upstream has answered so far: a mark to compare with later.
    #[inline]
    pub(crate) fn answers(&self) -> Answers {
        Answers {
            accepted: self.accepted_ever.load(Ordering::Relaxed),
            failed: self.failed_ever.load(Ordering::Relaxed),
        }
    }

    /// Whether, since `mark`, the upstream failed more than `own` attempts (the asking call's
    /// own) and accepted none: it is failing every call now, whatever the window still holds
    /// of the time before. A retry asked then waits for it to accept again.
    #[inline]
    pub(crate) fn failing_all_since(&self, mark: Answers, own: u64) -> bool {
        let now = self.answers();
        now.accepted == mark.accepted && now.failed.wrapping_sub(mark.failed) > own
    }

    /// Whether the upstream accepted an attempt since `mark`.
    #[inline]
    pub(crate) fn accepted_since(&self, mark: Answers) -> bool {
        self.accepted_ever.load(Ordering::Relaxed) != mark.accepted
    }
}

/// A mark of how often the upstream had been asked anything, and since when: see
/// [`Throttle::asked`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asked {
    pub(super) count: u64,
    pub(super) at: Tick,
}

impl PartialEq for Asked {
    fn eq(&self, other: &Asked) -> bool {
        self.count == other.count && self.at.nanos() == other.at.nanos()
    }
}

/// A call's place among those waiting for an upstream's admission; given back when dropped.
#[derive(Debug)]
pub(crate) struct WaitingPlace<'a>(pub(super) &'a Throttle);

impl Drop for WaitingPlace<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}
