//! The in-process contenders: one call through each retry library, around the same body that
//! waits once ([`crate::body`]). A successful call ([`work`]) and a call that fails twice and
//! succeeds on its third attempt ([`flaky`], 1 µs backoff).
//!
//! Settings, comparable where the libraries allow: ours uses the upstream's config (breaker,
//! budget, deadline, a 1 s attempt timeout); backon its default exponential builder (success)
//! or a constant 1 µs delay and 2 retries (failure), alone and with `tokio::time::timeout`
//! around each attempt (the fair peer: ours enforces an attempt timeout too); tokio-retry a
//! fixed 1 µs interval, 2 retries; tower a `Retry` with a `TpsBudget` policy, cloned per call.
//! [`floor`] is no library: backon + timeout with the upstream's budget and breaker counted by
//! hand, the least a call that keeps them can cost.

use std::sync::Arc;
use std::time::Duration;

use backon::{ConstantBuilder, ExponentialBuilder, Retryable};
use retry_runtime::backoff::Backoff;
use retry_runtime::budget::BudgetConfig;
use retry_runtime::throttle::ThrottleConfig;
use retry_runtime::{Method, Registry, Retry, Upstream, UpstreamConfig};
use tower::ServiceExt;
use tower::retry::budget::{Budget, TpsBudget};

use crate::BenchError;
use crate::body::{Flaky, Work, flaky, work};

/// The upstream every in-process call goes to.
pub const UPSTREAM: &str = "up";

/// The attempt timeout backon's timed contender enforces: the upstream default's.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);

/// The backoff of the failure path.
pub const BACKOFF: Duration = Duration::from_micros(1);

/// The config of an upstream whose calls fail twice in three attempts: the defaults, with a
/// The defaults but for a 1 µs backoff, a budget that allows two retries per call (ratio 10;
/// the default 0.2 refuses most of them, as it should under a real outage) and a throttle that
/// admits an upstream accepting one attempt in three (multipliers 100; it still counts every
/// attempt and draws its odds). No breaker, as by default.
pub fn failing_config() -> UpstreamConfig {
    UpstreamConfig::new()
        .with_backoff(
            Backoff::new()
                .with_initial(BACKOFF)
                .with_max_backoff(BACKOFF),
        )
        .with_budget(BudgetConfig::new().with_ratio(10.0))
        .with_throttle(Some(
            ThrottleConfig::new()
                .with_multiplier(100.0)
                .with_retry_multiplier(100.0),
        ))
}

/// A current-thread runtime with time and I/O, as every instruction count runs on (one thread:
/// no work stealing, so the counts repeat).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// No retry at all.
pub async fn bare() -> u64 {
    work().await.expect("bare")
}

/// An adapter as an application writes it, with the registry injected.
pub struct Adapter<'r> {
    /// The registry holding [`UPSTREAM`].
    pub registry: &'r Registry,
}

impl Adapter<'_> {
    /// A read that succeeds.
    #[retry_runtime::retry(upstream = "up", method = GET, registry = self.registry)]
    pub async fn read(&self) -> Result<u64, BenchError> {
        work().await
    }

    /// A read that fails twice, then succeeds.
    #[retry_runtime::retry(upstream = "up", method = GET, registry = self.registry)]
    pub async fn flaky(&self) -> Result<u64, BenchError> {
        flaky().await
    }
}

/// Through `#[retry]`.
pub async fn ours_macro(registry: &Registry) -> u64 {
    Adapter { registry }.read().await.expect("#[retry]")
}

/// Through the builder's `call` (the closure is not given the attempt).
pub async fn ours_call(registry: &Registry) -> u64 {
    Retry::in_registry(registry, UPSTREAM)
        .method(Method::GET)
        .call(work)
        .await
        .expect("call")
}

/// Through the builder's `run` (the closure is given the attempt).
pub async fn ours_run(registry: &Registry) -> u64 {
    Retry::in_registry(registry, UPSTREAM)
        .method(Method::GET)
        .run(|_attempt| work())
        .await
        .expect("run")
}

/// Through the builder's `call`, to `upstream`.
pub async fn ours_to(registry: &Registry, upstream: &str) -> u64 {
    Retry::in_registry(registry, upstream)
        .method(Method::GET)
        .call(work)
        .await
        .expect("call")
}

/// `attempt`, cut at [`ATTEMPT_TIMEOUT`].
async fn timed<F: Future<Output = Result<u64, BenchError>>>(attempt: F) -> Result<u64, BenchError> {
    match tokio::time::timeout(ATTEMPT_TIMEOUT, attempt).await {
        Ok(result) => result,
        Err(_) => Err(BenchError::TimedOut),
    }
}

/// Through backon, default exponential builder.
pub async fn backon() -> u64 {
    work.retry(ExponentialBuilder::default())
        .await
        .expect("backon")
}

/// Through backon, each attempt inside `tokio::time::timeout`.
pub async fn backon_timeout() -> u64 {
    (|| timed(work()))
        .retry(ExponentialBuilder::default())
        .await
        .expect("backon + timeout")
}

/// backon + timeout, plus by hand the bookkeeping every call through an upstream owes it: find
/// the upstream (an `Arc` clone, as a `#[retry]` site's kept entry), read the clock, ask the
/// breaker (window counters, as the default throttle's: give `upstream` one), and count the
/// outcome in the budget and the breaker when it happens. No deadline,
/// attempt, evidence or decision: a floor under what any call doing that bookkeeping costs.
pub async fn floor(upstream: &Arc<Upstream>) -> u64 {
    let upstream = Arc::clone(upstream);
    let started = tokio::time::Instant::now();
    let breaker = upstream
        .breaker()
        .expect("the floor's upstream has a breaker");
    let admission = breaker.admit().expect("a closed breaker admits");
    let result = (|| timed(work()))
        .retry(ExponentialBuilder::default())
        .await;
    upstream.budget().deposit_at(started);
    breaker.record_at(admission, result.is_err(), tokio::time::Instant::now());
    result.expect("floor")
}

/// Through tokio-retry, 2 retries.
pub async fn tokio_retry() -> u64 {
    let strategy = tokio_retry::strategy::FixedInterval::new(BACKOFF).take(2);
    tokio_retry::Retry::start(strategy, work)
        .await
        .expect("tokio-retry")
}

/// A tower retry policy with a `TpsBudget` (tower has no ready-made one): deposit on success,
/// withdraw before a retry, then sleep `delay`.
#[derive(Clone)]
pub struct BudgetPolicy {
    budget: Arc<TpsBudget>,
    delay: Duration,
}

impl BudgetPolicy {
    /// Finagle's defaults (10 s window, 10 retries per second floor, 20 %), or with `ratio`.
    pub fn new(ratio: f32, delay: Duration) -> Self {
        BudgetPolicy {
            budget: Arc::new(TpsBudget::new(Duration::from_secs(10), 10, ratio)),
            delay,
        }
    }
}

impl<Req: Clone, Res, E> tower::retry::Policy<Req, Res, E> for BudgetPolicy {
    type Future = tokio::time::Sleep;

    fn retry(&mut self, _req: &mut Req, result: &mut Result<Res, E>) -> Option<Self::Future> {
        match result {
            Ok(_) => {
                self.budget.deposit();
                None
            }
            Err(_) => self
                .budget
                .withdraw()
                .then(|| tokio::time::sleep(self.delay)),
        }
    }

    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }
}

/// tower's `Retry` around a plain function.
pub type TowerRetry<F> = tower::retry::Retry<BudgetPolicy, tower::util::ServiceFn<fn(()) -> F>>;

/// tower's `Retry` around [`work`], Finagle's budget.
pub fn tower_work() -> TowerRetry<Work> {
    fn attempt(_: ()) -> Work {
        work()
    }
    tower::retry::Retry::new(
        BudgetPolicy::new(0.2, BACKOFF),
        tower::service_fn(attempt as fn(()) -> Work),
    )
}

/// tower's `Retry` around [`flaky`], a budget that allows the retries.
pub fn tower_flaky() -> TowerRetry<Flaky> {
    fn attempt(_: ()) -> Flaky {
        flaky()
    }
    tower::retry::Retry::new(
        BudgetPolicy::new(10.0, BACKOFF),
        tower::service_fn(attempt as fn(()) -> Flaky),
    )
}

/// Through tower's `Retry` (cloned per call, as `oneshot` on a shared client would).
pub async fn tower<F>(svc: &TowerRetry<F>) -> u64
where
    F: Future<Output = Result<u64, BenchError>>,
{
    svc.clone().oneshot(()).await.expect("tower")
}

/// The failure path without a library: three tries, 1 µs apart.
pub async fn flaky_loop() -> u64 {
    for _ in 0..2 {
        if let Ok(v) = flaky().await {
            return v;
        }
        tokio::time::sleep(BACKOFF).await;
    }
    flaky().await.expect("third try")
}

/// The failure path through `#[retry]`.
pub async fn flaky_macro(registry: &Registry) -> u64 {
    Adapter { registry }.flaky().await.expect("#[retry]")
}

/// The failure path through the builder's `call`.
pub async fn flaky_call(registry: &Registry) -> u64 {
    Retry::in_registry(registry, UPSTREAM)
        .method(Method::GET)
        .call(flaky)
        .await
        .expect("call")
}

/// backon's constant 1 µs delay, 2 retries.
fn constant() -> ConstantBuilder {
    ConstantBuilder::default()
        .with_delay(BACKOFF)
        .with_max_times(2)
}

/// The failure path through backon.
pub async fn flaky_backon() -> u64 {
    flaky.retry(constant()).await.expect("backon")
}

/// The failure path through backon, each attempt inside `tokio::time::timeout`.
pub async fn flaky_backon_timeout() -> u64 {
    (|| timed(flaky()))
        .retry(constant())
        .await
        .expect("backon + timeout")
}

/// The failure path through tokio-retry.
pub async fn flaky_tokio_retry() -> u64 {
    let strategy = tokio_retry::strategy::FixedInterval::new(BACKOFF).take(2);
    tokio_retry::Retry::start(strategy, flaky)
        .await
        .expect("tokio-retry")
}
