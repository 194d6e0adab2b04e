//! The server side of idempotency keys: a tower layer that runs each keyed write once.
//!
//! A client that retries a write after a lost response sends it again with the same
//! `Idempotency-Key`; exactly-once effects then depend on the server recognising the second
//! request as the first. [`IdempotencyLayer`] does that for any tower (or axum) service,
//! following the IETF draft "The Idempotency-Key HTTP Header Field"
//! (draft-ietf-httpapi-idempotency-key-header-07), with the keys in SQLite (one instance) or
//! PostgreSQL (replicas sharing one store) so that a restart or a crash loses no completed key.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use retry_idempotency::{IdempotencyLayer, SqliteKeys, Sweeper};
//!
//! let keys = SqliteKeys::open("var/idempotency.sqlite").await?;
//! let layer = IdempotencyLayer::builder(keys.clone())
//!     .with_scope(|req| {
//!         // Keys of different clients never meet: scope them by account.
//!         req.headers.get("x-api-key").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned()
//!     })
//!     .with_lease(Duration::from_secs(30))
//!     .build()?;
//! tokio::spawn(Sweeper::new(keys).run(std::future::pending()));
//! // axum: Router::new().route("/orders", post(create)).route_layer(layer)
//! # let _ = layer; Ok(()) }
//! ```
//!
//! # The rules (the draft's)
//!
//! The layer applies to requests of the configured methods (`POST` and `PATCH` by default);
//! others pass through untouched.
//!
//! - The key is an RFC 8941 structured-field string, `Idempotency-Key: "…"`, at most 255
//!   characters of printable ASCII. A missing key answers **400**, as does an invalid one (a
//!   bare token, a second header line, a bad escape, too long).
//! - The first request with a key records a *fingerprint* (SHA-256 of the method, the path and
//!   query and the body, by default; see [`IdempotencyLayerBuilder::with_fingerprint`]) and runs
//!   the handler once. The body is read whole for this, up to a limit (**413** above it).
//! - A request with the key while the first still runs answers **409**: retry later.
//! - A request with the key and another fingerprint answers **422**: a key names one request.
//! - Once the first completes, a request with the key gets its stored response again: status,
//!   the chosen headers and body, marked `Idempotent-Replayed: true`. A response body larger
//!   than the storage limit is answered but not kept: the answer says so
//!   (`Idempotency-Not-Stored: too-large`), and a replay carries the status and headers with an
//!   empty body and the same mark.
//! - A 408, a 429 and, by default, a 5xx give the key back (the handler says it did not do
//!   the work; the client's retry runs it again); see
//!   [`IdempotencyLayerBuilder::with_stored_server_errors`].
//! - Keys are scoped per client ([`IdempotencyLayerBuilder::with_scope`]: an API key, a
//!   tenant; only its SHA-256 is stored) and expire a configurable time after the first request
//!   (24 h by default); an expired key is new again, and [`Sweeper`] deletes expired keys in
//!   small batches.
//!
//! Every refusal is an RFC 9457 problem (`application/problem+json`) with a `type` URI per kind
//! ([`problem::ProblemKind`]). A store that cannot be reached answers **503** without running
//! the handler, so the request can be sent again.
//!
//! # What is promised after a crash
//!
//! - A completed key is written (in its own statement, committed; SQLite with
//!   `synchronous = FULL`) **before** its response is sent: a client that saw the response
//!   will, after any restart, get the replay.
//! - A running key carries a *lease* (60 s by default). A handler whose process dies leaves the
//!   key running until the lease lapses; then the next request with the key takes it over and
//!   runs the handler. Until then, requests with the key get 409. A handler whose client went away
//!   is not stopped: it runs in a task of its own, so its response is stored and the client's
//!   retry gets the replay. A handler that panics gives its key back at once.
//! - A handler whose lease lapsed while it **still ran** (a stalled process, a handler slower
//!   than the lease) keeps its key if it completes before another request with the key comes
//!   (a take-over is fenced on the record as it was read, so a run that completed meanwhile is
//!   replayed, not repeated). Otherwise it may run at the same time as the run that took its
//!   key over. Its response
//!   still reaches its own client, marked `Idempotency-Not-Stored: lease-lost`, and is not
//!   stored: the key replays the newer run's response. Any effect that handler makes after its
//!   lease lapsed may therefore happen twice. Choose the lease above the handler's longest run,
//!   and before an irreversible step ask [`KeyLease::current`] whether the key is still held;
//!   that narrows the window to the gap between the check and the step.
//! - If the response cannot be written (the database failed after the handler ran), it is
//!   answered marked `Idempotency-Not-Stored: store-error`; the key stays running until its
//!   lease lapses, and a retry after that runs the handler again.
//!
//! # Why a crate of its own
//!
//! The layer serves the *receiving* side of a call, the queue ([`retry_durable`]) the sending
//! side: a service can use either without the other's dependencies (tower and HTTP bodies here,
//! a worker there). It reuses the queue's databases: the same sqlx 0.9 drivers, the same SQLite
//! settings, the same clock, and can share a queue store's pool
//! ([`SqlKeys::from_pool`]), while its schema is migrated and versioned in its own table
//! (`retry_idempotency_migrations`), so neither product's upgrades hold the other's back.
//! Decisions stay above the storage driver: the layer reads a key's record and decides (run,
//! replay, 409, 422, take over); the driver ([`KeyStore`]) runs one statement per call with
//! finished values, every write fenced on the run's random token.
//!
//! The header is parsed by the `sfv` crate (RFC 8941/9651), pinned to 0.15, the newest release
//! within this workspace's MSRV.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod body;
mod config;
mod headers;
mod holding;
pub mod key;
mod layer;
mod lease;
pub mod problem;
pub mod record;
mod sql;
pub mod store;
mod sweep;

pub use body::{BoxError, IdempotentBody};
pub use config::{
    ConfigError, Fingerprint, FingerprintFn, IdempotencyLayerBuilder, ScopeFn, default_fingerprint,
};
pub use headers::{NOT_STORED, REPLAYED};
pub use layer::{Idempotency, IdempotencyLayer};
pub use lease::KeyLease;
#[cfg(feature = "postgres")]
pub use sql::PgKeys;
#[cfg(feature = "sqlite")]
pub use sql::SqliteKeys;
pub use sql::{KeyDialect, SqlKeys};
pub use store::{KeyStore, StoreError};
pub use sweep::Sweeper;

/// The clock types the layer reads time from (shared with the durable queue).
pub use retry_durable::{Clock, ManualClock, SystemClock, Timestamp};
