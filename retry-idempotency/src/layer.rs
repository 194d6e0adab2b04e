//! The tower layer: [`IdempotencyLayer`] and its service, [`Idempotency`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use retry_durable::{Clock, Timestamp};
use sha2::{Digest, Sha256};

use crate::body::{BoxError, IdempotentBody};
use crate::config::{Config, ConfigError, Fingerprint, IdempotencyLayerBuilder};
use crate::headers::{NOT_STORED, REPLAYED};
use crate::holding::{Holding, finish};
use crate::key::{self, KeyError};
use crate::lease::KeyLease;
use crate::problem::ProblemKind;
use crate::record;
use crate::store::{KeyStore, NewRun, Record, RecordState, StoredResponse};

impl<K: KeyStore> IdempotencyLayerBuilder<K> {
    /// The layer, or the first setting that cannot work.
    pub fn build(self) -> Result<IdempotencyLayer<K>, ConfigError> {
        let (store, config) = self.checked()?;
        Ok(IdempotencyLayer {
            store,
            config: Arc::new(config),
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
        IdempotencyLayerBuilder::with_defaults(store)
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
