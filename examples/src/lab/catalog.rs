//! The catalog: the dependency at the end of the chain, with the scenario's fault injected, and
//! the instruments that count what reaches it.
//!
//! | route | does |
//! |---|---|
//! | `GET /orders/{id}` | the order's status (`new`, or `registered` with its registration number) |
//! | `POST /orders/{id}/register` | registers the order: **the side effect**. With an `Idempotency-Key` it has seen, it answers the stored result without executing again |
//!
//! Every request is counted per order (the order id is the operation's id: it travels in the
//! path through every layer), every execution of a registration is counted per order (more than
//! one is a duplicate side effect), and the requests in flight are tracked for the peak and the
//! concurrency-over-time series.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

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
}

#[derive(Debug, Default)]
struct Books {
    /// Requests per order (every route).
    calls: HashMap<u64, u32>,
    /// Executions of the registration per order.
    executions: HashMap<u64, u32>,
    /// Registration number per order (the latest).
    registered: HashMap<u64, u64>,
    /// Idempotency key -> (order, registration number).
    keys: HashMap<String, (u64, u64)>,
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
        let arrivals = self
            .arrivals
            .lock()
            .unwrap()
            .iter()
            .map(|at| match at.checked_duration_since(start) {
                Some(after) => after.as_secs_f64(),
                None => -start.duration_since(*at).as_secs_f64(),
            })
            .collect();
        let books = self.books.lock().unwrap();
        CatalogCounts {
            arrivals,
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

    async fn handle(self: Arc<Self>, request: Req) -> Resp {
        self.arrivals.lock().unwrap().push(Instant::now());
        let _in_flight = self.enter();
        let Some(order) = servers::order_of(request.uri().path()) else {
            return servers::respond(404, "no such route");
        };
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
        let key = request
            .headers()
            .get(IDEMPOTENCY_KEY)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let registration = {
            let mut books = self.books.lock().unwrap();
            match key.as_ref().and_then(|k| books.keys.get(k)).copied() {
                // Deduplicated: the stored result, no second execution.
                Some((_, n)) => n,
                None => {
                    books.next_registration += 1;
                    let n = books.next_registration;
                    *books.executions.entry(order).or_default() += 1;
                    books.registered.insert(order, n);
                    if let Some(k) = key {
                        books.keys.insert(k, (order, n));
                    }
                    n
                }
            }
        };
        if fault == Fault::ResetAfterWrite {
            if let Some(conn) = request.extensions().get::<Conn>() {
                conn.reset();
            }
            // The connection is torn down; this response is never written.
            std::future::pending::<()>().await;
        }
        servers::respond(
            200,
            format!(r#"{{"order":{order},"registration":{registration}}}"#),
        )
    }
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
    servers::serve(FnService(move |request: Req| state.clone().handle(request))).await
}
