//! Fault injection for staging and outage drills: a tower layer that adds latency, answers with
//! a status, resets, or refuses a share of the requests, per route, at a seeded rate, switched
//! on and off at run time.
//!
//! A [`FaultLayer`] goes on either side of a service:
//!
//! - **client side** ([`Faults::client_layer`]), below the runtime's
//!   [`RetryLayer`](retry_runtime::tower::RetryLayer):
//!   the retries see the faults as they would see the upstream's, so a drill shows what the
//!   budget, the breaker and the evidence rules do with them;
//! - **server side**, in front of your own service ([`Faults::layer`]; an axum app mounts it
//!   with `Router::layer`): every caller sees the faults, whatever its client. The layer keeps
//!   the service's error type (`Infallible` for a `Router`), and a reset or a refusal drops the
//!   connection before any response byte.
//!
//! # Switching at run time
//! A [`Faults`] handle holds the plan; every layer made from it (and every clone of those)
//! reads it. Keep the handle beside the service's [`Registry`](retry_runtime::Registry) (in the
//! application state an admin endpoint or a configuration reload can reach) and call
//! [`Faults::set`] to start a drill and [`Faults::clear`] to end it. The handle lives in this
//! crate rather than in the registry so that the runtime carries no fault-injection code and
//! production builds need not link the kit at all.
//!
//! # Cost when off
//! Off (no plan set, the default), a request costs one relaxed atomic load and goes straight
//! to the inner service; the response body is wrapped in a two-variant enum. Measured with
//! callgrind in front of a hyper server, it adds about 0.5 % to the instructions of a loopback
//! GET (client and server), and no allocation.
//!
//! # Rates and determinism
//! Each request matched by a rule draws one number from a counter-based generator
//! (SplitMix64 of the seed and the request's sequence number): no lock, and the same seed and
//! the same sequence of requests inject the same faults. A rule's rate is the share of the
//! requests it matches that get its fault; the rules matching one request share a single draw,
//! so their rates add up (keep the sum at or under 1).
//!
//! ```
//! use std::time::Duration;
//! use http::Method;
//! use retry_testkit::fault::{Fault, FaultPlan, Faults};
//!
//! let faults = Faults::new(42);
//! let layer = faults.layer(); // put it in the service stack; nothing is injected yet
//! # let _ = layer;
//! faults.set(
//!     FaultPlan::new()
//!         .rule("/charges", Fault::status(503), 0.02)
//!         .rule_for(Method::POST, "/refunds", Fault::Reset, 0.01)
//!         .rule("/", Fault::Latency(Duration::from_millis(200)), 0.05),
//! );
//! assert!(faults.is_on());
//! faults.clear();
//! ```
//!
//! On the client side, under the runtime's retry layer, a drill shows what the retries make of
//! the faults (here over an in-process service standing in for the network):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::convert::Infallible;
//! use retry_runtime::tower::RetryLayer;
//! use retry_runtime::{Registry, UpstreamConfig};
//! use retry_testkit::fault::{Fault, FaultPlan, Faults};
//! use tower_layer::Layer;
//! use tower_service::Service;
//!
//! #[derive(Clone)]
//! struct Network;
//! impl Service<http::Request<String>> for Network {
//!     type Response = http::Response<String>;
//!     type Error = Infallible;
//!     type Future = std::future::Ready<Result<http::Response<String>, Infallible>>;
//!     fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
//!         std::task::Poll::Ready(Ok(()))
//!     }
//!     fn call(&mut self, _: http::Request<String>) -> Self::Future {
//!         std::future::ready(Ok(http::Response::new("ok".to_owned())))
//!     }
//! }
//!
//! let registry = std::sync::Arc::new(
//!     Registry::builder().upstream("catalog", UpstreamConfig::new()).build().unwrap(),
//! );
//! let faults = Faults::new(7);
//! let mut client = RetryLayer::with_registry(registry, "catalog")
//!     .layer(faults.client_layer().layer(Network));
//!
//! // One refusal: the request was provably not processed, so even a write without a key is
//! // sent again, and the caller sees the second attempt's answer.
//! faults.set(FaultPlan::new().rule("/", Fault::Refuse, 1.0).at_most(1));
//! let request = http::Request::post("http://catalog/orders").body(String::new()).unwrap();
//! let response = client.call(request).await.unwrap();
//! assert_eq!(response.status(), 200);
//! assert_eq!(faults.injected(), 1);
//! # }
//! ```

mod body;
mod injected;
mod layer;
mod plan;

pub use body::FaultBody;
pub use injected::InjectedFault;
pub use layer::{ClientSide, FaultFuture, FaultLayer, FaultService, ServerSide, Side};
pub use plan::{Fault, FaultPlan, Rule};

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwapOption;

/// The switch and the plan, shared by every layer made from it. Cloning gives another handle
/// to the same switch.
#[derive(Clone)]
pub struct Faults {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    on: AtomicBool,
    plan: ArcSwapOption<FaultPlan>,
    seed: u64,
    /// Draws made: the sequence number of the next one.
    draws: AtomicU64,
    injected: AtomicU64,
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faults")
            .field("on", &self.is_on())
            .field("plan", &self.shared.plan.load_full())
            .field("seed", &self.shared.seed)
            .finish()
    }
}

impl Faults {
    /// A switch with no plan (off), drawing from `seed`.
    pub fn new(seed: u64) -> Self {
        Faults {
            shared: Arc::new(Shared {
                on: AtomicBool::new(false),
                plan: ArcSwapOption::empty(),
                seed,
                draws: AtomicU64::new(0),
                injected: AtomicU64::new(0),
            }),
        }
    }

    /// A layer reading this switch, for the server side: in front of your own service, where
    /// it keeps the service's error type, so it mounts where a server wants `Infallible`
    /// errors (an axum `Router`, `axum::serve`). A reset or a refusal drops the connection
    /// before any response byte.
    ///
    /// ```
    /// use axum::Router;
    /// use axum::routing::get;
    /// use retry_testkit::fault::Faults;
    ///
    /// let faults = Faults::new(42);
    /// let app: Router = Router::new()
    ///     .route("/items/{id}", get(|| async { "item" }))
    ///     .layer(faults.layer());
    /// # let _ = app;
    /// ```
    pub fn layer(&self) -> FaultLayer<ServerSide> {
        FaultLayer {
            shared: self.shared.clone(),
            side: std::marker::PhantomData,
        }
    }

    /// A layer reading this switch, for the client side: below the runtime's
    /// [`RetryLayer`](retry_runtime::tower::RetryLayer), over the service that sends requests.
    /// Its errors are [`BoxError`](retry_runtime::tower::BoxError); a reset or a refusal is an
    /// [`InjectedFault`] error carrying the I/O error a real one would, so a refusal counts as
    /// not sent and a reset as sent without a response.
    pub fn client_layer(&self) -> FaultLayer<ClientSide> {
        FaultLayer {
            shared: self.shared.clone(),
            side: std::marker::PhantomData,
        }
    }

    /// Starts injecting `plan` (replacing any plan in force), from the next request on, and
    /// restarts the counts ([`drawn`](Self::drawn), [`injected`](Self::injected)).
    pub fn set(&self, plan: FaultPlan) {
        self.shared.draws.store(0, Ordering::Relaxed);
        self.shared.injected.store(0, Ordering::Relaxed);
        self.shared.plan.store(Some(Arc::new(plan)));
        self.shared.on.store(true, Ordering::Release);
    }

    /// Stops injecting: requests go straight through again.
    pub fn clear(&self) {
        self.shared.on.store(false, Ordering::Release);
        self.shared.plan.store(None);
    }

    /// Whether a plan is in force.
    pub fn is_on(&self) -> bool {
        self.shared.on.load(Ordering::Relaxed)
    }

    /// Requests that matched a rule (and drew) since the plan was set.
    pub fn drawn(&self) -> u64 {
        self.shared.draws.load(Ordering::Relaxed)
    }

    /// Faults injected since the plan was set.
    pub fn injected(&self) -> u64 {
        self.shared.injected.load(Ordering::Relaxed)
    }
}

impl Shared {
    /// The fault for a request, if a plan is in force and the draw hits one of its rules.
    /// The caller has read `on`.
    fn pick(&self, method: &http::Method, path: &str) -> Option<Fault> {
        let plan = self.plan.load();
        let plan = plan.as_ref()?;
        let mut matching = plan.matching(method, path).peekable();
        matching.peek()?;
        let n = self.draws.fetch_add(1, Ordering::Relaxed);
        let draw = unit(splitmix64(
            self.seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        ));
        let mut cumulative = 0.0;
        for rule in matching {
            cumulative += rule.rate;
            if draw < cumulative {
                let limit = plan.limit().unwrap_or(u64::MAX);
                let counted =
                    self.injected
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                            (n < limit).then_some(n + 1)
                        });
                return counted.is_ok().then_some(rule.fault);
            }
        }
        None
    }
}

/// SplitMix64's output function: a well-mixed 64-bit value from any input (Steele, Lea and
/// Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014).
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform number in [0, 1) from the top 53 bits.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}
