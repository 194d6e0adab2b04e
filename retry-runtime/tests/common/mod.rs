//! What the integration tests share.

use retry_runtime::{Classify, Error, Evidence};

/// A failed attempt: the upstream's status, or the runtime's own error.
#[derive(Debug)]
pub enum Fail {
    Status(u16),
    Runtime(Error),
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Status(s) => write!(f, "status {s}"),
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
            Fail::Status(_) => None,
        }
    }
    fn evidence(&self) -> Evidence {
        match self {
            Fail::Runtime(e) => e.evidence(),
            Fail::Status(_) => Evidence::ResponseReceived,
        }
    }
    fn status(&self) -> Option<u16> {
        match self {
            Fail::Status(s) => Some(*s),
            Fail::Runtime(_) => None,
        }
    }
}
