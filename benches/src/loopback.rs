//! The loopback HTTP contenders, shared by `loopback_http` (criterion), `http-ratio` (wall time,
//! interleaved) and `http-one` (instruction counts): one GET of a tiny JSON body from a hyper
//! server in the same process, sent plainly, through our loop, through our send path, through a
//! `#[retry]` adapter method as an application writes it, and through reqwest-retry.

use std::time::Duration;

use bytes::Bytes;
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::{Error, Method, Registry, Retry, UpstreamConfig, retry};

use crate::server::Endpoint;
use crate::{BenchError, get};

/// The server's URL and every contender's client.
pub struct Loopback {
    /// The endpoint's URL.
    pub url: String,
    /// The plain reqwest client (every contender sends through it).
    pub client: reqwest::Client,
    /// A registry with the `catalog` upstream, defaults.
    pub registry: Registry,
    /// The same upstream with `propagate = false`.
    pub quiet: Registry,
    /// reqwest-middleware + reqwest-retry around `client`: 2 retries, 500 ms to 2 s.
    pub middleware: reqwest_middleware::ClientWithMiddleware,
}

impl Loopback {
    /// Starts the server (it runs until the runtime stops) and builds the clients.
    pub async fn start() -> Self {
        let addr = Endpoint::new(200).serve().await;
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        let policy = reqwest_retry::policies::ExponentialBackoff::builder()
            .retry_bounds(Duration::from_millis(500), Duration::from_secs(2))
            .build_with_max_retries(2);
        let middleware = reqwest_middleware::ClientBuilder::new(client.clone())
            .with(reqwest_retry::RetryTransientMiddleware::new_with_policy(
                policy,
            ))
            .build();
        Loopback {
            url: format!("http://{addr}/item"),
            client,
            registry: crate::registry(&["catalog"], UpstreamConfig::new()),
            quiet: crate::registry(&["catalog"], UpstreamConfig::new().with_propagate(false)),
            middleware,
        }
    }

    /// Plain reqwest.
    pub async fn plain(&self) -> Result<Bytes, BenchError> {
        get(&self.client, &self.url).await
    }

    /// Our loop around the plain reqwest call.
    pub async fn builder(&self) -> Result<Bytes, BenchError> {
        Retry::in_registry(&self.registry, "catalog")
            .method(Method::GET)
            .run(|_| get(&self.client, &self.url))
            .await
    }

    /// Our loop around the classifying send path, in `registry`.
    pub async fn send_path(&self, registry: &Registry) -> Result<Bytes, Error> {
        Retry::in_registry(registry, "catalog")
            .method(Method::GET)
            .run(|_| async {
                let response = self.client.get(&self.url).send_attempt().await?;
                Ok(response.read_bytes().await?)
            })
            .await
    }

    /// The send path as an application writes it: an adapter method under `#[retry]`.
    pub async fn adapter(&self) -> Result<Bytes, Error> {
        Catalog { loopback: self }.item().await
    }

    /// reqwest-middleware + reqwest-retry.
    pub async fn reqwest_retry(&self) -> Bytes {
        let response = self.middleware.get(&self.url).send().await.expect("send");
        assert!(response.status().is_success());
        response.bytes().await.expect("body")
    }
}

/// A catalog client with one read, as in an application.
struct Catalog<'l> {
    loopback: &'l Loopback,
}

impl Catalog<'_> {
    /// Reads the item: retried by the runtime when the evidence, budget and deadline allow.
    #[retry(upstream = "catalog", method = GET, registry = &self.loopback.registry)]
    async fn item(&self) -> Result<Bytes, Error> {
        let response = self
            .loopback
            .client
            .get(&self.loopback.url)
            .send_attempt()
            .await?;
        Ok(response.read_bytes().await?)
    }
}
