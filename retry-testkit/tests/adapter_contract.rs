//! The kit's promises, on an adapter written as users write theirs: a keyed POST with
//! `#[retry]` retried through two 503s with one key and delays inside the backoff, and an
//! unkeyed write sent once and reported ambiguous after a reset.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use retry_runtime::backoff::Backoff;
use retry_runtime::http::{HttpError, RequestBuilderExt, ResponseExt, reqwest};
use retry_runtime::{Method, Registry, Retry, UpstreamConfig, retry};
use retry_testkit::{Kit, Protocol, Step, Trace, Upstream};

#[derive(Debug, retry_runtime::Classify)]
enum PayError {
    #[classify(from)]
    Retry(retry_runtime::Error),
    #[classify(from)]
    Http(HttpError),
}

impl fmt::Display for PayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PayError::Retry(e) => e.fmt(f),
            PayError::Http(e) => e.fmt(f),
        }
    }
}

impl PayError {
    fn as_ambiguous(&self) -> Option<&retry_runtime::Ambiguous> {
        match self {
            PayError::Retry(e) => e.as_ambiguous(),
            PayError::Http(_) => None,
        }
    }
}

struct Payments {
    client: reqwest::Client,
    base: String,
    registry: Arc<Registry>,
}

impl Payments {
    #[retry(upstream = "payments", method = POST, idempotency = format!("charge-{order}"),
            registry = &self.registry)]
    async fn charge(&self, order: u64) -> Result<String, PayError> {
        let url = format!("{}/charges/{order}", self.base);
        let response = self
            .client
            .post(url)
            .body("{\"cents\":500}")
            .send_attempt()
            .await?;
        Ok(response.read_text().await?)
    }

    /// A write with neither key nor check: the macro refuses it, the builder sends it once.
    async fn refund_once(&self, order: u64) -> Result<String, PayError> {
        Retry::in_registry(&self.registry, "payments")
            .method(Method::POST)
            .run(|_attempt| async {
                let url = format!("{}/refunds/{order}", self.base);
                let response = self.client.post(url).send_attempt().await?;
                Ok(response.read_text().await?)
            })
            .await
    }
}

fn config() -> UpstreamConfig {
    UpstreamConfig::new()
        .with_max_attempts(3)
        .with_attempt_timeout(Duration::from_millis(500))
        .with_backoff(
            Backoff::new()
                .with_initial(Duration::from_millis(2))
                .with_max_backoff(Duration::from_millis(10)),
        )
}

fn payments(kit: &Kit, upstream: &Upstream) -> Payments {
    Payments {
        client: upstream.client(),
        base: upstream.base_url(),
        registry: kit.registry().clone(),
    }
}

#[tokio::test]
async fn a_keyed_post_is_retried_through_two_503s_with_one_key_and_the_configured_delays() {
    for protocol in [Protocol::Http1, Protocol::H2c] {
        let upstream = Upstream::start(protocol, [503.into(), 503.into(), 200.into()]).await;
        let kit = Kit::new("payments", config()).unwrap();
        let adapter = payments(&kit, &upstream);

        let run = kit.run(&upstream, adapter.charge(7)).await;

        assert!(run.output.is_ok(), "{run}");
        run.assert_attempts(3)
            .assert_requests(3)
            .assert_delays_within_backoff();
        // The key as it went out: the Idempotency-Key draft's structured-field string.
        assert_eq!(run.assert_one_key(), "\"charge-7\"");
        let call = run.trace.single().expect("one call");
        assert_eq!(
            call.outcome.as_deref(),
            Some("successful_with_retry"),
            "{run}"
        );
        let reasons: Vec<_> = call
            .attempts
            .iter()
            .map(|a| a.decisions[0].reason.clone())
            .collect();
        assert_eq!(
            reasons,
            [
                Some("status 503".to_owned()),
                Some("status 503".to_owned()),
                None
            ],
            "{run}"
        );
    }
}

#[tokio::test]
async fn an_unkeyed_write_reset_after_it_was_read_is_sent_once_and_ambiguous() {
    for protocol in [Protocol::Http1, Protocol::H2c] {
        let upstream = Upstream::start(protocol, [Step::ResetAfterRead]).await;
        let kit = Kit::new("payments", config()).unwrap();
        let adapter = payments(&kit, &upstream);

        let run = kit.run(&upstream, adapter.refund_once(7)).await;

        run.assert_requests(1)
            .assert_attempts(1)
            .assert_ambiguous()
            .assert_no_unkeyed_write_twice();
        let error = run.output.as_ref().expect_err("no answer came");
        let ambiguous = error
            .as_ambiguous()
            .unwrap_or_else(|| panic!("{error}\n{run}"));
        assert_eq!(ambiguous.attempts, 1);
        assert!(run.requests[0].processed);
    }
}

/// The decision trace of the same script with the same seed, run after run.
async fn trace_of_a_flaky_charge() -> Trace {
    let upstream = Upstream::http1([
        503.into(),
        Step::ResetAfterRead,
        Step::CloseAfterRead,
        503.into(),
    ])
    .await;
    let kit = Kit::new("payments", config().with_max_attempts(5)).unwrap();
    let adapter = payments(&kit, &upstream);
    let run = kit.run(&upstream, adapter.charge(1)).await;
    assert!(run.output.is_ok(), "{run}");
    run.trace
}

#[tokio::test]
async fn the_same_seed_gives_the_same_decision_trace_over_100_runs() {
    let first = trace_of_a_flaky_charge().await;
    assert_eq!(first.attempts().count(), 5, "{first}");
    assert!(first.delays().iter().any(|d| !d.is_zero()), "{first}");
    for run in 1..100 {
        let again = trace_of_a_flaky_charge().await;
        assert_eq!(again, first, "run {run} differs:\n{again}\nfirst:\n{first}");
    }
}

#[tokio::test]
async fn a_different_seed_draws_different_delays() {
    // The determinism test above would pass with no jitter at all: the seed must matter.
    let upstream = Upstream::http1([503.into(), 503.into(), 503.into(), 503.into()]).await;
    let mut delays = Vec::new();
    for seed in [1, 2] {
        let kit = Kit::builder()
            .upstream("payments", config().with_max_attempts(5))
            .seed(seed)
            .build()
            .unwrap();
        let run = kit
            .run(&upstream, payments(&kit, &upstream).charge(1))
            .await;
        delays.push(run.trace.delays());
    }
    assert_eq!(delays[0].len(), 4);
    assert_ne!(delays[0], delays[1]);
}
