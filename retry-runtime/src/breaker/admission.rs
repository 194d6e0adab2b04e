//! What the breaker lends an admitted attempt: nothing while closed, a probe slot of the
//! current round while half-open, given back if the attempt ends without a verdict.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Admission to one attempt: hand it to [`CircuitBreaker::record`](super::CircuitBreaker::record) when the attempt ends.
///
/// Dropped unrecorded (the attempt never started, was cancelled, or says nothing about the
/// upstream), it gives its place back: a half-open breaker's probe slot is freed at once for
/// another attempt, instead of waiting out another `open_for` for a verdict that never comes.
#[derive(Debug)]
#[must_use]
pub struct Admission {
    /// For a half-open probe: the round it was admitted in (a closed breaker's admission holds
    /// nothing).
    pub(super) probe: Option<Probe>,
}

/// A probe admission's claim on its round's probe slots.
#[derive(Debug)]
pub(super) struct Probe {
    pub(super) probes: Arc<Probes>,
    pub(super) round: u32,
    /// Recorded: its slot stays taken (its verdict counted), so dropping it gives nothing back.
    pub(super) recorded: bool,
}

/// The probe slots taken in the current half-open round: the round's number in the high 32
/// bits, the probes started in it in the low 32, so a probe from an earlier round can never be
/// given back into a later one.
#[derive(Debug, Default)]
pub(super) struct Probes(AtomicU64);

impl Probes {
    /// Starts a new round with `started` probes already taken: its number.
    pub(super) fn new_round(&self, started: u32) -> u32 {
        let next = |s: u64| (s >> 32).wrapping_add(1) & u64::from(u32::MAX);
        let previous = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                Some((next(s) << 32) | u64::from(started))
            })
            .unwrap_or_else(|s| s);
        next(previous) as u32
    }

    /// Takes a probe slot if fewer than `max` are taken: the round it was taken in.
    pub(super) fn take(&self, max: u32) -> Option<u32> {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                ((s as u32) < max).then_some(s + 1)
            })
            .ok()
            .map(|s| (s >> 32) as u32)
    }

    /// Gives back a slot taken in `round`, if that round is still the current one.
    pub(super) fn give_back(&self, round: u32) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                ((s >> 32) as u32 == round && s as u32 > 0).then(|| s - 1)
            });
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if !self.recorded {
            self.probes.give_back(self.round);
        }
    }
}
