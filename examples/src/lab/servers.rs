//! Real HTTP servers on loopback: hyper 1 over HTTP/1.1 with keep-alive, one task per connection.
//!
//! Every server is a `tower::Service` (so design B's middle can wrap its handler in the
//! runtime's `ScopeLayer` exactly as an axum or hyper service would), served on an ephemeral
//! port of 127.0.0.1. A handler can reset its own connection (see [`Conn::reset`]): the catalog
//! uses it to lose the response of a write it has executed.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;

/// A request as the lab's handlers see it.
pub type Req = http::Request<Incoming>;
/// A response as the lab's handlers build it.
pub type Resp = http::Response<Full<Bytes>>;
/// A boxed response future.
pub type RespFuture = Pin<Box<dyn Future<Output = Result<Resp, Infallible>> + Send>>;

/// The connection a request arrived on (a request extension).
#[derive(Clone, Debug, Default)]
pub struct Conn {
    abort: Arc<Notify>,
}

impl Conn {
    /// Drops the connection with a TCP reset (linger 0) instead of answering: the client sees
    /// a connection error after its request was received and maybe executed.
    pub fn reset(&self) {
        self.abort.notify_one();
    }
}

/// A `tower::Service` from an async function of the request.
#[derive(Clone)]
pub struct FnService<F>(pub F);

impl<F, Fut> tower_service::Service<Req> for FnService<F>
where
    F: Fn(Req) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Resp> + Send + 'static,
{
    type Response = Resp;
    type Error = Infallible;
    type Future = RespFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> RespFuture {
        let fut = (self.0)(request);
        Box::pin(async move { Ok(fut.await) })
    }
}

/// A running server; dropping it stops accepting and closes every connection.
pub struct Server {
    addr: SocketAddr,
    tasks: JoinSet<()>,
}

impl Server {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

/// Serves `service` on an ephemeral loopback port.
pub async fn serve<S, F>(service: S) -> std::io::Result<Server>
where
    S: tower_service::Service<Req, Response = Resp, Error = Infallible, Future = F>
        + Clone
        + Send
        + 'static,
    F: Future<Output = Result<Resp, Infallible>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of file descriptors (or another per-connection error): the pending
                    // connection stays queued; try again shortly instead of spinning.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let conn = Conn::default();
            let abort = conn.abort.clone();
            let service = service.clone();
            connections.spawn(async move {
                let hyper_service = hyper::service::service_fn(move |mut request: Req| {
                    request.extensions_mut().insert(conn.clone());
                    let mut service = service.clone();
                    tower_service::Service::call(&mut service, request)
                });
                let mut connection = hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), hyper_service);
                tokio::select! {
                    _ = &mut connection => {}
                    _ = abort.notified() => {
                        // Take the socket back and close it with linger 0: a TCP reset.
                        let stream = connection.into_parts().io.into_inner();
                        let _ = socket2::SockRef::from(&stream)
                            .set_linger(Some(std::time::Duration::ZERO));
                    }
                }
            });
            // Reap finished connections so the set does not grow for the whole run.
            while connections.try_join_next().is_some() {}
        }
    });
    Ok(Server { addr, tasks })
}

/// A response with `status` and a body.
pub fn respond(status: u16, body: impl Into<Bytes>) -> Resp {
    let mut response = http::Response::new(Full::new(body.into()));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    response
}

/// The order id in `/orders/{id}` or `/orders/{id}/register`.
pub fn order_of(path: &str) -> Option<u64> {
    path.strip_prefix("/orders/")?
        .split('/')
        .next()?
        .parse()
        .ok()
}
