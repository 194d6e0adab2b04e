//! What the engine answers: retry after a delay, denied with a named reason, or ambiguous.

use std::fmt;
use std::time::Duration;

use crate::{Evidence, PermanentCategory, Pushback};

/// The engine's answer for one failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Retry after `delay`.
    Retry {
        /// How long to wait first (already bounded by `Retry-After`, max backoff and deadline).
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
    /// GOAWAY `NO_ERROR`, `REFUSED_STREAM`, a request handed back unsent) while the upstream
    /// makes progress: retried at once, without a budget token, not counted in the attempts.
    /// Chosen by the attempt loop, never by the engine.
    ConnectionRotated,
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
    /// window ([`MAX_IN_MEMORY_WINDOW`](crate::config::MAX_IN_MEMORY_WINDOW)), even though the
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
    /// Step 9: the status is not retryable (other 4xx, 501, a second 425, a 401 that cannot be
    /// refreshed, a 500 not registered as transient, ...).
    Status(u16),
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
            DenyReason::Status(_) => "status_not_retryable",
        }
    }
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DenyReason::PermanentFailure(c) => write!(f, "permanent failure ({c})"),
            DenyReason::Pushback(p) => write!(f, "pushback ({})", p.as_str()),
            DenyReason::Status(s) => write!(f, "status {s} is not retryable"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// Why the outcome is ambiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AmbiguityReason {
    /// Step 8: the request was (partly) sent, no response came, and the operation is not safely
    /// idempotent.
    SentNoResponse,
    /// The response broke off mid-body on an operation that is not safely idempotent.
    PartialResponse,
    /// 502/503/504 on an operation that is not safely idempotent: a gateway may have forwarded it.
    Status(u16),
}

impl fmt::Display for AmbiguityReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AmbiguityReason::SentNoResponse => f.write_str("sent, no response"),
            AmbiguityReason::PartialResponse => f.write_str("response broke off"),
            AmbiguityReason::Status(s) => write!(f, "status {s} on a write"),
        }
    }
}
