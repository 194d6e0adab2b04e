//! What the integration tests share: the failure their calls return.
// Each test file uses part of it.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_runtime::{Classify, Error, Evidence, Pushback};
use tokio::time::Instant;

/// A failed attempt: the upstream's status, the runtime's own error, or a failure with chosen
/// facts (built from [`Fail::new`] or a status, then `with_*`).
#[derive(Debug)]
pub enum Fail {
    /// The upstream answered with this status.
    Status(u16),
    /// The runtime's own error (what the loop converts into the call's error type).
    Runtime(Error),
    /// A failure with chosen facts.
    Facts(Facts),
}

/// The facts of a [`Fail::Facts`]; what is not chosen is absent.
#[derive(Debug)]
pub struct Facts {
    pub evidence: Evidence,
    pub status: Option<u16>,
    pub retry_after: Option<Duration>,
    pub pushback: Option<Pushback>,
    /// The adapter's own client reported a timeout.
    pub timed_out: bool,
    /// The connection was rotated under the attempt (a GOAWAY with `NO_ERROR`).
    pub rotated: bool,
    /// Held for its `Drop`, which records when the failure is let go.
    pub held: Option<DropProbe>,
    /// The runtime's error this failure passes on (an adapter wrapping it).
    pub via: Option<Error>,
}

impl Facts {
    fn new(evidence: Evidence) -> Self {
        Facts {
            evidence,
            status: None,
            retry_after: None,
            pushback: None,
            timed_out: false,
            rotated: false,
            held: None,
            via: None,
        }
    }
}

/// Records the instant it is dropped (stands in for a response body or a bulkhead permit).
#[derive(Debug)]
pub struct DropProbe(pub Arc<Mutex<Vec<Instant>>>);

impl Drop for DropProbe {
    fn drop(&mut self) {
        self.0.lock().unwrap().push(Instant::now());
    }
}

impl Fail {
    /// A failure that got as far as `evidence` says, and nothing else known.
    pub fn new(evidence: Evidence) -> Self {
        Fail::Facts(Facts::new(evidence))
    }

    /// The runtime's error, wherever the failure carries it.
    pub fn runtime(&self) -> Option<&Error> {
        match self {
            Fail::Runtime(e) => Some(e),
            Fail::Facts(f) => f.via.as_ref(),
            Fail::Status(_) => None,
        }
    }

    /// Whether the throttle refused the call.
    pub fn is_throttled(&self) -> bool {
        matches!(self.runtime(), Some(Error::Throttled { .. }))
    }

    pub fn with_evidence(self, evidence: Evidence) -> Self {
        self.with(|f| f.evidence = evidence)
    }

    pub fn with_retry_after(self, after: Duration) -> Self {
        self.with(|f| f.retry_after = Some(after))
    }

    pub fn with_pushback(self, pushback: Pushback) -> Self {
        self.with(|f| f.pushback = Some(pushback))
    }

    pub fn with_timed_out(self) -> Self {
        self.with(|f| f.timed_out = true)
    }

    pub fn rotated(self) -> Self {
        self.with(|f| f.rotated = true)
    }

    pub fn holding(self, probe: DropProbe) -> Self {
        self.with(|f| f.held = Some(probe))
    }

    pub fn passing_on(self, error: Error) -> Self {
        self.with(|f| f.via = Some(error))
    }

    /// This failure's facts, changed by `change`.
    fn with(self, change: impl FnOnce(&mut Facts)) -> Self {
        let mut facts = match self {
            Fail::Facts(f) => f,
            Fail::Status(s) => Facts {
                status: Some(s),
                ..Facts::new(Evidence::ResponseReceived)
            },
            Fail::Runtime(e) => Facts {
                evidence: e.evidence(),
                via: Some(e),
                ..Facts::new(Evidence::NotSent)
            },
        };
        change(&mut facts);
        Fail::Facts(facts)
    }
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Status(s) => write!(f, "status {s}"),
            Fail::Runtime(e) => e.fmt(f),
            Fail::Facts(Facts { via: Some(e), .. }) => e.fmt(f),
            Fail::Facts(facts) => write!(f, "fail {} {:?}", facts.evidence, facts.status),
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
        self.runtime().map(|e| e as &dyn Classify)
    }
    fn evidence(&self) -> Evidence {
        match self {
            Fail::Runtime(e) => e.evidence(),
            Fail::Status(_) => Evidence::ResponseReceived,
            Fail::Facts(f) => f.evidence,
        }
    }
    fn status(&self) -> Option<u16> {
        match self {
            Fail::Status(s) => Some(*s),
            Fail::Runtime(e) => e.status(),
            Fail::Facts(f) => f.status,
        }
    }
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Fail::Status(_) => None,
            Fail::Runtime(e) => e.retry_after(),
            Fail::Facts(f) => f.retry_after,
        }
    }
    fn pushback(&self) -> Option<Pushback> {
        match self {
            Fail::Status(_) => None,
            Fail::Runtime(e) => e.pushback(),
            Fail::Facts(f) => f.pushback,
        }
    }
    fn timed_out(&self) -> bool {
        match self {
            Fail::Status(_) => false,
            Fail::Runtime(e) => e.timed_out(),
            Fail::Facts(f) => f.timed_out || f.via.as_ref().is_some_and(Classify::timed_out),
        }
    }
    fn connection_rotated(&self) -> bool {
        match self {
            Fail::Status(_) => false,
            Fail::Runtime(e) => e.connection_rotated(),
            Fail::Facts(f) => f.rotated,
        }
    }
}
