//! Runnable examples of `retry-runtime`: the catalog adapters and the outage lab.
//!
//! - [`adapters`]: an order-status read, a register write with a deterministic idempotency key,
//!   a write with a reconcile check.
//! - [`lab`]: API -> middle -> catalog on loopback under forced faults, for four retry
//!   designs; run it with `cargo run --release -p retry-examples --bin outage-lab`.

pub mod adapters;
pub mod lab;
