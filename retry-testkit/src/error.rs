//! A ready-made adapter error for tests that call through the builder or a closure.

use std::fmt;

use retry_runtime::http::HttpError;

/// An HTTP attempt's failure or the runtime's own error: the smallest error type a retrying
/// call accepts (`Classify`, `From<retry_runtime::Error>`, `Display`), for tests that do not
/// go through an adapter's own error. `?` converts both.
#[derive(Debug, retry_runtime::Classify)]
#[non_exhaustive]
pub enum CallError {
    /// The HTTP attempt failed (status or transport), with its evidence.
    #[classify(from)]
    Http(HttpError),
    /// The runtime stopped the call (ambiguous outcome, deadline, breaker open, ...).
    #[classify(from)]
    Runtime(retry_runtime::Error),
}

impl CallError {
    /// The ambiguous outcome, if the call ended with one.
    pub fn as_ambiguous(&self) -> Option<&retry_runtime::Ambiguous> {
        match self {
            CallError::Runtime(e) => e.as_ambiguous(),
            CallError::Http(_) => None,
        }
    }

    /// The status of the last response, if one arrived.
    pub fn status(&self) -> Option<u16> {
        match self {
            CallError::Http(e) => e.status().map(|s| s.as_u16()),
            CallError::Runtime(_) => None,
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Http(e) => e.fmt(f),
            CallError::Runtime(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::Http(e) => Some(e),
            CallError::Runtime(e) => Some(e),
        }
    }
}
