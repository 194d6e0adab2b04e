//! The runtime's own errors, and the ambiguous outcome.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::category::PermanentCategory;
use crate::classify::Classify;
use crate::decision::AmbiguityReason;
use crate::duration::Readable;
use crate::evidence::Evidence;
use crate::key::{IdempotencyKey, KeyError};
use crate::upstream::RefreshError;

/// The outcome of a write whose fate is unknown: it may or may not have happened.
///
/// This is a third answer on purpose. Retrying might duplicate the side effect; reporting a
/// plain failure would tell the caller the write did not happen, which may be false. Reconcile:
/// query the upstream for the result, or replay with the same idempotency key.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Ambiguous {
    /// The upstream called.
    pub upstream: Arc<str>,
    /// The business operation (scope name).
    pub operation: String,
    /// Attempts made.
    pub attempts: u32,
    /// The last attempt's evidence.
    pub evidence: Evidence,
    /// The last attempt's status, if a response arrived.
    pub status: Option<u16>,
    /// Why the outcome is ambiguous.
    pub reason: AmbiguityReason,
    /// The idempotency key the attempts carried, if any: replay with it to settle the outcome.
    pub idempotency_key: Option<IdempotencyKey>,
    /// The last attempt's error, rendered.
    pub last_error: String,
}

impl fmt::Display for Ambiguous {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "outcome unknown: {} on upstream `{}` (operation `{}`, {} attempt(s), evidence {}) may or may not have happened; \
             reconcile by querying the upstream or replaying with the same idempotency key (last error: {})",
            self.reason,
            self.upstream,
            self.operation,
            self.attempts,
            self.evidence,
            self.last_error
        )
    }
}

impl std::error::Error for Ambiguous {}

/// Errors raised by the runtime itself. Application error types wrap it (`From<Error>`) so a
/// retrying function keeps its own signature.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The write may or may not have happened; see [`Ambiguous`].
    Ambiguous(Box<Ambiguous>),
    /// The upstream name is not in the registry.
    UnknownUpstream {
        /// The name asked for.
        name: String,
        /// Names the registry knows: all of them, sorted, when there are at most
        /// [`KNOWN_IN_ERRORS`](crate::registry::KNOWN_IN_ERRORS); otherwise that many closest
        /// to `name` ([`Registry::names`](crate::Registry::names) lists them all).
        known: Vec<String>,
    },
    /// An attempt ran past its timeout (clamped to the deadline). The request may have been
    /// sent: the evidence is `SentNoResponse`.
    AttemptTimeout {
        /// The upstream.
        upstream: Arc<str>,
        /// The attempt that timed out.
        attempt: u32,
        /// The timeout it had.
        timeout: Duration,
    },
    /// The operation's deadline left no time for a further attempt, so none was sent. When
    /// earlier attempts were made, what the last one got is kept here: a deadline does not hide
    /// that the upstream answered 503 twice. (When the last attempt was a write whose outcome is
    /// unknown, the call ends [`Ambiguous`] instead.)
    DeadlineExceeded {
        /// The upstream.
        upstream: Arc<str>,
        /// Attempts made before the deadline (0 when there was no time for the first).
        attempts: u32,
        /// The last attempt's status, when a response arrived.
        last_status: Option<u16>,
        /// How far the last attempt got, when there was one.
        last_evidence: Option<Evidence>,
    },
    /// The idempotency key was refused before anything was sent.
    InvalidIdempotencyKey(KeyError),
    /// The credentials refresh after a 401 failed.
    RefreshFailed(RefreshError),
    /// The upstream's circuit breaker is open: nothing was sent.
    CircuitOpen {
        /// The upstream.
        upstream: Arc<str>,
    },
    /// The upstream's bulkhead had no free slot before the deadline: nothing was sent.
    BulkheadFull {
        /// The upstream.
        upstream: Arc<str>,
    },
    /// The upstream currently accepts less than it gets, and its adaptive throttle refused
    /// the attempt: nothing was sent (see [`throttle`](crate::throttle)).
    Throttled {
        /// The upstream.
        upstream: Arc<str>,
    },
    /// Shutdown ([`Drain`](crate::Drain)) started while the call waited to retry: no further
    /// attempt was sent. (When the last attempt was a write whose outcome is unknown, the call
    /// ends [`Ambiguous`] instead.)
    Draining {
        /// The upstream.
        upstream: Arc<str>,
        /// Attempts made.
        attempts: u32,
        /// What the last attempt failed with (its status, or how far it got).
        last_error: String,
    },
    /// A `#[retry(durable = ...)]` call stopped on a transient failure, and its registry has
    /// no durable queue to defer it to (register one with `Registry::set_durable_queue` at
    /// start-up; `Registry::verify` reports every such function). The in-memory attempts may
    /// have been sent.
    NoDurableQueue {
        /// The `durable = ...` operation.
        operation: &'static str,
        /// What the last in-memory attempt failed with.
        last_error: String,
    },
    /// An HTTP attempt failed (feature `http`); see [`HttpError`](crate::http::HttpError).
    #[cfg(feature = "http")]
    Http(crate::http::error::HttpError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Ambiguous(a) => a.fmt(f),
            Error::UnknownUpstream { name, known } => {
                write!(f, "unknown upstream `{name}`: ")?;
                if let Some(close) = crate::suggest::closest(name, known.iter().map(String::as_str))
                {
                    write!(f, "did you mean `{close}`? ")?;
                }
                write!(
                    f,
                    "add it to the retry registry (known: {})",
                    if known.is_empty() {
                        "none; was the registry loaded?".to_owned()
                    } else {
                        known.join(", ")
                    }
                )
            }
            Error::AttemptTimeout {
                upstream,
                attempt,
                timeout,
            } => {
                write!(
                    f,
                    "attempt {attempt} to `{upstream}` timed out after {}",
                    Readable(*timeout)
                )
            }
            Error::DeadlineExceeded {
                upstream,
                attempts,
                last_status,
                last_evidence,
            } => {
                write!(
                    f,
                    "the operation's deadline passed before an attempt to `{upstream}` could start"
                )?;
                match (attempts, last_status, last_evidence) {
                    (0, ..) => Ok(()),
                    (n, Some(status), _) => write!(f, " ({n} made; the last answered {status})"),
                    (n, None, Some(evidence)) => {
                        write!(f, " ({n} made; the last got no response: {evidence})")
                    }
                    (n, None, None) => write!(f, " ({n} made)"),
                }
            }
            Error::InvalidIdempotencyKey(e) => e.fmt(f),
            Error::RefreshFailed(e) => write!(f, "refreshing credentials after 401 failed: {e}"),
            Error::CircuitOpen { upstream } => {
                write!(
                    f,
                    "the circuit breaker of `{upstream}` is open: failing fast without sending"
                )
            }
            Error::BulkheadFull { upstream } => {
                write!(
                    f,
                    "the bulkhead of `{upstream}` had no free slot before the deadline: nothing was sent"
                )
            }
            Error::Throttled { upstream } => {
                write!(
                    f,
                    "`{upstream}` currently accepts less than it gets: refused locally without sending"
                )
            }
            Error::Draining {
                upstream,
                attempts,
                last_error,
            } => write!(
                f,
                "shutdown started while waiting to retry `{upstream}`: no attempt after the \
                 {attempts} made; the last failed with: {last_error}"
            ),
            Error::NoDurableQueue {
                operation,
                last_error,
            } => write!(
                f,
                "`{operation}` could not be deferred: no durable queue is registered (call \
                 `Registry::set_durable_queue` at start-up); the last attempt failed with: \
                 {last_error}"
            ),
            #[cfg(feature = "http")]
            Error::Http(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Ambiguous(a) => Some(&**a),
            Error::InvalidIdempotencyKey(e) => Some(e),
            Error::RefreshFailed(e) => Some(&**e),
            #[cfg(feature = "http")]
            Error::Http(e) => e.source(),
            _ => None,
        }
    }
}

impl Error {
    /// The ambiguous outcome, if that is what this is.
    pub fn as_ambiguous(&self) -> Option<&Ambiguous> {
        match self {
            Error::Ambiguous(a) => Some(a),
            _ => None,
        }
    }
}

#[cfg(feature = "http")]
impl From<crate::http::error::HttpError> for Error {
    fn from(e: crate::http::error::HttpError) -> Self {
        Error::Http(e)
    }
}

impl From<Ambiguous> for Error {
    fn from(a: Ambiguous) -> Self {
        Error::Ambiguous(Box::new(a))
    }
}

impl Classify for Error {
    fn evidence(&self) -> Evidence {
        match self {
            #[cfg(feature = "http")]
            Error::Http(e) => e.evidence(),
            Error::Ambiguous(a) => a.evidence,
            // The in-memory attempts before it may have been sent.
            Error::AttemptTimeout { .. } | Error::NoDurableQueue { .. } => Evidence::SentNoResponse,
            Error::UnknownUpstream { .. }
            | Error::DeadlineExceeded { .. }
            | Error::InvalidIdempotencyKey(_)
            | Error::RefreshFailed(_)
            | Error::CircuitOpen { .. }
            | Error::BulkheadFull { .. }
            | Error::Throttled { .. }
            | Error::Draining { .. } => Evidence::NotSent,
        }
    }

    fn timed_out(&self) -> bool {
        match self {
            #[cfg(feature = "http")]
            Error::Http(e) => e.timed_out(),
            Error::AttemptTimeout { .. } => true,
            _ => false,
        }
    }

    fn status(&self) -> Option<u16> {
        match self {
            Error::Ambiguous(a) => a.status,
            #[cfg(feature = "http")]
            Error::Http(e) => Classify::status(e),
            _ => None,
        }
    }

    fn permanent(&self) -> Option<PermanentCategory> {
        match self {
            Error::UnknownUpstream { .. } | Error::NoDurableQueue { .. } => {
                Some(PermanentCategory::Configuration)
            }
            Error::InvalidIdempotencyKey(_) => Some(PermanentCategory::InvalidRequest),
            Error::RefreshFailed(_) => Some(PermanentCategory::Auth),
            // An ambiguous outcome below must not be retried above: that is how one layer's
            // uncertainty becomes another layer's duplicate.
            Error::Ambiguous(_) => Some(PermanentCategory::OutcomeUnknown),
            Error::AttemptTimeout { .. }
            | Error::DeadlineExceeded { .. }
            | Error::CircuitOpen { .. }
            | Error::BulkheadFull { .. }
            | Error::Throttled { .. }
            | Error::Draining { .. } => None,
            #[cfg(feature = "http")]
            Error::Http(e) => e.permanent(),
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            #[cfg(feature = "http")]
            Error::Http(e) => Classify::retry_after(e),
            _ => None,
        }
    }

    fn pushback(&self) -> Option<crate::category::Pushback> {
        match self {
            #[cfg(feature = "http")]
            Error::Http(e) => Classify::pushback(e),
            _ => None,
        }
    }

    fn rejection(&self) -> Option<crate::category::Rejection> {
        match self {
            Error::CircuitOpen { .. } => Some(crate::category::Rejection::CircuitOpen),
            Error::BulkheadFull { .. } => Some(crate::category::Rejection::BulkheadFull),
            Error::Throttled { .. } => Some(crate::category::Rejection::Throttled),
            _ => None,
        }
    }

    fn already_retried(&self) -> bool {
        matches!(self, Error::Ambiguous(a) if a.attempts > 1)
    }

    fn connection_rotated(&self) -> bool {
        match self {
            #[cfg(feature = "http")]
            Error::Http(e) => Classify::connection_rotated(e),
            _ => false,
        }
    }

    fn stopped(&mut self, stop: crate::decision::Stop) {
        #[cfg(feature = "http")]
        if let Error::Http(e) = self {
            e.stopped(stop);
        }
        let _ = (self, stop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_attempt_names_its_timeout_readably() {
        let e = Error::AttemptTimeout {
            upstream: "sber".into(),
            attempt: 2,
            timeout: Duration::from_nanos(259_447_999),
        };
        assert_eq!(e.to_string(), "attempt 2 to `sber` timed out after 259ms");
    }

    #[test]
    fn an_unknown_outcome_is_not_reported_as_some_other_failure() {
        let e = Error::Ambiguous(Box::new(Ambiguous {
            upstream: "sber".into(),
            operation: "pay".into(),
            attempts: 2,
            evidence: Evidence::SentNoResponse,
            status: None,
            reason: AmbiguityReason::SentNoResponse,
            idempotency_key: None,
            last_error: "reset".into(),
        }));
        assert_eq!(e.permanent(), Some(PermanentCategory::OutcomeUnknown));
        assert_eq!(
            PermanentCategory::OutcomeUnknown.as_str(),
            "outcome_unknown"
        );
    }
}
