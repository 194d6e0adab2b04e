//! Table-driven: each fault -> the expected evidence class, for GET, POST with key and POST
//! without key, through the builder API with one attempt (so the returned error is the first
//! attempt's). Also checks the safety property on every row: when the server processed the
//! request, the evidence is never `NotSent`.

use std::time::Duration;

use retry_runtime::http::HttpErrorKind;
use retry_runtime::{Classify, Evidence, PermanentCategory};
use retry_tests::fault::dns::{FakeDns, Resolution};
use retry_tests::fault::h1::{H1Fault, H1Server, Reply};
use retry_tests::fault::h2::{H2Fault, H2Server, code};
use retry_tests::fault::{GroundTruth, dead_port};
use retry_tests::support::{self, Kind, call, fast_config, http_error};

use Evidence::*;

#[derive(Debug, Clone)]
enum Setup {
    H1(H1Fault),
    H2(H2Fault),
    Dns(Dns),
}

#[derive(Debug, Clone, Copy)]
enum Dns {
    Fail,
    Hang,
    DeadPort,
}

struct Row {
    setup: Setup,
    /// Allowed classes: racy rows (the server closing before reading) allow more than one.
    expect: &'static [Evidence],
    status: Option<u16>,
}

fn row(setup: Setup, expect: &'static [Evidence]) -> Row {
    Row {
        setup,
        expect,
        status: None,
    }
}

/// The headers (200) arrived, then the body broke off.
fn partial_row(setup: Setup) -> Row {
    Row {
        setup,
        expect: &[PartialResponse],
        status: Some(200),
    }
}

fn status_row(reply: Reply) -> Row {
    Row {
        status: Some(reply.status),
        setup: Setup::H1(H1Fault::Respond(reply)),
        expect: &[ResponseReceived],
    }
}

fn table() -> Vec<Row> {
    let mut rows = vec![
        // Connect phase: provably not sent.
        row(Setup::Dns(Dns::DeadPort), &[NotSent]),
        row(Setup::Dns(Dns::Fail), &[NotSent]),
        row(Setup::Dns(Dns::Hang), &[NotSent]),
        // The server closed before reading: the client may or may not have started writing.
        // hyper proves "not sent" only when it hands the request back (Canceled).
        row(
            Setup::H1(H1Fault::CloseBeforeRead),
            &[SentNoResponse, NotSent],
        ),
        row(
            Setup::H1(H1Fault::ResetBeforeRead),
            &[SentNoResponse, NotSent],
        ),
        // The server read (processed) the request: never NotSent.
        row(Setup::H1(H1Fault::ReadThenReset), &[SentNoResponse]),
        row(Setup::H1(H1Fault::ReadThenClose), &[SentNoResponse]),
        row(Setup::H1(H1Fault::PartialHead), &[SentNoResponse]),
        row(Setup::H1(H1Fault::Stall), &[SentNoResponse]),
        partial_row(Setup::H1(H1Fault::HeadersThenReset)),
        // HTTP/2.
        row(
            Setup::H2(H2Fault::ResetBeforeHeaders(code::REFUSED_STREAM)),
            &[NotSent],
        ),
        row(
            Setup::H2(H2Fault::ResetBeforeHeaders(code::INTERNAL_ERROR)),
            &[SentNoResponse],
        ),
        row(
            Setup::H2(H2Fault::ResetBeforeHeaders(code::CANCEL)),
            &[SentNoResponse],
        ),
        // REFUSED_STREAM after the headers is a body failure, not a proof of "not processed".
        partial_row(Setup::H2(H2Fault::ResetAfterHeaders(code::REFUSED_STREAM))),
        partial_row(Setup::H2(H2Fault::ResetAfterHeaders(code::INTERNAL_ERROR))),
        // GOAWAY is never proof of "not processed": hyper can attribute it to a request below
        // the last-stream-id (see `http::classify`).
        row(
            Setup::H2(H2Fault::GoAwayBelow(code::NO_ERROR)),
            &[SentNoResponse],
        ),
        row(
            Setup::H2(H2Fault::GoAwayBelow(code::ENHANCE_YOUR_CALM)),
            &[SentNoResponse],
        ),
        row(Setup::H2(H2Fault::GoAwayAbove), &[SentNoResponse]),
        Row {
            setup: Setup::H2(H2Fault::Respond(503)),
            expect: &[ResponseReceived],
            status: Some(503),
        },
        // Redirects are reported, not followed (the Location is a dead port).
        status_row(Reply::status(307).header("Location", format!("http://{}/pay", dead_port()))),
    ];
    for status in [408, 425, 429, 401, 500, 502, 503, 504] {
        rows.push(status_row(Reply::status(status)));
        rows.push(status_row(Reply::status(status).retry_after("1")));
        rows.push(status_row(
            Reply::status(status).retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
        ));
        rows.push(status_row(Reply::status(status).retry_after("soon-ish")));
    }
    rows
}

/// Runs one row for one kind: the first attempt's error and the server's ground truth.
async fn run(setup: &Setup, kind: Kind) -> (retry_runtime::Error, std::sync::Arc<GroundTruth>) {
    let config = fast_config()
        .with_max_attempts(1)
        .with_attempt_timeout(Duration::from_millis(300));
    let registry = support::registry(config);
    match setup {
        Setup::H1(fault) => {
            let server = H1Server::start([fault.clone()]).await;
            let result = call(&registry, &support::client(), kind, &server.url("/pay")).await;
            (
                result.expect_err("the fault fails the call"),
                server.truth().clone(),
            )
        }
        Setup::H2(fault) => {
            let server = H2Server::start([*fault]).await;
            let result = call(&registry, &support::h2_client(), kind, &server.url("/pay")).await;
            (
                result.expect_err("the fault fails the call"),
                server.truth().clone(),
            )
        }
        Setup::Dns(dns) => {
            let answer = match dns {
                Dns::Fail => Resolution::Fail,
                Dns::Hang => Resolution::Hang,
                Dns::DeadPort => Resolution::Addr(dead_port()),
            };
            let resolver = FakeDns::new([], answer);
            let client = support::dns_client(resolver);
            let result = call(&registry, &client, kind, "http://upstream.test/pay").await;
            (
                result.expect_err("the fault fails the call"),
                Default::default(),
            )
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fault_has_its_evidence_for_get_and_post_with_and_without_key() {
    let mut failures = Vec::new();
    for row in table() {
        for kind in Kind::ALL {
            let (error, truth) = run(&row.setup, kind).await;
            let evidence = error.evidence();
            let status = Classify::status(&error);
            let ok = row.expect.contains(&evidence) && status == row.status;
            if !ok {
                failures.push(format!(
                    "{:?} {kind:?}: got {evidence} status {status:?}, expected {:?} status {:?}; error: {error}",
                    row.setup, row.expect, row.status
                ));
            }
            // Safety: a processed request is never reported as not sent.
            assert!(
                !(truth.processed() > 0 && evidence == NotSent),
                "{:?} {kind:?}: the server processed the request but the evidence is NotSent",
                row.setup
            );
            // A write whose outcome is unknown is reported as ambiguous, never as a plain failure
            // (a read never is); the evidence above is then the ambiguous outcome's.
            if let Some(ambiguous) = error.as_ambiguous() {
                assert!(
                    kind != Kind::Get,
                    "{:?}: a read is never ambiguous",
                    row.setup
                );
                assert_eq!(
                    ambiguous.idempotency_key.is_some(),
                    kind == Kind::PostWithKey
                );
                continue;
            }
            assert!(
                kind == Kind::Get || !matches!(evidence, SentNoResponse | PartialResponse),
                "{:?} {kind:?}: a write that may have executed is reported as a plain failure",
                row.setup
            );
            // A stall is cut by the loop's attempt timeout (reqwest's own per-request timeout is
            // not set: it costs 5-10 % of every request), with the same evidence.
            if let retry_runtime::Error::AttemptTimeout { .. } = error {
                assert_eq!(evidence, SentNoResponse);
                continue;
            }
            // Every other error here is an HTTP error (not a runtime one) and has a source chain
            // to reqwest, except statuses, which keep the response instead.
            let http = http_error(&error).unwrap_or_else(|| panic!("not an HTTP error: {error:?}"));
            if http.kind() == HttpErrorKind::Status {
                assert!(http.response().is_some());
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn retry_after_is_parsed_from_seconds_and_dates_and_malformed_is_ignored() {
    for (value, expect) in [
        (Some("1"), Some(Duration::from_secs(1))),
        (Some("Wed, 21 Oct 2015 07:28:00 GMT"), Some(Duration::ZERO)),
        (Some("soon-ish"), None),
        (Some("-3"), None),
        (None, None),
    ] {
        let reply = match value {
            Some(v) => Reply::status(503).retry_after(v),
            None => Reply::status(503),
        };
        let (error, _) = run(&Setup::H1(H1Fault::Respond(reply)), Kind::Get).await;
        assert_eq!(
            Classify::retry_after(&error),
            expect,
            "Retry-After {value:?}"
        );
    }
}

#[tokio::test]
async fn a_complete_body_that_does_not_decode_is_a_permanent_decode_failure() {
    use retry_runtime::http::{RequestBuilderExt, ResponseExt};
    let server = H1Server::start([H1Fault::Respond(Reply::status(200).body("{not json"))]).await;
    let registry = support::registry(fast_config());
    let client = support::client();
    let url = server.url("/item");
    let result: Result<serde_json_value::Value, retry_runtime::Error> =
        retry_runtime::Retry::in_registry(&registry, support::UPSTREAM)
            .method(retry_runtime::Method::GET)
            .run(|_| {
                let request = client.get(&url);
                async move { Ok(request.send_attempt().await?.read_json().await?) }
            })
            .await;
    let error = result.expect_err("not JSON");
    assert_eq!(error.evidence(), ResponseReceived);
    assert_eq!(error.permanent(), Some(PermanentCategory::Decode));
    assert_eq!(
        http_error(&error).map(|e| e.kind()),
        Some(HttpErrorKind::Decode)
    );
    assert_eq!(server.truth().seen(), 1, "a decode failure is not retried");
}

/// A tiny JSON value type so the tests need no serde derive.
mod serde_json_value {
    pub type Value = std::collections::BTreeMap<String, String>;
}
