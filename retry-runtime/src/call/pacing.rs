//! What the call remembers between attempts for its upstream's throttle and quotas: what the
//! throttle had answered when the last attempt was admitted, when it counted the call's own
//! attempts, the call's partition, and whether its attempt is one the throttle let go after it
//! waited (`pace`).

use crate::partition::Partition;
use crate::throttle::marks::Own;
use crate::throttle::{Answers, Throttle};
use crate::window::Tick;

/// Whether the call's attempt is one the throttle let go after it waited (`pace`): from a slow
/// upstream's backlog, or as its probe.
#[derive(Debug, Clone, Copy)]
pub(super) enum LetGo {
    /// Its attempt went the ordinary way: admitted, not let go after waiting.
    Ordinary,
    /// The call is held work (a durable queue's replay): its first attempt goes only when the
    /// throttle lets it go at the pace of the upstream's answers (`pace`).
    Held,
    /// Its attempt is under way; it was let go at this tick of the throttle's window.
    Sent(Tick),
    /// Its attempt failed: its retry waits again.
    Failed,
}

/// Who waits for a call the throttle holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waits {
    /// Its caller, and the upstream has accepted an attempt since the call was refused.
    Caller,
    /// Its caller, and the upstream has accepted nothing since the call was refused.
    CallerUntilAccepted,
    /// Nobody: held work (a durable replay), which goes into capacity no caller needs.
    Nobody,
}

/// How the throttle let a waiting attempt go (the `let_go` event's `how`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LetGoHow {
    /// The upstream accepts again, and the backlog let it go at the pace of its answers.
    Backlog,
    /// Nobody else asked the upstream anything: it went as the probe.
    Probe,
}

impl LetGoHow {
    /// The name the `let_go` event gives it.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            LetGoHow::Backlog => "backlog",
            LetGoHow::Probe => "probe",
        }
    }
}

/// The call's pacing state.
#[derive(Debug)]
pub(super) struct Pacing {
    /// What the upstream's throttle had answered when the last attempt was admitted: a retry
    /// learns from it whether the upstream failed every call since.
    answers_mark: Answers,
    /// When the upstream's throttle counted the call's own attempts: a retry is judged on
    /// what the other calls met.
    own: Own,
    /// The part of the upstream's traffic the call belongs to, for its quotas.
    partition: Option<Partition>,
    /// Whether the attempt under way (or the next, after a free rotation retry) is that of a
    /// call the throttle let go from a slow upstream's backlog, or as its probe, and how it
    /// ended.
    let_go: LetGo,
}

impl Pacing {
    /// A call of `partition` that has sent nothing yet, `held` work (a durable queue's replay)
    /// or not.
    pub(super) fn new(partition: Option<Partition>, held: bool) -> Self {
        Pacing {
            answers_mark: Answers::default(),
            own: Own::default(),
            partition,
            let_go: match held {
                true => LetGo::Held,
                false => LetGo::Ordinary,
            },
        }
    }

    /// The part of the upstream's traffic the call belongs to.
    #[inline]
    pub(super) fn partition(&self) -> Option<Partition> {
        self.partition
    }

    /// An attempt is admitted: marks what `throttle` has answered so far.
    #[inline]
    pub(super) fn mark_answers(&mut self, throttle: Option<&Throttle>) {
        if let Some(throttle) = throttle {
            self.answers_mark = throttle.answers();
        }
    }

    /// What the throttle had answered when the last attempt was admitted.
    #[inline]
    pub(super) fn answers_mark(&self) -> Answers {
        self.answers_mark
    }

    /// The throttle counted one of the call's attempts at `tick`.
    #[inline]
    pub(super) fn counted(&mut self, tick: Tick) {
        self.own.counted(tick);
    }

    /// The call's own attempts in `throttle`'s window at `tick`.
    #[inline]
    pub(super) fn own_in_window(&self, throttle: &Throttle, tick: Tick) -> u32 {
        self.own.in_window(throttle, tick)
    }

    /// Whether the call's attempt is one the throttle let go, and how it went.
    #[inline]
    pub(super) fn let_go(&self) -> LetGo {
        self.let_go
    }

    /// The throttle let the call's waiting attempt go at `tick`, or its let-go attempt ended
    /// and what it left is `LetGo::Ordinary` or `LetGo::Failed`.
    #[inline]
    pub(super) fn set_let_go(&mut self, let_go: LetGo) {
        self.let_go = let_go;
    }

    /// Whether the attempt the throttle let go failed: then the retry waits again, and the
    /// mark is cleared (the next attempt goes the ordinary way unless let go again).
    #[inline]
    pub(super) fn take_failed_let_go(&mut self) -> bool {
        let failed = matches!(self.let_go, LetGo::Failed);
        if failed {
            self.let_go = LetGo::Ordinary;
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_let_go_is_taken_once() {
        let mut pacing = Pacing::new(None, false);
        assert!(!pacing.take_failed_let_go());
        pacing.set_let_go(LetGo::Failed);
        assert!(pacing.take_failed_let_go());
        assert!(matches!(pacing.let_go(), LetGo::Ordinary));
        assert!(!pacing.take_failed_let_go());
    }

    #[test]
    fn without_a_throttle_nothing_is_marked() {
        let mut pacing = Pacing::new(None, false);
        pacing.mark_answers(None);
        assert_eq!(pacing.answers_mark(), Answers::default());
        assert!(pacing.partition().is_none());
    }
}
