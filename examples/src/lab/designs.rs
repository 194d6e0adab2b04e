//! The retry designs the lab compares, as the API and the middle service call downstream.
//!
//! | design | API -> middle | middle -> catalog |
//! |---|---|---|
//! | A, retry in every layer | backon's `ExponentialBuilder::default()` around a reqwest call (`error_for_status`): every error retried, 3 retries after 1 s, 2 s, 4 s, no jitter | reqwest-middleware with reqwest-retry's `RetryTransientMiddleware` and `ExponentialBackoff::builder().build_with_max_retries(3)` (the crate's documented setup): 5xx, 408, 429, timeouts and connection errors retried whatever the method, 3 retries after up to 1 s, 2 s, 4 s (full jitter) |
//! | B, one retry owner, library defaults | the runtime (`middle` upstream): one attempt unless the middle did not retry; propagates deadline and retries left | `ScopeLayer` restores the API's scope; the catalog adapter (`catalog` upstream) owns the retries: shared allowance, budget, throttle, `Retry-After` |
//! | B-tuned | the same code, with `examples/lab.toml`'s upstreams | the same, with a bulkhead |
//! | B-hedged | as B-tuned | as B-tuned, and the catalog's reads and keyed writes hedged at the 95th percentile of its recent latency ([`config::HEDGE_TOML`](super::config::HEDGE_TOML)) |
//! | C, no retry | one attempt | one attempt |
//!
//! Timeouts: 1.5 s per API -> middle attempt and 300 ms per middle -> catalog attempt in A, C
//! and B-tuned. B keeps every library default except the catalog's 300 ms attempt timeout (the
//! environment every design runs in); its API -> middle attempts time out after the default of
//! a hop that propagates, half the deadline: 2.5 s. B's operation deadline is its `middle`
//! upstream's `deadline` (5 s by default, 2.5 s tuned).
//! B's attempts tell their callee how long they still wait (`retry-deadline-ms`: the attempt's
//! timeout, clamped to the deadline), so the middle's retries end when the API stops waiting,
//! and the brief slowdown's catalog skips queued requests nobody waits for (unless the scenario
//! says the catalog ignores the header, as a third-party service would); A and C send nothing
//! of the kind.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable as _};
use bytes::Bytes;
use reqwest_middleware::ClientWithMiddleware;
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry::policies::ExponentialBackoff;
use retry_durable::{
    DEFAULT_BACKOFF, Durable, DurableError, DurableQueue, DurableStore, EnqueueOptions, PgStore,
    PgStoreOptions, Replay, SqliteStore, Worker, WorkerConfig,
};
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::tower::{InboundLimits, ScopeLayer};
use retry_runtime::{Method, Pushback, Registry, Retry, propagation};
use tower_layer::Layer;

use super::catalog::IDEMPOTENCY_KEY;
use super::scenarios::{Scenario, WriteContract};
use super::servers::{self, FnService, Req, Resp, Server};
use crate::adapters::{AdapterError, CatalogAdapter, OrderId, RegisterCommand};

/// The response header the API sets when the outcome of a write is unknown (`ambiguous`), or
/// when it shed the operation because it had its bound of operations in flight (`shed`).
pub const OUTCOME: &str = "x-lab-outcome";

/// [`OUTCOME`]'s value for an operation the API shed (see [`super::files`]).
pub const SHED: &str = "shed";

/// A server's handler with a bound on the requests it serves at once: beyond it, `503` at once
/// with `x-lab-outcome: shed`, as a bounded server sheds load (see [`super::files`]).
#[derive(Clone)]
struct Bounded<S> {
    inner: S,
    slots: Arc<tokio::sync::Semaphore>,
}

fn bounded<S>(inner: S, limit: usize) -> Bounded<S> {
    Bounded {
        inner,
        slots: Arc::new(tokio::sync::Semaphore::new(limit.max(1))),
    }
}

impl<S> tower_service::Service<Req> for Bounded<S>
where
    S: tower_service::Service<
            Req,
            Response = Resp,
            Error = std::convert::Infallible,
            Future = servers::RespFuture,
        >,
{
    type Response = Resp;
    type Error = std::convert::Infallible;
    type Future = servers::RespFuture;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> servers::RespFuture {
        match self.slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let served = self.inner.call(request);
                Box::pin(async move {
                    let response = served.await;
                    drop(slot);
                    response
                })
            }
            Err(_) => Box::pin(async {
                let mut r = servers::respond(503, "the API has its bound of operations in flight");
                r.headers_mut()
                    .insert(OUTCOME, http::HeaderValue::from_static(SHED));
                Ok(r)
            }),
        }
    }
}

/// Attempt timeout of API -> middle calls (A and C; B's comes from the registry).
pub const API_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(1500);
/// Attempt timeout of middle -> catalog calls (A and C; B's comes from the registry).
pub const MIDDLE_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(300);

/// A retry design.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Design {
    /// Retry in every layer, with backon and reqwest-retry at their defaults.
    A,
    /// One retry owner (this library) at its defaults.
    B,
    /// One retry owner with the lab's tuned configuration (`examples/lab.toml`).
    BTuned,
    /// B-tuned, with hedged catalog calls.
    BHedged,
    /// No retry.
    C,
}

impl Design {
    /// Every design.
    pub const ALL: [Design; 5] = [
        Design::A,
        Design::B,
        Design::BTuned,
        Design::BHedged,
        Design::C,
    ];

    /// The flag value and report label.
    pub const fn letter(self) -> &'static str {
        match self {
            Design::A => "A",
            Design::B => "B",
            Design::BTuned => "B-tuned",
            Design::BHedged => "B-hedged",
            Design::C => "C",
        }
    }

    /// A short description.
    pub const fn describe(self) -> &'static str {
        match self {
            Design::A => "retry in every layer (backon + reqwest-retry defaults)",
            Design::B => "one retry owner, library defaults",
            Design::BTuned => "one retry owner, examples/lab.toml",
            Design::BHedged => "B-tuned with hedged catalog calls (95th percentile)",
            Design::C => "no retry",
        }
    }

    /// Whether this is one of the library's designs (B, B-tuned or B-hedged).
    pub const fn is_ours(self) -> bool {
        matches!(self, Design::B | Design::BTuned | Design::BHedged)
    }

    /// Whether the design runs in `scenario`: B-hedged only where hedging can change something
    /// (slow catalogs) or must not (writes), to keep the lab's run time.
    pub const fn runs_in(self, scenario: Scenario) -> bool {
        match self {
            Design::BHedged => matches!(
                scenario,
                Scenario::Slow
                    | Scenario::SlowTail
                    | Scenario::Slowdown
                    | Scenario::ResetKeyed
                    | Scenario::ResetUnkeyed
            ),
            _ => true,
        }
    }
}

impl fmt::Display for Design {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.letter())
    }
}

impl FromStr for Design {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_uppercase().as_str() {
            "A" => Ok(Design::A),
            "B" => Ok(Design::B),
            "B-TUNED" | "BT" => Ok(Design::BTuned),
            "B-HEDGED" | "BH" => Ok(Design::BHedged),
            "C" => Ok(Design::C),
            _ => Err(format!(
                "unknown design `{s}`: use A, B, B-tuned, B-hedged or C"
            )),
        }
    }
}

/// The registries designs B and B-tuned use: the API's (`middle` upstream) and the middle's
/// (`catalog`).
#[derive(Clone, Debug)]
pub struct Registries {
    /// The API process's registry.
    pub api: Arc<Registry>,
    /// The middle process's registry.
    pub middle: Arc<Registry>,
    /// The registries of the middle's further replicas, when it runs as a fleet (each
    /// replica's throttle and budget its own; the load goes round-robin over them all).
    pub middle_replicas: Vec<Arc<Registry>>,
}

/// One design's API -> middle -> catalog chain, running.
pub struct Chain {
    /// The API's server (the load driver calls it).
    pub api: Server,
    /// The middle's server.
    pub middle: Server,
    /// Calls B's services refused locally (A and C: none).
    pub local_refusals: Arc<LocalRefusals>,
    /// The middle's durable queue and worker (B and B-tuned, in the long outage).
    pub durable: Option<DurableTier>,
}

/// The durable queue of one chain, on either backend.
#[derive(Clone, Debug)]
pub enum LabQueue {
    /// An SQLite file in a temporary directory (the default).
    Sqlite(DurableQueue<SqliteStore>),
    /// A schema of its own in the PostgreSQL database given with `--database-url`.
    Postgres(DurableQueue<PgStore>),
}

impl LabQueue {
    /// Tasks not finished yet (pending or running): the backlog.
    pub async fn outstanding(&self) -> Result<u64, retry_durable::DurableError> {
        Ok(match self {
            LabQueue::Sqlite(q) => q.counts().await?.outstanding(),
            LabQueue::Postgres(q) => q.counts().await?.outstanding(),
        })
    }
}

/// The middle's durable tier: its queue, and the worker replaying deferred registrations
/// (stopped, and its files or schema removed, when the chain is dropped).
pub struct DurableTier {
    /// The queue the middle's adapter defers to.
    pub queue: LabQueue,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    cleanup: Cleanup,
}

enum Cleanup {
    Dir(std::path::PathBuf),
    Schema(PgStore, String),
}

impl Drop for DurableTier {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match &self.cleanup {
            Cleanup::Dir(dir) => {
                let _ = std::fs::remove_dir_all(dir);
            }
            Cleanup::Schema(store, schema) => {
                let (store, sql) = (
                    store.clone(),
                    format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"),
                );
                tokio::spawn(async move {
                    use retry_durable::sqlx;
                    let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
                        .execute(store.pool())
                        .await;
                    store.close().await;
                });
            }
        }
    }
}

/// How the lab's durable worker replays: it polls every 100 ms and backs off 0.5 s, 1 s, 2 s,
/// then every 2 s (the library's default, 2 s doubling to an hour, suits production, not a
/// run of seconds); 60 attempts cover the longest outage the lab documents.
fn lab_worker_config() -> WorkerConfig {
    WorkerConfig::new()
        .with_poll_interval(Duration::from_millis(100))
        .with_backoff(
            DEFAULT_BACKOFF
                .with_initial(Duration::from_millis(500))
                .with_max_backoff(Duration::from_secs(2)),
        )
}

/// The durable attempts of a lab task before it fails and alerts.
const LAB_DURABLE_ATTEMPTS: u32 = 60;

static TIER: AtomicUsize = AtomicUsize::new(0);

/// Opens the middle's durable queue (SQLite in a temporary directory, or a schema of its own
/// in `database_url`), registers it with the middle's registry and starts its worker.
async fn durable_tier(
    adapter: Arc<CatalogAdapter>,
    registry: &Registry,
    database_url: Option<&str>,
) -> std::io::Result<DurableTier> {
    let n = TIER.fetch_add(1, Ordering::Relaxed);
    let name = format!("retry_lab_{}_{n}", std::process::id());
    let io = |e: retry_durable::DurableError| std::io::Error::other(e.to_string());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = EnqueueOptions::new().with_max_attempts(LAB_DURABLE_ATTEMPTS);
    let replay = CatalogAdapter::register_durable_replay(adapter);
    let (queue, cleanup) = match database_url {
        None => {
            let dir = std::env::temp_dir().join(&name);
            let store = SqliteStore::open(dir.join("queue.sqlite"))
                .await
                .map_err(io)?;
            let queue = start_tier(store, registry, options, replay, stopped).map_err(io)?;
            (LabQueue::Sqlite(queue), Cleanup::Dir(dir))
        }
        Some(url) => {
            let store = PgStore::connect_with(PgStoreOptions::new(url).with_schema(&name))
                .await
                .map_err(io)?;
            let queue =
                start_tier(store.clone(), registry, options, replay, stopped).map_err(io)?;
            (LabQueue::Postgres(queue), Cleanup::Schema(store, name))
        }
    };
    Ok(DurableTier {
        queue,
        stop: Some(stop),
        cleanup,
    })
}

/// Registers `store`'s queue with the middle's registry and runs its worker until `stopped`.
fn start_tier<S: DurableStore + Clone>(
    store: S,
    registry: &Registry,
    options: EnqueueOptions,
    replay: Replay,
    stopped: tokio::sync::oneshot::Receiver<()>,
) -> Result<DurableQueue<S>, DurableError> {
    let queue = DurableQueue::new(store.clone());
    registry.set_durable_queue_with(queue.clone(), options);
    let worker = Worker::builder(store)
        .replay(replay)
        .config(lab_worker_config())
        .build()?;
    tokio::spawn(async move {
        worker
            .run(async {
                let _ = stopped.await;
            })
            .await
    });
    Ok(queue)
}

/// Calls refused locally (throttle or breaker), per service.
#[derive(Debug, Default)]
pub struct LocalRefusals {
    /// By the API's admission control on the middle (the `middle` upstream).
    pub api: AtomicUsize,
    /// By the middle's admission control on the catalog (the `catalog` upstream).
    pub middle: AtomicUsize,
}

impl LocalRefusals {
    /// (API's, middle's) so far.
    pub fn get(&self) -> [usize; 2] {
        [
            self.api.load(Ordering::Relaxed),
            self.middle.load(Ordering::Relaxed),
        ]
    }
}

/// Starts the API and the middle of `design` in front of the catalog at `catalog_url`; the API
/// serves at most `max_in_flight` operations at once and sheds the rest. `registries` are used
/// by B and B-tuned only.
pub async fn start(
    design: Design,
    contract: WriteContract,
    catalog_url: String,
    registries: Registries,
    database_url: Option<&str>,
    max_in_flight: usize,
) -> std::io::Result<Chain> {
    let local_refusals = Arc::new(LocalRefusals::default());
    let refused = local_refusals.clone();
    let mut durable = None;
    let middle = match design {
        Design::A => {
            let client = reqwest_middleware::ClientBuilder::new(plain_client())
                .with(RetryTransientMiddleware::new_with_policy(
                    ExponentialBackoff::builder().build_with_max_retries(3),
                ))
                .build();
            servers::serve(FnService(move |request: Req| {
                middle_a(client.clone(), catalog_url.clone(), request)
            }))
            .await?
        }
        Design::C => {
            let client = plain_client();
            servers::serve(FnService(move |request: Req| {
                once(
                    client.clone(),
                    catalog_url.clone(),
                    request,
                    MIDDLE_ATTEMPT_TIMEOUT,
                )
            }))
            .await?
        }
        Design::B | Design::BTuned | Design::BHedged => {
            let deadline = registries
                .middle
                .upstream("catalog")
                .expect("a `catalog` upstream")
                .config()
                .deadline;
            let adapter = Arc::new(CatalogAdapter::new(
                catalog_url.clone(),
                registries.middle.clone(),
            ));
            if contract == WriteContract::Durable {
                durable =
                    Some(durable_tier(adapter.clone(), &registries.middle, database_url).await?);
            }
            let fleet: Arc<Vec<Arc<CatalogAdapter>>> = Arc::new(
                std::iter::once(adapter)
                    .chain(registries.middle_replicas.iter().map(|registry| {
                        Arc::new(CatalogAdapter::new(catalog_url.clone(), registry.clone()))
                    }))
                    .collect(),
            );
            let next = Arc::new(AtomicUsize::new(0));
            let handler = FnService(move |request: Req| {
                let replica = next.fetch_add(1, Ordering::Relaxed) % fleet.len();
                middle_b(fleet[replica].clone(), contract, request, refused.clone())
            });
            let limits = InboundLimits::new().with_deadline(deadline);
            servers::serve(ScopeLayer::new(limits).layer(handler)).await?
        }
    };
    let middle_url = middle.url();
    let api = match design {
        Design::A => {
            let client = plain_client();
            servers::serve(bounded(
                FnService(move |mut request: Req| {
                    add_key(&mut request, contract);
                    api_a(client.clone(), middle_url.clone(), request)
                }),
                max_in_flight,
            ))
            .await?
        }
        Design::C => {
            let client = plain_client();
            servers::serve(bounded(
                FnService(move |mut request: Req| {
                    add_key(&mut request, contract);
                    once(
                        client.clone(),
                        middle_url.clone(),
                        request,
                        API_ATTEMPT_TIMEOUT,
                    )
                }),
                max_in_flight,
            ))
            .await?
        }
        Design::B | Design::BTuned | Design::BHedged => {
            let upstream = registries
                .api
                .upstream("middle")
                .expect("a `middle` upstream");
            let client = retry_runtime::http::client_builder_for(upstream.config())
                .build()
                .expect("a plain HTTP client builds");
            let registry = registries.api.clone();
            let refused = local_refusals.clone();
            servers::serve(bounded(
                FnService(move |request: Req| {
                    api_b(
                        client.clone(),
                        registry.clone(),
                        middle_url.clone(),
                        contract,
                        request,
                        refused.clone(),
                    )
                }),
                max_in_flight,
            ))
            .await?
        }
    };
    Ok(Chain {
        api,
        middle,
        local_refusals,
        durable,
    })
}

/// The client every design's services start from: plain reqwest, as their services would.
fn plain_client() -> reqwest::Client {
    reqwest::Client::builder()
        .retry(reqwest::retry::never())
        .build()
        .expect("a plain HTTP client builds")
}

/// The API derives the idempotency key of a keyed write (every design sends it).
fn add_key(request: &mut Req, contract: WriteContract) {
    if contract.keyed()
        && request.method() == Method::POST
        && let Some(order) = servers::order_of(request.uri().path())
    {
        // As the draft spells the field: a structured-field string (what the catalog's
        // Idempotency-Key layer requires, and what design B's runtime sends below).
        let key = RegisterCommand::new(OrderId(order)).idempotency_key();
        if let Ok(value) = retry_runtime::IdempotencyKey::new(key)
            .map(|k| k.to_sf_string())
            .map_err(drop)
            .and_then(|v| http::HeaderValue::from_str(&v).map_err(drop))
        {
            request.headers_mut().insert(IDEMPOTENCY_KEY, value);
        }
    }
}

/// The method, downstream URL and idempotency key of an inbound request, forwarded as is.
fn target(base: &str, request: &Req) -> (Method, String, Option<http::HeaderValue>) {
    (
        request.method().clone(),
        format!("{base}{}", request.uri().path()),
        request.headers().get(IDEMPOTENCY_KEY).cloned(),
    )
}

/// How A and C answer a failed call: the status they got, else 504 for a timeout and 502 for
/// anything else.
fn failure(status: Option<http::StatusCode>, timeout: bool) -> Resp {
    match status {
        Some(status) => servers::respond(status.as_u16(), "upstream failed"),
        None if timeout => servers::respond(504, "upstream timed out"),
        None => servers::respond(502, "upstream connection failed"),
    }
}

// ---------------------------------------------------------------------------------------------
// Design A: the popular crates at their defaults, in each service.

/// A's API: backon around a reqwest call, as its README shows it: `error_for_status` turns a
/// status into an error, and `ExponentialBuilder::default()` retries every error (3 retries,
/// after 1 s, 2 s, 4 s, no jitter).
async fn api_a(client: reqwest::Client, middle: String, request: Req) -> Resp {
    let (method, url, key) = target(&middle, &request);
    let call = || async {
        let mut builder = client
            .request(method.clone(), &url)
            .timeout(API_ATTEMPT_TIMEOUT);
        if let Some(key) = &key {
            builder = builder.header(IDEMPOTENCY_KEY, key.clone());
        }
        let response = builder.send().await?.error_for_status()?;
        response.bytes().await
    };
    match call.retry(ExponentialBuilder::default()).await {
        Ok(body) => servers::respond(200, body),
        Err(e) => failure(e.status(), e.is_timeout()),
    }
}

/// A's middle: a reqwest-middleware client with reqwest-retry's transient-retry middleware and
/// its documented policy (`ExponentialBackoff::builder().build_with_max_retries(3)`).
async fn middle_a(client: ClientWithMiddleware, catalog: String, request: Req) -> Resp {
    let (method, url, key) = target(&catalog, &request);
    let mut builder = client.request(method, &url).timeout(MIDDLE_ATTEMPT_TIMEOUT);
    if let Some(key) = key {
        builder = builder.header(IDEMPOTENCY_KEY, key);
    }
    let result = async {
        let response = builder.send().await?;
        let status = response.status();
        let body = response.bytes().await?;
        Ok::<_, reqwest_middleware::Error>((status, body))
    }
    .await;
    match result {
        Ok((status, body)) => servers::respond(status.as_u16(), body),
        Err(e) => failure(e.status(), e.is_timeout()),
    }
}

// ---------------------------------------------------------------------------------------------
// Design C.

/// One attempt, its status passed on.
async fn once(client: reqwest::Client, base: String, request: Req, timeout: Duration) -> Resp {
    let (method, url, key) = target(&base, &request);
    let mut builder = client.request(method, &url).timeout(timeout);
    if let Some(key) = key {
        builder = builder.header(IDEMPOTENCY_KEY, key);
    }
    let result = async {
        let response = builder.send().await?;
        let status = response.status().as_u16();
        let body = response.bytes().await?;
        Ok::<_, reqwest::Error>((status, body))
    }
    .await;
    match result {
        Ok((status, body)) => servers::respond(status, body),
        Err(e) => failure(e.status(), e.is_timeout()),
    }
}

// ---------------------------------------------------------------------------------------------
// Design B.

/// The API: one operation with a deadline; the call to the middle is a retrying call whose
/// attempts carry the remaining deadline and the retries left. The middle's pushback (it
/// already retried) stops the API from retrying the chain.
async fn api_b(
    client: reqwest::Client,
    registry: Arc<Registry>,
    middle: String,
    contract: WriteContract,
    request: Req,
    refused: Arc<LocalRefusals>,
) -> Resp {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let order = servers::order_of(&path).unwrap_or_default();
    let url = format!("{middle}{path}");
    let upstream = registry.upstream("middle").expect("a `middle` upstream");
    let deadline = upstream.config().deadline;
    let call = Retry::in_registry(&registry, "middle").method(method.clone());
    let call = if contract.keyed() && method == Method::POST {
        call.idempotency(RegisterCommand::new(OrderId(order)).idempotency_key())
    } else {
        call
    };
    let result: Result<(u16, Bytes), AdapterError> = retry_runtime::operation("api")
        .deadline(deadline)
        .run(call.run(|_attempt| {
            let request = client.request(method.clone(), &url);
            async move {
                let response = request.send_attempt().await?;
                // 202: the middle deferred the write to its durable queue.
                let status = response.status().as_u16();
                Ok((status, response.read_bytes().await?))
            }
        }))
        .await;
    match result {
        Ok((status, body)) => servers::respond(status, body),
        Err(e) => error_response(&e, &refused.api),
    }
}

/// The middle: runs inside the scope the `ScopeLayer` restored from the API's headers; the
/// catalog adapter owns the retries.
async fn middle_b(
    adapter: Arc<CatalogAdapter>,
    contract: WriteContract,
    request: Req,
    refused: Arc<LocalRefusals>,
) -> Resp {
    let Some(order) = servers::order_of(request.uri().path()).map(OrderId) else {
        return servers::respond(404, "no such route");
    };
    if request.method() == Method::GET {
        return match adapter.order_status(&order).await {
            Ok(status) => servers::respond(200, format!("{status:?}")),
            Err(e) => error_response(&e, &refused.middle),
        };
    }
    let cmd = RegisterCommand::new(order);
    let keyed = request.headers().contains_key(IDEMPOTENCY_KEY);
    let result = match (keyed, contract) {
        (true, WriteContract::Durable) => match adapter.register_durable(&cmd).await {
            Ok(Durable::Done(registered)) => Ok(registered),
            Ok(Durable::Deferred(call)) => {
                return servers::respond(202, format!(r#"{{"deferred":{}}}"#, call.task_id()));
            }
            Err(e) => Err(e),
        },
        (true, _) => adapter.register(&cmd).await,
        (false, WriteContract::Reconciled) => adapter.register_checked(&cmd).await,
        (false, _) => adapter.register_once(&cmd).await,
    };
    match result {
        Ok(r) => servers::respond(
            200,
            format!(
                r#"{{"order":{},"registration":{}}}"#,
                r.order, r.registration
            ),
        ),
        Err(e) => error_response(&e, &refused.middle),
    }
}

/// How B's services answer a failed call: an unknown outcome is said so (502 and
/// `x-lab-outcome: ambiguous`), a local refusal (throttle, breaker, bulkhead) is `503` with the
/// `overloaded` pushback, a catalog status is passed on with its `Retry-After`. A refusal by
/// a throttle's or breaker's refusal is counted in `refused`.
fn error_response(e: &AdapterError, refused: &AtomicUsize) -> Resp {
    if std::env::var_os("LAB_DEBUG").is_some() {
        eprintln!("lab: {e}");
    }
    if let AdapterError::Runtime(
        retry_runtime::Error::CircuitOpen { .. } | retry_runtime::Error::Throttled { .. },
    ) = e
    {
        refused.fetch_add(1, Ordering::Relaxed);
    }
    if e.as_ambiguous().is_some() {
        let mut r = servers::respond(502, e.to_string());
        r.headers_mut()
            .insert(OUTCOME, http::HeaderValue::from_static("ambiguous"));
        return r;
    }
    match e {
        AdapterError::Http(http) if http.status().is_some() => {
            let status = http.status().map_or(502, |s| s.as_u16());
            let mut r = servers::respond(status, e.to_string());
            for name in [http::header::RETRY_AFTER.as_str(), propagation::PUSHBACK] {
                if let Some(v) = http.headers().and_then(|h| h.get(name)) {
                    r.headers_mut().insert(name, v.clone());
                }
            }
            r
        }
        AdapterError::Runtime(
            retry_runtime::Error::CircuitOpen { .. }
            | retry_runtime::Error::BulkheadFull { .. }
            | retry_runtime::Error::Throttled { .. },
        ) => {
            let mut r = servers::respond(503, e.to_string());
            propagation::set_pushback(r.headers_mut(), Pushback::Overloaded);
            r
        }
        AdapterError::Runtime(
            retry_runtime::Error::AttemptTimeout { .. }
            | retry_runtime::Error::DeadlineExceeded { .. },
        ) => servers::respond(504, e.to_string()),
        AdapterError::Http(_) => servers::respond(502, e.to_string()),
        _ => servers::respond(500, e.to_string()),
    }
}
