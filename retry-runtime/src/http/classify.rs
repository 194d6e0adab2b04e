//! The error-chain walk: a failed `send()` into [`Evidence`].
//!
//! The rules, applied top-down to an error returned by `send()` (no final headers yet), on a
//! client built with [`client_builder`](super::client_builder) (no redirects, no reqwest
//! retries):
//!
//! | situation | check | evidence |
//! |---|---|---|
//! | invalid URL, bad scheme, builder error | `is_builder()` | `NotSent` |
//! | final headers arrived (`error_for_status`, redirect policy) | `is_status()` / `is_redirect()` | `ResponseReceived` |
//! | DNS, TCP refused/reset during connect, connect timeout, TLS/proxy, pool checkout | `is_connect()` (a hyper-util `legacy::Error` of kind Connect in the chain) | `NotSent` |
//! | hyper handed the request back unsent | the **first** `hyper::Error` in the chain `is_canceled()` | `NotSent`, rotation |
//! | HTTP/2 `REFUSED_STREAM` before headers | first `h2::Error`: `is_reset() && is_remote() && reason == REFUSED_STREAM` | `NotSent`, rotation |
//! | HTTP/2 GOAWAY reported for the request | first `h2::Error`: `is_go_away() && is_remote()` | `SentNoResponse` (see below); rotation when its code is `NO_ERROR` |
//! | hyper's dispatch task ended without answering | the **first** `hyper::Error` is `User(DispatchGone)` | `SentNoResponse`, rotation (see below) |
//! | every other failure: total/read timeout, reset, EOF (`IncompleteMessage`), partial head, other RST_STREAM codes, h2 connection loss, handshake failure, an unknown chain | default | `SentNoResponse` |
//!
//! The body phase is classified by the caller of [`ResponseExt`](super::ResponseExt): any failure
//! while reading a body whose headers arrived is `PartialResponse`; a complete body that does
//! not decode is `ResponseReceived` with the permanent category `Decode`.
//!
//! **GOAWAY is not proof.** RFC 9113 makes streams above a GOAWAY's last-stream-id safe, but h2
//! does not expose stream ids, and hyper can report a GOAWAY for a request it has just opened
//! *at or below* the last-stream-id: its HTTP/2 dispatcher calls `send_request` (the stream is
//! open, its HEADERS queued) then `poll_ready`, and when the connection task reads a GOAWAY in
//! between, `poll_ready` fails with it and hyper fails the request with that error and drops
//! the stream, before sending its body
//! ([hyper's `ClientTask`](https://github.com/hyperium/hyper/blob/master/src/proto/h2/client.rs);
//! requests failed by a GOAWAY are hyper's open issue
//! [#2500](https://github.com/hyperium/hyper/issues/2500)).
//! The request so failed is typically the one whose HEADERS made the server send the GOAWAY:
//! its stream *is* the last-stream-id, and a server that answers from the headers has processed
//! it (measured against nginx's `keepalive_requests`, where nginx logs it as the connection's
//! last request). Its error is the same as that of a stream the GOAWAY turned away. Our fault
//! server reproduces the race under load. reqwest, pingora and linkerd accept the risk; we do
//! not, because it is exactly how a graceful shutdown becomes a double charge. Reads and keyed
//! writes are still retried after a GOAWAY (a keyed write on the strength of the upstream's
//! promise to deduplicate its key: an upstream that does not may run it twice); an unkeyed
//! write is ambiguous (or reconciled).
//!
//! **Connection rotation.** Four of these rows are a server closing a *healthy* connection on
//! purpose (`keepalive_requests`, a proxy's request limit, draining, a reload), not a failure:
//! a remote GOAWAY with `NO_ERROR`, a remote `REFUSED_STREAM`, a request hyper handed back
//! unsent (over HTTP/1.1, a pooled connection closed before the request was written), and a
//! request hyper's dispatch task dropped. The last is the same GOAWAY seen through hyper's
//! HTTP/2 dispatcher: when the connection is at the server's `MAX_CONCURRENT_STREAMS` (nginx:
//! 128), the next request waits in the dispatcher for a stream; a graceful GOAWAY fails that
//! waiting stream, the dispatcher reads the failure as "the connection shut down gracefully" and
//! ends, and the request's error is `DispatchGone` instead of the GOAWAY (measured against
//! nginx's `keepalive_requests 3` with 200 concurrent requests: at most one per rotated
//! connection, often the same call several times in a row, since a call's place in the queue
//! tends to stay the same). Counted as an ordinary failure it spent the call's attempts within a few
//! rotations. `DispatchGone` is also what a request gets when the runtime that ran the
//! connection's tasks is shut down; the evidence stays `SentNoResponse` for both, so an unkeyed
//! write is never re-sent on its strength.
//! [`ChainFacts::connection_rotated`] reports them; the circuit breaker does not
//! count them and the loop retries them at once (see the crate docs). This is independent of the
//! evidence: a GOAWAY stays `SentNoResponse`. A GOAWAY with any other code (`ENHANCE_YOUR_CALM`,
//! `INTERNAL_ERROR`, ...) is the server complaining, and is not rotation.
//!
//! A generic I/O error is never upgraded to `NotSent`: a reset on a connection where the server
//! read the whole request and one where it read nothing produce identical chains. When a
//! downcast fails (a hyper/h2 upgrade changed the chain, or two majors are linked) the walk
//! finds nothing and the answer falls to `SentNoResponse`: unsafe changes can only make the
//! classifier more cautious. The canary tests in
//! [`tests/tests/http_canary.rs`](https://github.com/retry-rs/retry/blob/main/tests/tests/http_canary.rs) fail loudly when
//! that happens.

use std::error::Error as StdError;
use std::io;

use crate::evidence::Evidence;

/// The HTTP/2 `REFUSED_STREAM` error code (RFC 9113 §7).
pub const REFUSED_STREAM: u32 = 0x7;

/// The HTTP/2 `NO_ERROR` error code (RFC 9113 §7): a graceful GOAWAY.
pub const NO_ERROR: u32 = 0x0;

/// What the classifier found in a `reqwest::Error`'s chain. Exposed so tests (and curious
/// operators) can see why an error got its class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChainFacts {
    /// `reqwest::Error::is_builder()`.
    pub builder: bool,
    /// `reqwest::Error::is_connect()`.
    pub connect: bool,
    /// `reqwest::Error::is_timeout()` (phase-neutral: says nothing alone).
    pub timeout: bool,
    /// `reqwest::Error::is_status()` or `is_redirect()`: final headers arrived.
    pub response: bool,
    /// A hyper-util `legacy::Error` is in the chain.
    pub legacy: bool,
    /// That `legacy::Error` carries connection info (the request was dispatched on a connection).
    pub legacy_connect_info: bool,
    /// A `hyper::Error` is in the chain.
    pub hyper: bool,
    /// The first `hyper::Error` is `is_canceled()`.
    pub hyper_canceled: bool,
    /// The first `hyper::Error` is `is_incomplete_message()`.
    pub hyper_incomplete: bool,
    /// The first `hyper::Error` is `User(DispatchGone)`: hyper's dispatch task ended without
    /// answering the request (see "Connection rotation" in the module docs).
    pub hyper_dispatch_gone: bool,
    /// The first `h2::Error`'s reason code, if an `h2::Error` is in the chain.
    pub h2_reason: Option<u32>,
    /// The first `h2::Error` is a stream reset.
    pub h2_reset: bool,
    /// The first `h2::Error` is a GOAWAY.
    pub h2_go_away: bool,
    /// The first `h2::Error` came from the peer.
    pub h2_remote: bool,
    /// The first `io::Error`'s kind.
    pub io: Option<io::ErrorKind>,
}

impl ChainFacts {
    /// Walks `error`'s `source()` chain, downcasting at every level.
    pub fn of(error: &reqwest::Error) -> ChainFacts {
        let mut facts = ChainFacts {
            builder: error.is_builder(),
            connect: error.is_connect(),
            timeout: error.is_timeout(),
            response: error.is_status() || error.is_redirect(),
            ..ChainFacts::default()
        };
        let mut source: Option<&(dyn StdError + 'static)> = error.source();
        // A chain is a handful of links; the bound only guards against a cycle.
        for _ in 0..32 {
            let Some(e) = source else { break };
            if let Some(l) = e.downcast_ref::<hyper_util::client::legacy::Error>()
                && !facts.legacy
            {
                facts.legacy = true;
                facts.legacy_connect_info = l.connect_info().is_some();
            }
            // The first hyper::Error counts: a canceled request nests the connection error
            // that canceled it.
            if let Some(h) = e.downcast_ref::<hyper::Error>()
                && !facts.hyper
            {
                facts.hyper = true;
                facts.hyper_canceled = h.is_canceled();
                facts.hyper_incomplete = h.is_incomplete_message();
                // hyper has no predicate for this kind; its `Debug` names it (pinned by the
                // canary tests). Only a user error is rendered: never on a common path.
                facts.hyper_dispatch_gone =
                    h.is_user() && format!("{h:?}").starts_with("hyper::Error(User(DispatchGone)");
            }
            if let Some(h) = e.downcast_ref::<h2::Error>()
                && facts.h2_reason.is_none()
                && !facts.h2_reset
                && !facts.h2_go_away
            {
                facts.h2_reason = h.reason().map(u32::from);
                facts.h2_reset = h.is_reset();
                facts.h2_go_away = h.is_go_away();
                facts.h2_remote = h.is_remote();
            }
            if let Some(io) = e.downcast_ref::<io::Error>()
                && facts.io.is_none()
            {
                facts.io = Some(io.kind());
            }
            source = e.source();
        }
        facts
    }

    /// The evidence these facts prove for an error returned by `send()` (table above).
    pub fn send_evidence(&self) -> Evidence {
        if self.builder {
            return Evidence::NotSent;
        }
        if self.response {
            return Evidence::ResponseReceived;
        }
        if self.connect {
            return Evidence::NotSent;
        }
        if self.hyper_canceled {
            return Evidence::NotSent;
        }
        if self.h2_remote && self.h2_reset && self.h2_reason == Some(REFUSED_STREAM) {
            return Evidence::NotSent;
        }
        // A remote GOAWAY falls through: it may be attributed to a request the server processes.
        Evidence::SentNoResponse
    }

    /// Whether these facts show connection rotation (see the module docs): the first
    /// `hyper::Error` is `is_canceled()` (the request was handed back unsent) or
    /// `DispatchGone`, or the first `h2::Error` came from the peer and is a `REFUSED_STREAM`
    /// reset or a GOAWAY with `NO_ERROR`. Only for an error returned by `send()` (no final
    /// headers), like [`send_evidence`](Self::send_evidence).
    pub fn connection_rotated(&self) -> bool {
        if self.builder || self.response || self.connect {
            return false;
        }
        let refused = self.h2_reset && self.h2_reason == Some(REFUSED_STREAM);
        let graceful = self.h2_go_away && self.h2_reason == Some(NO_ERROR);
        self.hyper_canceled || self.hyper_dispatch_gone || (self.h2_remote && (refused || graceful))
    }
}

/// The evidence of an error returned by reqwest's `send()`/`execute()`: for code that calls
/// reqwest directly instead of [`send_attempt`](super::RequestBuilderExt::send_attempt).
/// Errors from reading a body are `PartialResponse`, whatever this says.
pub fn send_error_evidence(error: &reqwest::Error) -> Evidence {
    ChainFacts::of(error).send_evidence()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> ChainFacts {
        ChainFacts::default()
    }

    #[test]
    fn only_proofs_give_not_sent() {
        assert_eq!(facts().send_evidence(), Evidence::SentNoResponse);
        let timeout = ChainFacts {
            timeout: true,
            ..facts()
        };
        assert_eq!(timeout.send_evidence(), Evidence::SentNoResponse);
        let reset = ChainFacts {
            hyper: true,
            io: Some(io::ErrorKind::ConnectionReset),
            ..facts()
        };
        assert_eq!(reset.send_evidence(), Evidence::SentNoResponse);
        let connect_timeout = ChainFacts {
            connect: true,
            timeout: true,
            ..facts()
        };
        assert_eq!(connect_timeout.send_evidence(), Evidence::NotSent);
        let canceled = ChainFacts {
            hyper: true,
            hyper_canceled: true,
            ..facts()
        };
        assert_eq!(canceled.send_evidence(), Evidence::NotSent);
    }

    #[test]
    fn h2_codes() {
        let refused = ChainFacts {
            h2_reason: Some(REFUSED_STREAM),
            h2_reset: true,
            h2_remote: true,
            ..facts()
        };
        assert_eq!(refused.send_evidence(), Evidence::NotSent);
        let local_refused = ChainFacts {
            h2_remote: false,
            ..refused
        };
        assert_eq!(local_refused.send_evidence(), Evidence::SentNoResponse);
        let internal = ChainFacts {
            h2_reason: Some(0x2),
            ..refused
        };
        assert_eq!(internal.send_evidence(), Evidence::SentNoResponse);
        let go_away = ChainFacts {
            h2_reason: Some(0xb),
            h2_go_away: true,
            h2_remote: true,
            ..facts()
        };
        assert_eq!(
            go_away.send_evidence(),
            Evidence::SentNoResponse,
            "GOAWAY is not proof"
        );
    }

    #[test]
    fn rotation_is_a_graceful_goaway_a_refused_stream_or_a_request_handed_back() {
        let graceful = ChainFacts {
            h2_reason: Some(NO_ERROR),
            h2_go_away: true,
            h2_remote: true,
            ..facts()
        };
        assert!(graceful.connection_rotated());
        assert_eq!(
            graceful.send_evidence(),
            Evidence::SentNoResponse,
            "rotation changes nothing about the evidence"
        );
        let refused = ChainFacts {
            h2_reason: Some(REFUSED_STREAM),
            h2_reset: true,
            h2_remote: true,
            ..facts()
        };
        assert!(refused.connection_rotated());
        let canceled = ChainFacts {
            hyper: true,
            hyper_canceled: true,
            ..facts()
        };
        assert!(canceled.connection_rotated());
        let dispatch_gone = ChainFacts {
            hyper: true,
            hyper_dispatch_gone: true,
            ..facts()
        };
        assert!(dispatch_gone.connection_rotated());
        assert_eq!(
            dispatch_gone.send_evidence(),
            Evidence::SentNoResponse,
            "the dispatch task may have sent the request before it ended"
        );

        // The server complaining, our own h2 library, or no proof at all: not rotation.
        for not in [
            ChainFacts {
                h2_reason: Some(0xb),
                ..graceful
            },
            ChainFacts {
                h2_reason: Some(0x2),
                ..graceful
            },
            ChainFacts {
                h2_remote: false,
                ..graceful
            },
            ChainFacts {
                h2_remote: false,
                ..refused
            },
            ChainFacts {
                h2_reason: Some(0x8),
                ..refused
            },
            ChainFacts {
                hyper: true,
                hyper_incomplete: true,
                ..facts()
            },
            ChainFacts {
                hyper: true,
                io: Some(io::ErrorKind::ConnectionReset),
                ..facts()
            },
            ChainFacts {
                connect: true,
                io: Some(io::ErrorKind::ConnectionRefused),
                ..facts()
            },
            ChainFacts {
                timeout: true,
                ..facts()
            },
            facts(),
        ] {
            assert!(!not.connection_rotated(), "{not:?}");
        }
    }
}
