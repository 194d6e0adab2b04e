//! The attempt spans carry OpenTelemetry's HTTP semantic-convention attributes, and never the
//! idempotency key in clear (reqwest-middleware users ask for the attempt count:
//! TrueLayer/reqwest-middleware#152).

use std::sync::{Arc, Mutex};

use retry_testkit::{Protocol, Reply, Upstream};
use retry_tests::support::{KEY, Kind, call_fast};

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn attempt_spans_carry_the_http_semantic_conventions() {
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .finish();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tracing::subscriber::with_default(subscriber, || {
        rt.block_on(async {
            let upstream =
                Upstream::start_then(Protocol::Http1, [503.into()], Reply::ok("ok").into()).await;
            let body = call_fast(Kind::PostWithKey, &upstream.url("/pay")).await;
            assert_eq!(body.unwrap(), "ok");
        })
    });
    let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let attempts: Vec<&str> = out
        .lines()
        // The attempt spans' own lines, printed as they close (at DEBUG, hyper's events inside
        // them name them too).
        .filter(|l| l.contains("retry.attempt{") && l.contains(": close "))
        .collect();
    assert!(attempts.len() >= 2, "{out}");
    let first = attempts
        .iter()
        .find(|l| l.contains("http.request.resend_count=0"))
        .expect("first attempt");
    for attribute in [
        "http.request.method=POST",
        "server.address=\"127.0.0.1\"",
        "server.port=",
        "http.response.status_code=503",
        "error.type=503",
    ] {
        assert!(first.contains(attribute), "{attribute} missing: {first}");
    }
    let second = attempts
        .iter()
        .find(|l| l.contains("http.request.resend_count=1"))
        .expect("the retry");
    assert!(second.contains("http.response.status_code=200"), "{second}");
    for line in &attempts {
        assert_eq!(
            line.matches("http.response.status_code=").count(),
            1,
            "recorded once: {line}"
        );
    }
    assert!(
        !out.contains(KEY),
        "the idempotency key is never logged in clear"
    );
}
