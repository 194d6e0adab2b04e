//! HTTP retries that are safe by construction.
//!
//! Every Rust retry crate decides from an error predicate alone. None knows whether the request
//! reached the server, none refuses a non-idempotent write, none shares a retry budget across
//! layers, none propagates a deadline. This crate decides every retry from **evidence** (was the
//! request even sent?), body replayability, status, deadline and a shared **retry budget**, and
//! its `#[retry]` macro refuses at compile time to retry a write that has no idempotency key.
//!
//! # Why evidence, not predicates
//! "Retry on timeout" retries a payment whose response was lost after the charge. The engine
//! retries a write only when the request is *proven* not sent ([`Evidence::NotSent`]) or the
//! write carries an idempotency key the upstream deduplicates; otherwise the outcome is
//! [`Ambiguous`], a third answer that is neither success nor failure.
//!
//! # Why budgets, not just max attempts
//! Max attempts bounds one call; during an outage every call retries at once and the failing
//! upstream gets `max_attempts` times its normal load. The per-upstream [`budget`] lets retries
//! add only a fraction of real traffic, and the [operation scope](operation) shares one retry
//! allowance and one deadline across every layer of a business operation (3 calls, not 3 x 3).
//!
//! # A throttle, not a breaker
//! A budget caps retries over its window, not at the moment an upstream slows down; a circuit
//! breaker is all or nothing, and once a brief slowdown opens it, it refuses calls one attempt
//! would complete for as long as it stays open. Each upstream's [`throttle`] (on by default)
//! follows what the upstream accepts over the last half second and refuses the rest locally,
//! in proportion: first attempts pass at up to three times what it accepts, retries and
//! hedges only in the proportion it accepts. A dead upstream gets about a probe per half
//! second, a recovered one everything again within a few hundred milliseconds; a call it
//! refuses waits, within its deadline, for the upstream to accept again (a slow upstream's
//! backlog goes at the pace of its answers; when no other call is left to ask, one of the
//! waiting calls probes it). It judges answers and timeouts only: a
//! server closing connections under load (a reload, `keepalive_requests`, a restart) stays
//! invisible to callers. The [`breaker`] remains, opt-in, for a hard stop.
//!
//! # Quick start
//! Name the upstream in code, tune it in the registry, send through the classifying path:
//!
//! ```no_run
//! use retry_runtime::http::{RequestBuilderExt, ResponseExt};
//! use retry_runtime::{Error, Registry, retry};
//!
//! struct Catalog { client: reqwest::Client, base: String }
//!
//! impl Catalog {
//!     // A read: retried when the evidence, budget and deadline allow.
//!     #[retry(upstream = "catalog", method = GET)]
//!     async fn item(&self, id: u64) -> Result<bytes::Bytes, Error> {
//!         let response = self.client.get(format!("{}/items/{id}", self.base)).send_attempt().await?;
//!         Ok(response.read_bytes().await?)
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     Registry::global().load_file("upstreams.toml")?; // every mistake at once, located
//!     Registry::global().verify()?; // every upstream named by a #[retry] is configured
//!     // On SIGTERM or Ctrl-C: no new retries; calls waiting out a backoff end at once.
//!     tokio::spawn(retry_runtime::Drain::global().clone().on_shutdown_signal());
//!     // A client the classifier can trust: no automatic redirects, no hidden retries.
//!     let client = retry_runtime::http::client_builder().build()?;
//!     let catalog = Catalog { client, base: "http://catalog.internal".into() };
//!     let item = catalog.item(7).await?;
//!     println!("{} bytes", item.len());
//!     Ok(())
//! }
//! ```
//!
//! A complete service (registry, `verify()`, client, draining, an axum app behind the server
//! layer calling an adapter):
//! [`examples/src/bin/service.rs`](https://github.com/retry-rs/retry/blob/main/examples/src/bin/service.rs).
//!
//! Without the macro: [`Retry::upstream`]. Across services: [`propagation`] headers and the
//! `retry_runtime::tower` layers (feature `tower`). For outages longer than the in-memory
//! window: `#[retry(durable = ...)]` (feature `durable`) and the
//! [`retry-durable`](https://docs.rs/retry-durable) queue.
//!
//! Every rule, its reason and its source: the [`rules`] page. What the library promises when
//! things go wrong, with the test behind each promise: the [`guarantees`] page. What it reports (spans, events, metrics): the [`observability`] page.
//! How the crate is built: [`ARCHITECTURE.md`](https://github.com/retry-rs/retry/blob/main/ARCHITECTURE.md).
//!
//! # Connection rotation is not failure
//! Servers close healthy connections all the time: nginx after `keepalive_requests`, proxies
//! after their request limit, load balancers while draining, every reload. Over HTTP/2 that is a
//! GOAWAY with `NO_ERROR` (or a `REFUSED_STREAM`), over HTTP/1.1 a pooled connection closed
//! before the request was written. The classifier reports it
//! ([`Classify::connection_rotated`]), and the loop treats it as what it is:
//! - the **throttle and the circuit breaker do not count it** (neither failure nor success): it says nothing
//!   about the upstream's health. Connect failures, timeouts, 5xx and resets after the request
//!   was sent still count;
//! - a read or a keyed write (any method when nothing was sent) is **retried at once**, without
//!   a budget token and without counting against the attempts, like gRPC's transparent retries,
//!   as long as the upstream makes progress (see the attempt loop's docs for the exact bound);
//!   otherwise the rotation is an ordinary retry, and the budget stops a storm of them;
//! - the evidence does not change: an unkeyed write turned away by a GOAWAY may have been
//!   processed (hyper can attribute a GOAWAY to a stream the server accepted), so it stays
//!   [`Ambiguous`]; a keyed write is retried because the upstream promises to deduplicate its
//!   key (`dedups_idempotency_key`), and one that does not may run it twice;
//! - it is counted apart: the `retry.rotations` and `retry.rotation_retries` metrics, the
//!   `connection_rotated` field of the attempt span, the retry reason `connection_rotated`.
//!
//! # The decision order
//! The [`DefaultEngine`](engine::DefaultEngine) evaluates, in order, and a later rule never re-enables an earlier
//! denial: attempts, budget, body replayability, response already delivered, draining,
//! deadline, permanent failure, ambiguity of a sent write, then the status rules (408, 425,
//! 429, 401, 500, 502-504, other 4xx).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod ambient;
mod attempt;
mod attempt_future;
mod bulkhead;
mod call;
mod category;
mod classify;
mod config;
mod deadline;
mod decision;
mod drain;
mod duration;
mod error;
mod evidence;
#[cfg(feature = "durable")]
mod hand_off;
mod key;
mod latency;
mod macro_support;
mod observe;
mod replay;
mod retry;
mod scope;
mod site;
mod suggest;
mod upstream;
mod window;

pub mod backoff;
pub mod breaker;
pub mod budget;
#[cfg(feature = "durable")]
pub mod durable;
pub mod engine;
pub mod hedge;
#[cfg(feature = "http")]
pub mod http;
pub mod partition;
pub mod propagation;
pub mod registry;
pub mod retry_after;
pub mod throttle;
#[cfg(feature = "tower")]
pub mod tower;

pub use attempt::Attempt;
pub use call::Reconciled;
pub use category::{PermanentCategory, Pushback, Rejection};
pub use classify::Classify;
pub use config::{UpstreamConfig, Violation};
pub use decision::{AmbiguityReason, Decision, DenyReason, Failure, RetryReason, Stop};
pub use drain::Drain;
pub use error::{Ambiguous, Error};
pub use evidence::Evidence;
pub use key::{IdempotencyKey, IntoIdempotencyKey, KeyError};
#[cfg(feature = "prometheus")]
pub use observe::prometheus_buckets;
pub use observe::{ATTEMPT_DURATION_BUCKETS, describe_metrics};
pub use registry::live::Registry;
pub use replay::Replayability;
pub use retry::{HedgedCall, Retry, RetryCall};
pub use scope::{Operation, OperationBuilder, operation};
pub use upstream::Upstream;

/// Derives [`Classify`](trait@Classify) for an adapter error: every variant wraps a classifying
/// error (one field, or `#[classify(transparent)]`; add `from` for a `From` impl) or states its
/// facts: `status = 422` (a response arrived with that status), `evidence = ".."`
/// (`not_sent`, `sent_no_response`, `response_received`, `partial_response`), `permanent = ".."`
/// (`contract`, `decode`, `auth`, `invalid_request`, `configuration`, `cancelled`, `other`). A
/// variant that says neither is refused at compile time, so no fact is dropped by omission.
///
/// The derive does not write `Display`, which a `#[retry]` function's error also needs: the
/// message is the error's own business, most error types already get it from `thiserror`
/// (whose `#[from]` works in place of `#[classify(from)]`), and a second derive of it would
/// collide with theirs.
///
/// ```
/// use retry_runtime::{Classify, Evidence, PermanentCategory};
///
/// #[derive(Debug, thiserror::Error, Classify)]
/// enum AdapterError {
///     /// The runtime's and the HTTP integration's failures: every fact delegated.
///     #[error(transparent)]
///     Retry(#[from] retry_runtime::Error),
///     /// A 422 the contract names: retrying cannot help.
///     #[error("rejected: {code}")]
///     #[classify(status = 422, permanent = "contract")]
///     Rejected { code: String },
///     /// A complete answer that does not decode.
///     #[error("unexpected answer: {0}")]
///     #[classify(evidence = "response_received", permanent = "decode")]
///     Decode(String),
/// }
///
/// let e = AdapterError::from(retry_runtime::Error::CircuitOpen { upstream: "sber".into() });
/// assert_eq!(e.evidence(), Evidence::NotSent);
/// assert!(e.rejection().is_some(), "delegated");
/// let r = AdapterError::Rejected { code: "LIMIT".into() };
/// assert_eq!(r.status(), Some(422));
/// assert_eq!(r.evidence(), Evidence::ResponseReceived, "a status implies a response");
/// assert_eq!(r.permanent(), Some(PermanentCategory::Contract));
/// assert_eq!(r.to_string(), "rejected: LIMIT");
/// ```
pub use retry_macros::Classify;

/// The spans, events and metrics the library emits: names, levels, fields, labels, and what
/// each level costs.
#[doc = include_str!("observability.md")]
pub mod observability {}

/// Every rule the library applies, why, and where it comes from (RFC 9110/9113, the SRE
/// book, the AWS backoff study).
#[doc = include_str!("rules.md")]
pub mod rules {}

/// What the library promises under bad input, concurrency, crashes and clock jumps, each
/// promise with the test that shows it.
#[doc = include_str!("guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("retry_macro.md")]
#[doc(inline)]
pub use retry_macros::retry;

/// Re-exported so users name methods without depending on `http` themselves.
pub use ::http::Method;

#[doc(hidden)]
pub mod __private {
    //! Items the `#[retry]` expansion refers to. Not a public API.
    pub use crate::call::{BackoffSlot, Call, CallSpec, Reconciled, Step};
    pub use crate::key::IntoIdempotencyKey;
    pub use crate::macro_support::{
        AttemptArg, ForwardStop, NoStop, StopVia, attempt_arg, classify_ref, idempotency_key,
    };
    pub use crate::partition::Partition;
    pub use crate::registry::Registration;
    pub use crate::registry::live::Registry;
    pub use crate::site::CallSite;
    pub use crate::{Error, Method, Replayability};
    pub use ::core;
    pub use ::inventory;
    pub use ::std;

    /// What a `#[retry(durable = ...)]` expansion calls.
    #[cfg(feature = "durable")]
    pub mod durable {
        pub use crate::durable::replay::{
            ArgCodec, ArgsWriter, arg_codec, in_replay, read_arg, read_args, write_arg,
        };
        pub use crate::durable::{
            Durable, DurableReturn, Replay, StoredArg, TaskContext, defer, replay_key, replaying,
        };
    }

    /// Refuses `durable = ...` without the feature, in words that name it.
    #[cfg(not(feature = "durable"))]
    #[macro_export]
    #[doc(hidden)]
    macro_rules! __retry_require_durable {
        () => {
            ::core::compile_error!(
                "`#[retry(durable = ...)]` needs the durable queue: enable retry-runtime's \
                 `durable` feature and add the `retry-durable` crate"
            );
        };
    }

    /// Refuses `durable = ...` without the feature, in words that name it.
    #[cfg(feature = "durable")]
    #[macro_export]
    #[doc(hidden)]
    macro_rules! __retry_require_durable {
        () => {};
    }
    pub use crate::__retry_require_durable as require_durable;
}
