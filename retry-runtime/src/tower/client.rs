//! The client-side retry layer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use super::body::ReplayBody;
use crate::call::{Attempts, Call, CallSpec, drive, no_reconcile};
use crate::category::Pushback;
use crate::classify::Classify;
use crate::error::Error;
use crate::evidence::Evidence;
use crate::key::IdempotencyKey;
use crate::partition::Partition;
use crate::propagation;
use crate::registry::Registry;

/// A boxed error, as tower services commonly return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Which registry a layer uses.
#[derive(Clone)]
enum RegistryRef {
    Global,
    Owned(Arc<Registry>),
}

impl RegistryRef {
    fn get(&self) -> &Registry {
        match self {
            RegistryRef::Global => Registry::global(),
            RegistryRef::Owned(r) => r,
        }
    }
}

/// Classifies a transport error of the wrapped service into evidence.
pub type ErrorClassifier = fn(&(dyn std::error::Error + 'static)) -> Evidence;

/// The conservative default: `NotSent` only for a refused connection found in the error's
/// source chain; anything else may have been sent.
fn default_classifier(error: &(dyn std::error::Error + 'static)) -> Evidence {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return Evidence::NotSent;
        }
        current = e.source();
    }
    Evidence::SentNoResponse
}

/// Applies the retry engine to every request of a client service, as calls to one upstream.
///
/// The wrapped service is any `Service<http::Request<B>>` whose body `B` can be produced again
/// ([`ReplayBody`]); here hyper's pooled client:
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use hyper_util::client::legacy::Client;
/// use hyper_util::rt::TokioExecutor;
/// use tower_layer::Layer;
///
/// let hyper_client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
/// let client = retry_runtime::tower::RetryLayer::new("catalog").layer(hyper_client);
/// // `client` is a `Service<http::Request<Full<Bytes>>>`; its error is a `TowerError`.
/// # let _ = client;
/// ```
#[derive(Clone)]
pub struct RetryLayer {
    registry: RegistryRef,
    upstream: Arc<str>,
    classify: ErrorClassifier,
    partition: Option<PartitionOf>,
}

/// What names a request's partition for the upstream's quotas: see
/// [`RetryLayer::partition_by`].
pub type PartitionOf = Arc<dyn Fn(&http::request::Parts) -> Option<Partition> + Send + Sync>;

impl fmt::Debug for RetryLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryLayer")
            .field("upstream", &self.upstream)
            .finish()
    }
}

impl RetryLayer {
    /// Calls to `upstream`, configured in the global registry.
    pub fn new(upstream: impl Into<Arc<str>>) -> Self {
        RetryLayer {
            registry: RegistryRef::Global,
            upstream: upstream.into(),
            classify: default_classifier,
            partition: None,
        }
    }

    /// Calls to `upstream`, configured in `registry`.
    pub fn with_registry(registry: Arc<Registry>, upstream: impl Into<Arc<str>>) -> Self {
        RetryLayer {
            registry: RegistryRef::Owned(registry),
            upstream: upstream.into(),
            classify: default_classifier,
            partition: None,
        }
    }

    /// Replaces the transport error classifier (the default proves `NotSent` only for a refused
    /// connection; never upgrade a generic I/O error to `NotSent`).
    pub fn classify_errors_with(mut self, classify: ErrorClassifier) -> Self {
        self.classify = classify;
        self
    }

    /// Names each request's partition (a tenant, an API key) for the upstream's quotas: a 429
    /// then holds that partition's retries until its `Retry-After`, and no other's (see
    /// [`partition`](crate::partition)). Without it, a 429 holds only the request that got it.
    ///
    /// ```
    /// use retry_runtime::partition::Partition;
    /// let layer = retry_runtime::tower::RetryLayer::new("catalog").partition_by(|parts| {
    ///     parts.headers.get("x-tenant").map(|tenant| Partition::of(tenant.as_bytes()))
    /// });
    /// # let _ = layer;
    /// ```
    pub fn partition_by(
        mut self,
        partition: impl Fn(&http::request::Parts) -> Option<Partition> + Send + Sync + 'static,
    ) -> Self {
        self.partition = Some(Arc::new(partition));
        self
    }
}

impl<S> tower_layer::Layer<S> for RetryLayer {
    type Service = RetryService<S>;
    fn layer(&self, inner: S) -> RetryService<S> {
        RetryService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by [`RetryLayer`].
#[derive(Clone, Debug)]
pub struct RetryService<S> {
    inner: S,
    layer: RetryLayer,
}

/// Why a request through [`RetryService`] produced no response.
#[derive(Debug)]
#[non_exhaustive]
pub enum TowerError {
    /// The runtime refused or gave up (ambiguous outcome, unknown upstream, deadline, breaker...).
    Runtime(Error),
    /// The wrapped service failed, with the evidence the classifier found.
    Transport {
        /// How far the last attempt got.
        evidence: Evidence,
        /// The wrapped service's error.
        source: BoxError,
    },
}

impl fmt::Display for TowerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TowerError::Runtime(e) => e.fmt(f),
            TowerError::Transport { evidence, source } => {
                write!(f, "transport failure ({evidence}): {source}")
            }
        }
    }
}

impl std::error::Error for TowerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TowerError::Runtime(e) => Some(e),
            TowerError::Transport { source, .. } => Some(&**source),
        }
    }
}

impl Classify for TowerError {
    fn via(&self) -> Option<&dyn Classify> {
        match self {
            TowerError::Runtime(e) => Some(e),
            TowerError::Transport { .. } => None,
        }
    }
    fn evidence(&self) -> Evidence {
        match self {
            TowerError::Runtime(e) => e.evidence(),
            TowerError::Transport { evidence, .. } => *evidence,
        }
    }
}

/// One attempt's failure: an error response (kept, to be returned if the retry is denied) or a
/// transport error.
enum AttemptError<R> {
    Response {
        response: R,
        status: u16,
        retry_after: Option<Duration>,
        pushback: Option<Pushback>,
    },
    Failed(TowerError),
}

impl<R> fmt::Display for AttemptError<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptError::Response { status, .. } => write!(f, "status {status}"),
            AttemptError::Failed(e) => e.fmt(f),
        }
    }
}

impl<R> From<Error> for AttemptError<R> {
    fn from(e: Error) -> Self {
        AttemptError::Failed(TowerError::Runtime(e))
    }
}

impl<R> Classify for AttemptError<R> {
    fn via(&self) -> Option<&dyn Classify> {
        match self {
            AttemptError::Response { .. } => None,
            AttemptError::Failed(e) => Some(e),
        }
    }
    fn evidence(&self) -> Evidence {
        match self {
            AttemptError::Response { .. } => Evidence::ResponseReceived,
            AttemptError::Failed(e) => e.evidence(),
        }
    }
    fn status(&self) -> Option<u16> {
        match self {
            AttemptError::Response { status, .. } => Some(*status),
            AttemptError::Failed(e) => e.status(),
        }
    }
    fn retry_after(&self) -> Option<Duration> {
        match self {
            AttemptError::Response { retry_after, .. } => *retry_after,
            AttemptError::Failed(e) => e.retry_after(),
        }
    }
    fn pushback(&self) -> Option<Pushback> {
        match self {
            AttemptError::Response { pushback, .. } => *pushback,
            AttemptError::Failed(e) => e.pushback(),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> tower_service::Service<http::Request<B>> for RetryService<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: ReplayBody + Send + 'static,
    RB: Send + 'static,
{
    type Response = http::Response<RB>;
    type Error = TowerError;
    type Future = BoxFuture<Result<http::Response<RB>, TowerError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TowerError>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| TowerError::Transport {
                evidence: Evidence::NotSent,
                source: e.into(),
            })
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The clone is the one that was driven to readiness; keep a fresh clone for next time.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(send(layer, inner, request))
    }
}

async fn send<S, B, RB>(
    layer: RetryLayer,
    mut inner: S,
    request: http::Request<B>,
) -> Result<http::Response<RB>, TowerError>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Error: Into<BoxError>,
    B: ReplayBody,
{
    let registry = layer.registry.get();
    let upstream = registry
        .upstream(&layer.upstream)
        .map_err(TowerError::Runtime)?;
    let key = match request
        .headers()
        .get(upstream.config().idempotency_header.as_str())
    {
        Some(value) => {
            let key = value
                .to_str()
                .map_err(|_| crate::key::KeyError::NotAHeaderValue)
                .and_then(IdempotencyKey::new);
            Some(key.map_err(|e| TowerError::Runtime(Error::InvalidIdempotencyKey(e)))?)
        }
        None => None,
    };
    let replay = request.body().replayability();
    let (parts, body) = request.into_parts();
    let spec = CallSpec {
        registry,
        upstream,
        method: parts.method.clone(),
        key,
        replay,
        operation: None,
        reserve: Duration::ZERO,
        partition: layer.partition.as_ref().and_then(|of| of(&parts)),
        held: false,
    };
    let attempts = Sends {
        inner: &mut inner,
        parts,
        body: Some(body),
        classify: layer.classify,
    };
    match drive(|| Ok(spec), attempts, no_reconcile).await {
        Ok(response) => Ok(response),
        // Not retried: hand the error response to the caller as a response.
        Err(AttemptError::Response { response, .. }) => Ok(response),
        Err(AttemptError::Failed(e)) => Err(e),
    }
}

/// The attempts of one request through the wrapped service, each lent the service in turn.
struct Sends<'s, S, B> {
    inner: &'s mut S,
    parts: http::request::Parts,
    /// The body the next attempt sends.
    body: Option<B>,
    classify: ErrorClassifier,
}

impl<S, B, RB> Attempts<http::Response<RB>, AttemptError<http::Response<RB>>> for Sends<'_, S, B>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Error: Into<BoxError>,
    B: ReplayBody,
{
    async fn attempt(
        &mut self,
        call: &mut Call<'_>,
    ) -> Result<http::Response<RB>, AttemptError<http::Response<RB>>> {
        // The original body goes out first; replays are copies made before it is sent.
        let Some(this_body) = self.body.take() else {
            unreachable!(
                "a body that could not be copied was downgraded to one-shot, so no retry reaches here"
            )
        };
        self.body = this_body.replay();
        if self.body.is_none() {
            call.downgrade_replay(crate::replay::Replayability::OneShot);
        }
        let mut request = http::Request::from_parts(self.parts.clone(), this_body);
        let propagate = call.upstream().config().propagate;
        let retries_left = call.retries_left();
        let classify = self.classify;
        let inner = &mut *self.inner;
        call.attempt_with(|attempt| {
            if propagate {
                propagation::write_headers(
                    request.headers_mut(),
                    attempt.timeout(),
                    attempt.number(),
                    retries_left,
                );
            }
            send_one(inner, request, classify)
        })
        .await
    }
}

/// One attempt through the wrapped service.
async fn send_one<S, B, RB>(
    inner: &mut S,
    request: http::Request<B>,
    classify: ErrorClassifier,
) -> Result<http::Response<RB>, AttemptError<http::Response<RB>>>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Error: Into<BoxError>,
{
    std::future::poll_fn(|cx| inner.poll_ready(cx))
        .await
        .map_err(|e| {
            AttemptError::Failed(TowerError::Transport {
                evidence: Evidence::NotSent,
                source: e.into(),
            })
        })?;
    match inner.call(request).await {
        Ok(response) if response.status().as_u16() >= 400 => {
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| crate::retry_after::parse_header(v.as_bytes(), SystemTime::now()));
            let pushback = propagation::pushback(response.headers());
            Err(AttemptError::Response {
                response,
                status,
                retry_after,
                pushback,
            })
        }
        Ok(response) => Ok(response),
        Err(e) => {
            let source: BoxError = e.into();
            let evidence = classify(&*source);
            Err(AttemptError::Failed(TowerError::Transport {
                evidence,
                source,
            }))
        }
    }
}

impl From<Error> for TowerError {
    fn from(e: Error) -> Self {
        TowerError::Runtime(e)
    }
}
