//! End-to-end decisions against the scripted upstream of `retry-testkit` (HTTP/1.1 and h2c),
//! through the builder API: what was sent, what the runtime decided, what the caller got.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_runtime::http::{HttpErrorKind, RequestBuilderExt, ResponseExt};
use retry_runtime::{
    Classify, DenyReason, Error, Evidence, Method, PermanentCategory, Retry, RetryCall, Stop,
    UpstreamConfig,
};
use retry_testkit::{Protocol, Reply, Step, Upstream};
use retry_tests::fault::dead_port;
use retry_tests::fault::dns::{FakeDns, Resolution};
use retry_tests::support::{self, KEY, Kind, UPSTREAM, call, fast_config, http_error, kit};

/// The scripted upstream's body once its script is spent.
const OK: &str = r#"{"status":200}"#;

#[tokio::test]
async fn post_without_key_read_then_reset_is_ambiguous_executed_once_never_resent() {
    let up = Upstream::http1([Step::ResetAfterRead]).await;
    let run = support::run(&kit(fast_config()), &up, Kind::PostWithoutKey, "/pay").await;
    run.assert_requests(1).assert_attempts(1).assert_ambiguous();
    let ambiguous = run.output.as_ref().unwrap_err().as_ambiguous().cloned();
    assert_eq!(
        ambiguous.map(|a| a.evidence),
        Some(Evidence::SentNoResponse),
        "{run}"
    );
    assert!(run.requests[0].processed, "executed once");
    assert_eq!(up.connections(), 1);
}

#[tokio::test]
async fn post_with_key_is_retried_with_the_same_key_and_executes_once_logically() {
    let up = Upstream::http1([Step::ResetAfterRead, Step::CloseAfterRead]).await;
    let run = support::run(&kit(fast_config()), &up, Kind::PostWithKey, "/pay").await;
    assert!(run.output.is_ok(), "the third attempt succeeds\n{run}");
    run.assert_requests(3);
    // Three physical executions, one logical one for a server that deduplicates by key. The
    // key goes out as the draft's structured-field string.
    assert_eq!(run.assert_one_key(), format!("\"{KEY}\""));
    assert!(run.requests.iter().all(|r| r.processed));
    // The attempt number is sent on retries only: its absence says "first".
    let attempts: Vec<_> = run
        .requests
        .iter()
        .map(|r| r.header("retry-attempt"))
        .collect();
    assert_eq!(attempts, [None, Some("2"), Some("3")]);
}

#[tokio::test]
async fn refused_stream_is_not_sent_and_retried_even_for_a_post_without_key() {
    let up = Upstream::h2c([Step::RefuseBeforeRead]).await;
    let run = support::run(&kit(fast_config()), &up, Kind::PostWithoutKey, "/pay").await;
    assert!(run.output.is_ok(), "retried after REFUSED_STREAM\n{run}");
    run.assert_requests(2).assert_no_unkeyed_write_twice();
    let first = run.trace.attempts().next().unwrap();
    assert_eq!(first.evidence.as_deref(), Some("not_sent"), "{run}");
    let processed: Vec<_> = run.requests.iter().map(|r| r.processed).collect();
    assert_eq!(processed, [false, true], "one refused stream, one served");
}

#[tokio::test]
async fn goaway_is_retried_for_a_read_and_ambiguous_for_a_post_without_key() {
    // An unkeyed write is never re-sent after a GOAWAY: it is not proof of "not processed".
    let kit = kit(fast_config());
    let up = Upstream::h2c([Step::CloseBeforeRead]).await;
    let run = support::run(&kit, &up, Kind::PostWithoutKey, "/pay").await;
    run.assert_attempts(1).assert_ambiguous();

    let up = Upstream::h2c([Step::CloseBeforeRead]).await;
    let run = support::run(&kit, &up, Kind::Get, "/pay").await;
    assert!(run.output.is_ok(), "retried after GOAWAY\n{run}");
    run.assert_attempts(2).assert_requests(1);
    assert_eq!(up.connections(), 2, "a new connection after the GOAWAY");
}

#[tokio::test]
async fn retry_after_one_second_is_the_delay_chosen_before_the_next_attempt() {
    let up = Upstream::http1([Reply::status(429).retry_after("1").into()]).await;
    let run = support::run(&kit(fast_config()), &up, Kind::Get, "/item").await;
    assert!(run.output.is_ok(), "the second attempt succeeds\n{run}");
    run.assert_requests(2);
    assert_eq!(run.trace.delays(), [Duration::from_secs(1)], "{run}");
    // What the upstream saw agrees: a lower bound only, never a flaky upper limit.
    assert!(run.requests[1].at - run.requests[0].at >= Duration::from_secs(1));
}

#[tokio::test]
async fn a_503_storm_against_a_get_stops_at_max_attempts() {
    let storm = Step::from(Reply::status(503).retry_after("0"));
    let up = Upstream::start_then(Protocol::Http1, [], storm).await;
    let run = support::run(&kit(fast_config()), &up, Kind::Get, "/item").await;
    run.assert_requests(3)
        .assert_denied(DenyReason::MaxAttempts);
    let error = run.output.as_ref().expect_err("always 503");
    assert_eq!(Classify::status(error), Some(503));
    // The last response is kept for the caller.
    let response = http_error(error).and_then(|e| e.response());
    assert_eq!(response.expect("response kept").status(), 503);
    // The error says how the call ended, not only how its last attempt did.
    let stop = http_error(error).and_then(|e| e.stop());
    assert_eq!(stop, Some(Stop::new(3, DenyReason::MaxAttempts)));
    let message = error.to_string();
    assert!(
        message.ends_with("(3 attempts; not retried: max_attempts)"),
        "{message}"
    );
}

#[tokio::test]
async fn a_503_on_a_post_without_key_is_ambiguous_and_with_key_is_retried() {
    let kit = kit(fast_config());
    let up = Upstream::http1([503.into()]).await;
    let run = support::run(&kit, &up, Kind::PostWithoutKey, "/pay").await;
    run.assert_requests(1).assert_ambiguous();
    let up = Upstream::http1([503.into()]).await;
    let run = support::run(&kit, &up, Kind::PostWithKey, "/pay").await;
    assert!(run.output.is_ok(), "retried with the key\n{run}");
    run.assert_requests(2).assert_one_key();
}

#[tokio::test]
async fn a_reset_mid_body_is_retried_for_a_get() {
    let up = Upstream::http1([Step::TruncatedBody]).await;
    let run = support::run(&kit(fast_config()), &up, Kind::Get, "/item").await;
    assert!(
        run.output.is_ok(),
        "retried after the partial response\n{run}"
    );
    run.assert_requests(2);
    let first = run.trace.attempts().next().unwrap();
    assert_eq!(first.evidence.as_deref(), Some("partial_response"), "{run}");
}

#[tokio::test]
async fn a_redirect_is_reported_not_followed_and_not_retried() {
    let location = format!("http://{}/elsewhere", dead_port());
    let up = Upstream::http1([Reply::status(307).header("Location", location).into()]).await;
    let run = support::run(&kit(fast_config()), &up, Kind::PostWithKey, "/pay").await;
    run.assert_requests(1);
    let error = run.output.as_ref().expect_err("3xx is reported");
    assert_eq!(Classify::status(error), Some(307));
    assert_eq!(error.evidence(), Evidence::ResponseReceived);
}

#[tokio::test]
async fn a_401_refreshes_once_and_replays() {
    let up = Upstream::http1([401.into(), 401.into()]).await;
    let kit = kit(fast_config());
    let refreshes = Arc::new(AtomicU32::new(0));
    let r = refreshes.clone();
    kit.registry().on_unauthorized(UPSTREAM, move || {
        r.fetch_add(1, Ordering::SeqCst);
        async { Ok(()) }
    });
    let run = support::run(&kit, &up, Kind::Get, "/item").await;
    let error = run.output.as_ref().expect_err("the second 401 is final");
    assert_eq!(Classify::status(error), Some(401));
    assert_eq!(refreshes.load(Ordering::SeqCst), 1, "refreshed once");
    run.assert_requests(2);
}

#[tokio::test]
async fn refused_connection_is_not_sent_and_retried_even_for_a_post_without_key() {
    let live = Upstream::http1([]).await;
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
    assert_eq!(body, OK);
    assert_eq!(dns.lookups(), 2);
    let seen = live.requests();
    assert_eq!(
        (seen.len(), seen[0].header("retry-attempt")),
        (1, Some("2"))
    );
}

#[tokio::test]
async fn a_write_sent_through_a_read_declaration_is_refused_before_sending() {
    let server = Upstream::http1([]).await;
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
    assert_eq!(server.connections(), 0, "nothing sent");
}

/// A request safer than its declaration (a HEAD under GET, a GET under POST) is sent: the
/// loop's decisions for the declared method are the more cautious ones. A different write is
/// not: PUT and POST do not retry alike.
#[tokio::test]
async fn a_request_at_least_as_safe_as_declared_is_sent_and_another_write_is_not() {
    let server = Upstream::http1([]).await;
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
    assert_eq!(get.expect("a GET under POST is sent"), OK);
    assert_eq!(server.requests().len(), 2);
    let put: Result<String, Error> = send_text(
        Retry::in_registry(&registry, UPSTREAM)
            .method(Method::POST)
            .idempotency("order-1:put"),
        || client.put(&url).body("x"),
    )
    .await;
    let error = put.expect_err("a PUT under POST is refused");
    assert_eq!(error.permanent(), Some(PermanentCategory::InvalidRequest));
    assert_eq!(server.requests().len(), 2, "the PUT was not sent");
}

#[tokio::test]
async fn a_one_shot_body_is_sent_once_and_never_retried() {
    let server = Upstream::http1([Step::ResetAfterRead]).await;
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
    assert!(
        server.requests()[0].processed,
        "the first attempt still works"
    );

    // And a one-shot body that succeeds is simply sent.
    let server = Upstream::http1([]).await;
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
    assert_eq!(ok.expect("sent"), OK);
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

/// What the upstream saw of a keyed POST answered 503 once, then retried, to an upstream
/// configured with `config`.
async fn keyed_post_retried_once(config: UpstreamConfig) -> Vec<retry_testkit::Request> {
    let up = Upstream::http1([503.into()]).await;
    let run = support::run(&kit(config), &up, Kind::PostWithKey, "/pay").await;
    assert!(run.output.is_ok(), "retried\n{run}");
    run.assert_requests(2);
    run.requests
}

/// A third-party upstream (`propagate = false`) learns nothing of our deadlines and retries:
/// only the idempotency key, which is its contract, is sent.
#[tokio::test]
async fn an_upstream_that_does_not_propagate_gets_the_key_and_no_retry_headers() {
    let seen = keyed_post_retried_once(fast_config().with_propagate(false)).await;
    let wire = format!("\"{KEY}\"");
    for r in &seen {
        assert_eq!(r.key(), Some(wire.as_str()));
        let retry_headers = (r.header("retry-attempt"), r.header("retry-deadline-ms"));
        assert_eq!(retry_headers, (None, None), "{r}");
    }
}

#[tokio::test]
async fn the_send_path_adds_key_attempt_and_deadline_headers_with_the_configured_name() {
    let config = fast_config().with_idempotency_header("X-Request-Key");
    let seen = keyed_post_retried_once(config).await;
    for (i, r) in seen.iter().enumerate() {
        assert_eq!(r.header("x-request-key"), Some(KEY));
        assert_eq!(r.header("retry-attempt"), [None, Some("2")][i]);
        let ms: u64 = r.header("retry-deadline-ms").unwrap().parse().unwrap();
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
    let server = Upstream::http1([]).await;
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
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn a_stalled_server_times_out_within_the_attempt_and_a_post_is_ambiguous() {
    let stall = Reply::status(200).delay(Duration::from_secs(60));
    let up = Upstream::start_then(Protocol::Http1, [], stall.into()).await;
    let config = fast_config().with_attempt_timeout(Duration::from_millis(200));
    let run = support::run(&kit(config), &up, Kind::PostWithoutKey, "/pay").await;
    run.assert_requests(1).assert_ambiguous();
    let ambiguous = run.output.as_ref().unwrap_err().as_ambiguous().cloned();
    assert_eq!(
        ambiguous.map(|a| a.evidence),
        Some(Evidence::SentNoResponse),
        "{run}"
    );
}

#[tokio::test]
async fn outside_a_retry_loop_the_send_path_only_classifies() {
    let up = Upstream::http1([Step::CloseAfterRead]).await;
    let error = up
        .client()
        .post(up.url("/pay"))
        .body("x")
        .send_attempt()
        .await
        .expect_err("closed");
    assert_eq!(error.kind(), HttpErrorKind::Transport);
    assert_eq!(error.evidence(), Evidence::SentNoResponse);
    assert_eq!(up.requests()[0].header("retry-attempt"), None);
}

#[tokio::test]
async fn a_pushback_header_stops_retries_and_a_malformed_one_is_ignored() {
    let kit = kit(fast_config());
    let pushback = |value: &str| Reply::status(503).header("Retry-Pushback", value).into();
    let up = Upstream::http1([pushback("overloaded")]).await;
    let run = support::run(&kit, &up, Kind::Get, "/item").await;
    run.assert_requests(1);
    let pushed = run.output.as_ref().expect_err("pushback").pushback();
    assert_eq!(pushed, Some(retry_runtime::Pushback::Overloaded));

    let up = Upstream::http1([pushback("go away please")]).await;
    let run = support::run(&kit, &up, Kind::Get, "/item").await;
    assert!(
        run.output.is_ok(),
        "a malformed pushback is ignored: retried\n{run}"
    );
    run.assert_requests(2);
}

/// A timeout of the adapter's own client (no status, the request sent) tells the throttle the
/// upstream did not answer in time, as the loop's own attempt timeout does.
#[tokio::test]
async fn a_client_timeout_counts_as_not_accepted_by_the_throttle() {
    let up = Upstream::http1([Step::Respond(Reply::ok(OK).delay(Duration::from_secs(5)))]).await;
    let registry = retry_runtime::Registry::builder()
        .upstream(UPSTREAM, UpstreamConfig::new().with_max_attempts(1))
        .build()
        .unwrap();
    let client = retry_runtime::http::client_builder()
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let url = up.url("/slow");
    let result: Result<String, Error> = Retry::in_registry(&registry, UPSTREAM)
        .method(Method::GET)
        .run(|_| {
            let request = client.get(&url);
            async move { Ok(request.send_attempt().await?.read_text().await?) }
        })
        .await;
    let error = result.unwrap_err();
    assert!(error.timed_out(), "{error:?}");
    assert_eq!(Classify::status(&error), None);
    assert_eq!(error.evidence(), Evidence::SentNoResponse);
    let upstream = registry.upstream(UPSTREAM).unwrap();
    // One attempt sent, none accepted: a first attempt now goes with odds 1 / 2.
    assert_eq!(upstream.throttle().unwrap().refusal_probability(), 0.5);
}
