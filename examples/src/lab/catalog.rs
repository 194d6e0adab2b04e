//! The catalog: the dependency at the end of the chain, with the scenario's fault injected, and
//! the instruments that count what reaches it.
//!
//! | route | does |
//! |---|---|
//! | `GET /orders/{id}` | the order's status (`new`, or `registered` with its registration number) |
//! | `POST /orders/{id}/register` | registers the order: **the side effect**. Behind `retry-idempotency`'s layer: a request whose `Idempotency-Key` it has seen gets the stored response without executing again (409 while the first still runs); a write without a key executes every time |
//!
//! Every request is counted per order (the order id is the operation's id: it travels in the
//! path through every layer), every execution of a registration is counted per order (more than
//! one is a duplicate side effect), and the requests in flight are tracked for the peak and the
//! concurrency-over-time series.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use retry_durable::sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use retry_idempotency::{Idempotency, IdempotencyLayer, SqliteKeys};
use retry_runtime::propagation;

use super::scenarios::{Fault, Scenario};
use super::servers::{self, Conn, FnService, Req, Resp, Server};

/// The header carrying the idempotency key (the registry's default `idempotency_header`).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The first order id of a run's warm-up: the lab's load warms every chain up with healthy
/// operations of ids from here on before the measured load starts (ids from 1), so the designs'
/// budgets, throttles and breakers have seen a service that has been running. The catalog
/// serves them without the scenario's fault, and the figures count only the measured ids.
pub const WARMUP_IDS: u64 = 1 << 40;

/// Time every request takes, so concurrency is visible even for fast errors.
const SERVICE_TIME: Duration = Duration::from_millis(10);

/// What the catalog has seen.
#[derive(Debug)]
pub struct CatalogState {
    scenario: Scenario,
    seed: u64,
    duration: Duration,
    start: Mutex<Option<Instant>>,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    interval_peak: AtomicUsize,
    books: Mutex<Books>,
    samples: Mutex<Vec<(f64, usize)>>,
    /// The catalog's workers, when the scenario limits them, and what a request takes one.
    workers: Option<Arc<tokio::sync::Semaphore>>,
    service_time: Duration,
    /// When each request arrived (every order, the warm-up's included).
    arrivals: Mutex<Vec<Instant>>,
    /// Each request: when it arrived and ended, its order and the status answered.
    requests: Mutex<Vec<Line>>,
}

#[derive(Debug, Default)]
struct Books {
    /// Requests per order (every route).
    calls: HashMap<u64, u32>,
    /// Executions of the registration per order.
    executions: HashMap<u64, u32>,
    /// Registration number per order (the latest).
    registered: HashMap<u64, u64>,
    next_registration: u64,
    /// Requests of each order being served now.
    serving: HashMap<u64, u32>,
    /// Requests of each order that arrived while another of the same order was being served
    /// (hedges, or a retry while an abandoned attempt is still served).
    overlapping: HashMap<u64, u32>,
}

/// What the catalog counted for one run.
#[derive(Debug, Clone, Default)]
pub struct CatalogCounts {
    /// Requests per order.
    pub calls: HashMap<u64, u32>,
    /// Executions of the registration per order.
    pub executions: HashMap<u64, u32>,
    /// Most requests in flight at once.
    pub peak: usize,
    /// Requests per order that arrived while another of the same order was being served.
    pub overlapping: HashMap<u64, u32>,
    /// When each request arrived, in seconds from the start of the measured load (the
    /// warm-up's before it, negative).
    pub arrivals: Vec<f64>,
    /// Each request, in the order they ended (for `--trace`).
    pub requests: Vec<CatalogRequest>,
}

/// One request to the catalog.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CatalogRequest {
    /// When it arrived, in seconds from the start of the measured load (negative before).
    pub arrived: f64,
    /// When it was answered, or its client left, on the same clock.
    pub ended: f64,
    /// The order it was for (`None`: no such route).
    pub order: Option<u64>,
    /// The status answered (`None`: the client left before the answer).
    pub status: Option<u16>,
}

/// A request's line in the catalog's log.
#[derive(Debug, Clone, Copy)]
struct Line {
    arrived: Instant,
    ended: Instant,
    order: Option<u64>,
    status: Option<u16>,
}

/// A request being handled: its [`Line`] is written when its handler ends or is dropped.
struct Logged {
    state: Arc<CatalogState>,
    arrived: Instant,
    order: Option<u64>,
    status: Option<u16>,
}

impl Drop for Logged {
    fn drop(&mut self) {
        let line = Line {
            arrived: self.arrived,
            ended: Instant::now(),
            order: self.order,
            status: self.status,
        };
        self.state.requests.lock().unwrap().push(line);
    }
}

impl CatalogState {
    /// A catalog for `scenario`, whose load of `load` operations per second lasts `duration`.
    pub fn new(scenario: Scenario, seed: u64, duration: Duration, load: f64) -> Arc<Self> {
        Arc::new(CatalogState {
            scenario,
            seed,
            duration,
            start: Mutex::new(None),
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            interval_peak: AtomicUsize::new(0),
            books: Mutex::new(Books::default()),
            samples: Mutex::new(Vec::new()),
            workers: scenario
                .workers(load)
                .map(|n| Arc::new(tokio::sync::Semaphore::new(n))),
            service_time: scenario.service_time(load),
            arrivals: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
        })
    }

    /// Marks the start of the measured load (the transient scenario's clock); the peak in
    /// flight counts from here (the warm-up's is not the scenario's).
    pub fn start(&self, at: Instant) {
        *self.start.lock().unwrap() = Some(at);
        self.peak.store(self.in_flight(), Ordering::Relaxed);
        self.interval_peak
            .store(self.in_flight(), Ordering::Relaxed);
    }

    /// The fault for the `nth` request of `order`: none for the warm-up's orders.
    fn fault_of(&self, order: u64, nth: u32, elapsed: Duration, write: bool) -> Fault {
        match order >= WARMUP_IDS {
            true => Fault::None,
            false => self
                .scenario
                .fault(self.seed, order, nth, elapsed, self.duration, write),
        }
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The most requests in flight since the last call (for the time series).
    pub fn take_interval_peak(&self) -> usize {
        self.interval_peak
            .swap(self.in_flight(), Ordering::Relaxed)
            .max(self.in_flight())
    }

    /// Records one concurrency sample: (seconds since the start, peak in flight).
    pub fn record_sample(&self, at: f64, peak: usize) {
        self.samples.lock().unwrap().push((at, peak));
    }

    /// The concurrency samples so far.
    pub fn series(&self) -> Vec<(f64, usize)> {
        self.samples.lock().unwrap().clone()
    }

    /// A copy of the counts.
    pub fn counts(&self) -> CatalogCounts {
        let start = self.start.lock().unwrap().unwrap_or_else(Instant::now);
        let since = |at: &Instant| match at.checked_duration_since(start) {
            Some(after) => after.as_secs_f64(),
            None => -start.duration_since(*at).as_secs_f64(),
        };
        let arrivals = self.arrivals.lock().unwrap().iter().map(since).collect();
        let requests = self
            .requests
            .lock()
            .unwrap()
            .iter()
            .map(|line| CatalogRequest {
                arrived: since(&line.arrived),
                ended: since(&line.ended),
                order: line.order,
                status: line.status,
            })
            .collect();
        let books = self.books.lock().unwrap();
        CatalogCounts {
            arrivals,
            requests,
            calls: books.calls.clone(),
            executions: books.executions.clone(),
            overlapping: books.overlapping.clone(),
            peak: self.peak.load(Ordering::Relaxed),
        }
    }

    fn enter(self: &Arc<Self>) -> InFlight {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
        self.interval_peak.fetch_max(now, Ordering::Relaxed);
        InFlight(self.clone())
    }

    fn elapsed(&self) -> Duration {
        self.start
            .lock()
            .unwrap()
            .map_or(Duration::ZERO, |s| s.elapsed())
    }

    async fn handle(
        self: Arc<Self>,
        request: Req,
        registrations: Idempotency<Register, SqliteKeys>,
    ) -> Resp {
        let arrived = Instant::now();
        self.arrivals.lock().unwrap().push(arrived);
        let order = servers::order_of(request.uri().path());
        // Logged when dropped, so a request whose client left before the answer is logged too.
        let mut logged = Logged {
            state: self.clone(),
            arrived,
            order,
            status: None,
        };
        let _in_flight = self.enter();
        let response = match order {
            Some(order) => self.serve(order, request, registrations).await,
            None => servers::respond(404, "no such route"),
        };
        logged.status = Some(response.status().as_u16());
        response
    }

    async fn serve(
        self: Arc<Self>,
        order: u64,
        request: Req,
        registrations: Idempotency<Register, SqliteKeys>,
    ) -> Resp {
        let write = request.method() == http::Method::POST;
        let nth = {
            let mut books = self.books.lock().unwrap();
            let serving = books.serving.entry(order).or_default();
            *serving += 1;
            if *serving > 1 {
                *books.overlapping.entry(order).or_default() += 1;
            }
            let n = books.calls.entry(order).or_default();
            *n += 1;
            *n - 1
        };
        let _serving = Serving(self.clone(), order);
        let fault = self.fault_of(order, nth, self.elapsed(), write);
        // A fast fault is answered at once, without a worker: a server shedding at its door.
        let fast = matches!(fault, Fault::Unavailable | Fault::TooManyRequests);
        if let Some(workers) = self.workers.as_ref().filter(|_| !fast) {
            // Queued for a worker, then served; in a task of its own, so a request whose client
            // gave up still waits its turn and takes its worker's time: the wasted work that
            // turns timeouts and retries into a queue that does not drain.
            // A slowdown slows the requests served while it lasts, whenever they arrived.
            // A caller that propagates its deadline (design B) says how long it still waits for
            // this attempt: a worker that picks the request up later skips it, as a service
            // built on the runtime's `ScopeLayer` would, since the work would be done for
            // nobody. A and C send no deadline: their abandoned requests are served.
            // A catalog that ignores the header (a third-party service) serves them all.
            let caller_waits_until = propagation::Inbound::from_headers(request.headers())
                .deadline
                .filter(|_| self.scenario.honours_deadline())
                .map(|left| Instant::now() + left);
            let workers = workers.clone();
            let state = self.clone();
            let service_time = self.service_time;
            let served = tokio::spawn(async move {
                let _worker = workers.acquire_owned().await;
                if caller_waits_until.is_some_and(|until| Instant::now() >= until) {
                    return false;
                }
                let now = state.elapsed();
                let busy = match state.fault_of(order, nth, now, write) {
                    Fault::Slow(extra) => service_time + extra,
                    _ => service_time,
                };
                tokio::time::sleep(busy).await;
                true
            });
            if !served.await.unwrap_or(true) {
                return servers::respond(
                    504,
                    "the caller stopped waiting before a worker was free",
                );
            }
        } else {
            tokio::time::sleep(SERVICE_TIME).await;
        }
        match fault {
            Fault::Unavailable => return servers::respond(503, "catalog unavailable"),
            Fault::TooManyRequests => {
                let mut r = servers::respond(429, "slow down");
                r.headers_mut().insert(
                    http::header::RETRY_AFTER,
                    http::HeaderValue::from_static("1"),
                );
                return r;
            }
            // (With limited workers the delay was part of the service above.)
            Fault::Slow(d) if self.workers.is_none() => tokio::time::sleep(d).await,
            Fault::Slow(_) => {}
            Fault::None | Fault::ResetAfterWrite => {}
        }
        if !write {
            let books = self.books.lock().unwrap();
            let body = match books.registered.get(&order) {
                Some(n) => {
                    format!(r#"{{"order":{order},"status":"registered","registration":{n}}}"#)
                }
                None => format!(r#"{{"order":{order},"status":"new"}}"#),
            };
            return servers::respond(200, body);
        }
        // The registration behind the Idempotency-Key layer: the fault above is the network's
        // and the catalog's load (nothing executed); the layer decides whether to execute.
        let (parts, body) = request.into_parts();
        let conn = parts.extensions.get::<Conn>().cloned();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut registrations = registrations;
        let answer = match registrations
            .call(http::Request::from_parts(parts, Full::new(body)))
            .await
        {
            Ok(answer) => answer,
            Err(never) => match never {},
        };
        let (parts, body) = answer.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        if fault == Fault::ResetAfterWrite && parts.status.is_success() {
            if let Some(conn) = conn {
                conn.reset();
            }
            // The connection is torn down; this response is never written (the layer stored
            // it: the client's retry with the key gets it).
            std::future::pending::<()>().await;
        }
        http::Response::from_parts(parts, Full::new(body))
    }

    /// The side effect: registers the order (a new registration number each execution).
    fn register(&self, order: u64) -> http::Response<Full<Bytes>> {
        let registration = {
            let mut books = self.books.lock().unwrap();
            books.next_registration += 1;
            let n = books.next_registration;
            *books.executions.entry(order).or_default() += 1;
            books.registered.insert(order, n);
            n
        };
        servers::respond(
            200,
            format!(r#"{{"order":{order},"registration":{registration}}}"#),
        )
    }
}

/// The registration handler behind the layer.
#[derive(Clone)]
pub struct Register(Arc<CatalogState>);

impl Service<http::Request<Full<Bytes>>> for Register {
    type Response = Resp;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Resp, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Full<Bytes>>) -> Self::Future {
        let response = match servers::order_of(request.uri().path()) {
            Some(order) => self.0.register(order),
            None => servers::respond(404, "no such route"),
        };
        std::future::ready(Ok(response))
    }
}

/// The catalog's registrations behind the Idempotency-Key layer, keys in an in-memory SQLite
/// database (one connection, kept for the run): the lab measures retries, not a disk, and a
/// run's keys need not outlive it. Writes without a key pass through and execute every time
/// (the scenario that counts their duplicates).
async fn registrations(
    state: Arc<CatalogState>,
) -> std::io::Result<Idempotency<Register, SqliteKeys>> {
    let io = |e: retry_idempotency::StoreError| std::io::Error::other(e.to_string());
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .min_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_with(SqliteConnectOptions::new().in_memory(true))
        .await
        .map_err(std::io::Error::other)?;
    let keys = SqliteKeys::from_pool(pool).await.map_err(io)?;
    let layer = IdempotencyLayer::builder(keys)
        .with_key_required(false)
        .build()
        .map_err(std::io::Error::other)?;
    Ok(layer.layer(Register(state)))
}

struct InFlight(Arc<CatalogState>);

/// One request of an order being served.
struct Serving(Arc<CatalogState>, u64);

impl Drop for Serving {
    fn drop(&mut self) {
        let mut books = self.0.books.lock().unwrap();
        if let Some(n) = books.serving.get_mut(&self.1) {
            *n = n.saturating_sub(1);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Starts the catalog server.
pub async fn start(state: Arc<CatalogState>) -> std::io::Result<Server> {
    let registrations = registrations(state.clone()).await?;
    servers::serve(FnService(move |request: Req| {
        state.clone().handle(request, registrations.clone())
    }))
    .await
}
