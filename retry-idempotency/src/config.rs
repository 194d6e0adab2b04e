//! The layer's settings: what a request's scope and fingerprint are made of, the limits, and
//! the builder that checks them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use http::header::{self, HeaderName};
use http::request::Parts;
use retry_durable::{Clock, SystemClock};
use sha2::{Digest, Sha256};

use crate::key::DEFAULT_MAX_KEY_LEN;
use crate::store::KeyStore;

/// The client scope a request belongs to (see [`IdempotencyLayerBuilder::with_scope`]).
pub type ScopeFn = Arc<dyn Fn(&Parts) -> String + Send + Sync>;

/// What a request's fingerprint is made of (see [`IdempotencyLayerBuilder::with_fingerprint`]).
pub type FingerprintFn = Arc<dyn Fn(&Parts, &[u8], &mut Fingerprint) + Send + Sync>;

/// The SHA-256 of a request's parts, each added length-first so two different sequences of
/// parts never hash alike.
pub struct Fingerprint(pub(crate) Sha256);

impl Fingerprint {
    /// Adds one part.
    pub fn add(&mut self, part: &[u8]) {
        self.0.update((part.len() as u64).to_be_bytes());
        self.0.update(part);
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Fingerprint")
    }
}

/// The default fingerprint: the method, the path and query, and the body.
pub fn default_fingerprint(parts: &Parts, body: &[u8], fp: &mut Fingerprint) {
    fp.add(parts.method.as_str().as_bytes());
    fp.add(
        parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .as_bytes(),
    );
    fp.add(body);
}

/// A setting the builder refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigError {
    /// The setting.
    pub field: &'static str,
    /// Why, and the fix.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "idempotency layer: invalid {}: {}",
            self.field, self.reason
        )
    }
}

impl std::error::Error for ConfigError {}

pub(crate) struct Config {
    pub(crate) header: HeaderName,
    pub(crate) methods: Vec<Method>,
    pub(crate) require_key: bool,
    pub(crate) max_key_len: usize,
    pub(crate) max_request_body: usize,
    pub(crate) max_stored_body: usize,
    pub(crate) lease: Duration,
    pub(crate) ttl: Duration,
    pub(crate) stored_headers: Vec<HeaderName>,
    pub(crate) store_server_errors: bool,
    pub(crate) scope: ScopeFn,
    pub(crate) fingerprint: FingerprintFn,
    pub(crate) clock: Arc<dyn Clock>,
}

/// Builds an [`IdempotencyLayer`](crate::IdempotencyLayer).
///
/// # Default
/// - header: `Idempotency-Key`
/// - methods that need a key: `POST`, `PATCH` (others pass through untouched)
/// - `key_required`: true (a `POST`/`PATCH` without a key is answered 400)
/// - `max_key_len`: 255 characters
/// - `max_request_body`: 1 MiB (read whole to fingerprint it; above: 413)
/// - `max_stored_body`: 64 KiB (above: answered, not replayed; see [`NOT_STORED`](crate::NOT_STORED))
/// - `lease`: 60 s (a running request's hold on its key; past it another request may take it)
/// - `ttl`: 24 h (how long a key and its response are kept, from the first request)
/// - stored headers: `content-type`, `content-language`, `content-location`, `location`,
///   `etag`, `last-modified`
/// - `store_server_errors`: false (a 5xx gives the key back: the request may be sent again)
/// - scope: one scope for every client (set it to the API key or tenant: see
///   [`with_scope`](Self::with_scope))
/// - fingerprint: [`default_fingerprint`] (method, path and query, body)
/// - clock: [`SystemClock`]
pub struct IdempotencyLayerBuilder<K> {
    store: K,
    config: Config,
}

impl<K: fmt::Debug> fmt::Debug for IdempotencyLayerBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyLayerBuilder")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl<K: KeyStore> IdempotencyLayerBuilder<K> {
    /// Sets the header carrying the key.
    pub fn with_header(mut self, name: HeaderName) -> Self {
        self.config.header = name;
        self
    }

    /// Sets the methods whose requests need a key (the draft's non-idempotent methods are
    /// `POST` and `PATCH`). Requests of other methods pass through untouched.
    pub fn with_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.config.methods = methods.into_iter().collect();
        self
    }

    /// Whether a request of those methods without a key is refused (400), or passes through
    /// undeduplicated.
    pub fn with_key_required(mut self, required: bool) -> Self {
        self.config.require_key = required;
        self
    }

    /// Sets the longest key accepted, in characters (1 to 255).
    pub fn with_max_key_len(mut self, n: usize) -> Self {
        self.config.max_key_len = n;
        self
    }

    /// Sets the largest request body read to fingerprint it; a larger one is answered 413.
    pub fn with_max_request_body(mut self, bytes: usize) -> Self {
        self.config.max_request_body = bytes;
        self
    }

    /// Sets the largest response body stored for replay. A larger response is answered, marked
    /// [`NOT_STORED`](crate::NOT_STORED)` : too-large`; the key stays completed, and a retry gets the status and
    /// headers with an empty body, marked the same way.
    pub fn with_max_stored_body(mut self, bytes: usize) -> Self {
        self.config.max_stored_body = bytes;
        self
    }

    /// Sets how long a running request holds its key. Choose it above the handler's longest
    /// run: past it, another request with the key may run the handler too (see
    /// [`KeyLease`](crate::KeyLease)).
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }

    /// Sets how long a key and its stored response are kept, from the first request. After
    /// it the key is new again. Publish it: clients must not retry a write for longer.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.config.ttl = ttl;
        self
    }

    /// Sets the response headers stored and replayed (with the status and body).
    pub fn with_stored_headers(mut self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        self.config.stored_headers = names.into_iter().collect();
        self
    }

    /// Whether a 5xx response is stored and replayed like any other. By default it is not:
    /// the key is given back, so the client's retry runs the handler again, which is right
    /// when a 5xx means the handler did nothing (its dependency was down). Store them when a
    /// handler can fail after an effect it cannot undo. (408 and 429 always give the key
    /// back: they say the request was not processed.)
    pub fn with_stored_server_errors(mut self, store: bool) -> Self {
        self.config.store_server_errors = store;
        self
    }

    /// Sets the client scope of a request: keys of different scopes never meet (two tenants
    /// may pick the same key). Typically the authenticated account or API key; only its
    /// SHA-256 is stored.
    pub fn with_scope(mut self, scope: impl Fn(&Parts) -> String + Send + Sync + 'static) -> Self {
        self.config.scope = Arc::new(scope);
        self
    }

    /// Sets what a request's fingerprint is made of: a key reused with another fingerprint is
    /// answered 422. Add only what identifies the request (leave out a timestamp header the
    /// client changes on every retry).
    pub fn with_fingerprint(
        mut self,
        f: impl Fn(&Parts, &[u8], &mut Fingerprint) + Send + Sync + 'static,
    ) -> Self {
        self.config.fingerprint = Arc::new(f);
        self
    }

    /// Sets the clock leases and expiry are read from (a [`ManualClock`](retry_durable::ManualClock)
    /// in tests). Replicas sharing a store compare their clocks: keep them in step.
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.config.clock = Arc::new(clock);
        self
    }

    /// Its store and settings, or the first setting that cannot work (for
    /// [`build`](Self::build)).
    pub(crate) fn checked(self) -> Result<(K, Config), ConfigError> {
        let c = &self.config;
        let err = |field, reason: &str| {
            Err(ConfigError {
                field,
                reason: reason.to_owned(),
            })
        };
        if c.max_key_len == 0 || c.max_key_len > DEFAULT_MAX_KEY_LEN {
            return err("max_key_len", "must be 1 to 255 characters");
        }
        if c.lease.is_zero() {
            return err(
                "lease",
                "must be above zero: choose it above the handler's longest run",
            );
        }
        if c.ttl < c.lease {
            return err(
                "ttl",
                "must be at least the lease: a key cannot expire while held",
            );
        }
        if c.methods.is_empty() {
            return err("methods", "name at least one method (POST, PATCH)");
        }
        Ok((self.store, self.config))
    }
}

impl<K: KeyStore> IdempotencyLayerBuilder<K> {
    /// A builder of a layer on `store` with every default (listed above).
    pub(crate) fn with_defaults(store: K) -> Self {
        IdempotencyLayerBuilder {
            store,
            config: Config {
                header: HeaderName::from_static("idempotency-key"),
                methods: vec![Method::POST, Method::PATCH],
                require_key: true,
                max_key_len: DEFAULT_MAX_KEY_LEN,
                max_request_body: 1 << 20,
                max_stored_body: 64 << 10,
                lease: Duration::from_secs(60),
                ttl: Duration::from_secs(24 * 60 * 60),
                stored_headers: [
                    header::CONTENT_TYPE,
                    header::CONTENT_LANGUAGE,
                    header::CONTENT_LOCATION,
                    header::LOCATION,
                    header::ETAG,
                    header::LAST_MODIFIED,
                ]
                .to_vec(),
                store_server_errors: false,
                scope: Arc::new(|_| String::new()),
                fingerprint: Arc::new(default_fingerprint),
                clock: Arc::new(SystemClock),
            },
        }
    }
}
