//! End-to-end decisions against the fault-injecting upstream, through the builder API.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use retry_runtime::http::{HttpErrorKind, RequestBuilderExt, ResponseExt};
use retry_runtime::{
    Classify, DenyReason, Error, Evidence, Method, PermanentCategory, Retry, RetryCall, Stop,
    UpstreamConfig,
};
use retry_tests::fault::dns::{FakeDns, Resolution};
use retry_tests::fault::h1::{H1Fault, H1Server, Reply};
use retry_tests::fault::h2::{H2Fault, H2Server, code};
use retry_tests::fault::{SeenRequest, dead_port};
use retry_tests::support::{self, KEY, Kind, UPSTREAM, call, call_fast, fast_config, http_error};

#[tokio::test]
async fn post_without_key_read_then_reset_is_ambiguous_executed_once_never_resent() {
    let server = H1Server::start([H1Fault::ReadThenReset]).await;
    let error = call_fast(Kind::PostWithoutKey, &server.url("/pay"))
        .await
        .expect_err("ambiguous");
    let ambiguous = error.as_ambiguous().expect("an ambiguous outcome");
    assert_eq!(ambiguous.evidence, Evidence::SentNoResponse);
    assert_eq!(ambiguous.attempts, 1);
    assert_eq!(server.truth().processed(), 1, "executed once");
    assert_eq!(server.truth().seen(), 1, "never re-sent");
    assert_eq!(server.truth().connections(), 1);
}

#[tokio::test]
async fn post_with_key_is_retried_with_the_same_key_and_executes_once_logically() {
    let server = H1Server::start([H1Fault::ReadThenReset, H1Fault::ReadThenClose]).await;
    let body = call_fast(Kind::PostWithKey, &server.url("/pay"))
        .await
        .expect("the third attempt succeeds");
    assert_eq!(body, "ok");
    let seen = server.truth().requests();
    assert_eq!(seen.len(), 3);
    assert!(
        seen.iter().all(|r| r.key.as_deref() == Some(KEY)),
        "{seen:?}"
    );
    // The attempt number is sent on retries only: its absence says "first".
    let attempts: Vec<_> = seen.iter().map(|r| r.attempt.clone()).collect();
    assert_eq!(attempts, [None, Some("2".into()), Some("3".into())]);
    assert_eq!(
        server.truth().executions_by_key()[KEY],
        3,
        "physical executions"
    );
    assert_eq!(
        server.truth().logical_executions(),
        1,
        "one logical execution per key"
    );
}

#[tokio::test]
async fn refused_connection_is_not_sent_and_retried_even_for_a_post_without_key() {
    let live = H1Server::start([]).await;
    let dns = FakeDns::new(
        [Resolution::Addr(dead_port())],
        Resolution::Addr(live.addr()),
    );
    let registry = support::registry(fast_config());
    let client = support::dns_client(dns.clone());
    let body = call(
        &registry,
        &client,
        Kind::PostWithoutKey,
        "http://upstream.test/pay",
    )
    .await
    .expect("retried after the refused connection");
    assert_eq!(body, "ok");
    assert_eq!(dns.lookups(), 2);
    assert_eq!(live.truth().processed(), 1);
    assert_eq!(live.truth().requests()[0].attempt.as_deref(), Some("2"));
}

#[tokio::test]
async fn refused_stream_is_not_sent_and_retried_even_for_a_post_without_key() {
    let server = H2Server::start([H2Fault::ResetBeforeHeaders(code::REFUSED_STREAM)]).await;
    let registry = support::registry(fast_config());
    let body = call(
        &registry,
        &support::h2_client(),
        Kind::PostWithoutKey,
        &server.url("/pay"),
    )
    .await
    .expect("retried after REFUSED_STREAM");
    assert_eq!(body, "ok");
    assert_eq!(server.truth().seen(), 2, "one refused stream, one served");
    assert_eq!(server.truth().processed(), 1);
}

#[tokio::test]
async fn goaway_is_retried_for_a_read_and_ambiguous_for_a_post_without_key() {
    // An unkeyed write is never re-sent after a GOAWAY: it is not proof of "not processed".
    let server = H2Server::start([H2Fault::GoAwayBelow(code::NO_ERROR)]).await;
    let registry = support::registry(fast_config());
    let error = call(
        &registry,
        &support::h2_client(),
        Kind::PostWithoutKey,
        &server.url("/pay"),
    )
    .await
    .expect_err("not re-sent");
    assert!(error.as_ambiguous().is_some(), "{error}");
    assert_eq!(server.truth().seen(), 1, "sent once");

    let server = H2Server::start([H2Fault::GoAwayBelow(code::NO_ERROR)]).await;
    let body = call(
        &registry,
        &support::h2_client(),
        Kind::Get,
        &server.url("/pay"),
    )
    .await
    .expect("retried after GOAWAY");
    assert_eq!(body, "ok");
    assert_eq!(server.truth().processed(), 1);
    assert_eq!(
        server.truth().connections(),
        2,
        "a new connection after the GOAWAY"
    );
}

#[tokio::test]
async fn retry_after_one_second_delays_the_next_attempt_by_at_least_one_second() {
    let server = H1Server::start([H1Fault::Respond(Reply::status(429).retry_after("1"))]).await;
    let registry = support::registry(fast_config());
    let started = Instant::now();
    let body = call(
        &registry,
        &support::client(),
        Kind::Get,
        &server.url("/item"),
    )
    .await
    .expect("the second attempt succeeds");
    assert_eq!(body, "ok");
    // A lower bound only: never a flaky upper limit.
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.truth().seen(), 2);
}

#[tokio::test]
async fn a_503_storm_against_a_get_stops_at_max_attempts() {
    let server =
        H1Server::start_with_default([], H1Fault::Respond(Reply::status(503).retry_after("0")))
            .await;
    let error = call_fast(Kind::Get, &server.url("/item"))
        .await
        .expect_err("always 503");
    assert_eq!(Classify::status(&error), Some(503));
    assert_eq!(server.truth().seen(), 3, "max_attempts = 3");
    // The last response is kept for the caller.
    let response = http_error(&error)
        .and_then(|e| e.response())
        .expect("response kept");
    assert_eq!(response.status(), 503);
    // The error says how the call ended, not only how its last attempt did.
    let stop = http_error(&error)
        .and_then(|e| e.stop())
        .expect("stop kept");
    assert_eq!(stop, Stop::new(3, DenyReason::MaxAttempts));
    assert!(
        error
            .to_string()
            .ends_with("(3 attempts; not retried: max_attempts)"),
        "{error}"
    );
}

#[tokio::test]
async fn a_503_on_a_post_without_key_is_ambiguous_and_with_key_is_retried() {
    let storm = || H1Server::start([H1Fault::Respond(Reply::status(503))]);
    let registry = support::registry(fast_config());
    let server = storm().await;
    let error = call(
        &registry,
        &support::client(),
        Kind::PostWithoutKey,
        &server.url("/pay"),
    )
    .await
    .expect_err("ambiguous");
    assert!(error.as_ambiguous().is_some(), "{error}");
    assert_eq!(server.truth().seen(), 1);
    let server = storm().await;
    call(
        &registry,
        &support::client(),
        Kind::PostWithKey,
        &server.url("/pay"),
    )
    .await
    .expect("retried with the key");
    assert_eq!(server.truth().seen(), 2);
}

#[tokio::test]
async fn a_reset_mid_body_is_retried_for_a_get() {
    let server = H1Server::start([H1Fault::HeadersThenReset]).await;
    let body = call_fast(Kind::Get, &server.url("/item"))
        .await
        .expect("retried after the partial response");
    assert_eq!(body, "ok");
    assert_eq!(server.truth().seen(), 2);
}

#[tokio::test]
async fn a_redirect_is_reported_not_followed_and_not_retried() {
    let location = format!("http://{}/elsewhere", dead_port());
    let server = H1Server::start([H1Fault::Respond(
        Reply::status(307).header("Location", &location),
    )])
    .await;
    let error = call_fast(Kind::PostWithKey, &server.url("/pay"))
        .await
        .expect_err("3xx is reported");
    assert_eq!(Classify::status(&error), Some(307));
    assert_eq!(error.evidence(), Evidence::ResponseReceived);
    assert_eq!(server.truth().seen(), 1);
}

#[tokio::test]
async fn a_401_refreshes_once_and_replays() {
    let server = H1Server::start([
        H1Fault::Respond(Reply::status(401)),
        H1Fault::Respond(Reply::status(401)),
    ])
    .await;
    let registry = support::registry(fast_config());
    let refreshes = Arc::new(AtomicU32::new(0));
    let r = refreshes.clone();
    registry.on_unauthorized(UPSTREAM, move || {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    });
    let error = call(
        &registry,
        &support::client(),
        Kind::Get,
        &server.url("/item"),
    )
    .await
    .expect_err("the second 401 is final");
    assert_eq!(Classify::status(&error), Some(401));
    assert_eq!(refreshes.load(Ordering::SeqCst), 1, "refreshed once");
    assert_eq!(server.truth().seen(), 2, "replayed once");
}

#[tokio::test]
async fn a_write_sent_through_a_read_declaration_is_refused_before_sending() {
    let server = H1Server::start([]).await;
    let registry = support::registry(fast_config());
    let client = support::client();
    let url = server.url("/pay");
    let result: Result<String, Error> = send_text(
        Retry::in_registry(&registry, UPSTREAM).method(Method::GET),
        || client.post(&url).body("charge"),
    )
    .await;
    let error = result.expect_err("refused");
    assert_eq!(error.evidence(), Evidence::NotSent);
    assert_eq!(error.permanent(), Some(PermanentCategory::InvalidRequest));
    assert_eq!(
        http_error(&error).map(|e| e.kind()),
        Some(HttpErrorKind::Refused)
    );
    assert!(error.to_string().contains("declared GET"), "{error}");
    assert_eq!(server.truth().connections(), 0, "nothing sent");
}

/// A request safer than its declaration (a HEAD under GET, a GET under POST) is sent: the
/// loop's decisions for the declared method are the more cautious ones. A different write is
/// not: PUT and POST do not retry alike.
#[tokio::test]
async fn a_request_at_least_as_safe_as_declared_is_sent_and_another_write_is_not() {
    let server = H1Server::start([]).await;
    let registry = support::registry(fast_config());
    let client = support::client();
    let url = server.url("/orders/1");
    let head: Result<u16, Error> = Retry::in_registry(&registry, UPSTREAM)
        .method(Method::GET)
        .run(|_| {
            let request = client.head(&url);
            async move { Ok(request.send_attempt().await?.status().as_u16()) }
        })
        .await;
    assert_eq!(head.expect("a HEAD under GET is sent"), 200);
    let get: Result<String, Error> = send_text(
        Retry::in_registry(&registry, UPSTREAM)
            .method(Method::POST)
            .idempotency("order-1:check"),
        || client.get(&url),
    )
    .await;
    assert_eq!(get.expect("a GET under POST is sent"), "ok");
    assert_eq!(server.truth().seen(), 2);
    let put: Result<String, Error> = send_text(
        Retry::in_registry(&registry, UPSTREAM)
            .method(Method::POST)
            .idempotency("order-1:put"),
        || client.put(&url).body("x"),
    )
    .await;
    let error = put.expect_err("a PUT under POST is refused");
    assert_eq!(error.permanent(), Some(PermanentCategory::InvalidRequest));
    assert_eq!(server.truth().seen(), 2, "the PUT was not sent");
}

#[tokio::test]
async fn a_one_shot_body_is_sent_once_and_never_retried() {
    let server = H1Server::start([H1Fault::ReadThenReset]).await;
    let registry = support::registry(fast_config());
    let client = support::client();
    let url = server.url("/upload");
    let attempts = AtomicU32::new(0);
    let result: Result<String, Error> = Retry::in_registry(&registry, UPSTREAM)
        .method(Method::PUT)
        .idempotency("upload-7")
        .run(|_| {
            attempts.fetch_add(1, Ordering::SeqCst);
            // A streaming body: `try_clone()` is None.
            let request = client
                .put(&url)
                .body(reqwest::Body::wrap(String::from("streamed bytes")));
            async move { Ok(request.send_attempt().await?.read_text().await?) }
        })
        .await;
    let error = result.expect_err("not retried");
    assert_eq!(error.evidence(), Evidence::SentNoResponse);
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    assert_eq!(
        server.truth().processed(),
        1,
        "the first attempt still works"
    );

    // And a one-shot body that succeeds is simply sent.
    let server = H1Server::start([]).await;
    let url = server.url("/upload");
    let ok: Result<String, Error> = send_text(
        Retry::in_registry(&registry, UPSTREAM).method(Method::PUT),
        || {
            client
                .put(&url)
                .body(reqwest::Body::wrap(String::from("x")))
        },
    )
    .await;
    assert_eq!(ok.expect("sent"), "ok");
}

/// Runs `call`, each attempt sending `request()` through the send path and reading the body.
async fn send_text(
    call: RetryCall<'_>,
    request: impl Fn() -> reqwest::RequestBuilder,
) -> Result<String, Error> {
    call.run(|_| {
        let request = request();
        async move { Ok(request.send_attempt().await?.read_text().await?) }
    })
    .await
}

/// What the server saw of a keyed POST answered 503 once, then retried, to an upstream
/// configured with `config`.
async fn keyed_post_retried_once(config: UpstreamConfig) -> Vec<SeenRequest> {
    let server = H1Server::start([H1Fault::Respond(Reply::status(503))]).await;
    let registry = support::registry(config);
    call(
        &registry,
        &support::client(),
        Kind::PostWithKey,
        &server.url("/pay"),
    )
    .await
    .expect("retried");
    let seen = server.truth().requests();
    assert_eq!(seen.len(), 2);
    seen
}

/// A third-party upstream (`propagate = false`) learns nothing of our deadlines and retries:
/// only the idempotency key, which is its contract, is sent.
#[tokio::test]
async fn an_upstream_that_does_not_propagate_gets_the_key_and_no_retry_headers() {
    let seen = keyed_post_retried_once(fast_config().with_propagate(false)).await;
    for r in &seen {
        assert_eq!(r.key.as_deref(), Some(KEY));
        assert_eq!((&r.attempt, &r.deadline_ms), (&None, &None), "{r:?}");
    }
}

#[tokio::test]
async fn the_send_path_adds_key_attempt_and_deadline_headers_with_the_configured_name() {
    let config = fast_config().with_idempotency_header("X-Request-Key");
    let seen = keyed_post_retried_once(config).await;
    for (i, r) in seen.iter().enumerate() {
        assert_eq!(r.key.as_deref(), Some(KEY));
        assert_eq!(r.attempt.as_deref(), [None, Some("2")][i]);
        let ms: u64 = r.deadline_ms.as_deref().unwrap().parse().unwrap();
        // The caller waits for an attempt at most its timeout (1 s), not the deadline (5 s):
        // the callee is told the shorter.
        assert!(
            ms > 0 && ms <= 1_000,
            "relative wait for this attempt: {ms}"
        );
    }
}

#[tokio::test]
async fn a_hostile_key_is_refused_before_anything_is_sent() {
    let server = H1Server::start([]).await;
    let registry = support::registry(fast_config());
    let client = support::client();
    let url = server.url("/pay");
    for key in [
        String::new(),
        "k".repeat(256),
        "abc\r\nX-Evil: 1".to_owned(),
    ] {
        let result: Result<String, Error> = send_text(
            Retry::in_registry(&registry, UPSTREAM)
                .method(Method::POST)
                .idempotency(key.clone()),
            || client.post(&url).body("x"),
        )
        .await;
        let error = result.expect_err("refused");
        assert!(
            matches!(error, Error::InvalidIdempotencyKey(_)),
            "{key:?}: {error:?}"
        );
    }
    assert_eq!(server.truth().connections(), 0);
}

#[tokio::test]
async fn a_stalled_server_times_out_within_the_attempt_and_a_post_is_ambiguous() {
    let server = H1Server::start_with_default([], H1Fault::Stall).await;
    let config = fast_config().with_attempt_timeout(Duration::from_millis(200));
    let registry = support::registry(config);
    let error = call(
        &registry,
        &support::client(),
        Kind::PostWithoutKey,
        &server.url("/pay"),
    )
    .await
    .expect_err("stalled");
    let ambiguous = error.as_ambiguous().expect("ambiguous");
    assert_eq!(ambiguous.evidence, Evidence::SentNoResponse);
    assert_eq!(server.truth().seen(), 1);
}

#[tokio::test]
async fn outside_a_retry_loop_the_send_path_only_classifies() {
    let server = H1Server::start([H1Fault::ReadThenClose]).await;
    let error = support::client()
        .post(server.url("/pay"))
        .body("x")
        .send_attempt()
        .await
        .expect_err("closed");
    assert_eq!(error.kind(), HttpErrorKind::Transport);
    assert_eq!(error.evidence(), Evidence::SentNoResponse);
    assert!(server.truth().requests()[0].attempt.is_none());
}

#[tokio::test]
async fn a_pushback_header_stops_retries_and_a_malformed_one_is_ignored() {
    let registry = support::registry(fast_config());
    let server = H1Server::start([H1Fault::Respond(
        Reply::status(503).header("Retry-Pushback", "overloaded"),
    )])
    .await;
    let error = call(
        &registry,
        &support::client(),
        Kind::Get,
        &server.url("/item"),
    )
    .await
    .expect_err("pushback");
    assert_eq!(error.pushback(), Some(retry_runtime::Pushback::Overloaded));
    assert_eq!(server.truth().seen(), 1, "not retried");

    let server = H1Server::start([H1Fault::Respond(
        Reply::status(503).header("Retry-Pushback", "go away please"),
    )])
    .await;
    call(
        &registry,
        &support::client(),
        Kind::Get,
        &server.url("/item"),
    )
    .await
    .expect("a malformed pushback is ignored: retried");
    assert_eq!(server.truth().seen(), 2);
}
