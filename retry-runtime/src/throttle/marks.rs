//! Marks a call keeps of its upstream's throttle between its steps: its own attempts in the
//! window, when the upstream was last asked anything, and its place among the waiting calls.

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
        self.counted
            .iter()
            .flatten()
            .filter(|counted| throttle.clock.in_window(**counted, tick))
            .count() as u32
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
