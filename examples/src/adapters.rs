//! A payments adapter in Rust: an order-status read, a register write with a deterministic
//! idempotency key, and a write with a reconcile check; plus the write that has neither, which
//! the runtime sends once and reports as ambiguous when its fate is unknown.
//!
//! ```text
//! order_status    GET  /orders/{id}            a read: retried when eligible
//! register        POST /orders/{id}/register   key = UUID v5(order id + "register"): retried, deduplicated upstream
//! register_checked POST /orders/{id}/register  no key; before any retry, GET /orders/{id} says whether it happened
//! register_once   POST /orders/{id}/register   no key, no check: never repeated once it may have been sent
//! register_durable POST /orders/{id}/register  the key, and the durable queue when the in-memory retries stop
//! ```
//!
//! Tuning (attempts, backoff, timeouts, budget, breaker, bulkhead) is not here: it lives in the
//! registry's `catalog` entry (`examples/lab.toml`).

use std::fmt;
use std::sync::Arc;

use retry_runtime::durable::Durable;
use retry_runtime::http::{HttpError, RequestBuilderExt, ResponseExt};
use retry_runtime::{Classify, Method, Reconciled, Registry, Retry, retry};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The namespace of the adapter's idempotency keys (UUID v5 of `"{order}:{operation}"`).
pub const KEY_NAMESPACE: Uuid = Uuid::from_u128(0x6f1d_2a4e_8c1b_5d3a_9e7f_0b2c_4d6e_8a10);

/// An order's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OrderId(pub u64);

impl OrderId {
    /// The tenant the order belongs to: three orders in four are tenant A's.
    pub const fn tenant(self) -> &'static str {
        match self.0 % 4 {
            3 => "tenant-b",
            _ => "tenant-a",
        }
    }
}

impl fmt::Display for OrderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The order's state at the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderStatus {
    /// Not registered yet.
    New,
    /// Registered, with its registration number.
    Registered(u64),
}

/// A registration to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterCommand {
    /// The order to register.
    pub order: OrderId,
}

impl RegisterCommand {
    /// A command for `order`.
    pub const fn new(order: OrderId) -> Self {
        RegisterCommand { order }
    }

    /// The deterministic idempotency key: UUID v5 of the order id and the operation, so every
    /// attempt, every layer and every process derives the same key for the same registration.
    pub fn idempotency_key(&self) -> String {
        idempotency_key(self.order, "register")
    }
}

/// UUID v5 of `"{order}:{operation}"` in [`KEY_NAMESPACE`].
pub fn idempotency_key(order: OrderId, operation: &str) -> String {
    Uuid::new_v5(&KEY_NAMESPACE, format!("{order}:{operation}").as_bytes()).to_string()
}

/// A registration made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registered {
    /// The order.
    pub order: OrderId,
    /// The catalog's registration number.
    pub registration: u64,
}

/// Why an adapter call failed. The derive reports each variant's facts to the engine (the
/// wrapped errors their own; `Decode` states its), `thiserror` writes the messages.
#[derive(Debug, thiserror::Error, Classify)]
pub enum AdapterError {
    /// The HTTP attempt failed (status or transport), with its evidence.
    #[error("catalog call failed: {0}")]
    Http(#[from] HttpError),
    /// The runtime stopped: ambiguous outcome, deadline, breaker open, bulkhead full...
    #[error(transparent)]
    Runtime(#[from] retry_runtime::Error),
    /// The response arrived whole but is not what the contract says.
    #[error("unexpected catalog response: {0}")]
    #[classify(evidence = "response_received", permanent = "decode")]
    Decode(String),
}

impl AdapterError {
    /// The ambiguous outcome, if the write's fate is unknown.
    pub fn as_ambiguous(&self) -> Option<&retry_runtime::Ambiguous> {
        match self {
            AdapterError::Runtime(e) => e.as_ambiguous(),
            _ => None,
        }
    }

    /// The catalog's status, when it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            AdapterError::Http(e) => e.status().map(|s| s.as_u16()),
            _ => None,
        }
    }
}

/// The catalog adapter.
#[derive(Debug, Clone)]
pub struct CatalogAdapter {
    client: reqwest::Client,
    base: String,
    registry: Arc<Registry>,
}

impl CatalogAdapter {
    /// An adapter for the catalog at `base` (`http://host:port`), configured by the `catalog`
    /// entry of `registry`.
    ///
    /// # Panics
    /// If `registry` has no `catalog` upstream.
    pub fn new(base: impl Into<String>, registry: Arc<Registry>) -> Self {
        let upstream = registry.upstream("catalog").expect("a `catalog` upstream");
        // No redirects, no reqwest-internal retries: the evidence classification stays honest.
        let client = retry_runtime::http::client_builder_for(upstream.config())
            .pool_max_idle_per_host(64)
            .build()
            .expect("a plain HTTP client builds");
        CatalogAdapter {
            client,
            base: base.into(),
            registry,
        }
    }

    /// The order's status. A read: retried on 5xx, 429, timeouts and resets, inside the
    /// operation's deadline, retry allowance and the catalog's budget; hedged when the
    /// catalog's registry entry says when (`[upstreams.catalog.hedge]`). The order's tenant
    /// is the call's partition: a 429 (the tenant over its quota) holds that tenant's retries
    /// until its `Retry-After`, and no other tenant's.
    #[retry(
        upstream = "catalog",
        method = GET,
        registry = &self.registry,
        partition = id.tenant(),
        hedge
    )]
    pub async fn order_status(&self, id: &OrderId) -> Result<OrderStatus, AdapterError> {
        self.fetch_status(*id).await
    }

    /// Registers the order with its deterministic key: a retry carries the same key, and the
    /// catalog answers a replay with the stored result instead of registering twice. Hedged
    /// only if the catalog's entry also promises to deduplicate copies in flight.
    #[retry(
        upstream = "catalog",
        method = POST,
        idempotency = cmd.idempotency_key(),
        registry = &self.registry,
        hedge
    )]
    pub async fn register(&self, cmd: &RegisterCommand) -> Result<Registered, AdapterError> {
        self.post_register(cmd).await
    }

    /// Registers the order with its key; when the in-memory retries stop on a transient failure
    /// (an outage longer than the retry window, the breaker open), the registration is written
    /// to the registry's durable queue and answered [`Durable::Deferred`]: the worker replays
    /// it through this same function, with the same key, after the outage
    /// (`CatalogAdapter::register_durable_replay`).
    #[retry(
        upstream = "catalog",
        method = POST,
        idempotency = cmd.idempotency_key(),
        durable = "catalog.register",
        registry = &self.registry
    )]
    pub async fn register_durable(
        &self,
        cmd: &RegisterCommand,
    ) -> Result<Durable<Registered>, AdapterError> {
        self.post_register(cmd).await
    }

    /// Registers the order without a key; when an attempt's fate is unknown, asks the catalog
    /// (`GET /orders/{id}`) before retrying: registered returns that registration, new permits
    /// the retry, no answer leaves the outcome ambiguous.
    #[retry(
        upstream = "catalog",
        method = POST,
        reconcile = Self::registration_of,
        registry = &self.registry
    )]
    pub async fn register_checked(
        &self,
        cmd: &RegisterCommand,
    ) -> Result<Registered, AdapterError> {
        self.post_register(cmd).await
    }

    /// Registers the order without a key or a check: sent once, never repeated after it may
    /// have reached the catalog; a lost response is [`AdapterError::as_ambiguous`]. The macro
    /// refuses this write (no key, no check), so it uses the builder, which says the same thing
    /// at runtime: the outcome is ambiguous instead of retried. It asks to be hedged like the
    /// others, and the runtime never hedges it: two copies of a write without a key could both
    /// execute.
    pub async fn register_once(&self, cmd: &RegisterCommand) -> Result<Registered, AdapterError> {
        Retry::in_registry(&self.registry, "catalog")
            .method(Method::POST)
            .hedged()
            .run(|_attempt| self.post_register(cmd))
            .await
    }

    /// The reconcile check of [`register_checked`](Self::register_checked).
    pub async fn registration_of(&self, cmd: &RegisterCommand) -> Reconciled<Registered> {
        match self.fetch_status(cmd.order).await {
            Ok(OrderStatus::Registered(registration)) => Reconciled::Happened(Registered {
                order: cmd.order,
                registration,
            }),
            Ok(OrderStatus::New) => Reconciled::NotHappened,
            Err(_) => Reconciled::Unknown,
        }
    }

    async fn fetch_status(&self, id: OrderId) -> Result<OrderStatus, AdapterError> {
        let url = format!("{}/orders/{id}", self.base);
        let response = self.client.get(url).send_attempt().await?;
        let body = json(response.read_bytes().await?)?;
        match body["status"].as_str() {
            Some("new") => Ok(OrderStatus::New),
            Some("registered") => body["registration"]
                .as_u64()
                .map(OrderStatus::Registered)
                .ok_or_else(|| AdapterError::Decode("registered without a number".into())),
            other => Err(AdapterError::Decode(format!("status {other:?}"))),
        }
    }

    async fn post_register(&self, cmd: &RegisterCommand) -> Result<Registered, AdapterError> {
        let url = format!("{}/orders/{}/register", self.base, cmd.order);
        let response = self.client.post(url).send_attempt().await?;
        let body = json(response.read_bytes().await?)?;
        let registration = body["registration"]
            .as_u64()
            .ok_or_else(|| AdapterError::Decode("no registration number".into()))?;
        Ok(Registered {
            order: cmd.order,
            registration,
        })
    }
}

fn json(bytes: bytes::Bytes) -> Result<serde_json::Value, AdapterError> {
    serde_json::from_slice(&bytes).map_err(|e| AdapterError::Decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_deterministic_per_order_and_operation() {
        let a = RegisterCommand::new(OrderId(42)).idempotency_key();
        assert_eq!(a, RegisterCommand::new(OrderId(42)).idempotency_key());
        assert_ne!(a, RegisterCommand::new(OrderId(43)).idempotency_key());
        assert_ne!(a, idempotency_key(OrderId(42), "cancel"));
        assert_eq!(Uuid::parse_str(&a).unwrap().get_version_num(), 5);
    }
}
