//! A tiny hyper HTTP/1.1 server on 127.0.0.1, run inside the benchmark process.
//!
//! Not the test kit's scripted upstream: the benchmarks count instructions and allocations on
//! the client's path over kept-alive connections, and the kit records every request (a lock and
//! a copy per request) and closes each HTTP/1.1 connection after one answer.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// The response body of every endpoint.
pub const BODY: &[u8] = b"{\"ok\":true}";

/// Connections accepted by every server of this process.
static CONNECTIONS: AtomicU64 = AtomicU64::new(0);

/// Connections accepted so far by every server of this process (a client that reuses its
/// connections opens one per server).
pub fn connections() -> u64 {
    CONNECTIONS.load(Ordering::Relaxed)
}

/// Serves `handler` on a fresh loopback port; returns the address. Runs until the runtime stops.
pub async fn serve<H, Fut>(handler: H) -> SocketAddr
where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            CONNECTIONS.fetch_add(1, Ordering::Relaxed);
            let _ = stream.set_nodelay(true);
            let handler = handler.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let handler = handler.clone();
                    async move { Ok::<_, Infallible>(handler(req).await) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// Serves [`respond`]`(200)` on a fresh loopback port as a tower service (hyper-util's adapter
/// around `tower::service_fn`), behind the fault layer of `faults` when given. Returns the
/// address; runs until the runtime stops.
pub async fn serve_tower(faults: Option<retry_testkit::fault::Faults>) -> SocketAddr {
    use tower::Layer;
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            CONNECTIONS.fetch_add(1, Ordering::Relaxed);
            let _ = stream.set_nodelay(true);
            let svc = tower::service_fn(|_req: Request<Incoming>| async {
                Ok::<_, Infallible>(respond(200))
            });
            let conn = http1::Builder::new();
            let io = TokioIo::new(stream);
            match &faults {
                Some(faults) => {
                    let svc =
                        hyper_util::service::TowerToHyperService::new(faults.layer().layer(svc));
                    tokio::spawn(async move { conn.serve_connection(io, svc).await });
                }
                None => {
                    let svc = hyper_util::service::TowerToHyperService::new(svc);
                    tokio::spawn(async move { conn.serve_connection(io, svc).await });
                }
            }
        }
    });
    addr
}

/// A fixed endpoint: answers every request with the current `status`, counting hits.
#[derive(Debug, Clone, Default)]
pub struct Endpoint {
    /// The status returned (200 unless set).
    pub status: Arc<AtomicU16>,
    /// Requests received.
    pub hits: Arc<AtomicU64>,
}

impl Endpoint {
    /// An endpoint answering `status`.
    pub fn new(status: u16) -> Self {
        Endpoint {
            status: Arc::new(AtomicU16::new(status)),
            hits: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Serves it on loopback.
    pub async fn serve(&self) -> SocketAddr {
        let me = self.clone();
        serve(move |_req| {
            let me = me.clone();
            async move {
                me.hits.fetch_add(1, Ordering::Relaxed);
                respond(me.status.load(Ordering::Relaxed))
            }
        })
        .await
    }

    /// Serves it on loopback answering 503, 503, 200, 503, 503, 200, ...: an operation that
    /// makes three attempts fails twice and succeeds on the third (the status set is ignored).
    pub async fn serve_flaky(&self) -> SocketAddr {
        let me = self.clone();
        serve(move |_req| {
            let me = me.clone();
            async move {
                let hit = me.hits.fetch_add(1, Ordering::Relaxed) + 1;
                respond(if hit.is_multiple_of(3) { 200 } else { 503 })
            }
        })
        .await
    }

    /// Requests received so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

/// A response with `status` and the fixed body.
pub fn respond(status: u16) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(BODY)))
        .expect("valid response")
}
