//! The storage driver: what the layer asks of a database, one statement per method.
//!
//! Every decision (is the key free, held, lapsed, expired, reused with another request) is made
//! by the layer in Rust from a [`Record`] it reads; the driver only runs statements with the
//! values it is given, each write fenced on the run's `token` so a run that lost its key can
//! change nothing. Implemented by [`SqliteKeys`](crate::SqliteKeys) and
//! [`PgKeys`](crate::PgKeys); both pass one shared test suite.

use std::fmt;
use std::future::Future;

use retry_durable::Timestamp;

/// A key store the layer runs on. Cheap to clone (a connection pool).
pub trait KeyStore: Clone + Send + Sync + 'static {
    /// `"sqlite"` or `"postgres"`, for logs and errors.
    fn backend(&self) -> &'static str;

    /// Inserts a running record for `run` unless `(scope, key)` exists: `true` if inserted.
    fn insert(&self, run: &NewRun<'_>) -> impl Future<Output = StoreResult<bool>> + Send;

    /// The record of `(scope, key)`, if any.
    fn get(
        &self,
        scope: &[u8],
        key: &str,
    ) -> impl Future<Output = StoreResult<Option<Record>>> + Send;

    /// Replaces the record of `run`'s `(scope, key)` by a running record for `run`, only if it
    /// is still as the layer read it, carrying `previous_token` in `previous_state`
    /// (`"running"` or `"done"`): a lapsed lease or an expired key the layer decided to take
    /// over. A run that completed since it was read is not taken over. `true` if replaced.
    fn take_over(
        &self,
        previous_token: i64,
        previous_state: &str,
        run: &NewRun<'_>,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Marks the running record of `(scope, key)` held by `token` done, with its response:
    /// `true` if it was still held by `token`.
    fn complete(
        &self,
        held: &Held<'_>,
        response: &Completed<'_>,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Deletes the running record of `(scope, key)` held by `token` (the key is given back):
    /// `true` if it was still held by `token`.
    fn release(&self, held: &Held<'_>) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Deletes up to `batch` records that expired at or before `now` (a running one only once
    /// its lease lapsed too), oldest first: how many. Safe from every replica at once.
    fn sweep(&self, now: Timestamp, batch: u32) -> impl Future<Output = StoreResult<u64>> + Send;
}

/// Result alias for store calls.
pub type StoreResult<T> = Result<T, StoreError>;

/// A database call that failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The database refused or could not be reached.
    Database {
        /// `"sqlite"` or `"postgres"`.
        backend: &'static str,
        /// What the store was doing.
        action: &'static str,
        /// The driver's error.
        source: retry_durable::sqlx::Error,
    },
    /// A row holds a value this version cannot read.
    BadRow {
        /// `"sqlite"` or `"postgres"`.
        backend: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The schema cannot be used by this version.
    Migration {
        /// `"sqlite"` or `"postgres"`.
        backend: &'static str,
        /// Why.
        reason: String,
    },
    /// A setting is invalid.
    InvalidConfig {
        /// The setting.
        field: &'static str,
        /// Why, and the fix.
        reason: String,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Database {
                backend,
                action,
                source,
            } => write!(f, "{backend} key store could not {action}: {source}"),
            StoreError::BadRow { backend, detail } => {
                write!(
                    f,
                    "{backend} key store holds a row this version cannot read: {detail}"
                )
            }
            StoreError::Migration { backend, reason } => {
                write!(f, "{backend} key store schema: {reason}")
            }
            StoreError::InvalidConfig { field, reason } => write!(f, "invalid {field}: {reason}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Database { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A run taking a key: the values of its record.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct NewRun<'a> {
    /// SHA-256 of the client scope.
    pub scope: &'a [u8],
    /// The key.
    pub key: &'a str,
    /// SHA-256 of the request's fingerprint.
    pub fingerprint: &'a [u8],
    /// A random number naming this run; every later write of the run is fenced on it.
    pub token: i64,
    /// When another request may take the key over if this run has not completed.
    pub lease_until: Timestamp,
    /// When the key (and its stored response) expires.
    pub expires_at: Timestamp,
    /// Now.
    pub now: Timestamp,
}

impl<'a> NewRun<'a> {
    /// The run fenced by `held`, for a request with this `fingerprint`, taking the key `now`
    /// with a lease until `lease_until` and a record kept until `expires_at` (in time order).
    pub fn new(
        held: Held<'a>,
        fingerprint: &'a [u8],
        now: Timestamp,
        lease_until: Timestamp,
        expires_at: Timestamp,
    ) -> Self {
        NewRun {
            scope: held.scope,
            key: held.key,
            fingerprint,
            token: held.token,
            lease_until,
            expires_at,
            now,
        }
    }

    /// The fence of this run.
    pub fn held(&self) -> Held<'_> {
        Held {
            scope: self.scope,
            key: self.key,
            token: self.token,
        }
    }
}

/// The fence of a run: its key and token.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Held<'a> {
    /// SHA-256 of the client scope.
    pub scope: &'a [u8],
    /// The key.
    pub key: &'a str,
    /// The run's token.
    pub token: i64,
}

impl<'a> Held<'a> {
    /// The run with `token` on `key` in the client scope `scope` (its SHA-256).
    pub fn new(scope: &'a [u8], key: &'a str, token: i64) -> Self {
        Held { scope, key, token }
    }
}

/// A response to store with a completed key.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Completed<'a> {
    /// Its status.
    pub status: u16,
    /// The chosen headers, encoded (see [`crate::record`]).
    pub headers: &'a [u8],
    /// The body (empty when `not_stored` says why it is not kept).
    pub body: &'a [u8],
    /// Why the body is not kept (`too-large`, `body-error`, `trailers`), `None` if it is.
    pub not_stored: Option<&'a str>,
}

impl<'a> Completed<'a> {
    /// A response with its body kept.
    pub fn new(status: u16, headers: &'a [u8], body: &'a [u8]) -> Self {
        Completed {
            status,
            headers,
            body,
            not_stored: None,
        }
    }

    /// The same response without its body, for the named `reason`.
    pub fn not_stored(self, reason: &'a str) -> Self {
        Completed {
            body: &[],
            not_stored: Some(reason),
            ..self
        }
    }
}

/// A key's record as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// SHA-256 of the first request's fingerprint.
    pub fingerprint: Vec<u8>,
    /// The token of the run holding (or having completed) the key.
    pub token: i64,
    /// When the key expires.
    pub expires_at: Timestamp,
    /// Running or done.
    pub state: RecordState,
}

impl Record {
    /// A record as a store reads it back.
    pub fn new(
        fingerprint: Vec<u8>,
        token: i64,
        expires_at: Timestamp,
        state: RecordState,
    ) -> Self {
        Record {
            fingerprint,
            token,
            expires_at,
            state,
        }
    }
}

/// Where a key's first run is.
///
/// Closed on purpose: a key is taken by one run, which is running or done, and the layer decides
/// on exactly these two; a third state would change that decision, and every store with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// Running, under a lease.
    Running {
        /// When the lease lapses.
        lease_until: Timestamp,
    },
    /// Done: the response to replay.
    Done(StoredResponse),
}

/// A stored response.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredResponse {
    /// Its status.
    pub status: u16,
    /// The chosen headers, encoded.
    pub headers: Vec<u8>,
    /// The body (empty when not stored).
    pub body: Vec<u8>,
    /// Why the body was not stored, if it was not.
    pub not_stored: Option<String>,
}

impl StoredResponse {
    /// A stored response with its body.
    pub fn new(status: u16, headers: Vec<u8>, body: Vec<u8>) -> Self {
        StoredResponse {
            status,
            headers,
            body,
            not_stored: None,
        }
    }

    /// The same response, stored without its body for the named `reason`.
    pub fn not_stored(self, reason: impl Into<String>) -> Self {
        StoredResponse {
            body: Vec::new(),
            not_stored: Some(reason.into()),
            ..self
        }
    }
}

impl RecordState {
    /// Its name in the `state` column.
    pub fn as_str(&self) -> &'static str {
        match self {
            RecordState::Running { .. } => "running",
            RecordState::Done(_) => "done",
        }
    }
}
