//! Both ends of a keyed write: `retry-runtime` calling a service behind the Idempotency-Key
//! layer over loopback HTTP/1.1. The client's attempt times out while the first run is still
//! held mid-handler; its retry gets 409 and is retried; the next attempt gets the replay; the
//! handler ran once. A key reused with another body is a permanent `contract` failure, not
//! retried.

mod idempotency_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use idempotency_support::{Db, Handler, SqliteDb};
use retry_idempotency::{IdempotencyLayer, SqliteKeys};
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::{DenyReason, Error, Method, PermanentCategory, Retry, Stop};
use retry_tests::loopback::{self, FnService, Req};
use retry_tests::support::{KEY, UPSTREAM, client, fast_config, http_error, registry};
use tower_layer::Layer;
use tower_service::Service;

type Layered = retry_idempotency::Idempotency<Handler, SqliteKeys>;

/// The service on the wire: the body read, then the layer. On the first 409 it answers, it
/// lets the held first run finish and waits until the key has its response (asking the layer
/// itself), so the client's next attempt meets the replay whatever the timing.
async fn serve(svc: Layered, gate: Arc<tokio::sync::Semaphore>) -> loopback::Server {
    let released = Arc::new(AtomicBool::new(false));
    loopback::serve(FnService(move |req: Req| {
        let (mut svc, gate, released) = (svc.clone(), gate.clone(), released.clone());
        async move {
            let (parts, body) = req.into_parts();
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let again = http::Request::from_parts(parts.clone(), Full::new(body.clone()));
            let req = http::Request::from_parts(parts, Full::new(body));
            let response = svc.call(req).await.unwrap();
            if response.status() == StatusCode::CONFLICT && !released.swap(true, Ordering::SeqCst) {
                gate.add_permits(1);
                loop {
                    let probe = svc.call(clone_request(&again)).await.unwrap();
                    if probe.status() != StatusCode::CONFLICT {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            }
            response
        }
    }))
    .await
    .unwrap()
}

fn clone_request(req: &http::Request<Full<Bytes>>) -> http::Request<Full<Bytes>> {
    let mut out = http::Request::new(req.body().clone());
    *out.method_mut() = req.method().clone();
    *out.uri_mut() = req.uri().clone();
    *out.headers_mut() = req.headers().clone();
    out
}

async fn keyed_post(
    registry: &retry_runtime::Registry,
    url: &str,
    body: &'static str,
) -> Result<String, Error> {
    let client = client();
    Retry::in_registry(registry, UPSTREAM)
        .method(Method::POST)
        .idempotency(KEY)
        .run(|_attempt| {
            let request = client.post(url).body(body);
            async move { Ok(request.send_attempt().await?.read_text().await?) }
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_write_meets_409_then_the_replay_and_runs_once() {
    let db = SqliteDb::new().await;
    let (mut handler, gate) = Handler::held();
    handler.hold_only = Some(1);
    let svc = IdempotencyLayer::new(db.open().await).layer(handler.clone());
    let server = serve(svc, gate).await;
    let registry = registry(
        fast_config()
            .with_max_attempts(4)
            .with_attempt_timeout(Duration::from_millis(300)),
    );
    let answer = keyed_post(
        &registry,
        &format!("{}/orders", server.url()),
        "{\"order\":42}",
    )
    .await;
    assert_eq!(
        answer.as_deref().map_err(ToString::to_string),
        Ok("run #1"),
        "retried past the 409 to the replay"
    );
    assert_eq!(handler.runs(), 1, "the write ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reused_with_another_body_is_a_contract_failure() {
    let db = SqliteDb::new().await;
    let handler = Handler::default();
    let svc = IdempotencyLayer::new(db.open().await).layer(handler.clone());
    let server = serve(svc, Arc::new(tokio::sync::Semaphore::new(0))).await;
    let registry = registry(fast_config());
    let url = format!("{}/orders", server.url());
    assert_eq!(
        keyed_post(&registry, &url, "{\"order\":42}")
            .await
            .ok()
            .as_deref(),
        Some("run #1")
    );
    let error = keyed_post(&registry, &url, "{\"order\":43}")
        .await
        .expect_err("the key names another request");
    let stop = http_error(&error).and_then(|e| e.stop());
    assert_eq!(
        stop,
        Some(Stop::new(
            1,
            DenyReason::PermanentFailure(PermanentCategory::Contract)
        )),
        "{error}"
    );
    assert_eq!(handler.runs(), 1);
}
