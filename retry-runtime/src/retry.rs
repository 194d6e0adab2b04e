//! The attempt loop without the macro: `Retry::upstream("sber").method(..).run(..)` (the
//! closure is given its attempt) or `.call(..)` (it is not; the body can still ask
//! [`Attempt::current`]).

use crate::partition::Partition;
use std::borrow::Cow;
use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use crate::attempt::Attempt;
use crate::call::{CallSpec, Hedged, Plain, Reconciled, drive, no_reconcile};
use crate::classify::Classify;
use crate::error::Error;
use crate::key::{IdempotencyKey, IntoIdempotencyKey, KeyError};
use crate::registry::Registry;
use crate::replay::Replayability;

/// Entry point of the builder API. Choose the upstream, then the method (required: the runtime
/// never assumes GET), then run.
///
/// ```
/// use retry_runtime::{Error, Registry, Retry, UpstreamConfig};
/// use http::Method;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let registry = Registry::builder().upstream("catalog", UpstreamConfig::new()).build().unwrap();
/// let item: Result<u32, Error> = Retry::upstream("catalog")
///     .registry(&registry)
///     .method(Method::GET)
///     .run(|attempt| async move {
///         // send the request here; `attempt` carries the number, key and deadline
///         Ok(attempt.number())
///     })
///     .await;
/// assert_eq!(item.unwrap(), 1);
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "name the method with `.method(..)`, then `.run(..)`"]
pub struct Retry<'r> {
    registry: &'r Registry,
    upstream: &'r str,
    operation: Option<Cow<'static, str>>,
}

impl Retry<'static> {
    /// A call to `upstream`, configured in the global registry (see [`Registry::global`]).
    /// Name it with [`upstream!`](crate::upstream!) (`Retry::upstream(upstream!("sber"))`) so
    /// [`Registry::verify`] checks it at start-up.
    pub fn upstream(upstream: &'static str) -> Retry<'static> {
        Retry {
            registry: Registry::global(),
            upstream,
            operation: None,
        }
    }
}

impl<'r> Retry<'r> {
    /// A call to `upstream` in `registry`.
    pub fn in_registry(registry: &'r Registry, upstream: &'r str) -> Retry<'r> {
        Retry {
            registry,
            upstream,
            operation: None,
        }
    }

    /// Uses `registry` instead of the global one.
    pub fn registry<'s>(self, registry: &'s Registry) -> Retry<'s>
    where
        'r: 's,
    {
        Retry {
            registry,
            upstream: self.upstream,
            operation: self.operation,
        }
    }

    /// Names the operation when this call opens the scope (defaults to the upstream's name).
    pub fn operation(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.operation = Some(name.into());
        self
    }

    /// The HTTP method the call sends. A write (anything but GET, HEAD, OPTIONS) is retried
    /// after it may have reached the server only with an idempotency key the upstream
    /// deduplicates, or with a reconcile check.
    pub fn method(self, method: http::Method) -> RetryCall<'r> {
        RetryCall {
            registry: self.registry,
            upstream: self.upstream,
            method,
            operation: self.operation,
            key: None,
            replay: Replayability::Replayable,
            partition: None,
        }
    }
}

/// A call ready to run; see [`Retry`].
///
/// # Default
/// - no idempotency key
/// - body [`Replayability::Replayable`] (no body, or bytes)
/// - not hedged (see [`hedged`](Self::hedged))
#[derive(Debug, Clone)]
#[must_use = "a retrying call does nothing until `.run(..)` is awaited"]
pub struct RetryCall<'r> {
    registry: &'r Registry,
    upstream: &'r str,
    method: http::Method,
    operation: Option<Cow<'static, str>>,
    key: Option<Result<IdempotencyKey, KeyError>>,
    replay: Replayability,
    partition: Option<Partition>,
}

impl<'r> RetryCall<'r> {
    /// The idempotency key, fixed now and sent on every attempt. An invalid key (empty, over
    /// 255 bytes, CR/LF) fails the call before anything is sent.
    pub fn idempotency(mut self, key: impl IntoIdempotencyKey) -> Self {
        self.key = Some(key.into_idempotency_key());
        self
    }

    /// The part of the upstream's traffic the call belongs to (a tenant, an API key), for the
    /// upstream's quotas: a 429 then holds this partition's retries until its `Retry-After`,
    /// and no other's (see [`partition`](crate::partition)). Without one, a 429 holds only the
    /// call that got it.
    ///
    /// ```
    /// # async fn f(registry: &retry_runtime::Registry) {
    /// let tenant = "tenant-42";
    /// let result: Result<(), retry_runtime::Error> = retry_runtime::Retry::in_registry(registry, "catalog")
    ///     .method(retry_runtime::Method::GET)
    ///     .partition(tenant)
    ///     .run(|_| async { Ok(()) })
    ///     .await;
    /// # }
    /// ```
    pub fn partition<T: std::hash::Hash + ?Sized>(mut self, value: &T) -> Self {
        self.partition = Some(Partition::of(value));
        self
    }

    /// Declares the body's replayability (a one-shot stream is never retried).
    pub fn body(mut self, replay: Replayability) -> Self {
        self.replay = replay;
        self
    }

    /// Lets the call be hedged when its upstream has hedging configured
    /// ([`UpstreamConfig::hedge`](crate::UpstreamConfig::hedge)): the closure may then be
    /// called for a further copy while an earlier one is still in flight, and the first answer
    /// wins (see [`HedgeConfig`](crate::hedge::HedgeConfig)). Only reads, and keyed writes to
    /// an upstream that promises to deduplicate copies in flight, are ever hedged; for any
    /// other call this changes nothing.
    pub fn hedged(self) -> HedgedCall<'r> {
        HedgedCall { call: self }
    }

    /// What the call is: the upstream looked up and the key checked (the two things that can
    /// fail before it starts).
    fn into_spec(self) -> Result<CallSpec<'r>, Error> {
        let key = self.key.transpose().map_err(Error::InvalidIdempotencyKey)?;
        Ok(CallSpec {
            registry: self.registry,
            upstream: self.registry.upstream(self.upstream)?,
            method: self.method,
            key,
            replay: self.replay,
            operation: self.operation,
            reserve: Duration::ZERO,
            partition: self.partition,
            held: false,
        })
    }

    /// Runs `attempt` until it succeeds or the engine stops: returns the value, the last error
    /// (retry denied), or `E::from(Error::Ambiguous(..))` when a write's outcome is unknown.
    /// The closure is called once per attempt, after the breaker and the bulkhead admitted it,
    /// and given the [`Attempt`] (its number, key and deadline).
    pub fn run<T, E, F, Fut>(self, mut attempt: F) -> impl Future<Output = Result<T, E>>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify + From<Error> + Display,
    {
        let attempts = Plain(move |a: &Attempt| attempt(a.clone()));
        drive(move || self.into_spec(), attempts, no_reconcile)
    }

    /// Like [`run`](Self::run), for a closure that does not need its [`Attempt`] (the HTTP
    /// integration finds it by itself, and the body can ask [`Attempt::current`]).
    ///
    /// ```
    /// # use retry_runtime::{Method, Registry, UpstreamConfig, Retry, Error};
    /// # async fn fetch(id: u64) -> Result<String, Error> { Ok(id.to_string()) }
    /// # async fn demo() -> Result<(), Error> {
    /// # let registry = Registry::builder().upstream("catalog", UpstreamConfig::new()).build()
    /// #     .expect("valid");
    /// let item = Retry::in_registry(&registry, "catalog")
    ///     .method(Method::GET)
    ///     .call(|| fetch(42))
    ///     .await?;
    /// # assert_eq!(item, "42");
    /// # Ok(())
    /// # }
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
    /// #     .block_on(demo()).unwrap();
    /// ```
    pub fn call<T, E, F, Fut>(self, mut attempt: F) -> impl Future<Output = Result<T, E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify + From<Error> + Display,
    {
        let attempts = Plain(move |_: &Attempt| attempt());
        drive(move || self.into_spec(), attempts, no_reconcile)
    }

    /// Like [`run`](Self::run), for a write without a key that has a reliable way to check its
    /// result: before any retry of an ambiguous attempt, `reconcile` is asked. `Happened`
    /// returns its value, `NotHappened` permits the retry, `Unknown` returns the ambiguous
    /// outcome.
    pub fn run_reconciled<T, E, F, Fut, R, RFut>(
        self,
        mut attempt: F,
        reconcile: R,
    ) -> impl Future<Output = Result<T, E>>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        R: FnMut() -> RFut,
        RFut: Future<Output = Reconciled<T>>,
        E: Classify + From<Error> + Display,
    {
        let attempts = Plain(move |a: &Attempt| attempt(a.clone()));
        drive(move || self.into_spec(), attempts, reconcile)
    }
}

/// A call that may be hedged, ready to run; see [`RetryCall::hedged`].
#[derive(Debug, Clone)]
#[must_use = "a retrying call does nothing until `.run(..)` is awaited"]
pub struct HedgedCall<'r> {
    call: RetryCall<'r>,
}

impl HedgedCall<'_> {
    /// [`RetryCall::run`], hedged: the closure may be called for a further copy while an
    /// earlier one is in flight, so its futures must not borrow it mutably.
    pub fn run<T, E, F, Fut>(self, mut attempt: F) -> impl Future<Output = Result<T, E>>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify + From<Error> + Display,
    {
        let attempts = Hedged(move |a: &Attempt| attempt(a.clone()));
        drive(move || self.call.into_spec(), attempts, no_reconcile)
    }

    /// [`RetryCall::call`], hedged (see [`run`](Self::run)).
    pub fn call<T, E, F, Fut>(self, mut attempt: F) -> impl Future<Output = Result<T, E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify + From<Error> + Display,
    {
        let attempts = Hedged(move |_: &Attempt| attempt());
        drive(move || self.call.into_spec(), attempts, no_reconcile)
    }
}
