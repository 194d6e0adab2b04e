//! The fault layer: its rate over many requests, its switch, its routes, and what the
//! runtime's retry layer makes of its faults on the client side.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use retry_runtime::tower::RetryLayer;
use retry_runtime::{UpstreamConfig, backoff::Backoff};
use retry_testkit::Kit;
use retry_testkit::fault::{Fault, FaultPlan, Faults};
use tower_layer::Layer;
use tower_service::Service;

/// An upstream in process: answers 200 at once and counts the requests it was given.
#[derive(Clone, Default)]
struct Counting(Arc<AtomicUsize>);

impl<B> Service<http::Request<B>> for Counting {
    type Response = http::Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<B>) -> Self::Future {
        self.0.fetch_add(1, Ordering::Relaxed);
        ready(Ok(http::Response::new(Full::new(Bytes::from_static(
            b"ok",
        )))))
    }
}

fn get(path: &str) -> http::Request<()> {
    http::Request::get(path).body(()).unwrap()
}

/// Sends `n` GETs to `path`; the statuses.
async fn statuses(faults: &Faults, path: &str, n: usize) -> Vec<u16> {
    let mut service = faults.client_layer().layer(Counting::default());
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let status = match service.call(get(path)).await {
            Ok(response) => response.status().as_u16(),
            Err(_) => 0,
        };
        out.push(status);
    }
    out
}

#[tokio::test]
async fn at_a_2_percent_rate_2_percent_of_100_000_requests_get_the_fault() {
    let faults = Faults::new(7);
    faults.set(FaultPlan::new().rule("/", Fault::status(503), 0.02));
    let statuses = statuses(&faults, "/orders", 100_000).await;
    let injected = statuses.iter().filter(|&&s| s == 503).count();
    // Binomial(100 000, 0.02): sd = 44 requests; the bound (+/- 300) is nearly 7 sd wide, so
    // with any seed it fails only if the draw is biased.
    assert!(
        (1_700..=2_300).contains(&injected),
        "{injected} of 100 000 injected"
    );
    assert_eq!(faults.injected(), injected as u64);
    assert_eq!(faults.drawn(), 100_000);
}

#[tokio::test]
async fn the_same_seed_injects_into_the_same_requests() {
    let run = |seed| async move {
        let faults = Faults::new(seed);
        faults.set(FaultPlan::new().rule("/", Fault::Reset, 0.1));
        statuses(&faults, "/", 1_000).await
    };
    assert_eq!(run(3).await, run(3).await);
    assert_ne!(run(3).await, run(4).await);
}

#[tokio::test]
async fn off_nothing_is_injected_and_switching_takes_effect_at_the_next_request() {
    let faults = Faults::new(1);
    let inner = Counting::default();
    let mut service = faults.client_layer().layer(inner.clone());
    for _ in 0..100 {
        assert_eq!(service.call(get("/")).await.unwrap().status(), 200);
    }
    assert_eq!(inner.0.load(Ordering::Relaxed), 100);
    faults.set(FaultPlan::new().rule("/", Fault::status_retry_after(429, 3), 1.0));
    let response = service.call(get("/")).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "3");
    assert_eq!(
        inner.0.load(Ordering::Relaxed),
        100,
        "the inner service was not called"
    );
    faults.clear();
    assert_eq!(service.call(get("/")).await.unwrap().status(), 200);
    assert_eq!(faults.drawn(), 1, "off, nothing is drawn");
}

#[tokio::test]
async fn at_most_limits_the_faults_injected() {
    let faults = Faults::new(1);
    faults.set(
        FaultPlan::new()
            .rule("/", Fault::status(500), 1.0)
            .at_most(2),
    );
    assert_eq!(statuses(&faults, "/", 4).await, [500, 500, 200, 200]);
    assert_eq!(faults.injected(), 2);
}

#[tokio::test]
async fn rules_apply_per_route_and_method() {
    let faults = Faults::new(1);
    faults.set(
        FaultPlan::new()
            .rule("/charges", Fault::status(503), 1.0)
            .rule_for(http::Method::POST, "/refunds", Fault::Refuse, 1.0),
    );
    assert_eq!(statuses(&faults, "/charges/1", 3).await, [503; 3]);
    assert_eq!(statuses(&faults, "/orders/1", 3).await, [200; 3]);
    assert_eq!(
        statuses(&faults, "/refunds/1", 3).await,
        [200; 3],
        "GET is not POST"
    );
    let mut service = faults.client_layer().layer(Counting::default());
    let post = http::Request::post("/refunds/1").body(()).unwrap();
    let error = service.call(post).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "injected fault: refused before processing"
    );
}

#[tokio::test(start_paused = true)]
async fn latency_delays_the_answer_by_the_configured_time() {
    // No socket here, so the paused clock measures the delay exactly.
    let faults = Faults::new(1);
    faults.set(FaultPlan::new().rule("/", Fault::Latency(Duration::from_millis(250)), 1.0));
    let mut service = faults.client_layer().layer(Counting::default());
    let started = tokio::time::Instant::now();
    assert_eq!(service.call(get("/")).await.unwrap().status(), 200);
    assert_eq!(started.elapsed(), Duration::from_millis(250));
}

/// The runtime's retry layer over the fault layer over an upstream that always answers 200.
async fn client_side(
    fault: Fault,
    method: http::Method,
) -> (Result<u16, String>, retry_testkit::Trace, usize) {
    let config = UpstreamConfig::new().with_backoff(
        Backoff::new()
            .with_initial(Duration::from_millis(1))
            .with_max_backoff(Duration::from_millis(2)),
    );
    let kit = Kit::new("up", config).unwrap();
    let faults = Faults::new(9);
    // The first request gets the fault, the retries go through.
    faults.set(FaultPlan::new().rule("/", fault, 1.0).at_most(1));
    let upstream = Counting::default();
    let mut client = RetryLayer::with_registry(kit.registry().clone(), "up")
        .layer(faults.client_layer().layer(upstream.clone()));
    let request = http::Request::builder()
        .method(method)
        .uri("http://upstream.test/pay")
        .body(Bytes::new())
        .unwrap();
    let run = kit.trace(client.call(request)).await;
    let trace = run.trace;
    let result = run
        .output
        .map(|r| r.status().as_u16())
        .map_err(|e| e.to_string());
    (result, trace, upstream.0.load(Ordering::Relaxed))
}

#[tokio::test]
async fn client_side_a_refusal_is_retried_even_for_a_write_without_a_key() {
    let (result, trace, reached) = client_side(Fault::Refuse, http::Method::POST).await;
    assert_eq!(result, Ok(200), "{trace}");
    assert_eq!(reached, 1, "{trace}");
    let first = trace.attempts().next().unwrap();
    assert_eq!(first.evidence.as_deref(), Some("not_sent"), "{trace}");
    assert_eq!(
        first.decisions[0].reason.as_deref(),
        Some("not sent"),
        "{trace}"
    );
}

#[tokio::test]
async fn client_side_a_reset_is_ambiguous_for_a_write_without_a_key_and_retried_for_a_read() {
    let (result, trace, reached) = client_side(Fault::Reset, http::Method::POST).await;
    assert!(result.is_err(), "{trace}");
    assert_eq!(reached, 0, "{trace}");
    assert!(
        trace.decisions().any(|d| d.decision == "ambiguous"),
        "{trace}"
    );

    let (result, trace, reached) = client_side(Fault::Reset, http::Method::GET).await;
    assert_eq!(result, Ok(200), "{trace}");
    assert_eq!(reached, 1);
    assert_eq!(trace.attempts().count(), 2, "{trace}");
}

/// A hyper server on loopback with the fault layer in front of `Counting`.
async fn server_side(faults: &Faults) -> (String, Counting) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/pay", listener.local_addr().unwrap());
    let inner = Counting::default();
    let service = faults.layer().layer(inner.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper_util::service::TowerToHyperService::new(service.clone());
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
            );
        }
    });
    (url, inner)
}

#[tokio::test]
async fn server_side_statuses_and_resets_reach_any_client() {
    let faults = Faults::new(5);
    let (url, inner) = server_side(&faults).await;
    let client = retry_runtime::http::client_builder()
        .no_proxy()
        .build()
        .unwrap();
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
    faults.set(FaultPlan::new().rule("/pay", Fault::status(503), 1.0));
    assert_eq!(client.get(&url).send().await.unwrap().status(), 503);
    faults.set(FaultPlan::new().rule("/pay", Fault::Reset, 1.0));
    assert!(client.get(&url).send().await.is_err());
    assert_eq!(
        inner.0.load(Ordering::Relaxed),
        1,
        "only the first request reached the service"
    );
}
