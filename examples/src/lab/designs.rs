//! The three designs of spec 004, as the API and the middle service call downstream.
//!
//! | design | API -> middle | middle -> catalog |
//! |---|---|---|
//! | A, retry in every layer | 3 attempts on 5xx, 429, timeouts and resets, any method; backoff 100 ms, 200 ms; no budget, no deadline, `Retry-After` ignored | the same |
//! | B, one retry owner | the runtime (`middle` upstream): one attempt unless the middle did not retry; propagates deadline and retries left | `ScopeLayer` restores the API's scope; the catalog adapter (`catalog` upstream) owns the retries: shared allowance, budget, breaker, bulkhead, `Retry-After` |
//! | C, no retry | one attempt | one attempt |
//!
//! Timeouts are the same in every design: 1.5 s per API -> middle attempt, 300 ms per
//! middle -> catalog attempt. In B the API's operation deadline is 2.5 s and both limits come
//! from the registry (`examples/lab.toml`). B's attempts tell their callee how long they still
//! wait (`retry-deadline-ms`: the attempt's timeout, clamped to the deadline), so the middle's
//! retries end when the API stops waiting, and the brief slowdown's catalog skips queued
//! requests nobody waits for; A and C send nothing of the kind.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::tower::{InboundLimits, ScopeLayer};
use retry_runtime::{Method, Pushback, Registry, Retry, propagation};
use tower_layer::Layer;

use super::catalog::IDEMPOTENCY_KEY;
use super::scenarios::WriteContract;
use super::servers::{self, FnService, Req, Resp, Server};
use crate::adapters::{AdapterError, CatalogAdapter, OrderId, RegisterCommand};

/// The response header the API sets when the outcome of a write is unknown.
pub const OUTCOME: &str = "x-lab-outcome";

/// Attempt timeout of API -> middle calls (A and C; B's comes from the registry).
pub const API_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(1500);
/// Attempt timeout of middle -> catalog calls (A and C; B's comes from the registry).
pub const MIDDLE_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(300);
/// The operation deadline B's API sets.
pub const OPERATION_DEADLINE: Duration = Duration::from_millis(2500);

/// A retry design.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Design {
    /// Retry in every layer.
    A,
    /// One retry owner with shared allowance, budget and deadline.
    B,
    /// No retry.
    C,
}

impl Design {
    /// Every design.
    pub const ALL: [Design; 3] = [Design::A, Design::B, Design::C];

    /// The flag value.
    pub const fn letter(self) -> &'static str {
        match self {
            Design::A => "A",
            Design::B => "B",
            Design::C => "C",
        }
    }

    /// A short description.
    pub const fn describe(self) -> &'static str {
        match self {
            Design::A => "retry in every layer",
            Design::B => "one retry owner",
            Design::C => "no retry",
        }
    }
}

impl fmt::Display for Design {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.letter())
    }
}

impl FromStr for Design {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_uppercase().as_str() {
            "A" => Ok(Design::A),
            "B" => Ok(Design::B),
            "C" => Ok(Design::C),
            _ => Err(format!("unknown design `{s}`: use A, B or C")),
        }
    }
}

/// The registries design B uses: the API's (`middle` upstream) and the middle's (`catalog`).
#[derive(Clone, Debug)]
pub struct Registries {
    /// The API process's registry.
    pub api: Arc<Registry>,
    /// The middle process's registry.
    pub middle: Arc<Registry>,
}

/// One design's API -> middle -> catalog chain, running.
pub struct Chain {
    /// The API's server (the load driver calls it).
    pub api: Server,
    /// The middle's server.
    pub middle: Server,
}

/// Starts the API and the middle of `design` in front of the catalog at `catalog_url`.
pub async fn start(
    design: Design,
    contract: WriteContract,
    catalog_url: String,
    registries: Registries,
) -> std::io::Result<Chain> {
    let middle = match design {
        Design::A | Design::C => {
            let attempts = if design == Design::A { 3 } else { 1 };
            let client = plain_client();
            servers::serve(FnService(move |request: Req| {
                forward(
                    client.clone(),
                    catalog_url.clone(),
                    request,
                    attempts,
                    MIDDLE_ATTEMPT_TIMEOUT,
                )
            }))
            .await?
        }
        Design::B => {
            let adapter = Arc::new(CatalogAdapter::new(catalog_url, registries.middle.clone()));
            let handler =
                FnService(move |request: Req| middle_b(adapter.clone(), contract, request));
            let limits = InboundLimits {
                deadline: OPERATION_DEADLINE,
                max_retries: 2,
                enforce_deadline: true,
                ..InboundLimits::default()
            };
            servers::serve(ScopeLayer::new(limits).layer(handler)).await?
        }
    };
    let middle_url = middle.url();
    let client = match design {
        Design::B => {
            let upstream = registries
                .api
                .upstream("middle")
                .expect("a `middle` upstream");
            retry_runtime::http::client_builder_for(upstream.config())
                .pool_max_idle_per_host(64)
                .build()
                .expect("a plain HTTP client builds")
        }
        Design::A | Design::C => plain_client(),
    };
    let api = match design {
        Design::A | Design::C => {
            let attempts = if design == Design::A { 3 } else { 1 };
            servers::serve(FnService(move |mut request: Req| {
                add_key(&mut request, contract);
                forward(
                    client.clone(),
                    middle_url.clone(),
                    request,
                    attempts,
                    API_ATTEMPT_TIMEOUT,
                )
            }))
            .await?
        }
        Design::B => {
            let registry = registries.api.clone();
            servers::serve(FnService(move |request: Req| {
                api_b(
                    client.clone(),
                    registry.clone(),
                    middle_url.clone(),
                    contract,
                    request,
                )
            }))
            .await?
        }
    };
    Ok(Chain { api, middle })
}

/// The client A and C use: plain reqwest, as their services would.
fn plain_client() -> reqwest::Client {
    reqwest::Client::builder()
        .retry(reqwest::retry::never())
        .pool_max_idle_per_host(64)
        .build()
        .expect("a plain HTTP client builds")
}

/// The API derives the idempotency key of a keyed write (every design sends it).
fn add_key(request: &mut Req, contract: WriteContract) {
    if contract == WriteContract::Keyed
        && request.method() == Method::POST
        && let Some(order) = servers::order_of(request.uri().path())
    {
        let key = RegisterCommand::new(OrderId(order)).idempotency_key();
        if let Ok(value) = http::HeaderValue::from_str(&key) {
            request.headers_mut().insert(IDEMPOTENCY_KEY, value);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Designs A and C: the loop people write with backon or reqwest-retry in each service.

/// Forwards `request` to `base` with up to `attempts` attempts: retries 5xx, 429, timeouts
/// and connection errors whatever the method, after 100 ms, then 200 ms.
async fn forward(
    client: reqwest::Client,
    base: String,
    request: Req,
    attempts: u32,
    timeout: Duration,
) -> Resp {
    let method = request.method().clone();
    let url = format!("{base}{}", request.uri().path());
    let key = request.headers().get(IDEMPOTENCY_KEY).cloned();
    let mut delay = Duration::from_millis(100);
    let mut attempt = 1;
    loop {
        let mut builder = client.request(method.clone(), &url).timeout(timeout);
        if let Some(key) = &key {
            builder = builder.header(IDEMPOTENCY_KEY, key.clone());
        }
        let result = async {
            let response = builder.send().await?;
            let status = response.status().as_u16();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        }
        .await;
        let retryable = match &result {
            Ok((status, _)) => *status >= 500 || *status == 429,
            Err(_) => true,
        };
        if !retryable || attempt >= attempts {
            return match result {
                Ok((status, body)) => servers::respond(status, body),
                Err(e) if e.is_timeout() => servers::respond(504, "upstream timed out"),
                Err(_) => servers::respond(502, "upstream connection failed"),
            };
        }
        tokio::time::sleep(delay).await;
        delay *= 2;
        attempt += 1;
    }
}

// ---------------------------------------------------------------------------------------------
// Design B.

/// The API: one operation with a deadline; the call to the middle is a retrying call whose
/// attempts carry the remaining deadline and the retries left. The middle's pushback (it
/// already retried) stops the API from retrying the chain.
async fn api_b(
    client: reqwest::Client,
    registry: Arc<Registry>,
    middle: String,
    contract: WriteContract,
    request: Req,
) -> Resp {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let order = servers::order_of(&path).unwrap_or_default();
    let url = format!("{middle}{path}");
    let call = Retry::in_registry(&registry, "middle").method(method.clone());
    let call = if contract == WriteContract::Keyed && method == Method::POST {
        call.idempotency(RegisterCommand::new(OrderId(order)).idempotency_key())
    } else {
        call
    };
    let result: Result<Bytes, AdapterError> = retry_runtime::operation("api")
        .deadline(OPERATION_DEADLINE)
        .run(call.run(|_attempt| {
            let request = client.request(method.clone(), &url);
            async move {
                let response = request.send_attempt().await?;
                Ok(response.read_bytes().await?)
            }
        }))
        .await;
    match result {
        Ok(body) => servers::respond(200, body),
        Err(e) => error_response(&e),
    }
}

/// The middle: runs inside the scope the `ScopeLayer` restored from the API's headers; the
/// catalog adapter owns the retries.
async fn middle_b(adapter: Arc<CatalogAdapter>, contract: WriteContract, request: Req) -> Resp {
    let Some(order) = servers::order_of(request.uri().path()).map(OrderId) else {
        return servers::respond(404, "no such route");
    };
    if request.method() == Method::GET {
        return match adapter.order_status(&order).await {
            Ok(status) => servers::respond(200, format!("{status:?}")),
            Err(e) => error_response(&e),
        };
    }
    let cmd = RegisterCommand::new(order);
    let keyed = request.headers().contains_key(IDEMPOTENCY_KEY);
    let result = match (keyed, contract) {
        (true, _) => adapter.register(&cmd).await,
        (false, WriteContract::Reconciled) => adapter.register_checked(&cmd).await,
        (false, _) => adapter.register_once(&cmd).await,
    };
    match result {
        Ok(r) => servers::respond(
            200,
            format!(
                r#"{{"order":{},"registration":{}}}"#,
                r.order, r.registration
            ),
        ),
        Err(e) => error_response(&e),
    }
}

/// How B's services answer a failed call: an unknown outcome is said so (502 and
/// `x-lab-outcome: ambiguous`), a local refusal (breaker, bulkhead) is `503` with the
/// `overloaded` pushback, a catalog status is passed on with its `Retry-After`.
fn error_response(e: &AdapterError) -> Resp {
    if std::env::var_os("LAB_DEBUG").is_some() {
        eprintln!("lab: {e}");
    }
    if e.as_ambiguous().is_some() {
        let mut r = servers::respond(502, e.to_string());
        r.headers_mut()
            .insert(OUTCOME, http::HeaderValue::from_static("ambiguous"));
        return r;
    }
    match e {
        AdapterError::Http(http) if http.status().is_some() => {
            let status = http.status().map_or(502, |s| s.as_u16());
            let mut r = servers::respond(status, e.to_string());
            for name in [http::header::RETRY_AFTER.as_str(), propagation::PUSHBACK] {
                if let Some(v) = http.headers().and_then(|h| h.get(name)) {
                    r.headers_mut().insert(name, v.clone());
                }
            }
            r
        }
        AdapterError::Runtime(
            retry_runtime::Error::CircuitOpen { .. } | retry_runtime::Error::BulkheadFull { .. },
        ) => {
            let mut r = servers::respond(503, e.to_string());
            propagation::set_pushback(r.headers_mut(), Pushback::Overloaded);
            r
        }
        AdapterError::Runtime(
            retry_runtime::Error::AttemptTimeout { .. }
            | retry_runtime::Error::DeadlineExceeded { .. },
        ) => servers::respond(504, e.to_string()),
        AdapterError::Http(_) => servers::respond(502, e.to_string()),
        _ => servers::respond(500, e.to_string()),
    }
}
