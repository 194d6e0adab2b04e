//! The attempt loop without the macro: `Retry::upstream("sber").method(..).run(..)` (the
//! closure is given its attempt) or `.call(..)` (it is not, and the attempt is made only if
//! something asks for it).

use std::borrow::Cow;
use std::fmt::Display;
use std::future::Future;
use std::ops::ControlFlow;

use crate::attempt::{Attempt, IdempotencyKey, IntoIdempotencyKey, KeyError};
use crate::call::{self, Call, Reconciled, Step};
use crate::first::{Lazy, What};
use crate::registry::Registry;
use crate::{Classify, Error, Replayability};

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
    #[inline]
    pub fn method(self, method: http::Method) -> RetryCall<'r> {
        RetryCall {
            registry: self.registry,
            upstream: self.upstream,
            what: What::of(method, self.operation),
            key: None,
            replay: Replayability::Replayable,
        }
    }
}

/// A call ready to run; see [`Retry`].
///
/// # Default
/// - no idempotency key
/// - body [`Replayability::Replayable`] (no body, or bytes)
#[derive(Debug, Clone)]
#[must_use = "a retrying call does nothing until `.run(..)` is awaited"]
pub struct RetryCall<'r> {
    registry: &'r Registry,
    upstream: &'r str,
    /// The method and the operation name.
    what: What,
    key: Option<Result<IdempotencyKey, KeyError>>,
    replay: Replayability,
}

impl<'r> RetryCall<'r> {
    /// The idempotency key, fixed now and sent on every attempt. An invalid key (empty, over
    /// 255 bytes, CR/LF) fails the call before anything is sent.
    pub fn idempotency(mut self, key: impl IntoIdempotencyKey) -> Self {
        self.key = Some(key.into_idempotency_key());
        self
    }

    /// Declares the body's replayability (a one-shot stream is never retried).
    pub fn body(mut self, replay: Replayability) -> Self {
        self.replay = replay;
        self
    }

    /// The call, made lazily, so a first attempt that needs nothing of it takes the fast path;
    /// and the error that fails it before anything is sent (an invalid key), if there is one.
    #[inline]
    fn into_call(self) -> (Call<'r>, Option<Error>) {
        let (key, invalid) = match self.key {
            Some(Ok(key)) => (Some(key), None),
            Some(Err(e)) => (None, Some(Error::InvalidIdempotencyKey(e))),
            None => (None, None),
        };
        let lazy = Lazy::builder(self.registry, self.upstream, self.what, key, self.replay);
        (Call::from_lazy(lazy), invalid)
    }

    /// Runs `attempt` until it succeeds or the engine stops: returns the value, the last error
    /// (retry denied), or `E::from(Error::Ambiguous(..))` when a write's outcome is unknown.
    ///
    /// The closure is given its [`Attempt`], so the attempt is made, written and handed over on
    /// every call: a call whose first attempt succeeds at once costs about three times what it
    /// costs through [`call`](Self::call) or `#[retry]` (tens of nanoseconds; see
    /// `BENCHMARKS.md`). Prefer `call` when the closure does not need the attempt (the HTTP
    /// integration finds it by itself).
    pub fn run<T, E, F, Fut>(self, mut attempt: F) -> impl Future<Output = Result<T, E>>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify + From<Error> + Display,
    {
        // Not an `async fn`: the loop's future is returned as is, not wrapped in another.
        self.drive(true, move |a| attempt(call::given(a)))
    }

    /// Like [`run`](Self::run), for an attempt that is not given its [`Attempt`]: the attempt is
    /// made only if something asks for it ([`Attempt::current`], which the HTTP integration
    /// calls to send the key and the deadline), so a first attempt that completes at once and
    /// asks for nothing takes `#[retry]`'s fast path (see `BENCHMARKS.md`). The closure is
    /// called once per attempt, after the breaker and the bulkhead have admitted it.
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
        self.drive(false, move |_| attempt())
    }

    /// The attempt loop of [`run`](Self::run) and [`call`](Self::call): `make` builds each
    /// attempt's future once admitted, given the attempt if it `needs_attempt`.
    ///
    /// Not an `async fn`: the call is made here, and the loop's future uses it where it was
    /// captured. An `async fn` moves its arguments into its body's own variables when first
    /// polled, and that copy, just after the call was written, stalled the core reading back
    /// what it had not finished writing (about 3 ns of a 20 ns call, in `perf annotate`).
    #[inline]
    fn drive<T, E, F, Fut>(
        self,
        needs_attempt: bool,
        mut make: F,
    ) -> impl Future<Output = Result<T, E>> + use<'r, T, E, F, Fut>
    where
        F: FnMut(Option<Attempt>) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify + From<Error> + Display,
    {
        let (mut call, invalid) = self.into_call();
        async move {
            if let Some(error) = invalid {
                return Err(E::from(error));
            }
            loop {
                let a = call.begin_attempt()?;
                let result = call.run_attempt(a, needs_attempt, &mut make).await;
                let error = match call.succeeded(result) {
                    ControlFlow::Break(value) => return Ok(value),
                    ControlFlow::Continue(error) => error,
                };
                match call.settle(Err(error)).await {
                    Step::Retry => continue,
                    Step::Done(result) => return result,
                    Step::Ambiguous { ambiguous, .. } => return Err(call.ambiguous(ambiguous)),
                }
            }
        }
    }

    /// Like [`run`](Self::run), for a write without a key that has a reliable way to check its
    /// result: before any retry of an ambiguous attempt, `reconcile` is asked. `Happened`
    /// returns its value, `NotHappened` permits the retry, `Unknown` returns the ambiguous
    /// outcome.
    pub async fn run_reconciled<T, E, F, Fut, R, RFut>(
        self,
        mut attempt: F,
        mut reconcile: R,
    ) -> Result<T, E>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        R: FnMut() -> RFut,
        RFut: Future<Output = Reconciled<T>>,
        E: Classify + From<Error> + Display,
    {
        let (mut call, invalid) = self.into_call();
        if let Some(error) = invalid {
            return Err(E::from(error));
        }
        loop {
            let a = call.begin_attempt()?;
            let result = call.run_with(a, &mut attempt).await;
            let mut step = call.settle(result).await;
            if let Step::Ambiguous { error, ambiguous } = step {
                step = match reconcile().await {
                    Reconciled::Happened(value) => return Ok(call.happened(value)),
                    Reconciled::NotHappened => call.settle_not_happened(error).await,
                    Reconciled::Unknown => return Err(call.ambiguous(ambiguous)),
                };
            }
            match step {
                Step::Retry => continue,
                Step::Done(result) => return result,
                Step::Ambiguous { ambiguous, .. } => return Err(call.ambiguous(ambiguous)),
            }
        }
    }
}
