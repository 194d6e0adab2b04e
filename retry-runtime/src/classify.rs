//! How an error tells the engine what happened: the [`Classify`] trait.
//!
//! The loop never inspects error types itself. Any error that can say what it knows (its
//! [`Evidence`], HTTP status, `Retry-After`, failure category) can be retried safely; the
//! runtime's own [`Error`](crate::Error) and the HTTP integration's errors implement it, and an
//! application error usually delegates to the one it wraps.

use std::time::Duration;

use crate::category::{PermanentCategory, Pushback, Rejection};
use crate::decision::{Failure, Stop};
use crate::evidence::Evidence;

/// What a failed attempt's error knows about itself. Implement it for your adapter's error type
/// (usually by delegating to the transport error it wraps) so the engine can decide.
///
/// Prefer `#[derive(Classify)]`: it cannot forget a fact. By hand, nothing is required: an
/// error that wraps another implements [`via`](Classify::via); an error that knows nothing is
/// treated as possibly sent ([`Evidence::SentNoResponse`]).
///
/// A partial implementation fails safe, never silently: an error that says a response arrived
/// but not its status (it overrides `evidence` without `via`, `status` or `permanent`) is not read as some
/// status. A read is not retried ([`DenyReason::StatusUnknown`](crate::DenyReason::StatusUnknown)),
/// a write is [ambiguous](crate::AmbiguityReason::StatusUnknown) (it may have executed), and a
/// `WARN` event names the error type.
///
/// ```
/// use retry_runtime::{Classify, PermanentCategory};
///
/// #[derive(Debug)]
/// enum AdapterError {
///     /// Transport, HTTP status, ambiguous outcome... (`From<HttpError>` comes with it).
///     Retry(retry_runtime::Error),
///     /// A complete answer the contract does not allow.
///     Rejected { code: String },
/// }
///
/// impl Classify for AdapterError {
///     // Every fact of the wrapped error, delegated in one place.
///     fn via(&self) -> Option<&dyn Classify> {
///         match self {
///             AdapterError::Retry(e) => Some(e),
///             AdapterError::Rejected { .. } => None,
///         }
///     }
///     // The facts of our own variants.
///     fn evidence(&self) -> retry_runtime::Evidence {
///         match self {
///             AdapterError::Retry(e) => e.evidence(),
///             AdapterError::Rejected { .. } => retry_runtime::Evidence::ResponseReceived,
///         }
///     }
///     fn permanent(&self) -> Option<PermanentCategory> {
///         match self {
///             AdapterError::Retry(e) => e.permanent(),
///             AdapterError::Rejected { .. } => Some(PermanentCategory::Contract),
///         }
///     }
/// }
///
/// let e = AdapterError::Retry(retry_runtime::Error::CircuitOpen { upstream: "sber".into() });
/// assert_eq!(e.evidence(), retry_runtime::Evidence::NotSent);
/// assert!(e.rejection().is_some(), "delegated without writing `rejection`");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not implement `Classify`: the engine cannot tell what a failure of it means",
    label = "this error's facts (evidence, status, Retry-After, ...) are needed to decide a retry",
    note = "derive it (`#[derive(retry_runtime::Classify)]`), delegate to the error it wraps, or, on a `#[derive(Classify)]` variant, state the facts with `#[classify(status = .., evidence = \"..\", permanent = \"..\")]`"
)]
pub trait Classify {
    /// The error this one wraps and whose facts it reports (its transport or runtime error), if
    /// any. Every other method defaults to asking it, so an application error usually
    /// implements only this, plus the facts of its own variants (see the example above).
    fn via(&self) -> Option<&dyn Classify> {
        None
    }

    /// How far the attempt is proven to have got. The default asks [`via`](Classify::via),
    /// and without it answers [`Evidence::SentNoResponse`]: an error that proves nothing never
    /// counts as "not sent", since that is how a timeout becomes a duplicate payment.
    fn evidence(&self) -> Evidence {
        self.via()
            .map_or(Evidence::SentNoResponse, Classify::evidence)
    }

    /// The HTTP status of the response, when one arrived.
    fn status(&self) -> Option<u16> {
        self.via().and_then(Classify::status)
    }

    /// The server's `Retry-After`, already parsed into a delay from now (see
    /// [`retry_after::parse`](crate::retry_after::parse)).
    fn retry_after(&self) -> Option<Duration> {
        self.via().and_then(Classify::retry_after)
    }

    /// `Some` when retrying cannot help, with the category named in the denial.
    fn permanent(&self) -> Option<PermanentCategory> {
        self.via().and_then(Classify::permanent)
    }

    /// `true` when the first byte of the response was already handed to the caller (a streamed
    /// body): a retry would deliver a second response to code that consumed part of the first.
    fn response_delivered(&self) -> bool {
        self.via().is_some_and(Classify::response_delivered)
    }

    /// `true` when this failure was already retried by a retrying call below (in this process or
    /// in a callee): retrying it again multiplies traffic.
    fn already_retried(&self) -> bool {
        self.via().is_some_and(Classify::already_retried)
    }

    /// `true` when the attempt gave up waiting for the upstream's answer after the request may
    /// have been sent (a request or read timeout of the adapter's own client, or a runtime
    /// [`AttemptTimeout`](crate::Error::AttemptTimeout) it passes on): the upstream did not
    /// answer in time. The adaptive [`throttle`](crate::throttle) counts it as not accepted,
    /// as it does an attempt the loop's own attempt timeout cut; a failure with neither a status
    /// nor a timeout reads as a connection that failed, which the throttle does not judge.
    fn timed_out(&self) -> bool {
        self.via().is_some_and(Classify::timed_out)
    }

    /// The callee's "do not retry" signal, when its response carried one.
    fn pushback(&self) -> Option<Pushback> {
        self.via().and_then(Classify::pushback)
    }

    /// `Some` when the attempt was refused locally by the circuit breaker or the bulkhead.
    fn rejection(&self) -> Option<Rejection> {
        self.via().and_then(Classify::rejection)
    }

    /// `true` when the attempt was lost to *connection rotation*: the server (or a proxy)
    /// closed a healthy connection on purpose and turned the request away unprocessed, as
    /// servers do after `keepalive_requests`, while draining and on every reload. Over HTTP/2
    /// that is a GOAWAY with `NO_ERROR` or a `REFUSED_STREAM` reset; over HTTP/1.1 a pooled
    /// connection closed before the request was written (hyper hands the request back).
    ///
    /// It says nothing about the upstream's health, so the circuit breaker does not count it,
    /// and a read or a keyed write (any method when the evidence is
    /// [`NotSent`](Evidence::NotSent)) is retried at once, without backoff (see the crate
    /// docs, "Connection rotation"). It changes nothing about [`evidence`](Classify::evidence):
    /// a rotation whose request may have been processed (a GOAWAY) stays `SentNoResponse`.
    fn connection_rotated(&self) -> bool {
        self.via().is_some_and(Classify::connection_rotated)
    }

    /// Told once, when the call stops retrying and hands this error to the caller: how many
    /// attempts were made and why no further one was (a [`Stop`]). The HTTP integration's
    /// error keeps it and shows it in its message; `#[derive(Classify)]` passes it to the
    /// error a variant wraps. The default forgets it, so implement it only to keep it.
    fn stopped(&mut self, stop: Stop) {
        let _ = stop;
    }
}

impl<T: Classify + ?Sized> Classify for Box<T> {
    fn via(&self) -> Option<&dyn Classify> {
        (**self).via()
    }
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
    fn connection_rotated(&self) -> bool {
        (**self).connection_rotated()
    }
    fn stopped(&mut self, stop: Stop) {
        (**self).stopped(stop);
    }
}

impl Failure {
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
            connection_rotated: error.connection_rotated(),
        }
    }
}

#[cfg(test)]
mod tests;
