//! A shutdown signal drains every registry of the process: a registry loaded with
//! `Registry::from_file` and injected into an adapter stops retrying on SIGTERM through the one
//! line the README's `main` has, `tokio::spawn(Drain::global().clone().on_shutdown_signal())`.
//!
//! Alone in its binary: SIGTERM drains every registry of the process it is sent to.

use std::sync::Arc;

use retry_runtime::http::{HttpError, RequestBuilderExt, ResponseExt, reqwest};
use retry_runtime::{Classify, DenyReason, Drain, Registry, retry};
use retry_testkit::{Kit, Upstream};

#[derive(Debug, Classify)]
enum InventoryError {
    #[classify(from)]
    Retry(retry_runtime::Error),
    #[classify(from)]
    Http(HttpError),
}

impl std::fmt::Display for InventoryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InventoryError::Retry(e) => e.fmt(f),
            InventoryError::Http(e) => e.fmt(f),
        }
    }
}

/// An adapter given its registry, as the test kit's guide writes them.
struct Inventory {
    client: reqwest::Client,
    base: String,
    registry: Arc<Registry>,
}

impl Inventory {
    #[retry(upstream = "inventory", method = GET, registry = &self.registry)]
    async fn stock(&self, sku: &str) -> Result<String, InventoryError> {
        let url = format!("{}/stock/{sku}", self.base);
        let response = self.client.get(url).send_attempt().await?;
        Ok(response.read_text().await?)
    }
}

/// A backoff of exactly one second (decorrelated jitter between `initial_backoff` and
/// `max_backoff`), so the retry cannot begin before the signal, sent as the first request
/// arrives, has drained the registry.
const UPSTREAMS: &str = r#"
[upstreams.inventory]
max_attempts = 2
initial_backoff = "1s"
max_backoff = "1s"
jitter = "decorrelated"
attempt_timeout = "1s"
"#;

#[tokio::test]
async fn sigterm_drains_the_waiting_calls_of_a_registry_loaded_from_a_file() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("drain-on-signal.toml");
    std::fs::write(&path, UPSTREAMS).unwrap();
    let registry = Arc::new(Registry::from_file(&path).unwrap());
    // The README's line: it listens before it returns, so the signal below cannot be missed.
    tokio::spawn(Drain::global().clone().on_shutdown_signal());

    let upstream = Upstream::http1([503.into()]).await;
    let kit = Kit::with_registry(registry.clone());
    let inventory = Inventory {
        client: upstream.client(),
        base: upstream.base_url(),
        registry,
    };
    let signal = async {
        upstream.received(1).await;
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        Drain::global().started().await;
    };
    let (run, ()) = tokio::join!(kit.run(&upstream, inventory.stock("sku-1")), signal);

    assert!(kit.registry().drain().is_draining());
    run.assert_requests(1)
        .assert_denied(DenyReason::RuntimeDraining);
    assert!(run.output.is_err(), "{run}");
}
