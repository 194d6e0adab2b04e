//! The eligibility engine: the nine steps of the decision order, in order.
//!
//! Each step can only deny; none re-enables what an earlier one denied. The engine is pure: it
//! reads a [`Context`] and a [`Failure`], spends nothing, and sleeps nothing. The attempt loop
//! spends the budget token only when the answer is [`Decision::Retry`], so a denied retry is
//! free.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::config::UpstreamConfig;
use crate::decision::{AmbiguityReason, Decision, DenyReason, Failure, RetryReason};
use crate::evidence::Evidence;
use crate::replay::Replayability;

/// Whether repeating the operation is harmless.
///
/// Closed on purpose (not `#[non_exhaustive]`): the three kinds of operation the macro and the
/// engine tell apart (a read, a keyed write the upstream deduplicates, any other write).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Safety {
    /// A read method (GET, HEAD, OPTIONS).
    Read,
    /// A write with an idempotency key the upstream deduplicates.
    KeyedWrite,
    /// A write without a key, or with a key the upstream does not promise to deduplicate.
    UnsafeWrite,
}

impl Safety {
    /// Classifies a method and key against the upstream's dedup promise.
    pub fn of(method: &http::Method, has_key: bool, upstream_dedups: bool) -> Safety {
        if is_read(method) {
            Safety::Read
        } else if has_key && upstream_dedups {
            Safety::KeyedWrite
        } else {
            Safety::UnsafeWrite
        }
    }

    /// "Safely idempotent": repeating it cannot apply it twice (a read, or a keyed write the
    /// upstream deduplicates).
    pub const fn is_safe(self) -> bool {
        !matches!(self, Safety::UnsafeWrite)
    }
}

/// GET, HEAD and OPTIONS (TRACE too, though nobody should send it).
pub fn is_read(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS | http::Method::TRACE
    )
}

/// Everything the engine knows about the call, besides the failure itself.
///
/// Non-exhaustive, so a new fact is not a breaking change for custom engines: a test of one
/// starts from [`Context::new`] and sets the public fields it needs.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Context<'a> {
    /// Attempts made so far, the failed one included (1 after the first attempt).
    pub attempt: u32,
    /// The call's own limit.
    pub max_attempts: u32,
    /// Retries left in the operation's shared allowance.
    pub operation_retries_left: u32,
    /// Whether the upstream's budget has a token (peeked, not spent).
    pub budget_has_token: bool,
    /// The request body's replayability.
    pub replay: Replayability,
    /// Whether the runtime is draining.
    pub draining: bool,
    /// Time left before the deadline.
    pub remaining: Duration,
    /// No attempt starts with less time left than this.
    pub min_attempt_budget: Duration,
    /// Whether repeating the operation is harmless.
    pub safety: Safety,
    /// Whether the upstream registered 500 as transient.
    pub transient_500: bool,
    /// Whether a 401 refresh hook exists and was not used yet in this call.
    pub can_refresh_auth: bool,
    /// The backoff schedule.
    pub backoff: &'a Backoff,
    /// The previous delay (zero before the first retry).
    pub previous_delay: Duration,
}

/// What a hypothetical question keeps of a call (see
/// [`EligibilityEngine::decide_with_room`]): what it is, not how far it got. Non-exhaustive:
/// build it with [`CallFacts::new`] and set the public fields.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct CallFacts<'a> {
    /// Whether repeating the operation is harmless.
    pub safety: Safety,
    /// The request body's replayability.
    pub replay: Replayability,
    /// No attempt starts with less time left than this.
    pub min_attempt_budget: Duration,
    /// Whether the upstream registered 500 as transient.
    pub transient_500: bool,
    /// The backoff schedule.
    pub backoff: &'a Backoff,
}

impl<'a> Context<'a> {
    /// A call that has room to retry, scheduled by `backoff`: its first failed attempt of 2,
    /// one retry left in the operation's allowance, a budget token, the in-memory window's
    /// time to spare ([`MAX_IN_MEMORY_WINDOW`](UpstreamConfig::MAX_IN_MEMORY_WINDOW)) and no minimum per attempt, no shutdown, a
    /// safe read with a replayable body, 500 not transient, no credentials refresh, and no
    /// previous delay. The attempt loop fills every field from the call; a test of a custom
    /// engine changes the ones it is about.
    pub const fn new(backoff: &'a Backoff) -> Self {
        Context {
            attempt: 1,
            max_attempts: 2,
            operation_retries_left: 1,
            budget_has_token: true,
            replay: Replayability::Replayable,
            draining: false,
            remaining: UpstreamConfig::MAX_IN_MEMORY_WINDOW,
            min_attempt_budget: Duration::ZERO,
            safety: Safety::Read,
            transient_500: false,
            can_refresh_auth: false,
            backoff,
            previous_delay: Duration::ZERO,
        }
    }
}

impl<'a> CallFacts<'a> {
    /// A safe read with a replayable body, scheduled by `backoff`, with no minimum per attempt
    /// and 500 not transient.
    pub const fn new(backoff: &'a Backoff) -> Self {
        CallFacts {
            safety: Safety::Read,
            replay: Replayability::Replayable,
            min_attempt_budget: Duration::ZERO,
            transient_500: false,
            backoff,
        }
    }
}

/// Decides whether a failed attempt is retried. Implement it to replace the decision order;
/// most users keep [`DefaultEngine`].
pub trait EligibilityEngine: Send + Sync {
    /// Decides for one failed attempt. `rng` is the call's seedable random source for jitter.
    fn decide(&self, ctx: &Context<'_>, failure: &Failure, rng: &mut fastrand::Rng) -> Decision;

    /// What [`decide`](Self::decide) answers for `failure` when the call has room: its first
    /// attempt of two, the operation's allowance, a budget token and the in-memory window's
    /// time to spare, no shutdown, no credentials refresh left. The attempt loop asks it
    /// whether a failure is the upstream's answer or a blip: a hedged copy that another copy
    /// could not improve on ends the attempt, and a durable call defers only a failure the
    /// rules retry when they can. The delay of a `Retry` answer means nothing here.
    fn decide_with_room(&self, failure: &Failure, facts: &CallFacts<'_>) -> Decision {
        let ctx = Context {
            replay: facts.replay,
            min_attempt_budget: facts.min_attempt_budget,
            safety: facts.safety,
            transient_500: facts.transient_500,
            ..Context::new(facts.backoff)
        };
        // The delay is not used: any seed will do.
        self.decide(&ctx, failure, &mut fastrand::Rng::with_seed(0))
    }
}

/// The default decision order (the crate docs list its steps).
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultEngine;

impl EligibilityEngine for DefaultEngine {
    fn decide(&self, ctx: &Context<'_>, f: &Failure, rng: &mut fastrand::Rng) -> Decision {
        use DenyReason::*;
        // 1. attempts exhausted (this call's, or the operation's shared allowance)
        if ctx.attempt >= ctx.max_attempts || ctx.operation_retries_left == 0 {
            return Decision::Denied(MaxAttempts);
        }
        // 2. retry budget empty
        if !ctx.budget_has_token {
            return Decision::Denied(BudgetExhausted);
        }
        // 3. body not replayable
        if !ctx.replay.can_replay() {
            return Decision::Denied(BodyNotReplayable);
        }
        // 4. first byte already delivered
        if f.response_delivered {
            return Decision::Denied(ResponseAlreadyDelivered);
        }
        // 5. runtime draining
        if ctx.draining {
            return Decision::Denied(RuntimeDraining);
        }
        // 6. remaining deadline below the minimum attempt budget
        if ctx.remaining < ctx.min_attempt_budget {
            return Decision::Denied(Deadline);
        }
        // 7. permanent failure category
        if let Some(category) = f.permanent {
            return Decision::Denied(PermanentFailure(category));
        }
        // 7b. one retry owner per operation: a failure retried below, or a callee's pushback.
        if f.already_retried {
            return Decision::Denied(AlreadyRetried);
        }
        if let Some(p) = f.pushback {
            return Decision::Denied(Pushback(p));
        }
        match f.rejection {
            Some(crate::category::Rejection::CircuitOpen) => return Decision::Denied(CircuitOpen),
            Some(crate::category::Rejection::BulkheadFull) => {
                return Decision::Denied(BulkheadFull);
            }
            Some(crate::category::Rejection::Throttled) => return Decision::Denied(Throttled),
            None => {}
        }
        // 8. sent, no response, on an operation that is not safely idempotent
        if f.evidence == Evidence::SentNoResponse && !ctx.safety.is_safe() {
            return Decision::Ambiguous(AmbiguityReason::SentNoResponse);
        }
        // 9. status- and failure-specific rules
        let reason = match rule(ctx, f) {
            Ok(reason) => reason,
            Err(other) => return other,
        };
        match delay(ctx, f, reason, rng) {
            Ok(delay) => Decision::Retry { delay, reason },
            Err(denied) => Decision::Denied(denied),
        }
    }
}

/// Step 9: the retry reason, or the final answer when the rule does not allow a retry.
fn rule(ctx: &Context<'_>, f: &Failure) -> Result<RetryReason, Decision> {
    let safe = ctx.safety.is_safe();
    match (f.evidence, f.status) {
        (Evidence::NotSent, _) => Ok(RetryReason::NotSent),
        (Evidence::SentNoResponse, _) => Ok(RetryReason::Transport(Evidence::SentNoResponse)),
        (Evidence::PartialResponse, status) if status.is_none_or(|s| (200..300).contains(&s)) => {
            if safe {
                Ok(RetryReason::Transport(Evidence::PartialResponse))
            } else {
                Err(Decision::Ambiguous(AmbiguityReason::PartialResponse))
            }
        }
        (_, Some(status)) => status_rule(ctx, status),
        // A response arrived but the error cannot say which: never read as some status. For a
        // write it may have executed, so the caller must reconcile; a read is not retried blind.
        (_, None) if safe => Err(Decision::Denied(DenyReason::StatusUnknown)),
        (_, None) => Err(Decision::Ambiguous(AmbiguityReason::StatusUnknown)),
    }
}

/// The status rules: which statuses are retried, for which methods.
pub fn status_rule(ctx: &Context<'_>, status: u16) -> Result<RetryReason, Decision> {
    let safe = ctx.safety.is_safe();
    let deny = Err(Decision::Denied(DenyReason::Status(status)));
    match status {
        408 | 429 => Ok(RetryReason::Status(status)),
        // At most one retry, and only after the first attempt (RFC 8470 §5.2).
        425 if ctx.attempt == 1 => Ok(RetryReason::Status(425)),
        425 => deny,
        401 if safe && ctx.replay.can_replay() && ctx.can_refresh_auth => {
            Ok(RetryReason::RefreshAuth)
        }
        401 => deny,
        // The Idempotency-Key draft's "a request with this key is still being processed":
        // the key is held by the first attempt, so sending it again cannot run the write
        // twice; the retry gets the first attempt's response once it completed.
        409 if ctx.safety == Safety::KeyedWrite => Ok(RetryReason::Status(409)),
        // The draft's "this key was used for another request" (and a contract error anyway):
        // the same request gets the same answer.
        422 => Err(Decision::Denied(DenyReason::PermanentFailure(
            crate::category::PermanentCategory::Contract,
        ))),
        500 if ctx.transient_500 && safe => Ok(RetryReason::Status(500)),
        500 => deny,
        502..=504 if safe => Ok(RetryReason::Status(status)),
        502..=504 => Err(Decision::Ambiguous(AmbiguityReason::Status(status))),
        _ => deny,
    }
}

/// The delay before the retry: the jittered backoff, or the server's `Retry-After` when that is
/// longer. The hint is a floor (RFC 9110 §10.2.3: how long the client ought to wait), never a
/// way under the backoff: a server or proxy saying `0` under overload would otherwise get
/// every client's retry at once, unjittered. (AWS's SDKs clamp `x-amz-retry-after` the same
/// way, to no less than the computed backoff.) Denied with [`DenyReason::Deadline`] when
/// waiting would leave less than the minimum attempt budget, and with
/// [`DenyReason::RetryAfterBeyondWindow`] when the server asks for a wait beyond the
/// in-memory window (a deadline inherited from a scope may be longer than the window; no
/// single wait in memory is).
fn delay(
    ctx: &Context<'_>,
    f: &Failure,
    reason: RetryReason,
    rng: &mut fastrand::Rng,
) -> Result<Duration, DenyReason> {
    let room = ctx
        .remaining
        .checked_sub(ctx.min_attempt_budget)
        .ok_or(DenyReason::Deadline)?;
    if reason == RetryReason::RefreshAuth {
        return Ok(Duration::ZERO);
    }
    // A server's hint is a floor, never a reason to retry past the deadline.
    let floor = match f.retry_after {
        Some(hint) if hint > room => return Err(DenyReason::Deadline),
        Some(hint) if hint > UpstreamConfig::MAX_IN_MEMORY_WINDOW => {
            return Err(DenyReason::RetryAfterBeyondWindow);
        }
        Some(hint) => hint,
        None => Duration::ZERO,
    };
    let backoff = ctx.backoff.delay(ctx.attempt, ctx.previous_delay, rng);
    Ok(backoff
        .min(room)
        .min(UpstreamConfig::MAX_IN_MEMORY_WINDOW)
        .max(floor))
}

#[cfg(test)]
mod tests;
