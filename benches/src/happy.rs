//! The happy-path contenders: one call whose first attempt succeeds, through each retry
//! library with comparable settings (3 attempts, exponential backoff, a budget where the
//! library has one). Shared by the criterion bench (time) and `alloc-per-call` (allocations).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use retry_runtime::{Method, Registry, Retry};
use tower::ServiceExt;
use tower::retry::budget::{Budget, TpsBudget};

use crate::BenchError;

/// The upstream name used by the happy-path benches.
pub const UPSTREAM: &str = "up";

/// What every happy-path measurement runs on: a current-thread runtime with time, and a
/// registry holding [`UPSTREAM`] with the default config.
pub fn setup() -> (tokio::runtime::Runtime, Registry) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let registry = crate::registry(&[UPSTREAM], retry_runtime::UpstreamConfig::new());
    (rt, registry)
}

/// The work of one attempt: nothing but returning a value.
#[inline(never)]
async fn work() -> Result<u64, BenchError> {
    Ok(black_box(1))
}

/// The bare async call, no retry at all.
pub async fn bare() -> u64 {
    work().await.unwrap()
}

/// Through our builder, default upstream config (breaker on, budget, deadline).
pub async fn ours(registry: &Registry) -> u64 {
    Retry::in_registry(registry, UPSTREAM)
        .method(Method::GET)
        .run(|_attempt| work())
        .await
        .unwrap()
}

/// Through our builder's `call`, whose closure is not given its attempt (made only if asked).
pub async fn ours_call(registry: &Registry) -> u64 {
    Retry::in_registry(registry, UPSTREAM)
        .method(Method::GET)
        .call(work)
        .await
        .unwrap()
}

/// Through `#[retry]` on an adapter method, with the registry injected.
pub struct Adapter<'r> {
    /// The registry holding [`UPSTREAM`].
    pub registry: &'r Registry,
}

impl Adapter<'_> {
    /// One read, as an application writes it.
    #[retry_runtime::retry(upstream = "up", method = GET, registry = self.registry)]
    pub async fn read(&self) -> Result<u64, BenchError> {
        work().await
    }
}

/// Through the macro.
pub async fn ours_macro(registry: &Registry) -> u64 {
    Adapter { registry }.read().await.unwrap()
}

/// Through backon with its default exponential builder (3 retries, 1 s min delay).
pub async fn backon() -> u64 {
    use backon::{ExponentialBuilder, Retryable};
    work.retry(ExponentialBuilder::default()).await.unwrap()
}

/// Through tokio-retry: exponential from 10 ms, 2 retries.
pub async fn tokio_retry() -> u64 {
    let strategy = tokio_retry::strategy::ExponentialBackoff::from_millis(10).take(2);
    tokio_retry::Retry::start(strategy, work).await.unwrap()
}

/// A tower retry policy with a `TpsBudget` (tower has no ready-made one): deposit on success,
/// withdraw before a retry, no delay.
#[derive(Clone)]
pub struct BudgetPolicy {
    budget: Arc<TpsBudget>,
}

impl BudgetPolicy {
    /// Finagle's defaults: 10 s window, 10 retries per second floor, 20 %.
    pub fn new() -> Self {
        BudgetPolicy {
            budget: Arc::new(TpsBudget::new(Duration::from_secs(10), 10, 0.2)),
        }
    }
}

impl Default for BudgetPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl<Req: Clone, Res, E> tower::retry::Policy<Req, Res, E> for BudgetPolicy {
    type Future = std::future::Ready<()>;

    fn retry(&mut self, _req: &mut Req, result: &mut Result<Res, E>) -> Option<Self::Future> {
        match result {
            Ok(_) => {
                self.budget.deposit();
                None
            }
            Err(_) => self.budget.withdraw().then(|| std::future::ready(())),
        }
    }

    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }
}

/// The attempt as a tower service (a plain function, so the service is `Clone` and `Copy`).
pub type AttemptService =
    tower::util::ServiceFn<fn(()) -> std::future::Ready<Result<u64, BenchError>>>;

/// tower's `Retry` around the attempt, with a `TpsBudget` policy.
pub type TowerRetry = tower::retry::Retry<BudgetPolicy, AttemptService>;

/// A tower `Retry` service around the attempt, with a `TpsBudget` policy.
pub fn tower_service() -> TowerRetry {
    fn attempt(_: ()) -> std::future::Ready<Result<u64, BenchError>> {
        std::future::ready(Ok(black_box(1)))
    }
    tower::retry::Retry::new(
        BudgetPolicy::new(),
        tower::service_fn(attempt as fn(()) -> std::future::Ready<Result<u64, BenchError>>),
    )
}

/// Through tower::retry with a `TpsBudget` (the service is cloned per call, as `oneshot` on a
/// shared client would).
pub async fn tower(svc: &TowerRetry) -> u64 {
    svc.clone().oneshot(()).await.unwrap()
}
