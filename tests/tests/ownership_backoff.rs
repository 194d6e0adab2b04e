//! During a backoff nothing of the failed attempt is held: the upstream's bulkhead
//! has its permit back and no HTTP connection is checked out — measured on a real socket.
//!
//! The measurement. The server answers the first attempt with `503`, `Retry-After: 1` and a
//! 32 MiB body, far more than the loopback socket buffers and hyper's read buffer can absorb.
//! A client that still held that response (the runtime keeping the error, and so the
//! `reqwest::Response` and its pooled connection, across the backoff) would leave the server
//! stuck writing the body: the server's response body would still be alive. A client that let
//! go (dropped the response) frees the connection — hyper closes it, as the body was not read to
//! the end — and the server's write fails at once, dropping the body. So "zero response bodies
//! alive on the server and zero requests in progress" at a point inside the backoff means the
//! client holds no response and no connection is checked out for this call. A control test
//! shows the measurement does see a held response.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::{Error, Method, Registry, Retry, UpstreamConfig};
use retry_tests::loopback::{self, FnService, Req, Server};

const BIG: usize = 32 << 20;
const CHUNK: usize = 64 << 10;

#[derive(Debug, Default)]
struct Truth {
    /// Request paths in arrival order.
    paths: Mutex<Vec<String>>,
    /// Response bodies created and not yet dropped by hyper.
    bodies_alive: AtomicUsize,
    /// Bodies dropped before their last byte was handed to hyper (the client went away).
    bodies_abandoned: AtomicUsize,
    /// Woken on every change above.
    changed: tokio::sync::Notify,
}

impl Truth {
    /// Waits for `condition`, re-checked on every change the server records (an event, not a
    /// sleep). The bound only turns a hang into a clear failure.
    async fn wait(&self, what: &str, condition: impl Fn(&Truth) -> bool) {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                let mut changed = std::pin::pin!(changed);
                changed.as_mut().enable();
                if condition(self) {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .unwrap_or_else(|_| panic!("never happened: {what}"));
    }

    fn paths(&self) -> Vec<String> {
        self.paths.lock().unwrap().clone()
    }
    fn alive(&self) -> usize {
        self.bodies_alive.load(Ordering::SeqCst)
    }
}

/// A body of `remaining` zero bytes that reports its own drop.
struct TrackedBody {
    remaining: usize,
    chunk: Bytes,
    truth: Arc<Truth>,
}

impl TrackedBody {
    fn new(len: usize, truth: Arc<Truth>) -> Self {
        truth.bodies_alive.fetch_add(1, Ordering::SeqCst);
        TrackedBody {
            remaining: len,
            chunk: Bytes::from(vec![b'x'; CHUNK]),
            truth,
        }
    }
}

impl Drop for TrackedBody {
    fn drop(&mut self) {
        if self.remaining > 0 {
            self.truth.bodies_abandoned.fetch_add(1, Ordering::SeqCst);
        }
        self.truth.bodies_alive.fetch_sub(1, Ordering::SeqCst);
        self.truth.changed.notify_waiters();
    }
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let n = self.remaining.min(CHUNK);
        self.remaining -= n;
        Poll::Ready(Some(Ok(Frame::data(self.chunk.slice(..n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining as u64)
    }
}

/// `/busy`: 503, `Retry-After: 1`, 32 MiB. `/ok`: 200, 2 bytes.
async fn server() -> (Arc<Truth>, Server) {
    let truth = Arc::new(Truth::default());
    let t = truth.clone();
    let server = loopback::serve(FnService(move |request: Req| {
        let truth = t.clone();
        let path = request.uri().path().to_owned();
        truth.paths.lock().unwrap().push(path.clone());
        truth.changed.notify_waiters();
        async move {
            let mut response = http::Response::builder();
            let body = if path == "/busy" {
                response = response.status(503).header("retry-after", "1");
                TrackedBody::new(BIG, truth)
            } else {
                TrackedBody::new(2, truth)
            };
            response.body(body).expect("response")
        }
    }))
    .await
    .expect("server");
    (truth, server)
}

fn client() -> reqwest::Client {
    retry_runtime::http::client_builder()
        .no_proxy()
        .build()
        .expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_a_backoff_the_permit_is_back_and_no_connection_is_checked_out() {
    let (truth, server) = server().await;
    let registry = Arc::new(
        Registry::builder()
            .upstream(
                "up",
                UpstreamConfig::new()
                    .with_breaker(None)
                    .with_throttle(None)
                    .with_bulkhead(Some(1))
                    .with_max_attempts(2)
                    .with_attempt_timeout(Duration::from_secs(2))
                    .with_deadline(Duration::from_secs(5)),
            )
            .build()
            .expect("config"),
    );
    let upstream = registry.upstream("up").expect("upstream");
    let client = client();

    let (r, c, url) = (
        registry.clone(),
        client.clone(),
        format!("{}/busy", server.url()),
    );
    let call = tokio::spawn(async move {
        Retry::in_registry(&r, "up")
            .method(Method::GET)
            .run(|_| {
                let request = c.get(&url);
                async move { Ok::<_, Error>(request.send_attempt().await?.read_text().await?) }
            })
            .await
    });

    // The first attempt reached the server; its 503 says "Retry-After: 1", so the call now
    // waits one second. A client that lets go of the failed attempt drops the 503's body at
    // once (the server sees it abandoned); one that held it across the backoff would drop it
    // only when retrying.
    truth
        .wait("the 503's body is dropped by the client", |t| {
            t.bodies_abandoned.load(Ordering::SeqCst) == 1
        })
        .await;
    assert_eq!(
        truth.paths(),
        ["/busy"],
        "the second attempt has not started"
    );
    assert_eq!(upstream.in_flight(), 0, "the bulkhead has its permit back");
    assert_eq!(truth.alive(), 0, "no response body is still being streamed");
    eprintln!(
        "inside the backoff: connections open {}, accepted {}",
        server.open_connections(),
        server.accepted_connections()
    );

    // The permit is usable, not just counted: a second call through the same bulkhead of 1
    // is admitted and served before the first call's second attempt. (Had the first call held
    // its response until the retry, the drop above would have come only then, and this call
    // would arrive after the retry: the order below tells the two apart without a clock.)
    let ok = Retry::in_registry(&registry, "up")
        .method(Method::GET)
        .run(|_| {
            let request = client.get(format!("{}/ok", server.url()));
            async move { Ok::<_, Error>(request.send_attempt().await?.read_text().await?) }
        })
        .await
        .expect("the second call is admitted during the first call's backoff");
    assert_eq!(ok.len(), 2);
    assert_eq!(truth.paths(), ["/busy", "/ok"]);

    // The first call then retries once and fails on the second 503.
    let err = call.await.expect("no panic").unwrap_err();
    assert!(
        matches!(&err, Error::Http(e) if e.status() == Some(http::StatusCode::SERVICE_UNAVAILABLE)),
        "{err}"
    );
    assert_eq!(truth.paths(), ["/busy", "/ok", "/busy"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_the_measurement_sees_a_response_held_by_the_client() {
    let (truth, server) = server().await;
    let response = client()
        .get(format!("{}/busy", server.url()))
        .send()
        .await
        .expect("headers arrive");
    assert_eq!(response.status(), 503);
    // Held, unread: the server cannot finish writing 32 MiB, so its body stays alive (made
    // before the headers went out, dropped only once the client lets go).
    assert_eq!(
        truth.alive(),
        1,
        "the held response is visible on the server"
    );
    assert_eq!(truth.bodies_abandoned.load(Ordering::SeqCst), 0);
    drop(response);
    truth
        .wait("the server sees the response dropped", |t| t.alive() == 0)
        .await;
    assert_eq!(truth.bodies_abandoned.load(Ordering::SeqCst), 1);
}
