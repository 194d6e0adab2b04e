//! The configuration of one named upstream, its defaults and the rules it must follow.

use std::fmt;
use std::time::Duration;

use crate::backoff::{Backoff, Jitter};
use crate::breaker::BreakerConfig;
use crate::budget::BudgetConfig;
use crate::hedge::HedgeConfig;
use crate::throttle::ThrottleConfig;

/// Settings of one named upstream, its defaults and the rules it must follow.
///
/// Tuning lives in the registry, not in code: a config in code cannot change without a
/// rebuild, and an outage is exactly when an operator needs to change it. Every rule is checked
/// at load time and every violation is reported at once ([`violations`](Self::violations)).
///
/// # Default
/// | field | default | why |
/// |---|---|---|
/// | `max_attempts` | 3 | 3 typical (the first attempt included), 5 at most |
/// | `backoff.initial` | 500 ms | exponential, as the AWS backoff study recommends |
/// | `backoff.multiplier` | 2.0 | exponential, as the AWS backoff study recommends |
/// | `backoff.max_backoff` | 1 s | keeps the window within 5 s with either jitter |
/// | `backoff.jitter` | full | least total work in AWS's study |
/// | `attempt_timeout` | 1 s; half the deadline when `propagate` | 0.5 + 1 + 3 x 1 = 4.5 s worst case, under the 5 s window; a propagating hop's callee owns the retries below it and needs the time to make them (see [`UpstreamConfig::attempt_timeout()`]) |
/// | `deadline` | 5 s | default operation deadline when no scope sets one; at most 5 s |
/// | `min_attempt_budget` | 50 ms | no attempt starts with less time than this left |
/// | `transient_500` | false | a 500 is usually a bug, not an outage |
/// | `idempotency_header` | `Idempotency-Key` | IETF draft header name |
/// | `dedups_idempotency_key` | true | the upstream's contract promises dedup by key |
/// | `propagate` | false | send the deadline and retry headers: turn it on for your own services behind the server layer |
/// | `budget` | 20 % + 10/s over 10 s | Finagle / Linkerd |
/// | `bulkhead` | none (unlimited) | set it to the upstream's capacity |
/// | `throttle` | on: 3 x accepted for first attempts, 1 x for retries, over 500 ms; a refused call waits for the upstream to accept again, a slow one's backlog at the pace of its answers | sends an upstream that fails or slows about what it accepts, recovers as soon as it accepts again, and lets retries carry calls through a brief outage (see [`throttle`](crate::throttle)) |
/// | `breaker` | none (off) | all or nothing: opened by a brief slowdown, it refuses calls one attempt would complete for `open_for`; turn it on for a hard stop (80 % of >= 20 attempts in 10 s, open 5 s, 3 probes) |
/// | `hedge` | none (never hedged) | a hedge adds load: turn it on for an upstream with a slow tail |
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct UpstreamConfig {
    /// Attempts per call, the first included (1..=5). An enclosing operation scope can allow
    /// fewer: its retry allowance is shared by every call in it. Behind the tower server layer
    /// that allowance is `InboundLimits::max_retries` (2 by default, so at most 3 attempts per
    /// request whatever this says); raise it there, or in the scope you open, for more.
    pub max_attempts: u32,
    /// Delay between attempts.
    pub backoff: Backoff,
    /// Longest single attempt; clamped to the remaining deadline. `None`: the default, read
    /// through [`attempt_timeout()`](Self::attempt_timeout).
    pub attempt_timeout: Option<Duration>,
    /// Operation deadline used when no enclosing scope sets an earlier one (at most 5 s, the
    /// in-memory window: see [`MAX_IN_MEMORY_WINDOW`](Self::MAX_IN_MEMORY_WINDOW)).
    pub deadline: Duration,
    /// No attempt starts with less than this left before the deadline.
    pub min_attempt_budget: Duration,
    /// Whether a 500 is retried (safely idempotent operations only).
    pub transient_500: bool,
    /// Request header carrying the idempotency key.
    pub idempotency_header: String,
    /// Whether the upstream's contract promises to deduplicate writes by key. If not, a write
    /// with a key is not safely idempotent (no dedup promise, no retry of writes).
    pub dedups_idempotency_key: bool,
    /// Whether requests to this upstream carry the [propagation](crate::propagation) headers
    /// (remaining deadline, retries left, attempt number). Off by default: a third-party API (a
    /// bank, a payment provider) does not read them and would only learn your timeouts and
    /// retry counts. Turn it on for your own services that run the server layer
    /// (`tower::ScopeLayer`), so a callee stops working for a caller that gave up and does not
    /// add retries of its own on top of yours. A propagating hop's attempt timeout defaults to
    /// half its deadline, the time its callee has for retries of its own (see
    /// [`attempt_timeout()`](Self::attempt_timeout)).
    pub propagate: bool,
    /// The retry budget.
    pub budget: BudgetConfig,
    /// Most attempts in flight at once to this upstream (`None`: unlimited).
    pub bulkhead: Option<usize>,
    /// The adaptive throttle (`None`: disabled): refuses attempts locally in proportion to
    /// what the upstream currently does not accept (see [`throttle`](crate::throttle)).
    pub throttle: Option<ThrottleConfig>,
    /// The circuit breaker (`None`: disabled).
    pub breaker: Option<BreakerConfig>,
    /// Hedging: when a further copy of a slow safe request is sent (`None`: never). Only calls
    /// that ask for it are hedged (`#[retry(hedge, ..)]`, [`RetryCall::hedged`]), and only
    /// reads, or keyed writes when [`HedgeConfig::dedups_in_flight`] promises the upstream
    /// deduplicates copies in flight.
    ///
    /// [`RetryCall::hedged`]: crate::RetryCall::hedged
    pub hedge: Option<HedgeConfig>,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig::new()
    }
}

impl UpstreamConfig {
    /// The longest in-memory retry window allowed: beyond it, a handler holds
    /// a worker for too long; hand the work to a durable queue instead.
    pub const MAX_IN_MEMORY_WINDOW: Duration = Duration::from_secs(5);

    /// The attempt timeout of an upstream that does not set one and does not propagate.
    pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);

    /// The largest `max_attempts` allowed.
    pub const MAX_ATTEMPTS_LIMIT: u32 = 5;

    /// The defaults listed on the type.
    pub fn new() -> Self {
        UpstreamConfig {
            max_attempts: 3,
            backoff: Backoff::new()
                .with_initial(Duration::from_millis(500))
                .with_multiplier(2.0)
                .with_max_backoff(Duration::from_secs(1))
                .with_jitter(Jitter::Full),
            attempt_timeout: None,
            deadline: Duration::from_secs(5),
            min_attempt_budget: Duration::from_millis(50),
            transient_500: false,
            idempotency_header: "Idempotency-Key".to_owned(),
            dedups_idempotency_key: true,
            propagate: false,
            budget: BudgetConfig::new(),
            bulkhead: None,
            throttle: Some(ThrottleConfig::new()),
            breaker: None,
            hedge: None,
        }
    }

    /// Sets max attempts.
    pub fn with_max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }
    /// Sets the backoff.
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }
    /// Sets the attempt timeout.
    pub fn with_attempt_timeout(mut self, t: Duration) -> Self {
        self.attempt_timeout = Some(t);
        self
    }

    /// The longest single attempt: the one set, or by default [`DEFAULT_ATTEMPT_TIMEOUT`](Self::DEFAULT_ATTEMPT_TIMEOUT) for
    /// an upstream that does not propagate, and half the deadline for one that does.
    ///
    /// Why half: behind a propagating hop runs one of your own services, and the retry owner
    /// of the chain is the layer next to the failing dependency, usually that callee. The
    /// attempt's timeout is the whole deadline the callee is sent, so it bounds the callee's
    /// own retries: with 1 s, a callee whose dependency fails for longer than a second has no
    /// time to wait it out, and the outage reaches the user. Half the deadline gives the
    /// callee room for its retries and keeps the other half for the caller's one retry of a
    /// failure the callee did not retry (its process stopped, its connection broke, it shed
    /// the request).
    pub fn attempt_timeout(&self) -> Duration {
        match self.attempt_timeout {
            Some(t) => t,
            None if self.propagate => self.deadline / 2,
            None => Self::DEFAULT_ATTEMPT_TIMEOUT,
        }
    }
    /// Sets the default operation deadline.
    pub fn with_deadline(mut self, t: Duration) -> Self {
        self.deadline = t;
        self
    }
    /// Sets the minimum attempt budget.
    pub fn with_min_attempt_budget(mut self, t: Duration) -> Self {
        self.min_attempt_budget = t;
        self
    }
    /// Sets whether 500 is transient.
    pub fn with_transient_500(mut self, yes: bool) -> Self {
        self.transient_500 = yes;
        self
    }
    /// Sets the idempotency header name.
    pub fn with_idempotency_header(mut self, name: impl Into<String>) -> Self {
        self.idempotency_header = name.into();
        self
    }
    /// Sets whether the upstream dedups by key.
    pub fn with_dedups_idempotency_key(mut self, yes: bool) -> Self {
        self.dedups_idempotency_key = yes;
        self
    }
    /// Sets whether requests carry the propagation headers.
    pub fn with_propagate(mut self, yes: bool) -> Self {
        self.propagate = yes;
        self
    }
    /// Sets the budget.
    pub fn with_budget(mut self, budget: BudgetConfig) -> Self {
        self.budget = budget;
        self
    }
    /// Sets the bulkhead size (`None`: unlimited).
    pub fn with_bulkhead(mut self, max_in_flight: Option<usize>) -> Self {
        self.bulkhead = max_in_flight;
        self
    }
    /// Sets the adaptive throttle (`None`: disabled).
    pub fn with_throttle(mut self, throttle: Option<ThrottleConfig>) -> Self {
        self.throttle = throttle;
        self
    }
    /// Sets the circuit breaker (`None`: disabled).
    pub fn with_breaker(mut self, breaker: Option<BreakerConfig>) -> Self {
        self.breaker = breaker;
        self
    }
    /// Sets hedging (`None`: never).
    pub fn with_hedge(mut self, hedge: Option<HedgeConfig>) -> Self {
        self.hedge = hedge;
        self
    }

    /// The worst-case in-memory retry window: every backoff at its ceiling plus every attempt
    /// running to its timeout ("1.5 s + 3 x callTimeout" with the defaults' backoffs), and for
    /// an upstream that propagates, at most its deadline.
    ///
    /// Every attempt is cut at the deadline, but an attempt cut short leaves its work running
    /// at a callee that does not know the caller left, so without propagation the attempts
    /// must fit the window on their own. A propagating attempt tells its callee how long it
    /// still waits, and the callee stops there too: nothing is left behind, and the deadline
    /// bounds the window.
    ///
    /// Saturates at [`Duration::MAX`] instead of overflowing, so any durations given in code
    /// are reported as a violation, never a panic.
    pub fn retry_window(&self) -> Duration {
        let attempts = self
            .backoff
            .worst_case_total(self.max_attempts.saturating_sub(1))
            .saturating_add(self.attempt_timeout().saturating_mul(self.max_attempts));
        if self.propagate {
            attempts.min(self.deadline)
        } else {
            attempts
        }
    }

    /// Every rule this config breaks (empty when valid). Each names the field and the fix.
    pub fn violations(&self) -> Vec<Violation> {
        let mut v = Vec::new();
        let mut push = |field: &'static str, message: String| v.push(Violation { field, message });
        if !(1..=Self::MAX_ATTEMPTS_LIMIT).contains(&self.max_attempts) {
            push(
                "max_attempts",
                format!(
                    "max_attempts = {} is outside 1..=5: 3 is typical; beyond 5, hand off to the durable queue",
                    self.max_attempts
                ),
            );
        }
        if !(self.backoff.multiplier.is_finite() && self.backoff.multiplier > 1.0) {
            push(
                "multiplier",
                format!(
                    "multiplier = {} must be above 1: linear or fixed backoff hammers a failing upstream; use 2.0",
                    self.backoff.multiplier
                ),
            );
        }
        if self.backoff.initial.is_zero() {
            push(
                "initial_backoff",
                "initial_backoff must be above zero: use 500ms".to_owned(),
            );
        }
        if self.backoff.max_backoff < self.backoff.initial {
            push(
                "max_backoff",
                format!(
                    "max_backoff ({:?}) is below initial_backoff ({:?}): raise max_backoff",
                    self.backoff.max_backoff, self.backoff.initial
                ),
            );
        }
        let attempt_timeout = self.attempt_timeout();
        // How a message names the attempt timeout: a default derived from the deadline says so.
        let timeout_named = || match self.attempt_timeout {
            None if self.propagate => format!("{attempt_timeout:?}, half the deadline"),
            _ => format!("{attempt_timeout:?}"),
        };
        if attempt_timeout.is_zero() {
            push(
                "attempt_timeout",
                "attempt_timeout must be above zero: use 1s".to_owned(),
            );
        }
        if self.deadline.is_zero() {
            push("deadline", "deadline must be above zero: use 5s".to_owned());
        } else if self.deadline > Self::MAX_IN_MEMORY_WINDOW {
            // The deadline bounds every in-memory wait, a server's `Retry-After` included: a
            // longer one would let a single call hold its caller (a request handler, a
            // connection) for as long as the server asks.
            push(
                "deadline",
                format!(
                    "deadline = {:?} is above the 5s in-memory retry window: a call may wait in memory until its deadline, \
                     holding its caller; use 5s or less, and hand longer outages to the durable queue",
                    self.deadline
                ),
            );
        }
        if self.min_attempt_budget >= attempt_timeout && !attempt_timeout.is_zero() {
            push(
                "min_attempt_budget",
                format!(
                    "min_attempt_budget ({:?}) must be below attempt_timeout ({}): use 50ms",
                    self.min_attempt_budget,
                    timeout_named()
                ),
            );
        }
        if (1..=Self::MAX_ATTEMPTS_LIMIT).contains(&self.max_attempts) {
            let window = self.retry_window();
            if window > Self::MAX_IN_MEMORY_WINDOW {
                push(
                    "max_attempts",
                    format!(
                        "the in-memory retry window is {window:?} (backoffs + max_attempts x attempt_timeout), above 5s: \
                         lower max_attempts, the backoffs or attempt_timeout, or hand longer outages to the durable queue"
                    ),
                );
            }
        }
        if let Err(e) = self.budget.validate() {
            push("budget", e.0);
        }
        if self.bulkhead == Some(0) {
            push("bulkhead", "bulkhead = 0 would refuse every attempt: use the upstream's capacity, or remove the key for no limit".to_owned());
        }
        if let Some(t) = &self.throttle {
            for (field, message) in t.violations() {
                push(field, message);
            }
        }
        if let Some(b) = &self.breaker {
            for (field, message) in b.violations() {
                push(field, message);
            }
        }
        if let Some(h) = &self.hedge {
            for (field, message) in h.violations() {
                push(field, message);
            }
            if let Some(delay) = h.delay
                && !delay.is_zero()
                && delay >= attempt_timeout
            {
                push(
                    "hedge.delay",
                    format!(
                        "hedge.delay ({delay:?}) must be below attempt_timeout ({}): \
                         the attempt is cut before a hedge would start; lower hedge.delay",
                        timeout_named()
                    ),
                );
            }
            if (2..=crate::hedge::MAX_COPIES).contains(&h.max_copies)
                && h.max_copies > self.max_attempts
            {
                push(
                    "hedge.max_copies",
                    format!(
                        "hedge.max_copies = {} is above max_attempts = {}: every copy is an \
                         attempt; lower hedge.max_copies or raise max_attempts",
                        h.max_copies, self.max_attempts
                    ),
                );
            }
        }
        if self.idempotency_header.is_empty()
            || http::HeaderName::from_bytes(self.idempotency_header.as_bytes()).is_err()
        {
            push(
                "idempotency_header",
                format!(
                    "idempotency_header {:?} is not a valid HTTP header name: use \"Idempotency-Key\"",
                    self.idempotency_header
                ),
            );
        }
        v
    }
}

/// One broken rule of an upstream config.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Violation {
    /// The config key at fault.
    pub field: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests;
