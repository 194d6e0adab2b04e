//! The server-side layer: restore the caller's operation scope, shrunk to our own limits.
//!
//! A 5xx answer gets `retry-pushback: retries-spent` when the request already retried below,
//! and `retry-pushback: overloaded` when a retry below was refused because the upstream's retry
//! budget is exhausted, its breaker is open, its bulkhead is full or its throttle refused it,
//! or when the throttle held a call below until no time was left. The layer's own 504 (the
//! deadline passed before the handler answered) follows the same rules: it says
//! `retries-spent` only if a retry really happened below, never by default.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use crate::category::Pushback;
use crate::propagation::{self, Inbound};
use crate::scope::Operation;

/// The most a caller may ask of this server.
///
/// # Default
/// - `deadline`: 5 s (a caller's longer or missing deadline becomes this)
/// - `max_retries`: 2 (the retries a request may cause here, across every upstream it calls)
/// - `enforce_deadline`: true (the handler is dropped, answering 504, once the deadline passes)
/// - `transit_margin`: zero (a caller's remaining time is taken as it was sent, as gRPC does)
///
/// # Where attempts are configured
///
/// An upstream's `max_attempts` bounds one call; `max_retries` bounds the
/// retries of *every* call a request makes, across upstreams (the request's operation scope
/// shares one allowance). The smaller wins: behind this layer with the default 2 retries, an
/// upstream configured with `max_attempts = 5` makes at most 3 attempts per request. Raise
/// `max_retries` here if requests should be allowed more (a caller's
/// [`RETRIES_LEFT`](crate::propagation::RETRIES_LEFT) header can only lower it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct InboundLimits {
    /// The longest deadline a request gets.
    pub deadline: Duration,
    /// The most retries one request may cause, across every upstream it calls. It caps each
    /// upstream's `max_attempts` (see "Where attempts are configured" above).
    pub max_retries: u32,
    /// Stop the handler when the deadline passes.
    pub enforce_deadline: bool,
    /// Taken off a caller's propagated deadline: the caller counted its remaining time when it
    /// sent the request, and the request then spent time on the wire and in queues. With the
    /// one-way latency here (its p99, say), this server gives up no later than its caller, so
    /// it does not finish work nobody waits for. Our own limit (`deadline`) is not reduced.
    pub transit_margin: Duration,
}

impl Default for InboundLimits {
    fn default() -> Self {
        InboundLimits::new()
    }
}

impl InboundLimits {
    /// The defaults listed on the type.
    pub const fn new() -> Self {
        InboundLimits {
            deadline: Duration::from_secs(5),
            max_retries: 2,
            enforce_deadline: true,
            transit_margin: Duration::ZERO,
        }
    }

    /// Sets the longest deadline a request gets.
    pub const fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Sets the most retries one request may cause.
    pub const fn with_max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// Sets whether the handler is stopped when the deadline passes.
    pub const fn with_enforce_deadline(mut self, enforce_deadline: bool) -> Self {
        self.enforce_deadline = enforce_deadline;
        self
    }

    /// Sets what is taken off a caller's propagated deadline.
    pub const fn with_transit_margin(mut self, transit_margin: Duration) -> Self {
        self.transit_margin = transit_margin;
        self
    }
}

/// Opens an operation scope per inbound request; see the [module docs](super).
#[derive(Debug, Clone, Copy, Default)]
pub struct ScopeLayer {
    limits: InboundLimits,
}

impl ScopeLayer {
    /// A layer with these limits.
    pub fn new(limits: InboundLimits) -> Self {
        ScopeLayer { limits }
    }
}

impl<S> tower_layer::Layer<S> for ScopeLayer {
    type Service = ScopeService<S>;
    fn layer(&self, inner: S) -> ScopeService<S> {
        ScopeService {
            inner,
            limits: self.limits,
        }
    }
}

/// The service made by [`ScopeLayer`].
#[derive(Debug, Clone)]
pub struct ScopeService<S> {
    inner: S,
    limits: InboundLimits,
}

impl InboundLimits {
    /// The deadline and retries a request gets: the caller's values (its deadline less the
    /// transit margin), never above ours.
    pub fn apply(&self, inbound: &Inbound) -> (Duration, u32) {
        let deadline = inbound.deadline.map_or(self.deadline, |d| {
            d.saturating_sub(self.transit_margin).min(self.deadline)
        });
        let retries = inbound
            .retries_left
            .map_or(self.max_retries, |r| r.min(self.max_retries));
        (deadline, retries)
    }
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for ScopeService<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    RB: Default + Send + 'static,
{
    type Response = http::Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let inbound = Inbound::from_headers(request.headers());
        let (deadline, retries) = self.limits.apply(&inbound);
        // Saturating: `InboundLimits::new().with_deadline(Duration::MAX)` means "no limit of ours",
        // not a panic on every request.
        let now = Instant::now();
        let deadline = now.checked_add(deadline).unwrap_or_else(|| far_future(now));
        let name = operation_name(request.method(), request.uri().path());
        let op = Operation::root(name, Some(deadline), Some(retries));
        let enforce = self.limits.enforce_deadline;
        // Services that work in `call` itself (not only when polled) see the scope too.
        let handler = op.clone().sync_scope(|| self.inner.call(request));
        Box::pin(async move {
            let scoped = op.clone().scope(handler);
            let result = if enforce {
                match tokio::time::timeout_at(deadline, scoped).await {
                    Ok(result) => result,
                    Err(_) => {
                        tracing::info!(target: "retry_runtime::propagation", operation = op.name(), "caller's deadline passed: handler stopped");
                        let mut response = http::Response::new(RB::default());
                        *response.status_mut() = http::StatusCode::GATEWAY_TIMEOUT;
                        // Only what happened below: a handler that retried nothing has spent
                        // no retries, and saying so would be false.
                        if let Some(pushback) = pushback(&op) {
                            propagation::set_pushback(response.headers_mut(), pushback);
                        }
                        return Ok(response);
                    }
                }
            } else {
                scoped.await
            };
            result.map(|mut response| {
                if response.status().is_server_error()
                    && let Some(pushback) = pushback(&op)
                {
                    propagation::set_pushback(response.headers_mut(), pushback);
                }
                response
            })
        })
    }
}

/// The pushback a failed request's answer carries, from what happened below.
fn pushback(op: &Operation) -> Option<Pushback> {
    if op.retried_failures() > 0 {
        // A failure this request already retried below must not be retried above.
        Some(Pushback::RetriesSpent)
    } else if op.overloaded() {
        // A retry below was refused, or a call held until no time was left, because the
        // upstream is failing or saturated for everyone (budget, breaker, bulkhead, throttle):
        // retrying above would bypass it.
        Some(Pushback::Overloaded)
    } else {
        None
    }
}

/// A deadline too far away to matter (about 30 years), for limits given as `Duration::MAX`.
/// The operation's name: the method and the path with every segment that looks like an id
/// (it holds a digit) replaced by `{id}`, so `GET /orders/42/items/7` and
/// `GET /orders/43/items/9` are one operation, `GET /orders/{id}/items/{id}`. Traces and
/// metrics label by it: raw paths with their ids would make a series per order.
pub fn operation_name(method: &http::Method, path: &str) -> String {
    let mut name = String::with_capacity(method.as_str().len() + 1 + path.len());
    name.push_str(method.as_str());
    name.push(' ');
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            name.push('/');
        }
        match segment.bytes().any(|b| b.is_ascii_digit()) {
            true => name.push_str("{id}"),
            false => name.push_str(segment),
        }
    }
    name
}

fn far_future(now: Instant) -> Instant {
    now + Duration::from_secs(86_400 * 365 * 30)
}

#[cfg(test)]
mod tests {
    use super::operation_name;
    use http::Method;

    #[test]
    fn operation_names_hide_ids() {
        assert_eq!(
            operation_name(&Method::GET, "/orders/42/items/7f3a"),
            "GET /orders/{id}/items/{id}"
        );
        assert_eq!(operation_name(&Method::POST, "/orders"), "POST /orders");
        assert_eq!(operation_name(&Method::GET, "/"), "GET /");
        assert_eq!(
            operation_name(&Method::PUT, "/users/0b9e2c1e-6b0f-4a4e-9c8e-1f2a3b4c5d6e"),
            "PUT /users/{id}"
        );
    }
}
