//! Canaries: fail loudly when a hyper / h2 / reqwest upgrade changes an error chain or a
//! behaviour the classifier relies on. When one
//! fails, re-read the classifier (`retry_runtime::http::classify`) before "fixing" the test:
//! a downcast that stopped matching makes the classifier fall back to `SentNoResponse` (safe
//! but less useful), a predicate that changed meaning may make it unsafe.

use std::io;
use std::time::Duration;

use retry_runtime::Evidence;
use retry_runtime::http::classify::{ChainFacts, REFUSED_STREAM};
use retry_runtime::http::{HttpError, RequestBuilderExt};
use retry_testkit::{Protocol, Reply, Step, Upstream};
use retry_tests::fault::dead_port;
use retry_tests::fault::dns::{FakeDns, Resolution};
use retry_tests::fault::h2::{H2Fault, H2Server, code};
use retry_tests::support;

fn facts(e: &HttpError) -> ChainFacts {
    e.chain_facts().expect("a reqwest error in the chain")
}

#[tokio::test]
async fn refused_connect_is_connect_with_an_io_refused_under_hyper_util() {
    let e = support::client()
        .get(format!("http://{}/", dead_port()))
        .send_attempt()
        .await
        .unwrap_err();
    let f = facts(&e);
    assert!(f.connect && f.legacy, "{f:?}");
    assert_eq!(f.io, Some(io::ErrorKind::ConnectionRefused), "{f:?}");
    assert_eq!(e.evidence(), Evidence::NotSent);
}

/// The error of a GET to a host whose name resolves as `resolution` says.
async fn resolving(resolution: Resolution) -> HttpError {
    support::dns_client(FakeDns::new([], resolution))
        .get("http://upstream.test/")
        .send_attempt()
        .await
        .unwrap_err()
}

#[tokio::test]
async fn dns_failure_is_dns_and_connect() {
    let e = resolving(Resolution::Fail).await;
    let r = e.reqwest_error().unwrap();
    assert!(r.is_dns() && r.is_connect(), "{r:?}");
}

#[tokio::test]
async fn connect_timeout_is_connect_and_timeout() {
    let e = resolving(Resolution::Hang).await;
    let r = e.reqwest_error().unwrap();
    assert!(r.is_connect() && r.is_timeout(), "{r:?}");
}

#[tokio::test]
async fn refused_stream_is_a_remote_h2_reset_under_hyper_under_legacy() {
    let upstream = Upstream::h2c([Step::RefuseBeforeRead]).await;
    let e = support::h2_client()
        .get(upstream.url("/"))
        .send_attempt()
        .await
        .unwrap_err();
    let f = facts(&e);
    // Also proves hyper/h2 are unified with reqwest's: the h2 downcast succeeded.
    assert!(f.legacy && f.hyper && !f.connect, "{f:?}");
    assert_eq!(f.h2_reason, Some(REFUSED_STREAM), "{f:?}");
    assert!(f.h2_reset && f.h2_remote, "{f:?}");
}

#[tokio::test]
async fn goaway_is_a_remote_h2_go_away() {
    let server = H2Server::start([H2Fault::GoAwayBelow(code::ENHANCE_YOUR_CALM)]).await;
    let e = support::h2_client()
        .get(server.url("/"))
        .send_attempt()
        .await
        .unwrap_err();
    let f = facts(&e);
    assert!(f.h2_go_away && f.h2_remote, "{f:?}");
    assert_eq!(f.h2_reason, Some(code::ENHANCE_YOUR_CALM), "{f:?}");
}

#[tokio::test]
async fn a_close_after_the_request_was_read_is_incomplete_message_with_connect_info() {
    let upstream = Upstream::http1([Step::CloseAfterRead]).await;
    let e = support::client()
        .get(upstream.url("/"))
        .send_attempt()
        .await
        .unwrap_err();
    let f = facts(&e);
    assert!(
        f.hyper_incomplete && !f.hyper_canceled && !f.connect,
        "{f:?}"
    );
    // Post-dispatch errors carry connect_info: needed before a failure after dispatch may ever
    // be upgraded to NotSent.
    assert!(f.legacy && f.legacy_connect_info, "{f:?}");
}

#[tokio::test]
async fn a_total_timeout_before_headers_is_not_connect() {
    // An answer a minute away: the request was read, no response head comes in time.
    let stall = Reply::ok("").delay(Duration::from_secs(60));
    let upstream = Upstream::start_then(Protocol::Http1, [], stall.into()).await;
    let e = support::client()
        .get(upstream.url("/"))
        .timeout(Duration::from_millis(100))
        .send_attempt()
        .await
        .unwrap_err();
    let r = e.reqwest_error().unwrap();
    assert!(r.is_timeout() && !r.is_connect(), "{r:?}");
    assert_eq!(e.evidence(), Evidence::SentNoResponse);
}

#[tokio::test]
async fn reqwest_default_client_still_retries_refused_stream_by_itself() {
    // Why `retry::never()` is required: the default client re-sends REFUSED_STREAM up to twice,
    // invisible to the retry budget (S12b). If this starts failing, reqwest's default changed.
    let upstream = Upstream::h2c(std::iter::repeat_n(Step::RefuseBeforeRead, 3)).await;
    let default_client = reqwest::Client::builder()
        .no_proxy()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let _ = default_client.get(upstream.url("/")).send().await;
    assert_eq!(upstream.requests().len(), 3, "reqwest's hidden retries");

    let upstream = Upstream::h2c([Step::RefuseBeforeRead]).await;
    let _ = support::h2_client().get(upstream.url("/")).send().await;
    assert_eq!(
        upstream.requests().len(),
        1,
        "client_builder() turns them off"
    );
}

#[tokio::test]
async fn followed_redirects_make_is_connect_lie() {
    // Why redirects must be off (S22): the origin executed the POST, then the redirect's hop
    // failed to connect, and the error says `is_connect()` for the original URL.
    let location = format!("http://{}/next", dead_port());
    let upstream = Upstream::http1([Reply::status(307).header("Location", location).into()]).await;
    let following = reqwest::Client::builder().no_proxy().build().unwrap();
    let e = following
        .post(upstream.url("/pay"))
        .body("x")
        .send()
        .await
        .unwrap_err();
    assert!(e.is_connect(), "{e:?}");
    let processed = upstream.requests().iter().filter(|r| r.processed).count();
    assert_eq!(processed, 1);
}

/// `User(DispatchGone)` is what a request gets when hyper's dispatch task ends without
/// answering it. Under a graceful GOAWAY that happens to the request waiting in hyper's HTTP/2
/// dispatcher for a stream (the connection at the server's `MAX_CONCURRENT_STREAMS`: measured
/// against nginx, see `retry_runtime::http::classify`); the deterministic way to get the same
/// error is to shut down the runtime that runs the connection's tasks while a request is in
/// flight, which is done here. The classifier recognises the kind by hyper's `Debug` (hyper
/// has no predicate for it): if this fails, hyper renamed it or changed the chain, and the
/// classifier falls back to an ordinary failure (a counted attempt instead of a free rotation
/// retry). The evidence must stay `SentNoResponse`: here the server did see the request.
#[test]
fn a_request_dropped_by_hyper_dispatch_task_is_dispatch_gone_maybe_sent() {
    let runtime = |name: &str| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(name)
            .enable_all()
            .build()
            .expect("runtime")
    };
    // The server and the connection's tasks on runtimes of their own; the test on a third.
    let server_runtime = runtime("server");
    let connection_runtime = runtime("connection");
    // The second request is read and answered only a minute later.
    let silent = Reply::ok("").delay(Duration::from_secs(60));
    let upstream = server_runtime.block_on(Upstream::h2c([200.into(), silent.into()]));
    let client = support::h2_client();
    // The first request opens the connection: its tasks are spawned on `connection_runtime`.
    let first = connection_runtime.block_on(client.get(upstream.url("/")).send_attempt());
    assert!(first.is_ok(), "{first:?}");
    let test_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let e = test_runtime.block_on(async {
        let second = tokio::spawn(client.get(upstream.url("/")).send_attempt());
        // Once the upstream has the request, it is in the connection's tasks.
        upstream.received(2).await;
        connection_runtime.shutdown_background();
        second.await.expect("task").unwrap_err()
    });
    let f = facts(&e);
    assert!(
        f.hyper && f.hyper_dispatch_gone && !f.hyper_canceled,
        "{f:?} {e:?}"
    );
    assert!(f.connection_rotated(), "{f:?}");
    assert_eq!(e.evidence(), Evidence::SentNoResponse, "the server saw it");
    assert_eq!(upstream.requests().len(), 2);
    drop(upstream);
    server_runtime.shutdown_background();
}
