//! What one attempt knows about itself, visible to the code it runs and to integrations.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::lazy_clock::{Deadline, Start};
use crate::registry::Upstream;

/// An idempotency key, fixed before the first attempt and sent on every attempt.
///
/// Its `Debug` and `Display` never print the key itself (it may identify a payment): they print
/// a short fingerprint. Use [`IdempotencyKey::as_str`] to send it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(Arc<str>);

/// Why a string cannot be an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// The key is empty.
    Empty,
    /// The key is longer than 255 bytes.
    TooLong(usize),
    /// The key holds a byte not allowed in an HTTP header value (CR, LF, NUL, other controls).
    NotAHeaderValue,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Empty => f.write_str("the idempotency key is empty: derive it from the operation (e.g. UUID v5 of order id + operation)"),
            KeyError::TooLong(n) => write!(f, "the idempotency key is {n} bytes, above 255: use a UUID"),
            KeyError::NotAHeaderValue => f.write_str("the idempotency key contains control characters (CR, LF, ...) that cannot go in a header: use a UUID"),
        }
    }
}

impl std::error::Error for KeyError {}

impl IdempotencyKey {
    /// The longest key accepted, in bytes.
    pub const MAX_LEN: usize = 255;

    /// Validates `key`: non-empty, at most 255 bytes, a valid visible header value.
    pub fn new(key: impl Into<Arc<str>>) -> Result<Self, KeyError> {
        let key: Arc<str> = key.into();
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.len() > Self::MAX_LEN {
            return Err(KeyError::TooLong(key.len()));
        }
        if !key
            .bytes()
            .all(|b| b == b'\t' || (0x20..0x7f).contains(&b) || b >= 0x80)
        {
            return Err(KeyError::NotAHeaderValue);
        }
        Ok(IdempotencyKey(key))
    }

    /// The key, to send.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A short, non-reversible fingerprint for logs.
    pub fn fingerprint(&self) -> u32 {
        // FNV-1a: stable across runs, enough to correlate log lines.
        self.0.bytes().fold(0x811c_9dc5u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        })
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey(#{:08x})", self.fingerprint())
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{:08x}", self.fingerprint())
    }
}

/// A key-producing value accepted by `idempotency = ...` and [`RetryCall::idempotency`](crate::RetryCall::idempotency).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be an idempotency key",
    label = "expected a `String`, `&str`, `Arc<str>` or `IdempotencyKey`",
    note = "derive the key from the operation, e.g. `Uuid::new_v5(&NS, format!(\"{{order}}:register\").as_bytes()).to_string()`"
)]
pub trait IntoIdempotencyKey {
    /// Converts, validating.
    fn into_idempotency_key(self) -> Result<IdempotencyKey, KeyError>;
}

impl IntoIdempotencyKey for IdempotencyKey {
    fn into_idempotency_key(self) -> Result<IdempotencyKey, KeyError> {
        Ok(self)
    }
}
impl IntoIdempotencyKey for String {
    fn into_idempotency_key(self) -> Result<IdempotencyKey, KeyError> {
        IdempotencyKey::new(self)
    }
}
impl IntoIdempotencyKey for &str {
    fn into_idempotency_key(self) -> Result<IdempotencyKey, KeyError> {
        IdempotencyKey::new(self)
    }
}
impl IntoIdempotencyKey for &String {
    fn into_idempotency_key(self) -> Result<IdempotencyKey, KeyError> {
        IdempotencyKey::new(self.as_str())
    }
}
impl IntoIdempotencyKey for Arc<str> {
    fn into_idempotency_key(self) -> Result<IdempotencyKey, KeyError> {
        IdempotencyKey::new(self)
    }
}

/// One attempt of a retrying call: its number, key, deadline and upstream.
///
/// Given to the attempt closure and available to integrations through [`Attempt::current`], so
/// the HTTP layer can send the key, the attempt number and the remaining deadline. Cheap to
/// clone: every clone is a handle to the same attempt (and what it reports).
#[derive(Clone)]
pub struct Attempt {
    pub(crate) state: Arc<AttemptState>,
}

/// What an [`Attempt`] handle points to. One allocation serves every attempt of a call (and,
/// through a small per-thread pool, the calls after it) as long as no handle outlives its
/// attempt, so the happy path allocates nothing and moves an 8-byte handle around.
#[derive(Debug, Clone)]
pub(crate) struct AttemptState {
    pub(crate) upstream: Arc<Upstream>,
    pub(crate) facts: AttemptFacts,
    pub(crate) report: crate::attempt_report::AttemptReport,
}

/// Everything the loop fixes for one attempt but its upstream.
#[derive(Debug, Clone)]
pub(crate) struct AttemptFacts {
    pub(crate) number: u32,
    pub(crate) method: http::Method,
    pub(crate) key: Option<IdempotencyKey>,
    pub(crate) deadline: Deadline,
    pub(crate) timeout: Duration,
    /// When the attempt was admitted: its timeout counts from here. A call's first attempt
    /// may not have read it yet (see `lazy_clock.rs`).
    pub(crate) started: Start,
    pub(crate) retries_left: Option<u32>,
    pub(crate) span: tracing::Span,
}

/// What [`AttemptFacts::renew`] writes: one attempt's facts.
pub(crate) struct Fresh<'a> {
    pub(crate) number: u32,
    pub(crate) method: &'a http::Method,
    pub(crate) key: Option<&'a IdempotencyKey>,
    pub(crate) deadline: Deadline,
    pub(crate) timeout: Duration,
    pub(crate) started: Start,
    pub(crate) retries_left: Option<u32>,
    pub(crate) span: tracing::Span,
}

impl AttemptFacts {
    /// Becomes the attempt `fresh` describes, over a previous attempt's facts (what is equal
    /// already is left alone: no reference count touched, no span dropped).
    #[inline]
    pub(crate) fn renew(&mut self, fresh: Fresh<'_>) {
        self.number = fresh.number;
        if self.method != *fresh.method {
            self.method = fresh.method.clone();
        }
        if self.key.is_some() || fresh.key.is_some() {
            self.key = fresh.key.cloned();
        }
        self.deadline = fresh.deadline;
        self.timeout = fresh.timeout;
        self.started = fresh.started;
        self.retries_left = fresh.retries_left;
        if !(self.span.is_none() && fresh.span.is_none()) {
            self.span = fresh.span;
        }
    }

    /// When this attempt's timeout expires.
    pub(crate) fn ends(&self) -> Instant {
        self.started.get() + self.timeout
    }

    /// The operation's absolute deadline.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline.resolve(&self.started)
    }
}

impl AttemptState {
    /// Becomes the attempt `facts` describe. The upstream handle is kept when it is the same
    /// upstream: its count is shared by every thread calling that upstream, and not touching it
    /// is the point (two fewer writes to a contended cache line per call).
    #[inline]
    fn overwrite(&mut self, upstream: &Arc<Upstream>, fill: impl FnOnce(&mut AttemptFacts)) {
        if !Arc::ptr_eq(&self.upstream, upstream) {
            self.upstream = upstream.clone();
        }
        fill(&mut self.facts);
        self.report = crate::attempt_report::AttemptReport::default();
    }
}

impl fmt::Debug for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.state.fmt(f)
    }
}

thread_local! {
    /// Attempt states whose last handle is gone, for the next call on this thread. They may
    /// keep an upstream entry alive after a registry reload, at most [`POOL_SIZE`] per thread,
    /// until reused.
    static POOL: std::cell::RefCell<Vec<Arc<AttemptState>>> = const { std::cell::RefCell::new(Vec::new()) };
}

const POOL_SIZE: usize = 16;

impl Attempt {
    /// The next attempt to `upstream`, in `spare`'s allocation when no other handle to it is
    /// left, else in a pooled one, else in a new one.
    #[cfg(test)]
    pub(crate) fn reuse(
        spare: Option<Attempt>,
        upstream: &Arc<Upstream>,
        next: AttemptFacts,
    ) -> Attempt {
        Attempt::fill(spare, upstream, |facts| *facts = next)
    }

    /// The next attempt to `upstream`, `fill` writing its facts in place over the last
    /// attempt's (in `spare`'s allocation when no other handle to it is left, else in a pooled
    /// one, else in a new one). In place, so what did not change (the method, no key, no span:
    /// the usual case) is neither copied nor dropped.
    #[inline]
    pub(crate) fn fill(
        spare: Option<Attempt>,
        upstream: &Arc<Upstream>,
        fill: impl FnOnce(&mut AttemptFacts),
    ) -> Attempt {
        if let Some(mut spare) = spare
            && let Some(slot) = Arc::get_mut(&mut spare.state)
        {
            slot.overwrite(upstream, fill);
            return spare;
        }
        let pooled = POOL.try_with(|p| p.borrow_mut().pop()).ok().flatten();
        if let Some(mut pooled) = pooled
            && let Some(slot) = Arc::get_mut(&mut pooled)
        {
            slot.overwrite(upstream, fill);
            return Attempt { state: pooled };
        }
        let mut facts = AttemptFacts {
            number: 0,
            method: http::Method::GET,
            key: None,
            deadline: Deadline::AfterStart(Duration::ZERO),
            timeout: Duration::ZERO,
            started: Start::unread(),
            retries_left: None,
            span: tracing::Span::none(),
        };
        fill(&mut facts);
        Attempt {
            state: Arc::new(AttemptState {
                upstream: upstream.clone(),
                facts,
                report: crate::attempt_report::AttemptReport::default(),
            }),
        }
    }

    /// Offers the allocation for reuse by a later call on this thread if this is the last
    /// handle. The span is closed now (a pooled attempt must not keep it open) and the key is
    /// not kept.
    pub(crate) fn recycle(mut self) {
        if let Some(state) = Arc::get_mut(&mut self.state) {
            state.facts.span = tracing::Span::none();
            state.facts.key = None;
            let _ = POOL.try_with(|p| {
                let mut pool = p.borrow_mut();
                if pool.len() < POOL_SIZE {
                    pool.push(self.state);
                }
            });
        }
    }

    /// Whether nothing read the attempt's start yet (so nothing read the clock for it).
    pub(crate) fn started_unread(&self) -> bool {
        self.state.facts.started.read().is_none()
    }

    /// Whether the state holds nothing that must be let go when its call ends (an open span,
    /// a key), so it can wait for the next call as it is.
    pub(crate) fn holds_nothing(&self) -> bool {
        self.state.facts.span.is_none() && self.state.facts.key.is_none()
    }

    /// The attempt's facts, to change before it starts (copied first if a handle was cloned).
    pub(crate) fn facts_mut(&mut self) -> &mut AttemptFacts {
        &mut Arc::make_mut(&mut self.state).facts
    }

    /// The attempt the current task runs in, if any.
    pub fn current() -> Option<Attempt> {
        crate::ambient::with_attempt(|a| a.cloned())
    }

    /// Runs `f` with the current attempt without cloning it. Do not poll futures inside `f`.
    pub fn with_current<R>(f: impl FnOnce(Option<&Attempt>) -> R) -> R {
        crate::ambient::with_attempt(f)
    }

    /// 1 for the first attempt.
    pub fn number(&self) -> u32 {
        self.state.facts.number
    }

    /// How many times the request was re-sent before this attempt (OpenTelemetry's
    /// `http.request.resend_count`).
    pub fn resend_count(&self) -> u32 {
        self.state.facts.number - 1
    }

    /// The upstream's name.
    pub fn upstream(&self) -> &str {
        self.state.upstream.name()
    }

    /// The upstream's entry (its config).
    pub fn upstream_entry(&self) -> &Arc<Upstream> {
        &self.state.upstream
    }

    /// The declared method.
    pub fn method(&self) -> &http::Method {
        &self.state.facts.method
    }

    /// The idempotency key, the same on every attempt.
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        self.state.facts.key.as_ref()
    }

    /// The operation's absolute deadline.
    pub fn deadline(&self) -> Instant {
        self.state.facts.deadline()
    }

    /// Time left before the deadline.
    pub fn remaining(&self) -> Duration {
        self.state
            .facts
            .deadline()
            .saturating_duration_since(Instant::now())
    }

    /// Time left before this attempt is cut (its timeout, counted from when it was admitted,
    /// never past the deadline). Integrations use a little less, so their own, classified
    /// timeout fires before the loop's.
    pub fn time_left(&self) -> Duration {
        self.state
            .facts
            .ends()
            .min(self.state.facts.deadline())
            .saturating_duration_since(Instant::now())
    }

    /// Retries the operation may still make across every layer, when it started (sent to the
    /// callee so it does not add retries of its own on top).
    pub fn retries_left(&self) -> Option<u32> {
        self.state.facts.retries_left
    }

    /// This attempt's timeout: the upstream's attempt timeout clamped to the remaining deadline.
    pub fn timeout(&self) -> Duration {
        self.state.facts.timeout
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An upstream for unit tests.
    pub(crate) fn upstream() -> Arc<Upstream> {
        crate::Registry::builder()
            .upstream("up", crate::UpstreamConfig::new())
            .build()
            .expect("registry")
            .upstream("up")
            .expect("upstream")
    }

    /// Attempt `number`'s fields for unit tests.
    pub(crate) fn next(number: u32) -> AttemptFacts {
        let now = Instant::now();
        AttemptFacts {
            number,
            method: http::Method::GET,
            key: None,
            deadline: Deadline::At(now),
            timeout: Duration::ZERO,
            started: Start::at(now),
            retries_left: None,
            span: tracing::Span::none(),
        }
    }

    /// A fresh attempt for unit tests.
    pub(crate) fn attempt() -> Attempt {
        Attempt::reuse(None, &upstream(), next(1))
    }

    #[tokio::test]
    async fn an_allocation_is_reused_only_when_no_handle_is_left() {
        let up = upstream();
        let first = Attempt::reuse(None, &up, next(1));
        let kept = first.clone();
        let second = Attempt::reuse(Some(first), &up, next(2));
        assert_eq!(kept.number(), 1, "a live handle is never changed");
        assert!(!Arc::ptr_eq(&kept.state, &second.state));
        let before = Arc::as_ptr(&second.state);
        second.state.report.downgrade_for_tests();
        let third = Attempt::reuse(Some(second), &up, next(3));
        assert_eq!(Arc::as_ptr(&third.state), before, "no handle left: reused");
        assert_eq!(third.number(), 3);
        assert_eq!(
            third.reported_body(),
            crate::Replayability::Replayable,
            "a reused attempt starts with no report"
        );
        let other = upstream();
        let fourth = Attempt::reuse(Some(third), &other, next(4));
        assert!(
            Arc::ptr_eq(fourth.upstream_entry(), &other),
            "another upstream is taken"
        );
    }

    #[test]
    fn hostile_keys_are_refused() {
        assert_eq!(IdempotencyKey::new(""), Err(KeyError::Empty));
        assert_eq!(
            IdempotencyKey::new("a".repeat(256)),
            Err(KeyError::TooLong(256))
        );
        assert!(IdempotencyKey::new("a".repeat(255)).is_ok());
        assert_eq!(
            IdempotencyKey::new("abc\r\nX-Evil: 1"),
            Err(KeyError::NotAHeaderValue)
        );
        assert_eq!(IdempotencyKey::new("a\0b"), Err(KeyError::NotAHeaderValue));
    }

    #[test]
    fn debug_never_prints_the_key() {
        let k = IdempotencyKey::new("secret-payment-42").unwrap();
        assert!(!format!("{k:?} {k}").contains("secret"));
        assert_eq!(k.as_str(), "secret-payment-42");
    }
}
