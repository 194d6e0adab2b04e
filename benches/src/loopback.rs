//! The loopback HTTP contenders: a GET of an 11-byte JSON body from a hyper server in the same
//! process, with reqwest (HTTP/1.1, keep-alive, no TLS). Ours sends through the
//! `retry_runtime::http` send path (`send_attempt`: evidence, propagation headers on, the body
//! read inside the attempt), from the builder and from a `#[retry]` adapter method.
//!
//! Two endpoints: one always answering 200 (one request per call), and one answering 503, 503,
//! 200 in turn (three requests per call, 1 µs backoff between them).
//!
//! Beside the libraries, plain reqwest with parts of ours and no retry layer (a timer per
//! request; the timer and the propagation headers): what those parts cost on their own.

use std::time::Duration;

use backon::{ConstantBuilder, ExponentialBuilder, Retryable};
use bytes::Bytes;
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::{Error, Method, Registry, Retry, UpstreamConfig, propagation, retry};

use crate::inproc::{ATTEMPT_TIMEOUT, BACKOFF, failing_config};
use crate::server::Endpoint;
use crate::{BenchError, get};

/// The servers' URLs and every contender's client.
pub struct Loopback {
    /// The endpoint answering 200.
    pub url: String,
    /// The endpoint answering 503, 503, 200 in turn.
    pub flaky_url: String,
    /// A 200 endpoint served as a tower service.
    pub tower_url: String,
    /// The same behind the test kit's fault layer, off.
    pub faults_off_url: String,
    /// The plain reqwest client (every contender sends through it).
    pub client: reqwest::Client,
    /// `catalog`: the default config, propagation headers on; `quiet`: the same with them off;
    /// `flaky`: [`failing_config`], headers on.
    pub registry: Registry,
    /// reqwest-middleware + reqwest-retry around `client`: 2 retries, 500 ms to 2 s.
    pub middleware: reqwest_middleware::ClientWithMiddleware,
    /// The same with a 1 µs backoff, for the failure path.
    pub middleware_flaky: reqwest_middleware::ClientWithMiddleware,
}

fn middleware(
    client: &reqwest::Client,
    min: Duration,
    max: Duration,
) -> reqwest_middleware::ClientWithMiddleware {
    let policy = reqwest_retry::policies::ExponentialBackoff::builder()
        .retry_bounds(min, max)
        .jitter(reqwest_retry::Jitter::None)
        .build_with_max_retries(2);
    reqwest_middleware::ClientBuilder::new(client.clone())
        .with(reqwest_retry::RetryTransientMiddleware::new_with_policy(
            policy,
        ))
        .build()
}

impl Loopback {
    /// Starts the servers (they run until the runtime stops) and builds the clients.
    pub async fn start() -> Self {
        let addr = Endpoint::new(200).serve().await;
        let flaky_addr = Endpoint::new(200).serve_flaky().await;
        let tower_addr = crate::server::serve_tower(None).await;
        let faults = retry_testkit::fault::Faults::new(7);
        let faults_off_addr = crate::server::serve_tower(Some(faults)).await;
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        let registry = Registry::builder()
            .seed(7)
            .upstream("catalog", UpstreamConfig::new().with_propagate(true))
            .upstream("quiet", UpstreamConfig::new().with_propagate(false))
            .upstream("flaky", failing_config().with_propagate(true))
            .upstream("flaky-quiet", failing_config().with_propagate(false))
            .build()
            .expect("valid registry");
        Loopback {
            url: format!("http://{addr}/item"),
            flaky_url: format!("http://{flaky_addr}/item"),
            tower_url: format!("http://{tower_addr}/item"),
            faults_off_url: format!("http://{faults_off_addr}/item"),
            middleware: middleware(&client, Duration::from_millis(500), Duration::from_secs(2)),
            middleware_flaky: middleware(&client, BACKOFF, BACKOFF),
            client,
            registry,
        }
    }

    /// Plain reqwest.
    pub async fn plain(&self) -> Bytes {
        get(&self.client, &self.url).await.expect("plain")
    }

    /// Plain reqwest against the tower-service server.
    pub async fn plain_tower(&self) -> Bytes {
        get(&self.client, &self.tower_url)
            .await
            .expect("plain, tower server")
    }

    /// Plain reqwest against the tower-service server behind the fault layer, switched off.
    pub async fn plain_faults_off(&self) -> Bytes {
        get(&self.client, &self.faults_off_url)
            .await
            .expect("plain, fault layer off")
    }

    /// Plain reqwest inside `tokio::time::timeout`: the one timer per attempt that ours keeps
    /// (what `backon + timeout` is in process).
    pub async fn plain_timeout(&self) -> Bytes {
        tokio::time::timeout(ATTEMPT_TIMEOUT, get(&self.client, &self.url))
            .await
            .expect("in time")
            .expect("plain + timeout")
    }

    /// [`plain_timeout`](Self::plain_timeout) carrying the propagation headers ours sends on a
    /// first attempt, written by hand: the least a layer that propagates can cost.
    pub async fn plain_headers(&self) -> Bytes {
        let mut request = self.client.get(&self.url).build().expect("request");
        let headers = request.headers_mut();
        propagation::write_headers(headers, Duration::from_millis(1_000), 1, Some(2));
        let send = self.client.execute(request);
        let response = tokio::time::timeout(ATTEMPT_TIMEOUT, send).await;
        let response = response.expect("in time").expect("plain + headers");
        assert!(response.status().is_success(), "plain + headers");
        response.bytes().await.expect("plain + headers")
    }

    /// The builder's `call` around the send path.
    pub async fn builder(&self) -> Bytes {
        self.send(&self.url, "catalog").await.expect("builder")
    }

    /// The builder's `call` around the send path, to an upstream without propagation headers.
    pub async fn builder_quiet(&self) -> Bytes {
        self.send(&self.url, "quiet").await.expect("builder")
    }

    async fn send(&self, url: &str, upstream: &str) -> Result<Bytes, Error> {
        Retry::in_registry(&self.registry, upstream)
            .method(Method::GET)
            .call(|| async {
                let response = self.client.get(url).send_attempt().await?;
                Ok(response.read_bytes().await?)
            })
            .await
    }

    /// The send path as an application writes it: an adapter method under `#[retry]`.
    pub async fn adapter(&self) -> Bytes {
        Catalog { loopback: self }.item().await.expect("#[retry]")
    }

    /// backon (default exponential builder) around plain reqwest.
    pub async fn backon(&self) -> Bytes {
        (|| get(&self.client, &self.url))
            .retry(ExponentialBuilder::default())
            .await
            .expect("backon")
    }

    /// reqwest-middleware + reqwest-retry.
    pub async fn reqwest_retry(&self) -> Bytes {
        read(&self.middleware, &self.url).await
    }

    /// The failure path without a library: three tries, 1 µs apart.
    pub async fn flaky_loop(&self) -> Bytes {
        for _ in 0..2 {
            if let Ok(body) = get(&self.client, &self.flaky_url).await {
                return body;
            }
            tokio::time::sleep(BACKOFF).await;
        }
        get(&self.client, &self.flaky_url).await.expect("third try")
    }

    /// The failure path through backon (constant 1 µs, 2 retries).
    pub async fn flaky_backon(&self) -> Bytes {
        let constant = ConstantBuilder::default()
            .with_delay(BACKOFF)
            .with_max_times(2);
        (|| get(&self.client, &self.flaky_url))
            .retry(constant)
            .await
            .expect("backon")
    }

    /// The failure path through backon with each request inside `tokio::time::timeout` (ours
    /// cuts every attempt at its timeout too).
    pub async fn flaky_backon_timeout(&self) -> Bytes {
        let constant = ConstantBuilder::default()
            .with_delay(BACKOFF)
            .with_max_times(2);
        // Written out rather than through `inproc::timed`: a floor is the cheapest form, and
        // that helper's extra future costs a few hundred instructions per request.
        let timed = || async {
            match tokio::time::timeout(ATTEMPT_TIMEOUT, get(&self.client, &self.flaky_url)).await {
                Ok(result) => result,
                Err(_) => Err(BenchError::TimedOut),
            }
        };
        timed.retry(constant).await.expect("backon + timeout")
    }

    /// The failure path through the builder's `call` and the send path.
    pub async fn flaky_builder(&self) -> Bytes {
        self.send(&self.flaky_url, "flaky").await.expect("builder")
    }

    /// The failure path through the builder's `call`, without propagation headers (the
    /// default).
    pub async fn flaky_builder_quiet(&self) -> Bytes {
        self.send(&self.flaky_url, "flaky-quiet")
            .await
            .expect("builder")
    }

    /// The failure path through a `#[retry]` adapter method.
    pub async fn flaky_adapter(&self) -> Bytes {
        Catalog { loopback: self }.flaky().await.expect("#[retry]")
    }

    /// The failure path through reqwest-retry (1 µs backoff, 2 retries).
    pub async fn flaky_reqwest_retry(&self) -> Bytes {
        read(&self.middleware_flaky, &self.flaky_url).await
    }
}

async fn read(client: &reqwest_middleware::ClientWithMiddleware, url: &str) -> Bytes {
    let response = client.get(url).send().await.expect("send");
    assert!(response.status().is_success(), "{}", response.status());
    response.bytes().await.expect("body")
}

/// A catalog client, as in an application.
struct Catalog<'l> {
    loopback: &'l Loopback,
}

impl Catalog<'_> {
    /// Reads the item.
    #[retry(upstream = "catalog", method = GET, registry = &self.loopback.registry)]
    async fn item(&self) -> Result<Bytes, Error> {
        let lo = self.loopback;
        let response = lo.client.get(&lo.url).send_attempt().await?;
        Ok(response.read_bytes().await?)
    }

    /// Reads the item from the endpoint that fails twice in three.
    #[retry(upstream = "flaky", method = GET, registry = &self.loopback.registry)]
    async fn flaky(&self) -> Result<Bytes, Error> {
        let lo = self.loopback;
        let response = lo.client.get(&lo.flaky_url).send_attempt().await?;
        Ok(response.read_bytes().await?)
    }
}
