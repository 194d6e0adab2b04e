//! Real hyper 1 HTTP/1.1 servers on 127.0.0.1 for the cross-process ownership tests and the
//! `middle` binary: any `tower::Service` (a `ScopeLayer`-wrapped handler included) served through
//! `hyper_util::service::TowerToHyperService`, with keep-alive and counts of open connections
//! (now, and the most at once).
//!
//! The test kit's scripted upstream does not fit these tests: they serve real services (a
//! handler that reads the propagated headers and answers by its own logic, the server-side
//! `ScopeLayer`) over kept-alive connections, where the kit answers a fixed script and closes
//! each HTTP/1.1 connection after one answer.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// A request as the servers' handlers see it.
pub type Req = http::Request<Incoming>;
/// A boxed error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A `tower::Service` from an async function of the request (never fails).
#[derive(Clone)]
pub struct FnService<F>(pub F);

impl<F, Fut, B> tower_service::Service<Req> for FnService<F>
where
    F: Fn(Req) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = http::Response<B>> + Send + 'static,
{
    type Response = http::Response<B>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<B>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let fut = (self.0)(request);
        Box::pin(async move { Ok(fut.await) })
    }
}

/// A running server; dropping it stops accepting and closes every connection.
pub struct Server {
    addr: SocketAddr,
    open: Arc<AtomicUsize>,
    most_open: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Server {
    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections open now (accepted and not yet closed by either side).
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// The most connections that were open at once since the start.
    pub fn most_open_connections(&self) -> usize {
        self.most_open.load(Ordering::SeqCst)
    }

    /// Connections accepted since the start.
    pub fn accepted_connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct OpenGuard(Arc<AtomicUsize>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serves `service` over HTTP/1.1 (keep-alive) on `listener`.
pub fn serve_on<S, B>(listener: TcpListener, service: S) -> std::io::Result<Server>
where
    S: tower_service::Service<Req, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let addr = listener.local_addr()?;
    let open = Arc::new(AtomicUsize::new(0));
    let most_open = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let (o, m, a) = (open.clone(), most_open.clone(), accepted.clone());
    let task = tokio::spawn(async move {
        // Dropped with the accept task when the server is dropped: aborts every connection.
        let mut connections = JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            a.fetch_add(1, Ordering::SeqCst);
            let now_open = o.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now_open, Ordering::SeqCst);
            let guard = OpenGuard(o.clone());
            let service = TowerToHyperService::new(service.clone());
            connections.spawn(async move {
                let _guard = guard;
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
            while connections.try_join_next().is_some() {}
        }
    });
    Ok(Server {
        addr,
        open,
        most_open,
        accepted,
        task,
    })
}

/// Serves `service` on an ephemeral port of 127.0.0.1.
pub async fn serve<S, B>(service: S) -> std::io::Result<Server>
where
    S: tower_service::Service<Req, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    serve_on(TcpListener::bind("127.0.0.1:0").await?, service)
}

/// A response with `status` and a small body.
pub fn respond(status: u16, body: impl Into<Bytes>) -> http::Response<Full<Bytes>> {
    let mut response = http::Response::new(Full::new(body.into()));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    response
}
