//! Test helpers: a per-test registry, sound clients, and one call through the builder API.

use std::sync::Arc;
use std::time::Duration;

use retry_runtime::backoff::Backoff;
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::{Error, Method, Registry, Retry, UpstreamConfig};

use retry_testkit::{Kit, Run, Upstream};

use crate::fault::dns::FakeDns;

/// The upstream name every helper uses.
pub const UPSTREAM: &str = "up";

/// A config with a tiny backoff, so retry tests run in milliseconds. The circuit breaker is off:
/// tables of deliberate failures would open it and turn later rows into local rejections. The
/// test servers are "our own services", so the propagation headers are on (off by default).
pub fn fast_config() -> UpstreamConfig {
    UpstreamConfig::new()
        .with_propagate(true)
        .with_breaker(None)
        .with_throttle(None)
        .with_max_attempts(3)
        .with_backoff(
            Backoff::new()
                .with_initial(Duration::from_millis(1))
                .with_max_backoff(Duration::from_millis(5)),
        )
        .with_attempt_timeout(Duration::from_secs(1))
        .with_deadline(Duration::from_secs(5))
}

/// A registry of its own (not the global one) with [`UPSTREAM`] configured as `config`.
pub fn registry(config: UpstreamConfig) -> Registry {
    Registry::builder()
        .upstream(UPSTREAM, config)
        .seed(7)
        .build()
        .expect("valid test config")
}

/// The integration's sound client (no redirects, no reqwest retries), never via a proxy.
pub fn client() -> reqwest::Client {
    retry_runtime::http::client_builder()
        .no_proxy()
        .build()
        .expect("client")
}

/// [`client`] over HTTP/2 with prior knowledge.
pub fn h2_client() -> reqwest::Client {
    retry_runtime::http::client_builder()
        .no_proxy()
        .http2_prior_knowledge()
        .build()
        .expect("client")
}

/// [`client`] resolving every name through `dns`, with a 100 ms connect timeout.
pub fn dns_client(dns: Arc<FakeDns>) -> reqwest::Client {
    retry_runtime::http::client_builder()
        .no_proxy()
        .dns_resolver(dns)
        .connect_timeout(Duration::from_millis(100))
        .build()
        .expect("client")
}

/// The three ways a test calls an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A read.
    Get,
    /// A write with an idempotency key.
    PostWithKey,
    /// A write without a key.
    PostWithoutKey,
}

impl Kind {
    /// All three.
    pub const ALL: [Kind; 3] = [Kind::Get, Kind::PostWithKey, Kind::PostWithoutKey];

    /// The method.
    pub fn method(self) -> Method {
        match self {
            Kind::Get => Method::GET,
            Kind::PostWithKey | Kind::PostWithoutKey => Method::POST,
        }
    }
}

/// The key [`call`] sends for [`Kind::PostWithKey`].
pub const KEY: &str = "order-42-capture";

/// [`call`] through a fresh [`registry`] with [`fast_config`] and a fresh [`client`].
pub async fn call_fast(kind: Kind, url: &str) -> Result<String, Error> {
    call(&registry(fast_config()), &client(), kind, url).await
}

/// One retrying call through the builder API: sends `kind` to `url`, buffers the body as text
/// inside the attempt.
pub async fn call(
    registry: &Registry,
    client: &reqwest::Client,
    kind: Kind,
    url: &str,
) -> Result<String, Error> {
    let retry = Retry::in_registry(registry, UPSTREAM).method(kind.method());
    let retry = match kind {
        Kind::PostWithKey => retry.idempotency(KEY),
        _ => retry,
    };
    retry
        .run(|_attempt| {
            let request = client.request(kind.method(), url);
            let request = match kind {
                Kind::Get => request,
                _ => request.body(r#"{"order":42}"#),
            };
            async move { Ok(request.send_attempt().await?.read_text().await?) }
        })
        .await
}

/// The HTTP error inside a runtime error, if that is what it is.
pub fn http_error(error: &Error) -> Option<&retry_runtime::http::HttpError> {
    match error {
        Error::Http(e) => Some(e),
        _ => None,
    }
}

/// A test kit whose seeded registry holds [`UPSTREAM`] with `config`.
pub fn kit(config: UpstreamConfig) -> Kit {
    Kit::new(UPSTREAM, config).expect("valid test config")
}

/// [`call`] of `kind` to `path` on the scripted `upstream`, through `kit`'s registry: the
/// result, the decision trace and the requests the upstream received.
pub async fn run(
    kit: &Kit,
    upstream: &Upstream,
    kind: Kind,
    path: &str,
) -> Run<Result<String, Error>> {
    let (client, url) = (upstream.client(), upstream.url(path));
    kit.run(upstream, call(kit.registry(), &client, kind, &url))
        .await
}
