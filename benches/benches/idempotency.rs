//! The Idempotency-Key layer's cost per keyed request, beside the handler alone.
//!
//! An in-process service (no HTTP socket: what is measured is the layer and its store), a
//! handler that answers 201 with a small JSON body at once, every request a new key (the path
//! every first request takes: insert the key, run the handler, store the response). Reports:
//!
//! - sequential latency, p50 and p99 of 2,000 keyed writes, one at a time;
//! - throughput, keyed writes per second with 32 and with 128 requests in flight (4,000 writes
//!   each);
//!
//! for the handler alone, the layer on SQLite (a file in the temp directory, WAL,
//! `synchronous = FULL`) and, when `TEST_DATABASE_URL` is set, the layer on PostgreSQL beside
//! its floor (the same two round trips as `SELECT 1`).
//!
//! `cargo bench -p retry-benches --bench idempotency`

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use retry_idempotency::{IdempotencyLayer, KeyStore, PgKeys, SqliteKeys};
use tower_service::Service;

const SEQUENTIAL: usize = 2_000;
const CONCURRENT: usize = 4_000;
const IN_FLIGHT: [usize; 2] = [32, 128];

#[derive(Clone)]
struct Handler;

impl Service<Request<Full<Bytes>>> for Handler {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;
    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: Request<Full<Bytes>>) -> Self::Future {
        Box::pin(async {
            Ok(Response::builder()
                .status(201)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from_static(
                    br#"{"order":7,"registration":42}"#,
                )))
                .unwrap())
        })
    }
}

fn request(i: usize, run: u64) -> Request<Full<Bytes>> {
    Request::post("/orders/7/register")
        .header("idempotency-key", format!("\"bench-{run}-{i}\""))
        .body(Full::new(Bytes::from_static(br#"{"order":7}"#)))
        .unwrap()
}

async fn one<S, B>(svc: &S, req: Request<Full<Bytes>>)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let mut svc = svc.clone();
    std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
    let response = svc.call(req).await.unwrap();
    assert!(response.status().is_success());
    response.into_body().collect().await.unwrap();
}

async fn measure<S, B>(name: &str, svc: S)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug,
    B: http_body::Body + Send,
    B::Data: Send,
    B::Error: std::fmt::Debug,
{
    let run = fastrand::u64(..);
    // Warm up (connections opened, statements prepared).
    for i in 0..200 {
        one(&svc, request(i, run ^ 1)).await;
    }
    let mut lat = Vec::with_capacity(SEQUENTIAL);
    for i in 0..SEQUENTIAL {
        let t = Instant::now();
        one(&svc, request(i, run)).await;
        lat.push(t.elapsed());
    }
    lat.sort();
    let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    let svc = Arc::new(svc);
    let mut rates = Vec::new();
    for (n, in_flight) in IN_FLIGHT.into_iter().enumerate() {
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let t = Instant::now();
        let tasks: Vec<_> = (0..in_flight)
            .map(|_| {
                let (svc, next) = (Arc::clone(&svc), Arc::clone(&next));
                tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= CONCURRENT {
                            return;
                        }
                        one(&*svc, request(i, run ^ (2 + n as u64))).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let rate = CONCURRENT as f64 / t.elapsed().as_secs_f64();
        rates.push(format!("{in_flight} in flight: {rate:>7.0}/s"));
    }
    println!(
        "{name:<22} p50 {:>8.1} µs  p99 {:>8.1} µs  keyed writes {}",
        micros(p(0.50)),
        micros(p(0.99)),
        rates.join(", ")
    );
}

/// The floor under the layer on PostgreSQL: the two round trips every first request with a key
/// makes (record the key, store the response), as `SELECT 1` twice, one after the other.
async fn floor(pool: &retry_durable::sqlx::PgPool) {
    let mut lat = Vec::with_capacity(SEQUENTIAL);
    for i in 0..SEQUENTIAL + 200 {
        let t = Instant::now();
        for _ in 0..2 {
            retry_durable::sqlx::query("SELECT 1")
                .execute(pool)
                .await
                .unwrap();
        }
        if i >= 200 {
            lat.push(t.elapsed());
        }
    }
    lat.sort();
    let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    println!(
        "{:<22} p50 {:>8.1} µs  p99 {:>8.1} µs",
        "floor: 2 x SELECT 1",
        micros(p(0.50)),
        micros(p(0.99))
    );
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn layered<K: KeyStore>(name: &str, keys: K) {
    let svc = tower_layer::Layer::layer(&IdempotencyLayer::new(keys), Handler);
    measure(name, svc).await;
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        measure("handler alone", Handler).await;
        let dir = std::env::temp_dir().join(format!("idem-bench-{}", std::process::id()));
        let sqlite = SqliteKeys::open(dir.join("keys.sqlite")).await.unwrap();
        layered("layer on SQLite", sqlite).await;
        let _ = std::fs::remove_dir_all(&dir);
        match std::env::var("TEST_DATABASE_URL") {
            Ok(url) => {
                let schema = format!("idem_bench_{}", std::process::id());
                let store = retry_durable::PgStore::connect_with(
                    retry_durable::PgStoreOptions::new(&url).with_schema(&schema),
                )
                .await
                .unwrap();
                let keys = PgKeys::from_pool(store.pool().clone()).await.unwrap();
                layered("layer on PostgreSQL", keys).await;
                floor(store.pool()).await;
                let drop = format!("DROP SCHEMA \"{schema}\" CASCADE");
                let _ = retry_durable::sqlx::query(retry_durable::sqlx::AssertSqlSafe(drop))
                    .execute(store.pool())
                    .await;
            }
            Err(_) => println!("layer on PostgreSQL: skipped (TEST_DATABASE_URL not set)"),
        }
    });
}
