//! Fault-injecting upstreams on 127.0.0.1, each recording [`GroundTruth`].
//!
//! - [`h1::H1Server`]: raw HTTP/1.1 over a tokio `TcpListener`, one scripted [`h1::H1Fault`] per
//!   connection (every reply says `Connection: close`, so one connection is one attempt).
//! - [`h2::H2Server`]: a raw HTTP/2 prior-knowledge frame writer, one scripted [`h2::H2Fault`]
//!   per stream (REFUSED_STREAM and other resets before/after headers, GOAWAY below/above the
//!   stream).
//! - [`dns::FakeDns`]: a scripted reqwest resolver (DNS failure, a never-answering lookup for
//!   connect timeouts, a dead port for refused connections) so no test leaves loopback.
//! - [`dead_port`]: a port nothing listens on (bind, read the port, drop the listener).
//!
//! A test whose upstream the test kit can script (statuses, delays, the resets and closes of
//! `retry_testkit::Step`) uses `retry_testkit::Upstream`; these servers are for the wire-level
//! faults and the ground truth it does not offer (see each server's docs).

pub mod dns;
pub mod h1;
pub mod h2;
mod truth;

pub use truth::{GroundTruth, SeenRequest};

use std::net::SocketAddr;

/// A loopback address nothing listens on: bind port 0, read the port, drop the listener.
/// Connecting to it is refused (a later bind by another test could reuse it; tests use it
/// immediately).
pub fn dead_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.local_addr().expect("local addr")
}

/// A scripted sequence: the n-th use takes the n-th item, then `default` forever.
#[derive(Debug)]
pub(crate) struct Script<T: Clone> {
    items: std::sync::Mutex<std::collections::VecDeque<T>>,
    default: T,
}

impl<T: Clone> Script<T> {
    pub(crate) fn new(items: impl IntoIterator<Item = T>, default: T) -> Self {
        Script {
            items: std::sync::Mutex::new(items.into_iter().collect()),
            default,
        }
    }

    pub(crate) fn next(&self) -> T {
        self.items
            .lock()
            .expect("script lock")
            .pop_front()
            .unwrap_or_else(|| self.default.clone())
    }
}
