//! A complete service, start to finish: load and verify the retry registry, build the HTTP
//! client, install draining, serve an axum app behind the library's server layer, call an
//! adapter from a handler, and take keyed writes behind the Idempotency-Key layer (each runs
//! once; a retry with the same key gets the stored response).
//!
//! ```text
//! cargo run -p retry-examples --bin service            # a few requests to itself, then exits
//! cargo run -p retry-examples --bin service -- --serve # keeps serving until Ctrl-C
//! ```
//!
//! The upstream (a catalog) runs in the same process so the example needs nothing installed:
//! it answers each item's first request with 503 and the next with 200, so every request to
//! the service shows one retry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use retry_idempotency::{IdempotencyLayer, SqliteKeys, Sweeper};
use retry_runtime::http::{HttpError, RequestBuilderExt, ResponseExt};
use retry_runtime::tower::{InboundLimits, ScopeLayer};
use retry_runtime::{Classify, Drain, Registry, retry};
use tokio::net::TcpListener;

/// The retry settings, usually a file (`Registry::global().load_file("upstreams.toml")`).
const UPSTREAMS: &str = r#"
[upstreams.catalog]
max_attempts = 3
initial_backoff = "50ms"
attempt_timeout = "500ms"
"#;

/// The adapter's error: every failure says what it knows, so the engine can decide.
#[derive(Debug, Classify)]
enum CatalogError {
    #[classify(from)]
    Retry(retry_runtime::Error),
    #[classify(from)]
    Http(HttpError),
}

impl std::fmt::Display for CatalogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CatalogError::Retry(e) => e.fmt(f),
            CatalogError::Http(e) => e.fmt(f),
        }
    }
}

/// The adapter: one method per upstream operation.
struct Catalog {
    client: reqwest::Client,
    base: String,
}

impl Catalog {
    /// A read: retried when the evidence, the budget and the request's deadline allow.
    #[retry(upstream = "catalog", method = GET)]
    async fn item(&self, id: u64) -> Result<String, CatalogError> {
        let url = format!("{}/items/{id}", self.base);
        let response = self.client.get(url).send_attempt().await?;
        Ok(response.read_text().await?)
    }
}

/// `GET /items/{id}`: the handler runs inside the request's operation scope (opened by the
/// server layer), so the adapter's retries share its deadline and retry allowance.
async fn item(
    State(catalog): State<Arc<Catalog>>,
    Path(id): Path<u64>,
) -> Result<String, (StatusCode, String)> {
    catalog.item(id).await.map_err(|e| match e.evidence() {
        // Nothing reached the catalog: the request can be sent again.
        retry_runtime::Evidence::NotSent => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        _ => (StatusCode::BAD_GATEWAY, e.to_string()),
    })
}

/// `POST /orders/{id}`: a write clients retry after a lost response. The Idempotency-Key layer
/// in front of it runs it once per key; no deduplication is written here.
async fn create_order(Path(id): Path<u64>, State(orders): State<Orders>) -> (StatusCode, String) {
    let n = {
        let mut orders = orders.lock().expect("not poisoned");
        let n = orders.entry(id).or_default();
        *n += 1;
        *n
    };
    (
        StatusCode::CREATED,
        format!("order {id} created (execution {n})"),
    )
}

type Orders = Arc<Mutex<HashMap<u64, u32>>>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let serve = std::env::args().any(|a| a == "--serve");

    // 1. The registry: every mistake in the configuration at once, located.
    let registry = Registry::global();
    registry.load_str(UPSTREAMS, "upstreams.toml", [])?;
    // 2. Every upstream a `#[retry]` function names is configured: a typo fails the start-up,
    //    not the first request that needs it.
    registry.verify()?;
    // 3. A client the classifier can trust (no automatic redirects or hidden retries).
    let client = retry_runtime::http::client_builder().build()?;
    // 4. On SIGTERM or Ctrl-C: no new retries, and calls waiting out a backoff end at once.
    tokio::spawn(Drain::global().clone().on_shutdown_signal());

    let catalog = Arc::new(Catalog {
        client,
        base: flaky_catalog().await?,
    });
    // 5. The server layer opens each request's operation scope: the caller's deadline and retry
    //    allowance (from its headers), never above our own limits.
    // 6. Keyed writes run once: keys in SQLite (`PgKeys` for replicas sharing PostgreSQL),
    //    expired keys swept in the background.
    let dir = std::env::temp_dir().join(format!("retry-service-{}", std::process::id()));
    let keys = SqliteKeys::open(dir.join("idempotency.sqlite")).await?;
    tokio::spawn(Sweeper::new(keys.clone()).run(Drain::global().started()));
    let writes = Router::new()
        .route("/orders/{id}", post(create_order))
        .route_layer(IdempotencyLayer::new(keys))
        .with_state(Orders::default());
    let app = Router::new()
        .route("/items/{id}", get(item))
        .with_state(catalog)
        .merge(writes)
        .layer(ScopeLayer::new(InboundLimits::default()));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async { Drain::global().started().await })
            .await
    });

    let response = reqwest::get(format!("http://{addr}/items/7")).await?;
    println!(
        "GET /items/7 -> {} {}",
        response.status().as_u16(),
        response.text().await?
    );
    // A keyed write sent twice (a client retrying after a lost response): one execution, and
    // the second answer is the first one's, marked as a replay.
    let http = reqwest::Client::new();
    for _ in 0..2 {
        let response = http
            .post(format!("http://{addr}/orders/7"))
            .header("idempotency-key", "\"order-7-create\"")
            .send()
            .await?;
        let replayed = response.headers().contains_key(retry_idempotency::REPLAYED);
        println!(
            "POST /orders/7 -> {} {}{}",
            response.status().as_u16(),
            response.text().await?,
            if replayed { " (replayed)" } else { "" }
        );
    }
    if serve {
        println!("serving on http://{addr} (Ctrl-C to stop)");
        server.await??;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The upstream: answers each item's first request with 503, the next with 200.
async fn flaky_catalog() -> std::io::Result<String> {
    let seen: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
    let app = Router::new().route(
        "/items/{id}",
        get(
            |State(seen): State<Arc<Mutex<HashMap<u64, u32>>>>, Path(id): Path<u64>| async move {
                let n = {
                    let mut seen = seen.lock().expect("not poisoned");
                    let n = seen.entry(id).or_default();
                    *n += 1;
                    *n
                };
                match n {
                    1 => Err(StatusCode::SERVICE_UNAVAILABLE),
                    _ => Ok(format!("item {id} (catalog request {n})")),
                }
            },
        ),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app.with_state(seen)).await });
    Ok(base)
}
