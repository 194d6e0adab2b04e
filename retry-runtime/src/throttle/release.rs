//! Holding and letting go: whether a refused call may wait, and when a waiting call goes (from
//! the backlog, as held work, or as the probe). The rules and their reasons are in the
//! [module docs](super#holding).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::marks::{Asked, WaitingPlace};
use super::{FAILED_PROBES, Throttle, duration_nanos, take_turn};
use crate::window::{SLOTS, Tick};

impl Throttle {
    /// Whether a refused call may wait at `tick`: the upstream has not failed every attempt
    /// for [`ThrottleConfig::hold`] (see "Holding" in the module docs).
    #[inline]
    pub(crate) fn holds_at(&self, tick: Tick) -> bool {
        self.hold_ends_after(tick).is_some()
    }

    /// How long a call asking at `tick` may still wait: the rest of the hold, counted from
    /// the start of the upstream's failing spell; [`Duration::MAX`] while it is not failing;
    /// `None` once the hold is over.
    #[inline]
    pub(crate) fn hold_ends_after(&self, tick: Tick) -> Option<Duration> {
        let since = match self.failing_since.load(Ordering::Relaxed) {
            0 => return Some(Duration::MAX),
            since => since - 1,
        };
        let left = since
            .saturating_add(duration_nanos(self.config.hold))
            .saturating_sub(tick.nanos());
        (left > 0).then(|| Duration::from_nanos(left))
    }

    /// A place among the calls waiting for this upstream, if one is free: given back when
    /// dropped.
    #[inline]
    pub(crate) fn enter_waiting(&self) -> Option<WaitingPlace<'_>> {
        let before = self.waiting.fetch_add(1, Ordering::Relaxed);
        if before >= self.config.max_waiting {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(WaitingPlace(self))
    }

    /// Calls waiting for admission now.
    pub fn waiting(&self) -> u32 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Whether a waiting call goes at `tick`, counting it when it does: the upstream [accepts
    /// again](Self::accepts_again_at), and either the pace lets it go or the backlog has
    /// nothing in flight (every call let go in the window was answered, and accepted).
    ///
    /// The pace: the calls let go in the window stay within `release_ratio` times the answers
    /// the upstream accepted from the others, less one per attempt of the window that timed
    /// out (`released + 1 <= allowance = r x (accepted - released) - timed_out`, each call let
    /// go counted as accepted), and they go one at a time, a window's `allowance`-th part
    /// apart: the window's allowance let go at one instant would land on the upstream
    /// together, on top of the live calls whose answers made it. So the backlog adds at most
    /// `r` times what the upstream currently accepts from the others, spread as they are,
    /// shrinking as its attempts start to time out; plus one call at a time on its own answers
    /// when no other call is left.
    #[inline]
    pub(crate) fn lets_go_at(&self, tick: Tick) -> bool {
        let epoch = self.clock.epoch_of(tick);
        let (sent, accepted) = self.counts(epoch);
        if !self.accepts_again(sent, accepted) {
            return false;
        }
        let released = self.released.sum(epoch) as f64;
        let timed_out = self.slow.sum(epoch) as f64;
        let allowance = self.config.release_ratio * (accepted as f64 - released) - timed_out;
        // With too few other calls' answers in the window for the pace to let one go, one at a
        // time on the backlog's own answers (never beside a pace that lets calls go).
        let released_accepted = self.released_accepted.sum(epoch);
        let others = accepted.saturating_sub(released_accepted) as f64;
        let alone = self.config.release_ratio * others < 1.0;
        let idle = alone && released as u64 <= released_accepted;
        let paced = || released + 1.0 <= allowance && self.paced_turn(tick, allowance);
        if !(idle || paced()) {
            return false;
        }
        self.count_released(epoch);
        true
    }

    /// Whether the pace's next call goes at `tick`, claiming the turn: the first to ask at
    /// least `window / allowance` after the last call the pace let go (`allowance` >= 1).
    #[inline]
    fn paced_turn(&self, tick: Tick, allowance: f64) -> bool {
        // Rounded up: a whole number of nanoseconds at least the gap, as ticks are.
        let gap = (duration_nanos(self.config.window) as f64 / allowance).ceil() as u64;
        take_turn(&self.paced_at, tick, gap)
    }

    /// Whether held work (a durable replay: nobody waits for its answer) goes at `tick`,
    /// counting it when it does: as a [waiting call](Self::lets_go_at) would, and only into
    /// capacity no caller needs: no call waits for this upstream, the upstream does not queue
    /// (its recent answers take less than twice its base latency, and no attempt of the window
    /// timed out), and no call let go is still in flight. So the backlog goes one at a time,
    /// clocked by its own answers, and stops as soon as a queue forms: work nobody waits for
    /// yields to work somebody does, as a scavenger transport yields to the traffic it shares
    /// a link with (LEDBAT, RFC 6817).
    #[inline]
    pub(crate) fn lets_held_go_at(&self, tick: Tick) -> bool {
        let epoch = self.clock.epoch_of(tick);
        if self.waiting() > 0
            || self.slow.sum(epoch) > 0
            || self.released.sum(epoch) > self.released_answered.sum(epoch)
            || self.queueing.queues_at(tick, self.config.window)
        {
            return false;
        }
        self.lets_go_at(tick)
    }

    #[inline]
    fn count_released(&self, epoch: u64) {
        self.released.add(epoch, 1);
        self.released_ever.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an accepted answer to the attempt of a call [let go](Self::lets_go_at) or sent as
    /// the [probe](Self::probes_since) at `let_go`. It counts where the call was counted as let
    /// go, so that the two leave the window together, and a call let go a window ago and still
    /// in flight is forgotten with everything else of that time.
    #[inline]
    pub(crate) fn accepted_let_go(&self, let_go: Tick) {
        let epoch = self.clock.epoch_of(let_go);
        self.released_accepted.add(epoch, 1);
        self.released_answered.add(epoch, 1);
    }

    /// Counts a failed answer to the attempt of a call let go at `let_go` (see
    /// [`accepted_let_go`](Self::accepted_let_go)): no longer in flight.
    #[inline]
    pub(crate) fn failed_let_go(&self, let_go: Tick) {
        self.released_answered.add(self.clock.epoch_of(let_go), 1);
    }

    /// A mark, at `tick`, of how often the upstream has been asked anything (attempts
    /// answered, waiting calls let go; a refused attempt asks nothing), to compare with later:
    /// [`probes_since`](Self::probes_since). A mark still current is kept, not taken again,
    /// so that it tells how long nobody has asked.
    #[inline]
    pub(crate) fn asked(&self, previous: Option<Asked>, tick: Tick) -> Asked {
        let count = self.accepted_ever.load(Ordering::Relaxed)
            + self.failed_ever.load(Ordering::Relaxed)
            + self.released_ever.load(Ordering::Relaxed);
        match previous {
            Some(previous) if previous.count == count => previous,
            _ => Asked { count, at: tick },
        }
    }

    /// Whether a waiting call goes at `tick` as the upstream's probe, counting it (as a call
    /// let go) when it does: since `mark`, at least a tenth of the window ago (a step of the
    /// window's clock), no attempt was answered and no waiting call was let go, no call let
    /// go is still in flight, and fewer than [`FAILED_PROBES`] of those let go in the window
    /// failed: nobody is getting an answer from the upstream. Without it, calls that all wait
    /// (new calls refused, or none coming) would learn nothing until their hold ends, and a
    /// lone call waiting for its retry would wait for a window to pass, not for its backoff.
    /// While other calls' attempts are answered, the mark moves and no waiting call probes;
    /// while a probe is in flight no other goes, and an upstream that fails them gets at most
    /// [`FAILED_PROBES`] a window, only during the hold.
    #[inline]
    pub(crate) fn probes_since(&self, mark: Asked, tick: Tick) -> bool {
        let quiet = duration_nanos(self.config.window) / SLOTS as u64;
        if self.asked(Some(mark), tick) != mark || tick.nanos() < mark.at.nanos() + quiet {
            return false;
        }
        let epoch = self.clock.epoch_of(tick);
        let released = self.released.sum(epoch);
        if released > self.released_answered.sum(epoch)
            || released >= self.released_accepted.sum(epoch) + FAILED_PROBES
        {
            return false;
        }
        self.count_released(epoch);
        true
    }

    /// Whether the upstream accepts again, at `tick`: it accepted attempts in the window, and
    /// all that first attempts may reach (no first attempt would be refused). An empty window
    /// is no evidence: a window the throttle emptied by refusing everything would otherwise let
    /// every waiting call go at once into an upstream that still accepts nothing.
    #[cfg(test)]
    pub(crate) fn accepts_again_at(&self, tick: Tick) -> bool {
        let (sent, accepted) = self.counts(self.clock.epoch_of(tick));
        self.accepts_again(sent, accepted)
    }

    /// [`accepts_again_at`](Self::accepts_again_at) for a window's counts.
    #[inline]
    fn accepts_again(&self, sent: f64, accepted: u64) -> bool {
        accepted > 0 && sent <= self.config.multiplier * accepted as f64
    }
}
