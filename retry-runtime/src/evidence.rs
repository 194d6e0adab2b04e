//! Execution evidence: what is *proven* about how far a failed attempt got.
//!
//! A retry decision that only looks at an error predicate ("is it a timeout?") cannot tell a
//! request that never left the process from one whose response was lost after the server
//! charged the card. Evidence is that missing fact. It is produced by the transport
//! integration (see `http`), never guessed: a generic I/O error is never upgraded to
//! [`Evidence::NotSent`], because that is exactly how a timeout becomes a duplicate payment.

use std::fmt;

/// How far a failed attempt is proven to have got.
///
/// Closed on purpose (not `#[non_exhaustive]`): the four levels are the whole question the
/// library asks of a failure (did anything reach the upstream, and did an answer come back),
/// and every classifier and custom engine must answer each of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Evidence {
    /// Proven that the server never received (or never processed) the request: a local
    /// rejection before sending, DNS failure, connect failure, HTTP/2 `REFUSED_STREAM`, a stream
    /// above a GOAWAY's last-stream-id. Safe to retry even for a write.
    NotSent,
    /// Some or all of the request was written and no final response header arrived: the server
    /// may or may not have executed it.
    SentNoResponse,
    /// Final response headers arrived, whatever the status.
    ResponseReceived,
    /// Headers and part of the body arrived, then the attempt failed.
    PartialResponse,
}

impl Evidence {
    /// The stable lower-case name used in traces, metrics and `error.type`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Evidence::NotSent => "not_sent",
            Evidence::SentNoResponse => "sent_no_response",
            Evidence::ResponseReceived => "response_received",
            Evidence::PartialResponse => "partial_response",
        }
    }

    /// `true` when the server may have executed the request (everything but `NotSent`).
    pub const fn may_have_executed(self) -> bool {
        !matches!(self, Evidence::NotSent)
    }
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
