//! Test kit for adapters built on [`retry_runtime`]: prove in a unit test what an adapter's
//! retries do, and inject faults in staging.
//!
//! The runtime's value is in decisions a test cannot see from the outside: was the request
//! sent, is a repeat safe, is there budget left. The kit makes them visible:
//!
//! - [`Upstream`]: a scripted upstream on loopback, over real HTTP/1.1 or h2c. Each request
//!   gets the next [`Step`] (a status with headers and a delay, a reset before or after the
//!   request is read, a connection closed before the response, a body cut short), and every
//!   request is recorded ([`Request`]: method, path, headers, body, arrival time).
//! - [`Kit`]: a fresh, seeded registry to hand to the adapter (`#[retry(registry = ...)]`),
//!   and [`Kit::run`], which runs the adapter's call unchanged and returns a [`Run`]: its
//!   output, the [`Trace`] of every attempt (number, evidence, decision and named reason,
//!   delay, key fingerprint, budget left) and the requests received.
//! - Assertions on a [`Run`] for the common questions ([`Run::assert_attempts`],
//!   [`Run::assert_one_key`], [`Run::assert_no_unkeyed_write_twice`],
//!   [`Run::assert_delays_within_backoff`], [`Run::assert_denied`],
//!   [`Run::assert_ambiguous`]); a failing one prints the trace and the requests.
//! - [`fault`]: a tower layer that injects latency, statuses, resets and refusals at a
//!   seeded rate, per route, switched at run time through a handle; off, it costs one atomic
//!   load per request.
//!
//! The [`guide`] walks through a first test: start there.
//!
//! ```toml
//! [dev-dependencies]
//! retry-testkit = "0.1"
//! tokio = { version = "1", features = ["macros", "rt"] }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod assert;
mod error;
pub mod fault;
mod kit;
mod record;
mod script;
mod trace;
mod upstream;

pub use error::CallError;
pub use kit::{DEFAULT_SEED, Kit, KitBuilder, Run};
pub use record::Request;
pub use script::{Reply, Step};
pub use trace::{AttemptTrace, CallTrace, DecisionRecord, Trace};
pub use upstream::{Protocol, Upstream};

#[doc = include_str!("guide.md")]
pub mod guide {}

/// The README's example, compiled and run as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
