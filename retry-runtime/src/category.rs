//! The named kinds of failure an error can report: a permanent category, a callee's pushback,
//! a local refusal. Plain values, shared by the errors that report them and the rules that read
//! them.

use std::fmt;

/// A failure that can never be fixed by sending the same request again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PermanentCategory {
    /// The upstream answered with a client error (4xx): the request is wrong, retrying repeats it.
    Contract,
    /// The response was complete but could not be decoded (bad JSON, wrong schema).
    Decode,
    /// Credentials were refused and cannot be refreshed.
    Auth,
    /// The request was refused locally before sending because it is a bug (e.g. a write sent
    /// through an adapter declared as a read, an invalid idempotency key).
    InvalidRequest,
    /// The client or registry is misconfigured (unknown upstream, bad TLS setup).
    Configuration,
    /// The caller cancelled the operation.
    Cancelled,
    /// Any other failure the application marks as permanent.
    Other,
    /// A retrying call below ended [ambiguous](crate::Ambiguous): the write may have happened,
    /// and only that call's key (or a reconcile check) can settle it; retrying above it could
    /// repeat it.
    OutcomeUnknown,
}

impl PermanentCategory {
    /// The stable lower-case name used in traces and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            PermanentCategory::Contract => "contract",
            PermanentCategory::Decode => "decode",
            PermanentCategory::Auth => "auth",
            PermanentCategory::InvalidRequest => "invalid_request",
            PermanentCategory::Configuration => "configuration",
            PermanentCategory::Cancelled => "cancelled",
            PermanentCategory::Other => "other",
            PermanentCategory::OutcomeUnknown => "outcome_unknown",
        }
    }
}

impl fmt::Display for PermanentCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A callee's explicit "do not retry" signal on its error response (like gRPC's pushback or the
/// SRE book's "overloaded; don't retry").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Pushback {
    /// The callee is overloaded: do not add retries to its load.
    Overloaded,
    /// The callee already spent the retries for this operation (it retried below us).
    RetriesSpent,
}

impl Pushback {
    /// The stable lower-case name, also the value of the pushback response header.
    pub const fn as_str(self) -> &'static str {
        match self {
            Pushback::Overloaded => "overloaded",
            Pushback::RetriesSpent => "retries-spent",
        }
    }
}

/// An attempt refused locally, before anything was sent, to protect the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rejection {
    /// The upstream's circuit breaker is open.
    CircuitOpen,
    /// The upstream's bulkhead had no free slot before the deadline.
    BulkheadFull,
    /// The upstream's adaptive throttle refused it: the upstream currently accepts less than
    /// it gets (see [`throttle`](crate::throttle)).
    Throttled,
}

impl Rejection {
    /// The stable snake-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Rejection::CircuitOpen => "circuit_open",
            Rejection::BulkheadFull => "bulkhead_full",
            Rejection::Throttled => "throttled",
        }
    }
}
