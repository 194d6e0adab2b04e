//! What the integration tests share.

use retry_runtime::{Classify, Error, Evidence};

/// A failed attempt: the upstream's status, or the runtime's own error.
#[derive(Debug)]
#[allow(dead_code)] // Each test file uses the variants it needs.
pub enum Fail {
    Status(u16),
    /// 429 with this `Retry-After`.
    TooMany(std::time::Duration),
    Runtime(Error),
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Status(s) => write!(f, "status {s}"),
            Fail::TooMany(after) => write!(f, "status 429, retry after {after:?}"),
            Fail::Runtime(e) => e.fmt(f),
        }
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Runtime(e)
    }
}

impl Classify for Fail {
    fn via(&self) -> Option<&dyn Classify> {
        match self {
            Fail::Runtime(e) => Some(e),
            Fail::Status(_) | Fail::TooMany(_) => None,
        }
    }
    fn evidence(&self) -> Evidence {
        match self {
            Fail::Runtime(e) => e.evidence(),
            Fail::Status(_) | Fail::TooMany(_) => Evidence::ResponseReceived,
        }
    }
    fn status(&self) -> Option<u16> {
        match self {
            Fail::Status(s) => Some(*s),
            Fail::TooMany(_) => Some(429),
            Fail::Runtime(_) => None,
        }
    }
    fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Fail::TooMany(after) => Some(*after),
            _ => None,
        }
    }
}
