//! Whether a call that stopped did so on a failure time can clear: what a durable call hands
//! to its queue instead of failing.

use std::time::Duration;

use super::state::Call;
use crate::decision::{Decision, DenyReason, Failure};
use crate::engine::CallFacts;
use crate::replay::Replayability;

/// Why a call stopped, when its failure is one that time can clear: the retries, the budget,
/// the deadline or the in-memory window ran out on a failure the rules would have retried, or
/// the upstream's breaker or bulkhead turned the attempt away. A durable call hands such a
/// call to its queue instead of failing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransientStop {
    /// What stopped the retries.
    pub reason: DenyReason,
    /// The wait the upstream asked for, if any.
    pub retry_after: Option<Duration>,
}

impl Call<'_> {
    /// After the call ended (with [`Step::Done`](super::Step::Done) carrying an error, or
    /// [`Step::Ambiguous`](super::Step::Ambiguous)): the transient failure it stopped on, when
    /// replaying it later with the same key is safe (a read, or a write with a key the upstream
    /// deduplicates). `None` for a permanent failure, or for a write that repeating could apply
    /// twice.
    pub fn deferrable(&self) -> Option<TransientStop> {
        let (reason, failure) = self.outcome.stopped()?;
        (self.request.safety().is_safe() && self.is_transient(reason, &failure)).then_some(
            TransientStop {
                reason,
                retry_after: failure.retry_after,
            },
        )
    }

    /// Whether the failure that stopped the call for `reason` is one that time can clear: a
    /// refusal by the breaker or bulkhead, the callee's pushback, shutdown, a wait longer than
    /// the in-memory window, or retries, budget or deadline spent on a failure the engine
    /// retries when there is room (asked with room: a 400 on the last attempt is not
    /// transient, a 503 is).
    fn is_transient(&self, reason: DenyReason, failure: &Failure) -> bool {
        match reason {
            DenyReason::CircuitOpen
            | DenyReason::BulkheadFull
            | DenyReason::Throttled
            | DenyReason::RuntimeDraining
            | DenyReason::RetryAfterBeyondWindow
            | DenyReason::Pushback(_) => true,
            DenyReason::MaxAttempts | DenyReason::BudgetExhausted | DenyReason::Deadline => {
                let mut roomy = *failure;
                roomy.retry_after = None;
                roomy.already_retried = false;
                let facts = self.facts(
                    self.request.replay(),
                    self.upstream.config().min_attempt_budget,
                );
                matches!(
                    self.registry.engine().decide_with_room(&roomy, &facts),
                    Decision::Retry { .. }
                        | Decision::Denied(
                            DenyReason::CircuitOpen
                                | DenyReason::BulkheadFull
                                | DenyReason::Throttled
                                | DenyReason::Pushback(_)
                        )
                )
            }
            _ => false,
        }
    }

    /// The facts of this call a hypothetical question to the engine keeps, with the body's
    /// `replay` and the `min_attempt_budget` the question assumes.
    pub(super) fn facts(
        &self,
        replay: Replayability,
        min_attempt_budget: Duration,
    ) -> CallFacts<'_> {
        let config = self.upstream.config();
        CallFacts {
            safety: self.request.safety(),
            replay,
            min_attempt_budget,
            transient_500: config.transient_500,
            backoff: &config.backoff,
        }
    }
}
