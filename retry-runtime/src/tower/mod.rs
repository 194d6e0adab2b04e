//! tower integration (feature `tower`): the same engine for any `tower::Service` over HTTP,
//! and the server-side layer that restores a caller's operation scope.
//!
//! - [`RetryLayer`] wraps a client service (a hyper client, a tonic-style channel): every
//!   request becomes a retrying call to one named upstream, with replayability from the body
//!   type ([`ReplayBody`]), the idempotency key from the request's idempotency header, and the
//!   propagation headers added to every attempt. The last response is returned as the
//!   service's response, whatever its status, so callers keep full control of error mapping.
//! - [`ScopeLayer`] wraps a server (axum, plain hyper): it opens an operation scope per request
//!   from the caller's propagated deadline (less an optional transit margin) and retry
//!   allowance, *shrunk* to the server's own limits ([`InboundLimits`]), stops the handler when
//!   the caller's deadline has passed, and answers a failed
//!   request whose retries were spent here (`retries-spent`), or whose retry here was refused by
//!   the upstream's budget, breaker, bulkhead or throttle, or held by its throttle until no
//!   time was left (`overloaded`), with the pushback header, so the caller does not retry it
//!   again.

mod body;
mod client;
mod server;

pub use body::{OneShot, ReplayBody};
pub use client::{BoxError, PartitionOf, RetryLayer, RetryService, TowerError};
pub use server::{InboundLimits, ScopeLayer, ScopeService, operation_name};
