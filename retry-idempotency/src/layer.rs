//! The tower layer: [`IdempotencyLayer`] and its service, [`Idempotency`].

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use retry_durable::{Clock, SystemClock, Timestamp};
use sha2::{Digest, Sha256};

use crate::body::{BoxError, IdempotentBody};
use crate::key::{self, DEFAULT_MAX_KEY_LEN, Key, KeyError};
use crate::lease::KeyLease;
use crate::problem::ProblemKind;
use crate::record;
use crate::store::{Completed, Held, KeyStore, NewRun, Record, RecordState, StoredResponse};

/// Set to `true` on every replayed response (the name Stripe's API uses).
pub const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// Set on a response whose body will not be replayed as sent, with the reason: `too-large`
/// (above [`with_max_stored_body`](IdempotencyLayerBuilder::with_max_stored_body)),
/// `trailers`, `body-error` (the handler's body failed), `lease-lost` (the run's lease lapsed
/// and another request took the key over: that run's response is the one replayed), or
/// `store-error` (the response could not be written; the key is given back when its lease
/// lapses). A replay of a response whose body was not kept carries it too, with an empty body.
pub const NOT_STORED: HeaderName = HeaderName::from_static("idempotency-not-stored");

/// The client scope a request belongs to (see [`IdempotencyLayerBuilder::with_scope`]).
pub type ScopeFn = Arc<dyn Fn(&Parts) -> String + Send + Sync>;

/// What a request's fingerprint is made of (see [`IdempotencyLayerBuilder::with_fingerprint`]).
pub type FingerprintFn = Arc<dyn Fn(&Parts, &[u8], &mut Fingerprint) + Send + Sync>;

/// The SHA-256 of a request's parts, each added length-first so two different sequences of
/// parts never hash alike.
pub struct Fingerprint(Sha256);

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

struct Config {
    header: HeaderName,
    methods: Vec<Method>,
    require_key: bool,
    max_key_len: usize,
    max_request_body: usize,
    max_stored_body: usize,
    lease: Duration,
    ttl: Duration,
    stored_headers: Vec<HeaderName>,
    store_server_errors: bool,
    scope: ScopeFn,
    fingerprint: FingerprintFn,
    clock: Arc<dyn Clock>,
}

/// Builds an [`IdempotencyLayer`].
///
/// # Default
/// - header: `Idempotency-Key`
/// - methods that need a key: `POST`, `PATCH` (others pass through untouched)
/// - `key_required`: true (a `POST`/`PATCH` without a key is answered 400)
/// - `max_key_len`: 255 characters
/// - `max_request_body`: 1 MiB (read whole to fingerprint it; above: 413)
/// - `max_stored_body`: 64 KiB (above: answered, not replayed; see [`NOT_STORED`])
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
    /// [`NOT_STORED`]` : too-large`; the key stays completed, and a retry gets the status and
    /// headers with an empty body, marked the same way.
    pub fn with_max_stored_body(mut self, bytes: usize) -> Self {
        self.config.max_stored_body = bytes;
        self
    }

    /// Sets how long a running request holds its key. Choose it above the handler's longest
    /// run: past it, another request with the key may run the handler too (see
    /// [`KeyLease`]).
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

    /// The layer, or the first setting that cannot work.
    pub fn build(self) -> Result<IdempotencyLayer<K>, ConfigError> {
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
        Ok(IdempotencyLayer {
            store: self.store,
            config: Arc::new(self.config),
        })
    }
}

/// A tower layer that runs each keyed write once; see the [crate docs](crate).
pub struct IdempotencyLayer<K> {
    store: K,
    config: Arc<Config>,
}

impl<K: Clone> Clone for IdempotencyLayer<K> {
    fn clone(&self) -> Self {
        IdempotencyLayer {
            store: self.store.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for IdempotencyLayer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("store", &self.store)
            .field("header", &self.config.header)
            .field("lease", &self.config.lease)
            .field("ttl", &self.config.ttl)
            .finish_non_exhaustive()
    }
}

impl<K: KeyStore> IdempotencyLayer<K> {
    /// A builder with the defaults (see [`IdempotencyLayerBuilder`]).
    pub fn builder(store: K) -> IdempotencyLayerBuilder<K> {
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

    /// The layer with every default.
    pub fn new(store: K) -> Self {
        // The defaults are valid.
        match Self::builder(store).build() {
            Ok(layer) => layer,
            Err(e) => unreachable!("the default settings are valid: {e}"),
        }
    }

    /// The store.
    pub fn store(&self) -> &K {
        &self.store
    }
}

impl<S, K: KeyStore> tower_layer::Layer<S> for IdempotencyLayer<K> {
    type Service = Idempotency<S, K>;

    fn layer(&self, inner: S) -> Idempotency<S, K> {
        Idempotency {
            inner,
            store: self.store.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

/// The service of an [`IdempotencyLayer`].
pub struct Idempotency<S, K> {
    inner: S,
    store: K,
    config: Arc<Config>,
}

impl<S: Clone, K: Clone> Clone for Idempotency<S, K> {
    fn clone(&self) -> Self {
        Idempotency {
            inner: self.inner.clone(),
            store: self.store.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, K: fmt::Debug> fmt::Debug for Idempotency<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("inner", &self.inner)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, K, B, RB> tower_service::Service<Request<B>> for Idempotency<S, K>
where
    S: tower_service::Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    K: KeyStore,
    B: Body + From<Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = Response<IdempotentBody<RB>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The clone is not ready; the one polled ready serves this request.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(serve(
            inner,
            self.store.clone(),
            Arc::clone(&self.config),
            req,
        ))
    }
}

fn problem<RB>(kind: ProblemKind, detail: &str) -> Response<IdempotentBody<RB>> {
    kind.response(detail).map(IdempotentBody::full)
}

async fn pass<S, B, RB>(
    mut inner: S,
    req: Request<B>,
) -> Result<Response<IdempotentBody<RB>>, S::Error>
where
    S: tower_service::Service<Request<B>, Response = Response<RB>>,
{
    Ok(inner
        .call(req)
        .await?
        .map(|b| IdempotentBody::inner(Box::pin(b))))
}

/// What to do with a request whose key has a record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step<'r> {
    /// The first request completed: answer its response.
    Replay(&'r StoredResponse),
    /// The key was used for another request: 422.
    Reused,
    /// The first request still runs under its lease: 409.
    InProgress,
    /// The record is void (its lease lapsed, or the key expired): run, if the record still
    /// carries the token read.
    TakeOver,
}

/// The draft's rules, applied to a record read at `now`.
pub(crate) fn step<'r>(record: &'r Record, fingerprint: &[u8], now: Timestamp) -> Step<'r> {
    let released = match &record.state {
        RecordState::Running { lease_until } => *lease_until <= now,
        RecordState::Done(_) => true,
    };
    // An expired key is new again (the sweeper deletes it later), unless a run still holds it.
    if record.expires_at <= now && released {
        return Step::TakeOver;
    }
    if record.fingerprint != fingerprint {
        return Step::Reused;
    }
    match &record.state {
        RecordState::Done(response) => Step::Replay(response),
        RecordState::Running { .. } if !released => Step::InProgress,
        RecordState::Running { .. } => Step::TakeOver,
    }
}

/// A replayed response: the stored status, headers and body, marked.
fn replay<RB>(stored: &StoredResponse) -> Response<IdempotentBody<RB>> {
    let mut response = Response::new(IdempotentBody::full(Bytes::copy_from_slice(&stored.body)));
    *response.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    if !record::decode(&stored.headers, response.headers_mut()) {
        tracing::warn!(target: "retry_idempotency", "a stored response's headers could not all be read");
    }
    response
        .headers_mut()
        .insert(REPLAYED, HeaderValue::from_static("true"));
    if let Some(why) = &stored.not_stored
        && let Ok(v) = HeaderValue::from_str(why)
    {
        response.headers_mut().insert(NOT_STORED, v);
    }
    response
}

/// A run holding a key: gives it back when dropped before completing (the request was
/// cancelled while it took the key, the handler panicked, or the runtime shut down under it):
/// a retry may run at once instead of waiting out the lease.
struct Holding<K: KeyStore> {
    store: K,
    scope: [u8; 32],
    key: Key,
    token: i64,
    armed: bool,
}

impl<K: KeyStore> Holding<K> {
    /// The guard of a run about to take `key` with `token`, armed before the write that may
    /// take it: the release it makes when dropped is fenced on the token, so it gives back
    /// the key only if this run took it.
    fn taking(store: &K, scope: [u8; 32], key: &Key, token: i64) -> Self {
        Holding {
            store: store.clone(),
            scope,
            key: key.clone(),
            token,
            armed: true,
        }
    }

    /// The write did not take the key: nothing to give back.
    fn disarm(mut self) {
        self.armed = false;
    }

    fn held(&self) -> Held<'_> {
        Held {
            scope: &self.scope,
            key: self.key.as_str(),
            token: self.token,
        }
    }

    async fn release(mut self) {
        self.armed = false;
        if let Err(e) = self.store.release(&self.held()).await {
            tracing::warn!(target: "retry_idempotency", error = %e,
                "could not give a key back; it is free again once its lease lapses");
        }
    }
}

impl<K: KeyStore> Drop for Holding<K> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let store = self.store.clone();
            let scope = self.scope;
            let key = self.key.clone();
            let token = self.token;
            runtime.spawn(async move {
                let held = Held {
                    scope: &scope,
                    key: key.as_str(),
                    token,
                };
                if let Err(e) = store.release(&held).await {
                    tracing::warn!(target: "retry_idempotency", error = %e,
                        "could not give back the key of a cancelled request; it is free again once its lease lapses");
                }
            });
        }
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// How many times a request reads and writes its key's record before answering 409: each
/// retry follows another request's change to the record (a sweep, a release, a take-over).
const RACES: u32 = 3;

async fn serve<S, K, B, RB>(
    mut inner: S,
    store: K,
    config: Arc<Config>,
    req: Request<B>,
) -> Result<Response<IdempotentBody<RB>>, S::Error>
where
    S: tower_service::Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    K: KeyStore,
    B: Body + From<Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    if !config.methods.contains(req.method()) {
        return pass(inner, req).await;
    }
    let key = match key::parse(req.headers(), &config.header, config.max_key_len) {
        Ok(Some(key)) => key,
        Ok(None) if !config.require_key => return pass(inner, req).await,
        Ok(None) => {
            return Ok(problem(
                ProblemKind::KeyMissing,
                &KeyError::Missing.to_string(),
            ));
        }
        Err(e) => return Ok(problem(ProblemKind::KeyInvalid, &e.to_string())),
    };
    let (parts, body) = req.into_parts();
    let limit = config.max_request_body;
    let too_large = || {
        problem(
            ProblemKind::BodyTooLarge,
            &format!(
                "an idempotent request's body is read whole to fingerprint it, up to {limit} bytes"
            ),
        )
    };
    if body.size_hint().lower() > limit as u64 {
        return Ok(too_large());
    }
    let body = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return Ok(too_large()),
        Err(e) => {
            return Ok(problem(
                ProblemKind::BodyUnreadable,
                &format!("the request body could not be read: {e}"),
            ));
        }
    };
    let scope = digest((config.scope)(&parts).as_bytes());
    let fingerprint = {
        let mut fp = Fingerprint(Sha256::new());
        (config.fingerprint)(&parts, &body, &mut fp);
        <[u8; 32]>::from(fp.0.finalize())
    };
    let unavailable = |e: crate::store::StoreError| {
        tracing::warn!(target: "retry_idempotency", error = %e, "key store unavailable");
        problem::<RB>(
            ProblemKind::StoreUnavailable,
            "the idempotency store could not be reached; the request was not processed and can \
             be sent again with the same key",
        )
    };

    // Take the key: insert it, or read its record and decide. Each write that may take it is
    // made holding a guard for the run's token: a request cancelled while the write is under
    // way (its client went away) gives back a key the write took, rather than leaving it
    // running until its lease lapses, answering every retry 409 meanwhile.
    let mut races = 0;
    let (holding, lease_until) = loop {
        let now = config.clock.now();
        let run = NewRun {
            scope: &scope,
            key: key.as_str(),
            fingerprint: &fingerprint,
            token: fastrand::i64(..),
            lease_until: now.saturating_add(config.lease),
            expires_at: now.saturating_add(config.ttl),
            now,
        };
        let taking = Holding::taking(&store, scope, &key, run.token);
        match store.insert(&run).await {
            Ok(true) => break (taking, run.lease_until),
            Ok(false) => taking.disarm(),
            Err(e) => return Ok(unavailable(e)),
        }
        let record = match store.get(&scope, key.as_str()).await {
            Ok(Some(record)) => record,
            Ok(None) => {
                // Deleted since the insert saw it (swept, or given back): try again.
                races += 1;
                if races >= RACES {
                    return Ok(in_progress());
                }
                continue;
            }
            Err(e) => return Ok(unavailable(e)),
        };
        match step(&record, &fingerprint, now) {
            Step::Replay(stored) => {
                tracing::debug!(target: "retry_idempotency", event = "replay", status = stored.status);
                return Ok(replay(stored));
            }
            Step::Reused => {
                tracing::debug!(target: "retry_idempotency", event = "reused");
                return Ok(problem(
                    ProblemKind::KeyReused,
                    "this Idempotency-Key was first used with a different request (method, \
                     path or body): use a new key for a new request",
                ));
            }
            Step::InProgress => return Ok(in_progress()),
            Step::TakeOver => {
                let taking = Holding::taking(&store, scope, &key, run.token);
                match store
                    .take_over(record.token, record.state.as_str(), &run)
                    .await
                {
                    Ok(true) => {
                        tracing::info!(target: "retry_idempotency", event = "take_over",
                            "a key whose lease lapsed or which expired is taken over by a new request");
                        break (taking, run.lease_until);
                    }
                    Ok(false) => {
                        taking.disarm();
                        races += 1;
                        if races >= RACES {
                            return Ok(in_progress());
                        }
                    }
                    Err(e) => return Ok(unavailable(e)),
                }
            }
        }
    };

    // Run the handler once, holding the key, in a task of its own: if this request is
    // cancelled (its client went away and the server dropped this future), the handler still
    // runs to its end and its response is stored, so the client's retry gets the replay
    // instead of running the write a second time.
    let lease = KeyLease::new(key, lease_until, Arc::clone(&config.clock));
    let mut req = Request::from_parts(parts, B::from(body));
    req.extensions_mut().insert(lease.clone());
    let call = lease.clone().in_sync(|| inner.call(req));
    let run = tokio::spawn(finish(holding, config, lease.scope(call)));
    match run.await {
        Ok(answer) => answer,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Ok(problem(
            ProblemKind::StoreUnavailable,
            "the server is shutting down; the request can be sent again with the same key",
        )),
    }
}

/// The statuses that say the request was not processed: the key is given back, and the
/// client's retry runs the handler (a 5xx too, unless server errors are stored).
fn gives_key_back(status: StatusCode, store_server_errors: bool) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || (status.is_server_error() && !store_server_errors)
}

/// Awaits the handler's response, reads it up to what is stored, and completes the key.
async fn finish<K, RB, E>(
    holding: Holding<K>,
    config: Arc<Config>,
    call: impl Future<Output = Result<Response<RB>, E>>,
) -> Result<Response<IdempotentBody<RB>>, E>
where
    K: KeyStore,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    let response = match call.await {
        Ok(response) => response,
        Err(e) => {
            holding.release().await;
            return Err(e);
        }
    };
    let (mut parts, body) = response.into_parts();
    if gives_key_back(parts.status, config.store_server_errors) {
        holding.release().await;
        return Ok(Response::from_parts(
            parts,
            IdempotentBody::inner(Box::pin(body)),
        ));
    }

    // Read the response, up to what is stored.
    let mut body = Box::pin(body);
    let mut frames = VecDeque::new();
    let mut size = 0usize;
    let mut failed = None;
    let mut not_stored = None;
    if body.size_hint().lower() > config.max_stored_body as u64 {
        not_stored = Some("too-large");
    }
    while not_stored.is_none() {
        match body.frame().await {
            None => break,
            Some(Ok(frame)) => {
                match frame.data_ref() {
                    Some(data) => size = size.saturating_add(data.len()),
                    None => not_stored = Some("trailers"),
                }
                frames.push_back(frame);
                if size > config.max_stored_body {
                    not_stored = Some("too-large");
                }
            }
            Some(Err(e)) => {
                failed = Some(e.into());
                not_stored = Some("body-error");
            }
        }
    }
    let stored_body = match not_stored {
        None => {
            let mut all = BytesMut::with_capacity(size);
            for frame in &frames {
                if let Some(data) = frame.data_ref() {
                    all.extend_from_slice(data);
                }
            }
            Some(all.freeze())
        }
        Some(_) => None,
    };
    let headers = record::encode(&parts.headers, &config.stored_headers);
    let completed = Completed {
        status: parts.status.as_u16(),
        headers: &headers,
        body: stored_body.as_deref().unwrap_or_default(),
        not_stored,
    };
    let mut mark = not_stored;
    let mut holding = holding;
    holding.armed = false;
    match holding
        .store
        .complete(&holding.held(), &completed, config.clock.now())
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(target: "retry_idempotency", event = "lease_lost",
                "a request finished after its lease lapsed and another request took its key: \
                 its response is answered but not stored");
            mark = Some("lease-lost");
        }
        Err(e) => {
            tracing::error!(target: "retry_idempotency", event = "store_error", error = %e,
                "a completed request's response could not be stored; its key is free again \
                 once its lease lapses");
            mark = Some("store-error");
        }
    }
    if let Some(why) = mark {
        parts
            .headers
            .insert(NOT_STORED, HeaderValue::from_static(why));
    }
    let body = match stored_body {
        Some(bytes) => IdempotentBody::full(bytes),
        None => {
            let rest = failed.is_none().then_some(body);
            IdempotentBody::resumed(frames, rest, failed)
        }
    };
    Ok(Response::from_parts(parts, body))
}

fn in_progress<RB>() -> Response<IdempotentBody<RB>> {
    tracing::debug!(target: "retry_idempotency", event = "in_progress");
    problem(
        ProblemKind::InProgress,
        "the first request with this Idempotency-Key is still being processed: retry later with \
         the same key to get its response",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(fp: &[u8], state: RecordState, expires: i64) -> Record {
        Record {
            fingerprint: fp.to_vec(),
            token: 7,
            expires_at: Timestamp::from_unix_millis(expires),
            state,
        }
    }

    fn done() -> RecordState {
        RecordState::Done(StoredResponse {
            status: 201,
            headers: Vec::new(),
            body: b"ok".to_vec(),
            not_stored: None,
        })
    }

    fn running(until: i64) -> RecordState {
        RecordState::Running {
            lease_until: Timestamp::from_unix_millis(until),
        }
    }

    #[test]
    fn the_drafts_rules_in_order() {
        let at = Timestamp::from_unix_millis;
        // Completed, same request: replay; another request: 422.
        let r = record(b"a", done(), 1000);
        assert!(matches!(step(&r, b"a", at(10)), Step::Replay(s) if s.status == 201));
        assert_eq!(step(&r, b"b", at(10)), Step::Reused);
        // Running under its lease: 409; another request: 422 (reuse is the client's mistake).
        let r = record(b"a", running(100), 1000);
        assert_eq!(step(&r, b"a", at(99)), Step::InProgress);
        assert_eq!(step(&r, b"b", at(99)), Step::Reused);
        // Lapsed lease: the same request takes over; another is still a reuse.
        assert_eq!(step(&r, b"a", at(100)), Step::TakeOver);
        assert_eq!(step(&r, b"b", at(100)), Step::Reused);
        // Expired: new again, whatever the request, unless a run still holds it.
        let r = record(b"a", done(), 1000);
        assert_eq!(step(&r, b"b", at(1000)), Step::TakeOver);
        let r = record(b"a", running(2000), 1000);
        assert_eq!(step(&r, b"a", at(1500)), Step::InProgress);
    }
}
