//! The fault layer on an axum app, as a service mounts it (`Router::layer(faults.layer())`,
//! `axum::serve`), and an adapter's retries through its faults, asserted with the kit.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use retry_runtime::backoff::Backoff;
use retry_runtime::http::{RequestBuilderExt, ResponseExt, reqwest};
use retry_runtime::{Registry, UpstreamConfig, retry};
use retry_testkit::fault::{Fault, FaultPlan, Faults};
use retry_testkit::{CallError, Kit};

/// An adapter given its registry, calling the service under test.
struct Inventory {
    client: reqwest::Client,
    base: String,
    registry: Arc<Registry>,
}

impl Inventory {
    #[retry(upstream = "inventory", method = GET, registry = &self.registry)]
    async fn stock(&self, sku: &str) -> Result<String, CallError> {
        let url = format!("{}/stock/{sku}", self.base);
        let response = self.client.get(url).send_attempt().await?;
        Ok(response.read_text().await?)
    }
}

/// The service under test: an axum app with the fault layer in front of its router, served by
/// `axum::serve` on loopback. Its base URL.
async fn serve(faults: &Faults) -> String {
    let app = Router::new()
        .route("/stock/{sku}", get(|| async { "12 in stock" }))
        .layer(faults.layer());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

fn kit() -> Kit {
    let config = UpstreamConfig::new().with_backoff(
        Backoff::new()
            .with_initial(Duration::from_millis(1))
            .with_max_backoff(Duration::from_millis(4)),
    );
    Kit::new("inventory", config).unwrap()
}

fn inventory(kit: &Kit, base: String) -> Inventory {
    Inventory {
        client: retry_runtime::http::client_builder()
            .no_proxy()
            .build()
            .unwrap(),
        base,
        registry: Arc::clone(kit.registry()),
    }
}

#[tokio::test]
async fn a_503_injected_in_front_of_an_axum_router_is_retried_and_seen_by_the_kit() {
    let faults = Faults::new(3);
    let base = serve(&faults).await;
    let kit = kit();
    faults.set(
        FaultPlan::new()
            .rule("/stock", Fault::status(503), 1.0)
            .at_most(1),
    );

    let run = kit.trace(inventory(&kit, base).stock("sku-1")).await;

    assert_eq!(run.output.as_deref().ok(), Some("12 in stock"), "{run}");
    run.assert_attempts(2)
        .assert_delays_within_backoff()
        .assert_nothing_refused();
    let first = run.trace.attempts().next().unwrap();
    assert_eq!(first.status, Some(503), "{run}");
    assert_eq!(faults.injected(), 1);
}

#[tokio::test]
async fn a_reset_in_front_of_an_axum_router_drops_the_connection_before_any_answer() {
    let faults = Faults::new(3);
    let base = serve(&faults).await;
    let kit = kit();
    faults.set(
        FaultPlan::new()
            .rule("/stock", Fault::Reset, 1.0)
            .at_most(1),
    );

    let run = kit.trace(inventory(&kit, base).stock("sku-2")).await;

    assert_eq!(run.output.as_deref().ok(), Some("12 in stock"), "{run}");
    run.assert_attempts(2);
    let first = run.trace.attempts().next().unwrap();
    assert_eq!(first.status, None, "no status reached the client\n{run}");
    assert_eq!(first.evidence.as_deref(), Some("sent_no_response"), "{run}");
}

#[tokio::test]
#[should_panic(expected = "assert_requests needs the requests the upstream received")]
async fn request_assertions_on_a_run_against_a_real_service_fail_saying_why() {
    let faults = Faults::new(3);
    let base = serve(&faults).await;
    let kit = kit();
    let run = kit.trace(inventory(&kit, base).stock("sku-3")).await;
    run.assert_attempts(1).assert_requests(1);
}
