//! The reqwest integration (feature `http`, on by default): send a request inside an attempt
//! and get back either the response or an [`HttpError`] that says how far the request got.
//!
//! ```no_run
//! use retry_runtime::http::{self, RequestBuilderExt, ResponseExt};
//! use retry_runtime::{Error, Method, Registry, Retry, UpstreamConfig};
//!
//! # async fn demo() -> Result<(), Error> {
//! let registry = Registry::builder().upstream("payments", UpstreamConfig::new()).build().unwrap();
//! let client = http::client_builder_for(registry.upstream("payments")?.config())
//!     .build()
//!     .expect("client");
//! let receipt: serde_json::Value = Retry::in_registry(&registry, "payments")
//!     .method(Method::POST)
//!     .idempotency("order-42-capture")
//!     .run(|_attempt| {
//!         let client = client.clone();
//!         async move {
//!             // adds Idempotency-Key, retry-deadline-ms, retry-retries-left (retry-attempt on retries); the loop bounds it by the attempt timeout
//!             let response = client
//!                 .post("http://payments.internal/capture")
//!                 .body(r#"{"order":42}"#)
//!                 .send_attempt()
//!                 .await?;
//!             // buffered inside the attempt: a reset mid-body is retried as PartialResponse
//!             Ok::<_, Error>(response.read_json().await?)
//!         }
//!     })
//!     .await?;
//! # let _ = receipt; Ok(()) }
//! ```
//!
//! # Why the send path, not `send()`
//! reqwest's predicates do not say whether a request reached the server: `is_timeout()` is true
//! before and after the request was written, a body reset surfaces as `is_decode()`, and with
//! automatic redirects `is_connect()` describes the last hop, not the request that may have
//! charged a card. [`RequestBuilderExt::send_attempt`] walks the error chain down to hyper and h2
//! and classifies it into [`Evidence`](crate::Evidence) (see [`classify`] for the table), so the
//! engine retries a write only when the failure *proves* it was not sent.
//!
//! # What the send path adds
//! Inside an attempt (a [`Retry`](crate::Retry) closure or a `#[retry]` function) it:
//! - refuses, before sending, a write whose method is not the declared one (a write sent
//!   through an adapter declared as a read is a bug, [`PermanentCategory::InvalidRequest`](crate::PermanentCategory));
//!   a safe request (GET, HEAD, OPTIONS, TRACE) goes out under any declaration, whose rules are
//!   then the more cautious ones;
//! - adds the idempotency key (header named by the upstream's `idempotency_header`), the attempt
//!   number and how long the caller still waits for this attempt: its timeout, clamped to the
//!   remaining deadline ([`headers`]);
//! - leaves the timeout to the loop (the attempt timeout, clamped to the remaining deadline, cuts
//!   the request; a tighter per-request timeout set by the caller is kept);
//! - reports a streaming (one-shot) body to the loop: the attempt is sent, never retried;
//! - records OpenTelemetry HTTP attributes on the attempt span: `http.request.method`,
//!   `server.address`, `server.port`, `http.request.resend_count`, `http.response.status_code`
//!   and `error.type` (the evidence class). The idempotency key is never logged in clear.
//!
//! Outside an attempt it only sends and classifies.
//!
//! # A sound client
//! The classification holds only for a client without automatic redirects and without
//! reqwest's own protocol retries (which hide attempts from the budget): build it with
//! [`client_builder`] or [`client_builder_for`], and do not re-enable either.
//!
//! # Errors
//! [`HttpError`] implements [`Classify`](crate::Classify) and converts into the runtime's
//! [`Error`](crate::Error) (`Error::Http`), so `?` works in a closure whose error type is
//! `retry_runtime::Error`, or any application error that wraps it. `HttpError` is not itself a
//! loop error type (it has no `From<retry_runtime::Error>`): the runtime's own outcomes
//! (ambiguous, deadline, unknown upstream) are not HTTP failures.
//!
//! # The reqwest version
//! The extension traits are implemented for reqwest 0.13's `RequestBuilder` and `Response`:
//! an application on another reqwest major gets "method not found" for `send_attempt`. Depend
//! on `reqwest = "0.13"`, or use the copy re-exported here, [`reqwest`], which
//! is always the one the traits are implemented for.
//!
//! # TLS
//! The `http` feature builds reqwest without TLS (plain HTTP/1 and HTTP/2 with prior
//! knowledge), which is all the test suite needs. Enable the `rustls` feature for `https://`
//! (reqwest's default rustls backend).

mod body;
pub mod classify;
mod client;
pub(crate) mod error;
pub mod headers;
mod sealed;
mod send;

pub use body::ResponseExt;
pub use client::{DEFAULT_CONNECT_TIMEOUT, client_builder, client_builder_for};
pub use error::{HttpError, HttpErrorKind};
pub use send::RequestBuilderExt;

/// The reqwest this integration is built on (0.13), re-exported so an application can use the
/// very version [`RequestBuilderExt`] and [`ResponseExt`] are implemented for.
pub use ::reqwest;
