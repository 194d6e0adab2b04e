//! What one attempt knows about itself, visible to the code it runs and to integrations.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::key::IdempotencyKey;
use crate::upstream::Upstream;

/// One attempt of a retrying call: its number, key, deadline and upstream.
///
/// Given to the attempt closure of [`RetryCall::run`](crate::RetryCall::run) and available to
/// integrations through [`Attempt::current`] and [`Attempt::with_current`], so the HTTP layer can
/// send the key, the attempt number and the remaining deadline. A plain value: a clone is a copy
/// of the attempt's facts (the upstream entry, the key and the span are shared handles).
#[derive(Clone)]
pub struct Attempt {
    pub(crate) upstream: Arc<Upstream>,
    pub(crate) number: u32,
    pub(crate) method: http::Method,
    pub(crate) key: Option<IdempotencyKey>,
    /// The operation's absolute deadline.
    pub(crate) deadline: Instant,
    /// When the attempt is cut: its timeout after `started`, never past the deadline.
    pub(crate) ends: Instant,
    /// When the attempt was admitted (after any wait for a bulkhead slot).
    pub(crate) started: Instant,
    pub(crate) retries_left: Option<u32>,
    pub(crate) span: tracing::Span,
}

impl fmt::Debug for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attempt")
            .field("upstream", &self.upstream.name())
            .field("number", &self.number)
            .field("method", &self.method)
            .field("key", &self.key)
            .field("timeout", &self.timeout())
            .field("retries_left", &self.retries_left)
            .finish_non_exhaustive()
    }
}

impl Attempt {
    /// 1 for the first attempt.
    pub fn number(&self) -> u32 {
        self.number
    }

    /// How many times the request was re-sent before this attempt (OpenTelemetry's
    /// `http.request.resend_count`).
    pub fn resend_count(&self) -> u32 {
        self.number.saturating_sub(1)
    }

    /// The upstream's name.
    pub fn upstream(&self) -> &str {
        self.upstream.name()
    }

    /// The upstream's entry (its config).
    pub fn upstream_entry(&self) -> &Arc<Upstream> {
        &self.upstream
    }

    /// The declared method.
    pub fn method(&self) -> &http::Method {
        &self.method
    }

    /// The idempotency key, the same on every attempt.
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    /// The operation's absolute deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left before the deadline.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// When an attempt started at `started` with `timeout` is cut: never past `deadline`.
    pub(crate) fn ends_at(started: Instant, timeout: Duration, deadline: Instant) -> Instant {
        started
            .checked_add(timeout)
            .map_or(deadline, |ends| ends.min(deadline))
    }

    /// When this attempt is cut: its timeout after it was admitted, never past the deadline.
    pub(crate) fn ends(&self) -> Instant {
        self.ends
    }

    /// Time left before this attempt is cut (its timeout, counted from when it was admitted,
    /// never past the deadline). Integrations use a little less, so their own, classified
    /// timeout fires before the loop's.
    pub fn time_left(&self) -> Duration {
        self.ends().saturating_duration_since(Instant::now())
    }

    /// Retries the operation may still make across every layer, when it started (sent to the
    /// callee so it does not add retries of its own on top).
    pub fn retries_left(&self) -> Option<u32> {
        self.retries_left
    }

    /// This attempt's timeout: the upstream's attempt timeout clamped to the remaining deadline.
    pub fn timeout(&self) -> Duration {
        self.ends.saturating_duration_since(self.started)
    }

    /// The attempt's span (`retry.attempt`), to record OpenTelemetry attributes on
    /// (`server.address`, `http.response.status_code`, ...) whatever span is current. Disabled
    /// (a no-op) unless a subscriber enables `DEBUG` for `retry_runtime`.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }
}

#[cfg(test)]
pub(crate) mod tests;
