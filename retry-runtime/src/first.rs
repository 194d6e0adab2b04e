//! The first attempt of a lazy call (the one `#[retry]` makes), on the fast path.
//!
//! Most calls succeed at their first attempt, and most such attempts need almost nothing of
//! what the full attempt loop prepares: nobody reads the attempt's number, key or deadline, no
//! nested call asks for the operation scope, and no time is read. Preparing all of it anyway
//! (the upstream entry moved out of the thread's cache and back, the attempt's facts written,
//! the scope, the spans, the frame swapped in and out) was most of the cost of such a call.
//!
//! So a call made with [`Call::at`](crate::Call::at) looks nothing up until its first
//! attempt is polled. Then, if the upstream's entry is in this thread's cache, needs no
//! admission (no bulkhead; the breaker, if any, closed), its spans are disabled and nothing is
//! installed around the call (no enclosing operation or attempt to join), the attempt runs
//! *lazily*:
//!
//! - the cache entry is lent in place (`hot.rs`), not moved;
//! - a marker holding the call's method, key and operation name is installed (`ambient.rs`),
//!   from which the attempt and the call's scope are made the first time anything asks for
//!   either ([`make`]); the HTTP integration always asks, so a real request gets exactly the
//!   attempt the full path would have given it;
//! - if the body completes in that first poll, successfully, and nothing asked, the call is
//!   counted in the entry's batch (as the full path counts such a call) and is over.
//!
//! Anything else (the body waits, fails, or asked for the attempt) continues on the full path
//! from where the first poll left it, with the attempt that was made, if one was: the same
//! attempt, deadline, timeout, scope and counting as a call that took the full path from the
//! start. Every other case (a cache miss, a bulkhead, a breaker not closed, spans enabled, an
//! enclosing scope) takes the full path from the start.

use crate::ambient::{self, LazyFirst};
use crate::attempt::{Attempt, Fresh};
use crate::call::{CallSite, CallSpec};
use crate::call_core::{attempt_span, call_span};
use crate::engine::Safety;
use crate::hot::{self, HeldUpstream};
use crate::lazy_clock::{Deadline, Start};
use crate::registry::Upstream;
use crate::scope::{OpName, Operation, Unopened};
use crate::thread;

/// What a lazy call sends: moved into the installed marker while its fast first attempt runs
/// (two words: its static call site and its key).
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) site: &'static CallSite,
    pub(crate) key: Option<crate::IdempotencyKey>,
}

/// A call made by [`Call::at`](crate::Call::at) and not started.
#[derive(Debug)]
pub(crate) struct Lazy<'r> {
    registry: &'r crate::Registry,
    site: &'static CallSite,
    replay: crate::Replayability,
    /// `None` only while its fast first attempt runs (the marker holds it then).
    request: Option<Request>,
    /// Its first attempt succeeded on the fast path, which counted the call: it is over.
    pub(crate) succeeded: bool,
    /// What the fast path found before it handed the first attempt to the full path.
    pub(crate) handed: Option<Handed>,
}

impl<'r> Lazy<'r> {
    pub(crate) fn new(
        registry: &'r crate::Registry,
        site: &'static CallSite,
        key: Option<crate::IdempotencyKey>,
    ) -> Self {
        Lazy {
            registry,
            site,
            replay: crate::Replayability::Replayable,
            request: Some(Request { site, key }),
            succeeded: false,
            handed: None,
        }
    }

    /// The call's spec, to start it.
    pub(crate) fn into_spec(self) -> CallSpec<'r> {
        let Some(request) = self.request else {
            unreachable!("the request is back once the fast first attempt left")
        };
        CallSpec {
            registry: self.registry,
            upstream: self.site.upstream,
            method: self.site.method.clone(),
            key: request.key,
            replay: self.replay,
            operation: Some(std::borrow::Cow::Borrowed(self.site.operation)),
        }
    }

    pub(crate) fn registry(&self) -> &'r crate::Registry {
        self.registry
    }

    pub(crate) fn upstream(&self) -> &'static str {
        self.site.upstream
    }

    pub(crate) fn downgrade_replay(&mut self, replay: crate::Replayability) {
        self.replay = self.replay.min(replay);
    }
}

/// A fast first attempt in progress: the cache slot lent to it and the marker installed,
/// until [`leave`](Entered::leave) (or a panic in its body) takes them back.
#[derive(Debug)]
pub(crate) struct Entered {
    slot: usize,
    live: bool,
}

/// What the full path takes over from a first attempt that did not take the fast path, or
/// did not end the call on it: the entry found and the spans made, if they were.
#[derive(Debug)]
pub(crate) struct Handed {
    pub(crate) held: HeldUpstream,
    pub(crate) spans: Option<(tracing::Span, tracing::Span)>,
}

/// How a fast first attempt's first poll left.
pub(crate) enum Left {
    /// It succeeded and nothing asked for the attempt: the call was counted and is over.
    Ended,
    /// The full path takes over the lent entry in `slot`, with the attempt (and the scope, if
    /// it was opened) made because the body asked.
    Continue {
        slot: usize,
        made: Option<(Attempt, Option<Operation>)>,
    },
}

/// Enters `lazy`'s first attempt on the fast path if it can take it (see the module docs). Its
/// request moves into the installed marker until it leaves. `None`: the full path starts it
/// (with what this found, in `lazy.handed`).
#[inline]
pub(crate) fn enter(lazy: &mut Lazy<'_>) -> Option<Entered> {
    let registry = lazy.registry.generation();
    let (upstream, request) = (lazy.site.upstream, &mut lazy.request);
    // One access to this thread's state: nothing installed (else the full path joins what is),
    // and the entry cached, free to start (else the full path waits for a bulkhead, fails
    // fast on an open breaker, or reports that no time was left).
    let lent = thread::with(|thread| {
        let mut slots = thread.ambient.try_borrow_mut().ok()?;
        if !slots.is_empty() {
            return None;
        }
        let slot = thread
            .cache
            .try_borrow_mut()
            .ok()?
            .lend(registry, upstream)?;
        let Some(request) = request.take() else {
            unreachable!("a lazy call's first attempt starts once")
        };
        slots.install_lazy(slot, request);
        Some(slot)
    });
    let Ok(Some(slot)) = lent else {
        return None;
    };
    let entered = Entered { slot, live: true };
    if spans_may_be_enabled() {
        return entered.unless_spans(lazy);
    }
    Some(entered)
}

/// Whether any subscriber may enable an `INFO` span (one load): when none may, the call's and
/// the attempt's spans are certainly disabled, and need not be made to find out.
#[inline]
fn spans_may_be_enabled() -> bool {
    use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};
    STATIC_MAX_LEVEL >= LevelFilter::INFO && LevelFilter::current() >= LevelFilter::INFO
}

/// The call's and its first attempt's spans, as the full path makes them. The method, key and
/// name are read from the installed marker.
fn spans(upstream: &Upstream) -> (tracing::Span, tracing::Span) {
    ambient::with_lazy(|first| {
        let Request { site, key } = &first.request;
        let safety = Safety::of(
            &site.method,
            key.is_some(),
            upstream.config().dedups_idempotency_key,
        );
        let call = call_span(
            upstream.name(),
            site.operation,
            &site.method,
            safety,
            key.as_ref(),
        );
        let attempt = attempt_span(&call, 1, &site.method);
        (call, attempt)
    })
    .unwrap_or_else(|| (tracing::Span::none(), tracing::Span::none()))
}

impl Entered {
    /// Leaves the first attempt's first poll: [`Left::Ended`] if it `succeeded` and nothing
    /// asked for the attempt (the call was counted and is over).
    #[inline]
    pub(crate) fn leave(mut self, lazy: &mut Lazy<'_>, succeeded: bool) -> Left {
        self.live = false;
        let (slot, request) = (self.slot, &mut lazy.request);
        let left = thread::with(|thread| {
            let made = thread.ambient.borrow_mut().leave_lazy(request);
            if succeeded && made.is_none() {
                thread.cache.borrow_mut().give_back_happy(slot);
                return Left::Ended;
            }
            Left::Continue { slot, made }
        });
        match left {
            Ok(Left::Ended) => {
                lazy.succeeded = true;
                Left::Ended
            }
            Ok(left) => left,
            Err(_) => unreachable!("the thread running the attempt is not ending"),
        }
    }

    /// Spans may be enabled: made now, as the full path would make them, and if either is,
    /// the full path takes the attempt over with them (`None`).
    #[cold]
    fn unless_spans(self, lazy: &mut Lazy<'_>) -> Option<Entered> {
        let spans = hot::with_lent(self.slot, |upstream, _| spans(upstream));
        if spans.0.is_disabled() && spans.1.is_disabled() {
            return Some(self);
        }
        let Left::Continue { slot, .. } = self.leave(lazy, false) else {
            unreachable!("only a success ends the call")
        };
        lazy.handed = Some(Handed {
            held: hot::take_lent(slot),
            spans: Some(spans),
        });
        None
    }
}

impl Drop for Entered {
    /// The body panicked: nothing stays installed or lent.
    fn drop(&mut self) {
        if self.live {
            ambient::drop_lazy();
            hot::unlend(self.slot);
        }
    }
}

/// Takes the lent entry in `slot` out of this thread's cache, for the full path.
pub(crate) fn take_lent(slot: usize) -> HeldUpstream {
    hot::take_lent(slot)
}

/// Makes the first attempt and the call's unopened scope from the marker, exactly as the full
/// path would have made them: attempt 1, the whole deadline after a start not read yet, the
/// attempt timeout within it, the upstream's retries.
pub(crate) fn make(first: &LazyFirst) -> (Attempt, Unopened) {
    hot::with_lent(first.slot, |upstream, spare| {
        let config = upstream.config();
        let Request { site, key } = &first.request;
        let name = Some(OpName::Static(site.operation));
        let unopened = Unopened::new(name, config.max_attempts.saturating_sub(1));
        let attempt = Attempt::fill(spare.take(), upstream, |facts| {
            facts.renew(Fresh {
                number: 1,
                method: &site.method,
                key: key.as_ref(),
                deadline: Deadline::AfterStart(config.deadline),
                timeout: config.attempt_timeout.min(config.deadline),
                started: Start::unread(),
                retries_left: Some(unopened.retries_left()),
                span: tracing::Span::none(),
            })
        });
        (attempt, unopened)
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::call::{Call, CallSite, First};
    use crate::hot::HeldUpstream;
    use crate::{Registry, UpstreamConfig, operation};

    fn registry() -> Registry {
        Registry::builder()
            .upstream("free", UpstreamConfig::new())
            .upstream("bulkhead", UpstreamConfig::new().with_bulkhead(Some(4)))
            .upstream(
                "no-time",
                UpstreamConfig::new()
                    .with_deadline(Duration::from_millis(10))
                    .with_min_attempt_budget(Duration::from_millis(50)),
            )
            .build()
            .unwrap()
    }

    fn call<'r>(registry: &'r Registry, upstream: &'r str) -> Call<'r> {
        // Leaked: a call site is a `static` in the macro's expansion; a few per test run.
        let site = Box::leak(Box::new(CallSite::new(
            Box::leak(upstream.to_owned().into_boxed_str()),
            http::Method::GET,
            "op",
        )));
        Call::at(registry, site, None)
    }

    /// Whether `upstream`'s first attempt takes the fast path; if it does, it succeeds.
    fn fast(registry: &Registry, upstream: &str) -> bool {
        let mut call = call(registry, upstream);
        match call.first() {
            Ok(First::Fast(entered)) => {
                assert!(
                    call.leave_first(entered, true).is_none(),
                    "a success ends it"
                );
                assert_eq!(call.attempts(), 1);
                true
            }
            Ok(First::Full(_)) | Err(_) => false,
        }
    }

    fn warm(registry: &Registry, upstream: &str) {
        drop(HeldUpstream::take(registry, upstream).unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_warm_upstream_that_asks_nothing_outside_any_scope_takes_the_fast_path() {
        let registry = registry();
        assert!(!fast(&registry, "free"), "cold: the full path looks it up");
        warm(&registry, "free");
        assert!(fast(&registry, "free"));
        assert!(
            fast(&registry, "free"),
            "and again: the entry was given back"
        );

        warm(&registry, "bulkhead");
        assert!(
            !fast(&registry, "bulkhead"),
            "a bulkhead is asked on the full path"
        );
        warm(&registry, "no-time");
        assert!(
            !fast(&registry, "no-time"),
            "the full path reports no time left"
        );

        let inside = operation("enclosing")
            .run(async { fast(&registry, "free") })
            .await;
        assert!(!inside, "inside a scope: the full path joins it");

        let breaker = registry.upstream("free").unwrap();
        let breaker = breaker.breaker().expect("on by default");
        while breaker.state() == crate::breaker::BreakerState::Closed {
            let admission = breaker.admit().unwrap();
            breaker.record_at(admission, true, tokio::time::Instant::now());
        }
        assert!(
            !fast(&registry, "free"),
            "a breaker not closed is asked on the full path"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unknown_upstream_is_reported_by_the_first_attempt() {
        let registry = registry();
        let mut call = call(&registry, "nope");
        assert!(matches!(
            call.first(),
            Err(crate::Error::UnknownUpstream { .. })
        ));
    }
}
