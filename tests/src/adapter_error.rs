//! An application error as a `#[retry]` function needs one: `Classify`, `From<retry_runtime::Error>`
//! and `Display`. Tests script its evidence and status to drive the engine.

use std::fmt;
use std::time::Duration;

use retry_runtime::{Classify, Evidence, PermanentCategory};

/// The error of the test adapters.
#[derive(Debug)]
pub enum AdapterError {
    /// The runtime's own error (unknown upstream, timeout, ambiguous outcome...).
    Runtime(retry_runtime::Error),
    /// A scripted failure.
    Failed {
        /// How far the attempt got.
        evidence: Evidence,
        /// The response status, if one arrived.
        status: Option<u16>,
        /// The response's `Retry-After`, as a delay.
        retry_after: Option<Duration>,
    },
}

impl AdapterError {
    /// The request was sent and no response arrived: a write may have happened.
    pub fn lost_response() -> Self {
        AdapterError::Failed {
            evidence: Evidence::SentNoResponse,
            status: None,
            retry_after: None,
        }
    }

    /// The request provably never left.
    pub fn not_sent() -> Self {
        AdapterError::Failed {
            evidence: Evidence::NotSent,
            status: None,
            retry_after: None,
        }
    }

    /// A response with `status` arrived.
    pub fn status(status: u16) -> Self {
        AdapterError::Failed {
            evidence: Evidence::ResponseReceived,
            status: Some(status),
            retry_after: None,
        }
    }

    /// A 429 asking the caller to wait `retry_after` before its next request.
    pub fn over_quota(retry_after: Duration) -> Self {
        AdapterError::Failed {
            evidence: Evidence::ResponseReceived,
            status: Some(429),
            retry_after: Some(retry_after),
        }
    }

    /// A response arrived, but the error does not say its status: what a hand-written
    /// `Classify` that forgets `status` reports.
    pub fn forgot_status() -> Self {
        AdapterError::Failed {
            evidence: Evidence::ResponseReceived,
            status: None,
            retry_after: None,
        }
    }

    /// The ambiguous outcome, if this is one.
    pub fn as_ambiguous(&self) -> Option<&retry_runtime::Ambiguous> {
        match self {
            AdapterError::Runtime(retry_runtime::Error::Ambiguous(a)) => Some(a),
            _ => None,
        }
    }
}

impl Classify for AdapterError {
    fn evidence(&self) -> Evidence {
        match self {
            AdapterError::Runtime(e) => e.evidence(),
            AdapterError::Failed { evidence, .. } => *evidence,
        }
    }

    fn status(&self) -> Option<u16> {
        match self {
            AdapterError::Runtime(e) => e.status(),
            AdapterError::Failed { status, .. } => *status,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            AdapterError::Runtime(e) => e.retry_after(),
            AdapterError::Failed { retry_after, .. } => *retry_after,
        }
    }

    fn permanent(&self) -> Option<PermanentCategory> {
        match self {
            AdapterError::Runtime(e) => e.permanent(),
            AdapterError::Failed { .. } => None,
        }
    }
}

impl From<retry_runtime::Error> for AdapterError {
    fn from(e: retry_runtime::Error) -> Self {
        AdapterError::Runtime(e)
    }
}

/// For `send_attempt().await?` in the tests' adapters.
impl From<retry_runtime::http::HttpError> for AdapterError {
    fn from(e: retry_runtime::http::HttpError) -> Self {
        AdapterError::Runtime(e.into())
    }
}

impl fmt::Display for AdapterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdapterError::Runtime(e) => e.fmt(f),
            AdapterError::Failed {
                evidence, status, ..
            } => {
                write!(f, "scripted failure ({evidence}, status {status:?})")
            }
        }
    }
}

impl std::error::Error for AdapterError {}
