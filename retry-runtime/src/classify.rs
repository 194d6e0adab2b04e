//! How an error tells the engine what happened: the [`Classify`] trait.
//!
//! The loop never inspects error types itself. Any error that can say what it knows (its
//! [`Evidence`], HTTP status, `Retry-After`, failure category) can be retried safely; the
//! runtime's own [`Error`](crate::Error) and the HTTP integration's errors implement it, and an
//! application error usually delegates to the one it wraps.

use std::fmt;
use std::time::Duration;

use crate::Evidence;

/// A failure that can never be fixed by sending the same request again (spec 000 step 7).
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
pub enum Rejection {
    /// The upstream's circuit breaker is open.
    CircuitOpen,
    /// The upstream's bulkhead had no free slot before the deadline.
    BulkheadFull,
}

impl Rejection {
    /// The stable snake-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Rejection::CircuitOpen => "circuit_open",
            Rejection::BulkheadFull => "bulkhead_full",
        }
    }
}

/// What a failed attempt's error knows about itself. Implement it for your adapter's error type
/// (usually by delegating to the transport error it wraps) so the engine can decide.
///
/// Only [`evidence`](Classify::evidence) is required; every other fact defaults to "unknown".
///
/// ```
/// use retry_runtime::{Classify, Evidence};
///
/// #[derive(Debug)]
/// enum AdapterError {
///     Transport(retry_runtime::Error),
///     Rejected { code: String },
/// }
///
/// impl Classify for AdapterError {
///     fn evidence(&self) -> Evidence {
///         match self {
///             AdapterError::Transport(e) => e.evidence(),
///             AdapterError::Rejected { .. } => Evidence::ResponseReceived,
///         }
///     }
///     fn permanent(&self) -> Option<retry_runtime::PermanentCategory> {
///         match self {
///             AdapterError::Transport(e) => e.permanent(),
///             AdapterError::Rejected { .. } => Some(retry_runtime::PermanentCategory::Contract),
///         }
///     }
/// }
/// ```
pub trait Classify {
    /// How far the attempt is proven to have got.
    fn evidence(&self) -> Evidence;

    /// The HTTP status of the response, when one arrived.
    fn status(&self) -> Option<u16> {
        None
    }

    /// The server's `Retry-After`, already parsed into a delay from now (see
    /// [`retry_after::parse`](crate::retry_after::parse)).
    fn retry_after(&self) -> Option<Duration> {
        None
    }

    /// `Some` when retrying cannot help, with the category named in the denial.
    fn permanent(&self) -> Option<PermanentCategory> {
        None
    }

    /// `true` when the first byte of the response was already handed to the caller (a streamed
    /// body): a retry would deliver a second response to code that consumed part of the first.
    fn response_delivered(&self) -> bool {
        false
    }

    /// `true` when this failure was already retried by a retrying call below (in this process or
    /// in a callee): retrying it again multiplies traffic (spec 004).
    fn already_retried(&self) -> bool {
        false
    }

    /// The callee's "do not retry" signal, when its response carried one.
    fn pushback(&self) -> Option<Pushback> {
        None
    }

    /// `Some` when the attempt was refused locally by the circuit breaker or the bulkhead.
    fn rejection(&self) -> Option<Rejection> {
        None
    }
}

impl<T: Classify + ?Sized> Classify for Box<T> {
    fn evidence(&self) -> Evidence {
        (**self).evidence()
    }
    fn status(&self) -> Option<u16> {
        (**self).status()
    }
    fn retry_after(&self) -> Option<Duration> {
        (**self).retry_after()
    }
    fn permanent(&self) -> Option<PermanentCategory> {
        (**self).permanent()
    }
    fn response_delivered(&self) -> bool {
        (**self).response_delivered()
    }
    fn already_retried(&self) -> bool {
        (**self).already_retried()
    }
    fn pushback(&self) -> Option<Pushback> {
        (**self).pushback()
    }
    fn rejection(&self) -> Option<Rejection> {
        (**self).rejection()
    }
}

/// The facts the engine decides from, copied out of a [`Classify`] error so the error itself
/// (and any response or connection it holds) can be dropped before a backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
        }
    }

    /// A response with `status` (evidence [`Evidence::ResponseReceived`]).
    pub const fn status(status: u16) -> Self {
        let mut f = Failure::new(Evidence::ResponseReceived);
        f.status = Some(status);
        f
    }

    /// Copies the facts out of an error.
    pub fn of<E: Classify + ?Sized>(error: &E) -> Self {
        Failure {
            evidence: error.evidence(),
            status: error.status(),
            retry_after: error.retry_after(),
            permanent: error.permanent(),
            response_delivered: error.response_delivered(),
            already_retried: error.already_retried(),
            pushback: error.pushback(),
            rejection: error.rejection(),
        }
    }

    /// Marks the attempt as refused locally (nothing was sent).
    pub fn reject(&mut self, rejection: Rejection) {
        self.evidence = Evidence::NotSent;
        self.rejection = Some(rejection);
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
