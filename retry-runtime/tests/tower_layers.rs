//! The tower layers: the client retry layer, the server scope layer, and the two together
//! across a simulated process boundary (only headers cross it).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use retry_runtime::propagation::{ATTEMPT, DEADLINE_MS, Inbound, PUSHBACK, RETRIES_LEFT};
use retry_runtime::tower::{InboundLimits, OneShot, RetryLayer, ScopeLayer, TowerError};
use retry_runtime::{Error, Method, Operation, Registry, Retry, UpstreamConfig};
use tower_layer::Layer;
use tower_service::Service;

type Req = http::Request<Full<Bytes>>;
type Resp = http::Response<Full<Bytes>>;
type BoxFut = Pin<Box<dyn Future<Output = Result<Resp, std::convert::Infallible>> + Send>>;

/// A service from an async closure.
#[derive(Clone)]
struct FnService<F>(F);

impl<F, Fut, B> Service<http::Request<B>> for FnService<F>
where
    F: FnMut(http::Request<B>) -> Fut + Clone,
    Fut: Future<Output = Resp> + Send + 'static,
{
    type Response = Resp;
    type Error = std::convert::Infallible;
    type Future = BoxFut;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, req: http::Request<B>) -> BoxFut {
        let fut = (self.0)(req);
        Box::pin(async move { Ok(fut.await) })
    }
}

/// An attempt that timed out.
fn timed_out() -> Error {
    Error::AttemptTimeout {
        upstream: "catalog".into(),
        attempt: 1,
        timeout: Duration::ZERO,
    }
}

fn status(code: u16) -> Resp {
    let mut r = http::Response::new(Full::new(Bytes::from_static(b"x")));
    *r.status_mut() = http::StatusCode::from_u16(code).unwrap();
    r
}

fn registry(names: &[&str]) -> Arc<Registry> {
    let mut b = Registry::builder().seed(3);
    for n in names {
        b = b.upstream(
            *n,
            UpstreamConfig::new()
                .with_breaker(None)
                .with_throttle(None)
                .with_propagate(true),
        );
    }
    Arc::new(b.build().unwrap())
}

fn request(method: Method) -> Req {
    http::Request::builder()
        .method(method)
        .uri("http://catalog/items/1")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap()
}

/// A fake upstream answering `codes` in turn (the last one forever), recording request headers.
fn upstream(
    codes: Vec<u16>,
    seen: Arc<Mutex<Vec<http::HeaderMap>>>,
) -> impl Service<Req, Response = Resp, Error = std::convert::Infallible, Future = BoxFut> + Clone {
    let n = Arc::new(AtomicU32::new(0));
    FnService(move |req: Req| {
        seen.lock().unwrap().push(req.headers().clone());
        let i = n.fetch_add(1, Ordering::SeqCst) as usize;
        let code = codes[i.min(codes.len() - 1)];
        async move { status(code) }
    })
}

#[tokio::test(start_paused = true)]
async fn a_read_is_retried_and_every_attempt_carries_the_propagation_headers() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut svc = RetryLayer::with_registry(registry(&["catalog"]), "catalog")
        .layer(upstream(vec![503, 503, 200], seen.clone()));
    let response = svc.call(request(Method::GET)).await.unwrap();
    assert_eq!(response.status(), 200);
    let seen = seen.lock().unwrap();
    // The number is sent on retries; its absence says "first".
    let attempts: Vec<_> = seen
        .iter()
        .map(|h| h.get(ATTEMPT).map(|v| v.to_str().unwrap().to_owned()))
        .collect();
    assert_eq!(attempts, [None, Some("2".into()), Some("3".into())]);
    assert!(
        seen.iter()
            .all(|h| Inbound::from_headers(h).attempt.is_some()),
        "the callee reads a number for every attempt"
    );
    let deadlines: Vec<u64> = seen
        .iter()
        .map(|h| h[DEADLINE_MS].to_str().unwrap().parse().unwrap())
        .collect();
    // A propagating hop's attempt timeout is half the 5 s deadline by default: the callee is
    // told that, not the whole deadline, and every attempt is bounded by it.
    assert_eq!(
        deadlines[0], 2500,
        "the attempt timeout is what the callee is told"
    );
    assert!(
        deadlines.iter().all(|d| *d <= 2500),
        "the attempt timeout bounds what the callee is told: {deadlines:?}"
    );
    let retries: Vec<_> = seen
        .iter()
        .map(|h| h[RETRIES_LEFT].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(retries, ["2", "1", "0"]);
}

#[tokio::test(start_paused = true)]
async fn a_denied_error_response_is_returned_as_the_response() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut svc = RetryLayer::with_registry(registry(&["catalog"]), "catalog")
        .layer(upstream(vec![404], seen.clone()));
    assert_eq!(svc.call(request(Method::GET)).await.unwrap().status(), 404);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_write_without_key_is_ambiguous_on_503_and_with_key_is_retried_with_the_same_key() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reg = registry(&["catalog"]);
    let mut svc = RetryLayer::with_registry(reg.clone(), "catalog")
        .layer(upstream(vec![503, 200], seen.clone()));
    let err = svc.call(request(Method::POST)).await.unwrap_err();
    assert!(
        matches!(&err, TowerError::Runtime(Error::Ambiguous(a)) if a.status == Some(503)),
        "{err}"
    );
    assert_eq!(seen.lock().unwrap().len(), 1, "never re-sent");

    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut svc =
        RetryLayer::with_registry(reg, "catalog").layer(upstream(vec![503, 200], seen.clone()));
    let mut req = request(Method::POST);
    req.headers_mut()
        .insert("idempotency-key", "order-1:pay".parse().unwrap());
    assert_eq!(svc.call(req).await.unwrap().status(), 200);
    let keys: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|h| h["idempotency-key"].clone())
        .collect();
    assert_eq!(keys, ["order-1:pay", "order-1:pay"]);
}

#[tokio::test(start_paused = true)]
async fn a_hostile_key_header_is_refused_before_sending() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut svc = RetryLayer::with_registry(registry(&["catalog"]), "catalog")
        .layer(upstream(vec![200], seen.clone()));
    let mut req = request(Method::POST);
    req.headers_mut().insert(
        "idempotency-key",
        http::HeaderValue::from_bytes(&[b'a'; 300]).unwrap(),
    );
    assert!(matches!(
        svc.call(req).await,
        Err(TowerError::Runtime(Error::InvalidIdempotencyKey(_)))
    ));
    assert!(seen.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_one_shot_body_is_sent_once() {
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let inner = FnService(move |_req: http::Request<OneShot<Full<Bytes>>>| {
        c.fetch_add(1, Ordering::SeqCst);
        async { status(503) }
    });
    let mut svc = RetryLayer::with_registry(registry(&["catalog"]), "catalog").layer(inner);
    let req = http::Request::builder()
        .method(Method::GET)
        .uri("/")
        .body(OneShot(Full::new(Bytes::new())))
        .unwrap();
    assert_eq!(svc.call(req).await.unwrap().status(), 503);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn the_server_layer_only_ever_shrinks_the_callers_limits() {
    let observed = Arc::new(Mutex::new(Vec::new()));
    let o = observed.clone();
    let handler = FnService(move |_req: Req| {
        let op = Operation::current().expect("the layer opened a scope");
        o.lock()
            .unwrap()
            .push((op.remaining().unwrap(), op.retries_left()));
        async { status(200) }
    });
    let limits = InboundLimits::new()
        .with_deadline(Duration::from_secs(2))
        .with_max_retries(2)
        .with_enforce_deadline(true);
    let mut svc = ScopeLayer::new(limits).layer(handler);
    for (deadline, retries) in [("300", "1"), ("86400000", "99"), ("-5", "x"), ("", "")] {
        let mut req = request(Method::GET);
        if !deadline.is_empty() {
            req.headers_mut()
                .insert(DEADLINE_MS, deadline.parse().unwrap());
            req.headers_mut()
                .insert(RETRIES_LEFT, retries.parse().unwrap());
        }
        svc.call(req).await.unwrap();
    }
    let observed = observed.lock().unwrap();
    assert_eq!(
        observed[0],
        (Duration::from_millis(300), Some(1)),
        "a shorter deadline is honoured"
    );
    assert_eq!(
        observed[1],
        (Duration::from_secs(2), Some(2)),
        "a longer one is cut to ours"
    );
    assert_eq!(
        observed[2],
        (Duration::from_secs(2), Some(2)),
        "garbage is ignored"
    );
    assert_eq!(
        observed[3],
        (Duration::from_secs(2), Some(2)),
        "absent: our limits"
    );
}

#[tokio::test(start_paused = true)]
async fn the_handler_stops_when_the_caller_has_given_up() {
    let finished = Arc::new(AtomicU32::new(0));
    let f = finished.clone();
    let handler = FnService(move |_req: Req| {
        let f = f.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            f.fetch_add(1, Ordering::SeqCst);
            status(200)
        }
    });
    let mut svc = ScopeLayer::default().layer(handler);
    let mut req = request(Method::GET);
    req.headers_mut()
        .insert(DEADLINE_MS, "300".parse().unwrap());
    let t0 = tokio::time::Instant::now();
    let response = svc.call(req).await.unwrap();
    assert_eq!(response.status(), 504);
    // The handler made no upstream call: no retries were spent, and the answer must not say so.
    assert_eq!(response.headers().get(PUSHBACK), None);
    assert_eq!(tokio::time::Instant::now() - t0, Duration::from_millis(300));
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "the handler's work was dropped"
    );
}

#[tokio::test(start_paused = true)]
async fn limits_of_duration_max_mean_no_limit_not_a_panic() {
    let handler = FnService(|_req: Req| async {
        let op = Operation::current().expect("a scope");
        assert!(op.remaining().unwrap() >= Duration::from_secs(86_400));
        status(200)
    });
    let limits = InboundLimits::new().with_deadline(Duration::MAX);
    let mut svc = ScopeLayer::new(limits).layer(handler);
    for deadline in [None, Some("86400000")] {
        let mut req = request(Method::GET);
        if let Some(d) = deadline {
            req.headers_mut().insert(DEADLINE_MS, d.parse().unwrap());
        }
        assert_eq!(svc.call(req).await.unwrap().status(), 200);
    }
}

/// Counts of one API -> middle -> catalog chain.
#[derive(Default)]
struct Calls {
    catalog: AtomicU32,
    middle: AtomicU32,
}

/// API --(RetryLayer)--> middle (ScopeLayer) --(retrying call)--> a catalog that always times
/// out. Only headers cross the API/middle boundary, as between two processes. With
/// `own_scope`, the middle's handler names its work with a nested `operation(..)`.
fn chain(
    reg: Arc<Registry>,
    own_scope: bool,
) -> (
    impl Service<Req, Response = Resp, Error = TowerError>,
    Arc<Calls>,
) {
    let calls = Arc::new(Calls::default());
    let (r, c) = (reg.clone(), calls.clone());
    let middle = FnService(move |_req: Req| {
        c.middle.fetch_add(1, Ordering::SeqCst);
        let (r, c) = (r.clone(), c.clone());
        async move {
            let catalog = Retry::in_registry(&r, "catalog")
                .method(Method::GET)
                .run(|_| {
                    c.catalog.fetch_add(1, Ordering::SeqCst);
                    async {
                        Err(Error::AttemptTimeout {
                            upstream: "catalog".into(),
                            attempt: 1,
                            timeout: Duration::ZERO,
                        })
                    }
                });
            let result: Result<(), Error> = if own_scope {
                retry_runtime::operation("lookup").run(catalog).await
            } else {
                catalog.await
            };
            status(if result.is_ok() { 200 } else { 503 })
        }
    });
    let middle = ScopeLayer::default().layer(middle);
    (
        RetryLayer::with_registry(reg, "middle").layer(middle),
        calls,
    )
}

#[tokio::test(start_paused = true)]
async fn two_layers_of_three_attempts_make_three_catalog_calls_not_nine() {
    let (mut api, calls) = chain(registry(&["middle", "catalog"]), false);
    let response = api.call(request(Method::GET)).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()[PUSHBACK], "retries-spent");
    assert_eq!(calls.catalog.load(Ordering::SeqCst), 3, "3 calls, not 9");
    assert_eq!(
        calls.middle.load(Ordering::SeqCst),
        1,
        "the API did not retry what the middle retried"
    );
}

/// A registry with a `middle` upstream that propagates (no breaker, no throttle) and `catalog`.
fn middle_and_catalog(catalog: UpstreamConfig) -> Arc<Registry> {
    let middle = UpstreamConfig::new()
        .with_breaker(None)
        .with_throttle(None)
        .with_propagate(true);
    Arc::new(
        Registry::builder()
            .seed(3)
            .upstream("middle", middle)
            .upstream("catalog", catalog)
            .build()
            .unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_retry_refused_by_the_middles_budget_is_answered_overloaded_and_not_retried_above() {
    // The middle's catalog budget allows no retry at all: its call makes one attempt, is denied
    // `budget_exhausted`, and the middle answers 503. Without a pushback the API would retry
    // the whole chain, each retry a fresh catalog call the budget never sees refused.
    use retry_runtime::budget::BudgetConfig;
    let reg = middle_and_catalog(
        UpstreamConfig::new()
            .with_breaker(None)
            .with_throttle(None)
            .with_budget(BudgetConfig::new().with_ratio(0.0).with_min_per_second(0)),
    );
    let (mut api, calls) = chain(reg, false);
    let response = api.call(request(Method::GET)).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()[PUSHBACK], "overloaded");
    assert_eq!(calls.catalog.load(Ordering::SeqCst), 1);
    assert_eq!(
        calls.middle.load(Ordering::SeqCst),
        1,
        "the API did not retry what the middle's budget refused"
    );
}

/// A retry the middle's catalog throttle held until no time was left is answered `overloaded`,
/// and the API does not retry the chain: its retry would reach the catalog as a first attempt
/// that nothing paces, past the hold, which is how calls held through a slowdown came back
/// together as the callers above retried them.
#[tokio::test(start_paused = true)]
async fn a_retry_held_below_until_no_time_was_left_is_answered_overloaded() {
    use retry_runtime::throttle::ThrottleConfig;
    let reg = middle_and_catalog(
        UpstreamConfig::new()
            .with_breaker(None)
            .with_min_attempt_budget(Duration::from_millis(10))
            // A window long enough that nobody probes within the middle's deadline.
            .with_throttle(Some(
                ThrottleConfig::new().with_window(Duration::from_secs(2)),
            )),
    );
    let calls = Arc::new(Calls::default());
    // Another call's attempts timed out a moment ago: the chain's retry, judged on what the
    // other calls met, is refused and waits for an accepted answer that never comes.
    let other: Result<(), Error> = Retry::in_registry(&reg, "catalog")
        .method(Method::GET)
        .run(|_| async { Err(timed_out()) })
        .await;
    assert!(other.is_err());
    let (r, c) = (reg.clone(), calls.clone());
    let middle = FnService(move |_req: Req| {
        c.middle.fetch_add(1, Ordering::SeqCst);
        let (r, c) = (r.clone(), c.clone());
        async move {
            let result: Result<(), Error> = Retry::in_registry(&r, "catalog")
                .method(Method::GET)
                .run(|_| {
                    c.catalog.fetch_add(1, Ordering::SeqCst);
                    async { Err(timed_out()) }
                })
                .await;
            status(if result.is_ok() { 200 } else { 503 })
        }
    });
    let limits = InboundLimits::new().with_deadline(Duration::from_millis(150));
    let middle = ScopeLayer::new(limits).layer(middle);
    let mut api = RetryLayer::with_registry(reg.clone(), "middle").layer(middle);
    let response = api.call(request(Method::GET)).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()[PUSHBACK], "overloaded");
    assert_eq!(
        calls.catalog.load(Ordering::SeqCst),
        1,
        "the retry was held"
    );
    assert_eq!(
        calls.middle.load(Ordering::SeqCst),
        1,
        "the API did not retry what the middle's throttle held"
    );
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_opens_its_own_operation_scope_still_pushes_back() {
    // The failure the middle's catalog call retried is noted on the handler's nested scope, and
    // must reach the request's root scope, which the server layer reads (else the API retries:
    // 3 + 2 + 1 = 6 catalog calls).
    let (mut api, calls) = chain(registry(&["middle", "catalog"]), true);
    let response = api.call(request(Method::GET)).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()[PUSHBACK], "retries-spent");
    assert_eq!(calls.catalog.load(Ordering::SeqCst), 3, "3 calls, not 6");
    assert_eq!(calls.middle.load(Ordering::SeqCst), 1);
}

#[test]
fn the_transit_margin_shortens_a_propagated_deadline_and_only_that() {
    let limits = InboundLimits::new()
        .with_deadline(Duration::from_secs(2))
        .with_transit_margin(Duration::from_millis(20));
    let from = |ms: u64| Inbound::default().with_deadline(Duration::from_millis(ms));
    assert_eq!(limits.apply(&from(300)).0, Duration::from_millis(280));
    assert_eq!(
        limits.apply(&from(10)).0,
        Duration::ZERO,
        "a caller with less than the margin left is already gone"
    );
    assert_eq!(
        limits.apply(&from(60_000)).0,
        Duration::from_secs(2),
        "our own limit is not reduced"
    );
    assert_eq!(
        limits.apply(&Inbound::default()).0,
        Duration::from_secs(2),
        "no propagated deadline: ours, whole"
    );
}
