//! Integration tests live in `tests/`; shared helpers (fault-injecting servers) live here.
//!
//! [`fault`] is an in-process fault-injecting upstream on 127.0.0.1 that records ground truth
//! (connections, bytes read, requests seen, executions by idempotency key): reusable by the
//! examples crate to demonstrate outages without a network.

pub mod fault;
pub mod loopback;
pub mod nginx;
pub mod support;
/// The failure the tests' adapters and UI files return (the workspace's one fixture error).
pub use retry_fixtures::AdapterError;
