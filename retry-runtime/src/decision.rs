//! What the engine answers: retry after a delay, denied with a named reason, or ambiguous.

use std::fmt;
use std::time::Duration;

use crate::category::{PermanentCategory, Pushback, Rejection};
use crate::evidence::Evidence;

/// The engine's answer for one failed attempt.
///
/// Closed on purpose (not `#[non_exhaustive]`): the loop carries out every answer a custom
/// engine may give, so the set of answers is part of the engine's contract; the reasons
/// inside them are the open part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Retry after `delay`.
    Retry {
        /// How long to wait first: the jittered backoff, at least the server's `Retry-After`,
        /// within the deadline.
        delay: Duration,
        /// Why the failure is retryable.
        reason: RetryReason,
    },
    /// Do not retry; return the failure.
    Denied(DenyReason),
    /// The operation may or may not have happened: neither retry nor report a plain failure.
    Ambiguous(AmbiguityReason),
}

/// Why a retry was allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryReason {
    /// Proven not sent: safe for any method.
    NotSent,
    /// A transport failure on a safely idempotent operation.
    Transport(Evidence),
    /// A retryable status (408, 425, 429, 500 when transient, 502, 503, 504).
    Status(u16),
    /// 401: refresh credentials once, then replay.
    RefreshAuth,
    /// The attempt was lost to connection rotation (a server closing a healthy connection:
    /// GOAWAY `NO_ERROR`, `REFUSED_STREAM`, a request handed back unsent or dropped by hyper's
    /// HTTP/2 dispatcher) while the upstream
    /// makes progress: retried at once, without a budget token, not counted in the attempts.
    /// Chosen by the attempt loop, never by the engine.
    ConnectionRotated,
    /// A reconcile check found that the write did not happen, so it is sent again. Chosen by
    /// the attempt loop (the engine decides it as [`NotSent`](RetryReason::NotSent)).
    ReconciledNotHappened,
}

impl RetryReason {
    /// The stable snake-case name used in traces and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            RetryReason::NotSent => "not_sent",
            RetryReason::Transport(_) => "transport",
            RetryReason::Status(_) => "status",
            RetryReason::RefreshAuth => "refresh_auth",
            RetryReason::ConnectionRotated => "connection_rotated",
            RetryReason::ReconciledNotHappened => "reconciled_not_happened",
        }
    }
}

impl fmt::Display for RetryReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryReason::NotSent => f.write_str("not sent"),
            RetryReason::Transport(e) => write!(f, "transport failure ({e})"),
            RetryReason::Status(s) => write!(f, "status {s}"),
            RetryReason::RefreshAuth => f.write_str("refresh credentials and replay"),
            RetryReason::ConnectionRotated => f.write_str("connection rotated"),
            RetryReason::ReconciledNotHappened => {
                f.write_str("the reconcile check found the write did not happen")
            }
        }
    }
}

/// Why a retry was denied. Each maps to one step of the decision order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DenyReason {
    /// Step 1: the call's attempts, or the operation's shared retry allowance, are used up.
    MaxAttempts,
    /// Step 2: the upstream's retry budget is empty.
    BudgetExhausted,
    /// Step 3: the body is one-shot.
    BodyNotReplayable,
    /// Step 4: part of the response was already handed to the caller.
    ResponseAlreadyDelivered,
    /// Step 5: the runtime is draining (shutdown).
    RuntimeDraining,
    /// Step 6: not enough time left before the deadline (or `Retry-After` points past it).
    Deadline,
    /// Step 9: the server's `Retry-After` asks for a wait longer than the in-memory retry
    /// window ([`MAX_IN_MEMORY_WINDOW`](crate::UpstreamConfig::MAX_IN_MEMORY_WINDOW)), even though the
    /// deadline would allow it: waits that long hold the caller, and belong to a durable queue.
    RetryAfterBeyondWindow,
    /// Step 7: retrying cannot help.
    PermanentFailure(PermanentCategory),
    /// A retrying call below already retried this failure (one retry owner per operation).
    AlreadyRetried,
    /// The callee said "do not retry".
    Pushback(Pushback),
    /// The upstream's circuit breaker is open: failing fast, not retrying.
    CircuitOpen,
    /// The upstream's bulkhead is full: not adding to the queue.
    BulkheadFull,
    /// The upstream currently accepts less than it gets: its adaptive throttle refused the
    /// attempt (see [`throttle`](crate::throttle)).
    Throttled,
    /// Step 9: the status is not retryable (other 4xx, 501, a second 425, a 401 that cannot be
    /// refreshed, a 500 not registered as transient, ...).
    Status(u16),
    /// Step 9: a response arrived but the error reports no status (its [`Classify`] gives no
    /// [`status`](crate::Classify::status)), on a read: it is not retried blind. On a write the
    /// same failure is [`AmbiguityReason::StatusUnknown`].
    ///
    /// [`Classify`]: crate::Classify
    StatusUnknown,
}

impl DenyReason {
    /// The stable snake-case name used in traces and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            DenyReason::MaxAttempts => "max_attempts",
            DenyReason::BudgetExhausted => "budget_exhausted",
            DenyReason::BodyNotReplayable => "body_not_replayable",
            DenyReason::ResponseAlreadyDelivered => "response_already_delivered",
            DenyReason::RuntimeDraining => "runtime_draining",
            DenyReason::Deadline => "deadline",
            DenyReason::RetryAfterBeyondWindow => "retry_after_beyond_window",
            DenyReason::PermanentFailure(_) => "permanent_failure",
            DenyReason::AlreadyRetried => "already_retried",
            DenyReason::Pushback(_) => "pushback",
            DenyReason::CircuitOpen => "circuit_open",
            DenyReason::BulkheadFull => "bulkhead_full",
            DenyReason::Throttled => "throttled",
            DenyReason::Status(_) => "status_not_retryable",
            DenyReason::StatusUnknown => "status_unknown",
        }
    }
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DenyReason::PermanentFailure(c) => write!(f, "permanent failure ({c})"),
            DenyReason::Pushback(p) => write!(f, "pushback ({})", p.as_str()),
            DenyReason::Status(s) => write!(f, "status {s} is not retryable"),
            DenyReason::StatusUnknown => f.write_str(
                "a response arrived but the error reports no status (does its `Classify` delegate to the HTTP error?)",
            ),
            other => f.write_str(other.as_str()),
        }
    }
}

/// Why the outcome is ambiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AmbiguityReason {
    /// Step 8: the request was (partly) sent, no response came, and the operation is not safely
    /// idempotent.
    SentNoResponse,
    /// The response broke off mid-body on an operation that is not safely idempotent.
    PartialResponse,
    /// 502/503/504 on an operation that is not safely idempotent: a gateway may have forwarded it.
    Status(u16),
    /// A response arrived on a write but the error reports no status, so nothing proves the
    /// write did not happen (its [`Classify`](crate::Classify) gives no `status`).
    StatusUnknown,
}

impl fmt::Display for AmbiguityReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AmbiguityReason::SentNoResponse => f.write_str("sent, no response"),
            AmbiguityReason::PartialResponse => f.write_str("response broke off"),
            AmbiguityReason::Status(s) => write!(f, "status {s} on a write"),
            AmbiguityReason::StatusUnknown => f.write_str("a response with no status reported"),
        }
    }
}

/// Why a call stopped and returned its last attempt's error: the attempts it made and the rule
/// that allowed no further one. Handed to the error by [`Classify::stopped`](crate::Classify::stopped),
/// so the caller's error can say "3 attempts; not retried: budget_exhausted" instead of only
/// the last attempt's failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stop {
    /// Attempts made (sent or refused locally), the last one included.
    pub attempts: u32,
    /// Why there was no further attempt.
    pub reason: DenyReason,
}

impl Stop {
    /// A stop after `attempts` attempts, for `reason`.
    pub const fn new(attempts: u32, reason: DenyReason) -> Self {
        Stop { attempts, reason }
    }
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.attempts == 1 { "" } else { "s" };
        write!(
            f,
            "{} attempt{s}; not retried: {}",
            self.attempts, self.reason
        )
    }
}

/// The facts the engine decides from, copied out of a [`Classify`](crate::Classify) error so the error itself
/// (and any response or connection it holds) can be dropped before a backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Failure {
    /// How far the attempt got.
    pub evidence: Evidence,
    /// The response status, if any.
    pub status: Option<u16>,
    /// The server's requested delay, if any.
    pub retry_after: Option<Duration>,
    /// A permanent category, if any.
    pub permanent: Option<PermanentCategory>,
    /// The response was already (partly) handed to the caller.
    pub response_delivered: bool,
    /// A retrying call below already retried this failure.
    pub already_retried: bool,
    /// The callee's "do not retry" signal.
    pub pushback: Option<Pushback>,
    /// A local refusal (breaker, bulkhead).
    pub rejection: Option<Rejection>,
    /// The attempt was lost to connection rotation ([`Classify::connection_rotated`](crate::Classify::connection_rotated)).
    pub connection_rotated: bool,
}

impl Failure {
    /// A failure with only its evidence known.
    pub const fn new(evidence: Evidence) -> Self {
        Failure {
            evidence,
            status: None,
            retry_after: None,
            permanent: None,
            response_delivered: false,
            already_retried: false,
            pushback: None,
            rejection: None,
            connection_rotated: false,
        }
    }

    /// A response with `status` (evidence [`Evidence::ResponseReceived`]).
    pub const fn status(status: u16) -> Self {
        let mut f = Failure::new(Evidence::ResponseReceived);
        f.status = Some(status);
        f
    }

    /// Marks the attempt as refused locally (nothing was sent).
    pub fn reject(&mut self, rejection: Rejection) {
        self.evidence = Evidence::NotSent;
        self.rejection = Some(rejection);
    }

    /// Marks the attempt as lost to connection rotation.
    pub const fn rotated(mut self) -> Self {
        self.connection_rotated = true;
        self
    }

    /// Sets the `Retry-After` delay.
    pub const fn with_retry_after(mut self, delay: Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }

    /// Sets the permanent category.
    pub const fn with_permanent(mut self, category: PermanentCategory) -> Self {
        self.permanent = Some(category);
        self
    }
}
