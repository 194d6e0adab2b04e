//! One named upstream as the runtime uses it: its configuration and the live state built from
//! it (retry budget, throttle, breaker, bulkhead, latency window), and its credentials hook.
//!
//! The registry holds one per name and swaps them on reload; an attempt holds the one its call
//! started with, so a call in flight keeps its settings through a reload.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::partition::Quotas;

use crate::breaker::CircuitBreaker;
use crate::budget::RetryBudget;
use crate::bulkhead::Bulkhead;
use crate::config::UpstreamConfig;
use crate::hedge::{LATENCY_WINDOW, MIN_SAMPLES};
use crate::latency::LatencyWindow;
use crate::throttle::Throttle;
use crate::window::Tick;

/// The error a credentials refresh may return.
pub type RefreshError = Box<dyn std::error::Error + Send + Sync>;

/// A per-upstream hook that refreshes credentials after a 401, before the one replay the engine
/// allows for safe, replayable operations.
pub trait RefreshAuth: Send + Sync {
    /// Refreshes the credentials the next attempt will use.
    fn refresh(&self) -> Pin<Box<dyn Future<Output = Result<(), RefreshError>> + Send + '_>>;
}

impl<F, Fut> RefreshAuth for F
where
    F: Fn() -> Fut + Send + Sync,
    Fut: Future<Output = Result<(), RefreshError>> + Send + 'static,
{
    fn refresh(&self) -> Pin<Box<dyn Future<Output = Result<(), RefreshError>> + Send + '_>> {
        Box::pin(self())
    }
}

/// One named upstream as the runtime uses it: config, budget and hooks.
pub struct Upstream {
    name: Arc<str>,
    config: UpstreamConfig,
    budget: Arc<RetryBudget>,
    throttle: Option<Arc<Throttle>>,
    breaker: Option<Arc<CircuitBreaker>>,
    bulkhead: Option<Arc<Bulkhead>>,
    /// Recent attempt latencies, kept only for a hedge delay at a percentile.
    latency: Option<Arc<LatencyWindow>>,
    refresh: Option<Arc<dyn RefreshAuth>>,
    /// Its partitions' quota pushbacks (`partition`).
    quotas: Arc<Quotas>,
    /// What the windows of `budget` and `breaker` count from: the registry's origin.
    origin: tokio::time::Instant,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.name)
            .field("config", &self.config)
            .field("budget", &self.budget)
            .field("throttle", &self.throttle)
            .field("breaker", &self.breaker)
            .field("bulkhead", &self.config.bulkhead)
            .field("refresh", &self.refresh.is_some())
            .finish()
    }
}

impl Upstream {
    /// The upstream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name, shared.
    pub fn name_arc(&self) -> &Arc<str> {
        &self.name
    }

    /// Its configuration.
    pub fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    /// Its partitions' quota pushbacks.
    pub(crate) fn quotas(&self) -> &Quotas {
        &self.quotas
    }

    /// `now` on the clocks of its budget's and breaker's windows: read once, it places a call
    /// in both.
    pub(crate) fn tick(&self, now: tokio::time::Instant) -> Tick {
        Tick::at(self.origin, now)
    }

    /// Its retry budget (shared across reloads while the budget settings stay the same).
    pub fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    /// Its adaptive throttle, if enabled (shared across reloads while its settings stay the
    /// same).
    pub fn throttle(&self) -> Option<&Throttle> {
        self.throttle.as_deref()
    }

    /// Its circuit breaker, if enabled.
    pub fn breaker(&self) -> Option<&CircuitBreaker> {
        self.breaker.as_deref()
    }

    /// Its bulkhead, if limited.
    pub(crate) fn bulkhead(&self) -> Option<&Bulkhead> {
        self.bulkhead.as_deref()
    }

    /// Attempts in flight through the bulkhead (0 when unlimited).
    pub fn in_flight(&self) -> usize {
        self.bulkhead.as_ref().map_or(0, |b| b.in_flight())
    }

    /// The 401 refresh hook, if registered.
    pub fn refresh_hook(&self) -> Option<&Arc<dyn RefreshAuth>> {
        self.refresh.as_ref()
    }

    /// How long a copy runs before the next one is sent, at `now`: the fixed delay, or the
    /// percentile of the recent latencies (`None` while too few are known, or without hedging).
    pub fn hedge_delay(&self, now: tokio::time::Instant) -> Option<std::time::Duration> {
        let hedge = self.config.hedge.as_ref()?;
        match (hedge.delay, hedge.percentile, &self.latency) {
            (Some(delay), _, _) => Some(delay),
            (None, Some(p), Some(latency)) => latency.percentile(p, MIN_SAMPLES, now),
            _ => None,
        }
    }

    /// Whether attempts' latencies are kept (for a percentile hedge delay).
    pub(crate) fn keeps_latency(&self) -> bool {
        self.latency.is_some()
    }

    /// Records an attempt's latency for a percentile hedge delay (nothing without one).
    pub(crate) fn record_latency(&self, latency: std::time::Duration, now: tokio::time::Instant) {
        if let Some(window) = &self.latency {
            window.record(latency, now);
        }
    }

    /// The entry for `config`, built fresh or carried over from `previous` (the entry the same
    /// name had before a reload). State carries over while its settings stay the same, so a
    /// reload neither refills an exhausted budget nor closes an open breaker nor resets a
    /// bulkhead. `config` has passed [`UpstreamConfig::violations`].
    pub(crate) fn new(
        name: Arc<str>,
        config: UpstreamConfig,
        previous: Option<&Upstream>,
        refresh: Option<Arc<dyn RefreshAuth>>,
        origin: tokio::time::Instant,
    ) -> Upstream {
        let budget = match previous {
            Some(u) if u.config.budget == config.budget => u.budget.clone(),
            _ => Arc::new(
                RetryBudget::counting_from(config.budget, origin).expect("validated by the caller"),
            ),
        };
        let breaker = match (previous, config.breaker) {
            (Some(u), Some(b)) if u.config.breaker == Some(b) => u.breaker.clone(),
            (_, Some(b)) => Some(Arc::new(
                CircuitBreaker::counting_from(b, origin).named(name.clone()),
            )),
            (_, None) => None,
        };
        let throttle = match (previous, config.throttle) {
            (Some(u), Some(t)) if u.config.throttle == Some(t) => u.throttle.clone(),
            (_, Some(t)) => Some(Arc::new(
                Throttle::counting_from(t, origin).named(name.clone()),
            )),
            (_, None) => None,
        };
        let bulkhead = match (previous, config.bulkhead) {
            (Some(u), Some(n)) if u.config.bulkhead == Some(n) => u.bulkhead.clone(),
            (_, Some(n)) => Some(Arc::new(Bulkhead::new(n))),
            (_, None) => None,
        };
        let latency = match (previous, config.hedge.and_then(|h| h.percentile)) {
            (Some(u), Some(_)) if u.latency.is_some() => u.latency.clone(),
            (_, Some(_)) => Some(Arc::new(LatencyWindow::new(
                LATENCY_WINDOW,
                tokio::time::Instant::now(),
            ))),
            (_, None) => None,
        };
        Upstream {
            name,
            config,
            budget,
            throttle,
            breaker,
            bulkhead,
            latency,
            refresh,
            quotas: Arc::default(),
            origin,
        }
    }

    /// The same entry, sharing all its state, with `hook` as its 401 refresh hook.
    pub(crate) fn with_refresh(&self, hook: Arc<dyn RefreshAuth>) -> Upstream {
        Upstream {
            name: self.name.clone(),
            config: self.config.clone(),
            budget: self.budget.clone(),
            throttle: self.throttle.clone(),
            breaker: self.breaker.clone(),
            bulkhead: self.bulkhead.clone(),
            latency: self.latency.clone(),
            refresh: Some(hook),
            quotas: self.quotas.clone(),
            origin: self.origin,
        }
    }
}
