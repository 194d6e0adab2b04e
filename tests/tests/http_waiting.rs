//! What a retry holds while the throttle makes it wait: nothing of its failed attempt. Over
//! HTTP/1.1 a failed attempt's error carries the unread 503 response, and with it the
//! connection it came on (hyper returns a connection to the pool only once its response body is
//! read). A retry that kept the error across its wait would pin one connection per waiting
//! call; the upstream here counts the connections it sees open at once.
//!
//! The scenario, paced by events, not by the clock: calls start one after another, each once
//! the upstream has answered the previous call's first attempt. Every second call's first
//! attempt is answered 503, everything else 200, so the upstream accepts about two thirds of
//! what it gets: first attempts always go, and a retry goes in proportion to what the upstream
//! accepts from the others: the throttle makes about a third of the retries wait, at the pace
//! of the upstream's answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use retry_runtime::budget::BudgetConfig;
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::{Error, Method, Registry, Retry, UpstreamConfig};
use retry_tests::loopback::{self, FnService, Req, Server};
use tokio::sync::Notify;

const UPSTREAM: &str = "waiting";

/// Calls started, one after another.
const CALLS: usize = 200;

/// The 503's body: larger than what hyper reads along with the head, so that the connection
/// stays busy until the body is read or dropped.
const UNAVAILABLE_PAGE: &[u8] = &[b'x'; 256 * 1024];

/// An upstream answering 503 to the first attempt of every odd-numbered call (`x-op`) and 200
/// to everything else; `firsts` counts the first attempts answered, `answered` is told each.
async fn upstream(firsts: Arc<AtomicUsize>, answered: Arc<Notify>) -> Server {
    let seen: Arc<Vec<AtomicU32>> = Arc::new((0..CALLS).map(|_| AtomicU32::new(0)).collect());
    loopback::serve(FnService(move |request: Req| {
        let (firsts, answered, seen) = (firsts.clone(), answered.clone(), seen.clone());
        async move {
            let op: usize = request
                .headers()
                .get("x-op")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(0);
            let first = seen[op % CALLS].fetch_add(1, Ordering::SeqCst) == 0;
            let status = match (first, op % 2) {
                (true, 1) => 503,
                _ => 200,
            };
            if first {
                firsts.fetch_add(1, Ordering::SeqCst);
                answered.notify_one();
            }
            match status {
                200 => loopback::respond(200, "ok"),
                _ => loopback::respond(503, UNAVAILABLE_PAGE),
            }
        }
    }))
    .await
    .expect("the upstream binds a loopback port")
}

/// What one scenario saw: the most connections open at once at the upstream, and the most
/// calls waiting for the throttle at once, sampled as each call starts.
#[derive(Debug)]
struct Seen {
    most_open: usize,
    most_waiting: u32,
    succeeded: usize,
}

/// Runs the scenario with `max_attempts` (1: no retry at all).
async fn scenario(max_attempts: u32) -> Seen {
    let (firsts, answered) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
    let server = upstream(firsts.clone(), answered.clone()).await;
    // A budget that never runs out: what the budget allows is not what this test is about.
    let config = UpstreamConfig::new()
        .with_max_attempts(max_attempts)
        .with_budget(
            BudgetConfig::new()
                .with_ratio(1.0)
                .with_min_per_second(1000),
        );
    let registry = Registry::builder()
        .upstream(UPSTREAM, config.clone())
        .build()
        .expect("valid config");
    let registry = Arc::new(registry);
    let client = retry_runtime::http::client_builder_for(&config)
        .no_proxy()
        .http1_only()
        .build()
        .expect("client");
    let most_waiting = AtomicU32::new(0);
    let throttle_waiting = || {
        let upstream = registry.upstream(UPSTREAM).expect("configured");
        upstream
            .throttle()
            .expect("the throttle is on by default")
            .waiting()
    };
    let mut calls = tokio::task::JoinSet::new();
    for op in 0..CALLS {
        let (registry, client) = (registry.clone(), client.clone());
        let url = format!("{}/read", server.url());
        calls.spawn(async move {
            let result = Retry::in_registry(&registry, UPSTREAM)
                .method(Method::GET)
                .run(|_| {
                    let request = client.get(&url).header("x-op", op.to_string());
                    async move { Ok::<_, Error>(request.send_attempt().await?.read_text().await?) }
                })
                .await;
            // The caller is done with what it got: an error's response is not kept either.
            result.is_ok()
        });
        // The next call starts once this one's first attempt has been answered.
        loop {
            let notified = answered.notified();
            if firsts.load(Ordering::SeqCst) > op {
                break;
            }
            notified.await;
        }
        most_waiting.fetch_max(throttle_waiting(), Ordering::SeqCst);
    }
    let mut succeeded = 0;
    while let Some(done) = calls.join_next().await {
        succeeded += usize::from(done.expect("call task"));
    }
    Seen {
        most_open: server.most_open_connections(),
        most_waiting: most_waiting.into_inner(),
        succeeded,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_waiting_for_the_throttle_hold_no_connection() {
    let without_retries = scenario(1).await;
    let with_retries = scenario(3).await;
    eprintln!("no retry: {without_retries:?}; retries: {with_retries:?}");
    // The scenario did what it is for: many retries waited at once.
    assert!(
        with_retries.most_waiting >= 20,
        "the throttle made retries wait: {with_retries:?}"
    );
    // Each waiting call holding a connection would need one per waiting call; holding nothing,
    // the upstream sees about what it sees with no retry at all, plus the few retries let go
    // (measured: 4-6 with no retry, 5-7 with retries and 37-54 waiting at once; 45-55 when the
    // wait held the error).
    assert!(
        with_retries.most_open <= without_retries.most_open + 6,
        "connections open at once: {} with waiting retries, {} with no retry; {} calls waited \
         at once",
        with_retries.most_open,
        without_retries.most_open,
        with_retries.most_waiting
    );
    assert_eq!(
        with_retries.succeeded, CALLS,
        "every call ends well once its retry goes: {with_retries:?}"
    );
}
