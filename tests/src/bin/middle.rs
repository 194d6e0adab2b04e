//! The "middle" service of the cross-process ownership tests (tests/ownership_processes.rs):
//! API (test process) -> **middle (this process)** -> catalog (test process).
//!
//! A hyper 1 server on 127.0.0.1:0 whose handler is wrapped in `retry_runtime::tower::ScopeLayer`
//! (default `InboundLimits`: 5 s, 2 retries), so the caller's propagated deadline and retry
//! allowance apply to the handler. `GET /op/{id}` reads `{catalog}/item/{id}` through
//! `Retry::in_registry(..)` + `send_attempt()` (3 attempts) and answers 200 with the catalog's
//! body, or 503 when the catalog call failed (the layer adds `retry-pushback` when it applies).
//!
//! Usage: `middle catalog=URL [ratio=0.2] [floor=10] [window_secs=10] [backoff_ms=2]
//! [attempt_timeout_ms=1000]` (the catalog upstream's budget, backoff and attempt timeout).
//! Prints the bound port on stdout, then serves until its stdin closes (the test process ends)
//! or it is killed.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

use retry_runtime::backoff::Backoff;
use retry_runtime::budget::BudgetConfig;
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::tower::{InboundLimits, ScopeLayer};
use retry_runtime::{Error, Method, Registry, Retry, UpstreamConfig};
use retry_tests::loopback::{self, FnService, Req};
use tower_layer::Layer;

struct Args {
    catalog: String,
    ratio: f64,
    floor: u32,
    window_secs: u64,
    backoff_ms: u64,
    attempt_timeout_ms: u64,
}

fn args() -> Args {
    let mut a = Args {
        catalog: String::new(),
        ratio: 0.2,
        floor: 10,
        window_secs: 10,
        backoff_ms: 2,
        attempt_timeout_ms: 1000,
    };
    for arg in std::env::args().skip(1) {
        let (k, v) = arg
            .split_once('=')
            .unwrap_or_else(|| panic!("bad argument {arg:?}"));
        match k {
            "catalog" => a.catalog = v.trim_end_matches('/').to_owned(),
            "ratio" => a.ratio = num(&arg, v),
            "floor" => a.floor = num(&arg, v),
            "window_secs" => a.window_secs = num(&arg, v),
            "backoff_ms" => a.backoff_ms = num(&arg, v),
            "attempt_timeout_ms" => a.attempt_timeout_ms = num(&arg, v),
            _ => panic!("unknown argument {arg:?}"),
        }
    }
    assert!(
        !a.catalog.is_empty(),
        "usage: middle catalog=URL [key=value ...]"
    );
    a
}

fn num<T: std::str::FromStr>(arg: &str, value: &str) -> T {
    value
        .parse()
        .unwrap_or_else(|_| panic!("bad value in {arg:?}"))
}

fn main() {
    let args = args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(serve(args));
}

/// Prints `done <op>` when dropped: the end of an operation in this process, as an event the
/// test can wait for.
struct Done(String);

impl Drop for Done {
    fn drop(&mut self) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "done {}", self.0);
        let _ = out.flush();
    }
}

async fn serve(args: Args) {
    let config = UpstreamConfig::new()
        // The catalog is our own service: it reads the propagated deadline.
        .with_propagate(true)
        // The breaker stays out of the way: these tests measure the allowance and the budget.
        .with_breaker(None)
        .with_throttle(None)
        .with_max_attempts(3)
        .with_backoff(
            Backoff::new()
                .with_initial(Duration::from_millis(args.backoff_ms))
                .with_max_backoff(Duration::from_millis(args.backoff_ms)),
        )
        .with_attempt_timeout(Duration::from_millis(args.attempt_timeout_ms))
        .with_deadline(Duration::from_secs(5))
        .with_budget(
            BudgetConfig::new()
                .with_ratio(args.ratio)
                .with_min_per_second(args.floor)
                .with_window(Duration::from_secs(args.window_secs)),
        );
    let registry = Arc::new(
        Registry::builder()
            .upstream("catalog", config)
            .build()
            .expect("valid middle config"),
    );
    let client = retry_runtime::http::client_builder()
        .no_proxy()
        .build()
        .expect("client");
    let catalog = Arc::new(args.catalog);
    let handler = FnService(move |request: Req| {
        let (registry, client, catalog) = (registry.clone(), client.clone(), catalog.clone());
        async move {
            let id = request
                .uri()
                .path()
                .strip_prefix("/op/")
                .unwrap_or("none")
                .to_owned();
            // Tells the test when this operation is over here, however it ends (the server
            // layer drops the handler when its caller's deadline passes).
            let _done = Done(id.clone());
            let url = format!("{catalog}/item/{id}");
            let result: Result<String, Error> = Retry::in_registry(&registry, "catalog")
                .method(Method::GET)
                .run(|_attempt| {
                    let request = client.get(&url);
                    async move { Ok(request.send_attempt().await?.read_text().await?) }
                })
                .await;
            match result {
                Ok(body) => loopback::respond(200, body),
                Err(e) => loopback::respond(503, format!("catalog: {e}")),
            }
        }
    });
    let service = ScopeLayer::new(InboundLimits::default()).layer(handler);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let server = loopback::serve_on(listener, service).expect("serve");
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", server.addr().port()).expect("stdout");
        out.flush().expect("stdout");
    }
    // Serve until stdin closes: the test process (our parent) is gone or done with us.
    tokio::task::spawn_blocking(|| {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            if line.is_err() {
                break;
            }
        }
    })
    .await
    .expect("stdin watcher");
    drop(server);
}
