//! Header names the integration sends and reads, in one place.
//!
//! | header | direction | value |
//! |---|---|---|
//! | [`IDEMPOTENCY_KEY`] (per upstream: `idempotency_header`) | request | the call's key, the same on every attempt |
//! | [`ATTEMPT`](crate::propagation::ATTEMPT) | request | the attempt number, from the second attempt on (absent on the first) |
//! | [`DEADLINE_MS`](crate::propagation::DEADLINE_MS) | request | the operation's remaining deadline in whole milliseconds, relative (never an absolute clock) |
//! | [`RETRIES_LEFT`](crate::propagation::RETRIES_LEFT) | request | retries the operation may still make across every layer |
//! | `Retry-After` | response | delay-seconds or HTTP-date; malformed values are ignored with a trace event |
//! | [`PUSHBACK`](crate::propagation::PUSHBACK) | response | `overloaded` or `retries-spent` ([`Pushback`](crate::Pushback)); other values are ignored with a trace event |

/// The default idempotency key header (IETF `draft-ietf-httpapi-idempotency-key-header`).
/// Each upstream can rename it (`idempotency_header`).
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";
