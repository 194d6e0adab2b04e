//! The first attempt of a lazy call (the ones `#[retry]` and the builder make), on the fast
//! path.
//!
//! Most calls succeed at their first attempt, and most such attempts need almost nothing of
//! what the full attempt loop prepares: nobody reads the attempt's number, key or deadline, no
//! nested call asks for the operation scope, and no time is read. Preparing all of it anyway
//! (the upstream entry moved out of the thread's cache and back, the attempt's facts written,
//! the scope, the spans, the frame swapped in and out) was most of the cost of such a call.
//!
//! So a call made with [`Call::at`](crate::Call::at) or [`Call::lazy`](crate::Call::lazy)
//! looks nothing up until its first attempt is polled. Then, if the upstream's entry is in
//! this thread's cache, needs no admission (no bulkhead; the breaker, if any, closed), its
//! spans are disabled and nothing is installed around the call (no enclosing operation or
//! attempt to join), the attempt runs *lazily*:
//!
//! - the cache entry is lent in place (`hot.rs`), not moved;
//! - a marker is installed (`ambient.rs`) from which the attempt and the call's scope are made
//!   the first time anything asks for either ([`make`]): for `#[retry]`, two words (its static
//!   call site and its key); the HTTP integration always asks, so a real request gets exactly
//!   the attempt the full path would have given it. The builder's `call` (whose closure is not
//!   given the attempt) does the same from a static site for its method ([`BUILDER_SITES`],
//!   chosen when the builder names the method, where a constant method folds to its site);
//!   its `run` hands the attempt to its closure, so that attempt is made at once (as is one
//!   of a builder call with its own operation name);
//! - if the body completes in that first poll, successfully, and nothing read the attempt's
//!   time or opened the scope, the call is counted in the entry's batch (as the full path
//!   counts such a call) and is over.
//!
//! Anything else (the body waits, fails, or read the time) continues on the full path from
//! where the first poll left it, with the attempt that was made, if one was: the same attempt,
//! deadline, timeout, scope and counting as a call that took the full path from the start.
//! Every other case (a cache miss, a bulkhead, a breaker not closed, spans enabled, an
//! enclosing scope) takes the full path from the start.

use std::borrow::Cow;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use crate::IdempotencyKey;
use crate::ambient::{self, LazyFirst};
use crate::attempt::{Attempt, Fresh};
use crate::call::{CallSite, CallSpec};
use crate::call_core::{attempt_span, call_span};
use crate::engine::Safety;
use crate::hot::{self, Cache, HeldUpstream};
use crate::lazy_clock::{Deadline, Start};
use crate::registry::Upstream;
use crate::scope::{OpName, Operation, Unopened};
use crate::thread;

/// A lazy call's method and operation name: a static call site (`#[retry]`'s own, or one of
/// [`BUILDER_SITES`] for a builder call with a standard method and no operation name), or the
/// builder's own.
#[derive(Debug, Clone)]
pub(crate) enum What {
    Site(&'static CallSite),
    Owned {
        method: http::Method,
        operation: Option<Cow<'static, str>>,
    },
}

impl What {
    /// A `What` that owns nothing, left in place of one taken out.
    const NOTHING: What = What::Site(&BUILDER_SITES[0]);

    /// A builder call's: one of [`BUILDER_SITES`] if it can be (chosen here, where a constant
    /// method folds to its site, rather than on every first attempt).
    #[inline]
    pub(crate) fn of(method: http::Method, operation: Option<Cow<'static, str>>) -> What {
        match builder_site(&method, operation.as_ref()) {
            Some(site) => What::Site(site),
            None => What::Owned { method, operation },
        }
    }

    pub(crate) fn method(&self) -> &http::Method {
        match self {
            What::Site(site) => &site.method,
            What::Owned { method, .. } => method,
        }
    }

    /// The name of the call's own scope, if it is not named after its upstream (a site's empty
    /// name is not one).
    fn operation(&self) -> Option<&str> {
        match self {
            What::Site(site) => site.own_operation(),
            What::Owned { operation, .. } => operation.as_deref(),
        }
    }

    /// [`operation`](Self::operation), owned.
    #[inline]
    fn op_name(&self) -> Option<OpName> {
        match self {
            What::Site(site) => site.own_operation().map(OpName::Static),
            What::Owned { operation, .. } => operation.clone().map(OpName::from),
        }
    }

    /// The static site that names its upstream, whose address keys the thread's cache: never
    /// one of [`BUILDER_SITES`], which every upstream shares.
    #[inline]
    fn keyed_site(&self) -> Option<&'static CallSite> {
        match self {
            What::Site(site) if !site.upstream.is_empty() => Some(*site),
            _ => None,
        }
    }
}

/// A call made by [`Call::at`](crate::Call::at) or [`Call::lazy`](crate::Call::lazy) and not
/// started.
///
/// The parts that may own something are dropped by [`Lazy`]'s own `Drop`, which checks inline
/// whether there is anything to drop: a call that ended on the fast path (a static site, the
/// key with the marker or none, nothing made) then calls no drop glue at all. Generated glue
/// was an out-of-line call per part, about a tenth of such a call's instructions.
#[derive(Debug)]
pub(crate) struct Lazy<'r> {
    registry: &'r crate::Registry,
    upstream: &'r str,
    replay: crate::Replayability,
    what: ManuallyDrop<What>,
    /// `None` while `#[retry]`'s fast first attempt runs (its marker holds the key then).
    key: ManuallyDrop<Option<IdempotencyKey>>,
    /// Its first attempt succeeded on the fast path, which counted the call: it is over.
    pub(crate) succeeded: bool,
    /// What a fast first attempt made and left behind (see [`Entered::leave`]).
    made: ManuallyDrop<Made>,
}

impl Drop for Lazy<'_> {
    #[inline]
    fn drop(&mut self) {
        let owns_nothing = matches!(*self.what, What::Site(_))
            && self.key.is_none()
            && matches!(*self.made, Made::Nothing);
        if !owns_nothing {
            self.drop_parts();
        }
    }
}

impl Lazy<'_> {
    /// Drops what the parts own, leaving parts that own nothing.
    #[cold]
    #[inline(never)]
    fn drop_parts(&mut self) {
        drop(std::mem::replace(&mut *self.what, What::NOTHING));
        drop(self.key.take());
        drop(std::mem::replace(&mut *self.made, Made::Nothing));
    }
}

/// What a fast first attempt made and left behind.
#[derive(Debug)]
enum Made {
    Nothing,
    /// The attempt of a body that succeeded, to recycle when the call ends.
    Recycle(#[allow(dead_code, reason = "held for what its drop does")] Recycled),
    /// The attempt (and the scope, if opened) for the full path, which takes the attempt over.
    Continue(Attempt, Option<Operation>),
}

/// An attempt recycled when dropped (once its body's future, which may hold a handle to it,
/// is gone).
#[derive(Debug)]
struct Recycled(Option<Attempt>);

impl Drop for Recycled {
    fn drop(&mut self) {
        if let Some(attempt) = self.0.take() {
            attempt.recycle();
        }
    }
}

impl<'r> Lazy<'r> {
    #[inline]
    pub(crate) fn at(
        registry: &'r crate::Registry,
        site: &'static CallSite,
        key: Option<IdempotencyKey>,
    ) -> Self {
        Lazy {
            registry,
            upstream: site.upstream,
            replay: crate::Replayability::Replayable,
            what: ManuallyDrop::new(What::Site(site)),
            key: ManuallyDrop::new(key),
            succeeded: false,
            made: ManuallyDrop::new(Made::Nothing),
        }
    }

    #[inline]
    pub(crate) fn new(spec: CallSpec<'r>) -> Self {
        let what = What::of(spec.method, spec.operation);
        Lazy::builder(spec.registry, spec.upstream, what, spec.key, spec.replay)
    }

    /// A builder call's.
    #[inline]
    pub(crate) fn builder(
        registry: &'r crate::Registry,
        upstream: &'r str,
        what: What,
        key: Option<IdempotencyKey>,
        replay: crate::Replayability,
    ) -> Self {
        Lazy {
            registry,
            upstream,
            replay,
            what: ManuallyDrop::new(what),
            key: ManuallyDrop::new(key),
            succeeded: false,
            made: ManuallyDrop::new(Made::Nothing),
        }
    }

    /// The call's spec, to start it.
    pub(crate) fn into_spec(mut self) -> CallSpec<'r> {
        // What `Drop` then finds owns nothing.
        let what = std::mem::replace(&mut *self.what, What::NOTHING);
        let (method, operation) = match what {
            What::Site(site) => (site.method.clone(), site.own_operation().map(Cow::Borrowed)),
            What::Owned { method, operation } => (method, operation),
        };
        CallSpec {
            registry: self.registry,
            upstream: self.upstream,
            method,
            key: self.key.take(),
            replay: self.replay,
            operation,
        }
    }

    pub(crate) fn registry(&self) -> &'r crate::Registry {
        self.registry
    }

    pub(crate) fn upstream(&self) -> &'r str {
        self.upstream
    }

    pub(crate) fn downgrade_replay(&mut self, replay: crate::Replayability) {
        self.replay = self.replay.min(replay);
    }

    /// What the fast first attempt made for the full path to take over.
    pub(crate) fn take_continued(&mut self) -> Option<(Attempt, Option<Operation>)> {
        match std::mem::replace(&mut *self.made, Made::Nothing) {
            Made::Continue(attempt, opened) => Some((attempt, opened)),
            made => {
                *self.made = made;
                None
            }
        }
    }
}

/// A fast first attempt in progress: the cache slot lent to it and the marker installed,
/// until [`leave`](Entered::leave) (or a panic in its body) takes them back.
#[derive(Debug)]
pub(crate) struct Entered {
    // Small enough, with `live`, that `First` comes back from `Call::first` in registers.
    slot: u32,
    live: bool,
}

/// What the full path takes over from a first attempt that did not take the fast path: the
/// entry found and the spans made, if they were.
#[derive(Debug)]
pub(crate) struct Handed {
    pub(crate) held: HeldUpstream,
    pub(crate) spans: Option<(tracing::Span, tracing::Span)>,
}

/// How a lazy call's first attempt starts.
pub(crate) enum Enter {
    /// On the fast path: poll the body, then leave.
    Fast(Entered),
    /// On the full path, from what the fast path found (if anything: only when spans are
    /// enabled, which costs more than this allocation).
    Full(Option<Box<Handed>>),
}

/// How a fast first attempt's first poll left.
pub(crate) enum Left {
    /// It succeeded and nothing read its time or opened its scope: the call was counted and
    /// is over.
    Ended,
    /// The full path takes over the lent entry in `slot`, with the attempt (and the scope, if
    /// it was opened) made because the body asked, if it asked: waiting in the lazy call (so
    /// this comes back in registers).
    Continue { slot: u32 },
}

/// Whether any subscriber may enable an `INFO` span (one load): when none may, the call's and
/// the attempt's spans are certainly disabled, and need not be made to find out.
#[inline]
fn spans_may_be_enabled() -> bool {
    use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};
    STATIC_MAX_LEVEL >= LevelFilter::INFO && LevelFilter::current() >= LevelFilter::INFO
}

/// The call sites of the builder's `call` (its closure is not given the attempt) for the
/// standard methods, its scope named after its upstream (an empty operation name, see
/// [`make`]): such a call's marker points at one of these, as `#[retry]`'s points at its own.
/// Only the marker uses them: every upstream shares them, so the cache entry is still found by
/// the upstream's name (see [`What::keyed_site`]).
static BUILDER_SITES: [CallSite; 9] = [
    CallSite::new("", http::Method::GET, ""),
    CallSite::new("", http::Method::HEAD, ""),
    CallSite::new("", http::Method::OPTIONS, ""),
    CallSite::new("", http::Method::POST, ""),
    CallSite::new("", http::Method::PUT, ""),
    CallSite::new("", http::Method::PATCH, ""),
    CallSite::new("", http::Method::DELETE, ""),
    CallSite::new("", http::Method::TRACE, ""),
    CallSite::new("", http::Method::CONNECT, ""),
];

/// The static site of a builder call that can make its attempt lazily: a standard method and
/// no operation name of its own (else the attempt is made at once).
#[inline]
fn builder_site(
    method: &http::Method,
    operation: Option<&Cow<'static, str>>,
) -> Option<&'static CallSite> {
    if operation.is_some() {
        return None;
    }
    let index = match *method {
        http::Method::GET => 0,
        http::Method::HEAD => 1,
        http::Method::OPTIONS => 2,
        http::Method::POST => 3,
        http::Method::PUT => 4,
        http::Method::PATCH => 5,
        http::Method::DELETE => 6,
        http::Method::TRACE => 7,
        http::Method::CONNECT => 8,
        _ => return None,
    };
    BUILDER_SITES.get(index)
}

/// Enters `lazy`'s first attempt on the fast path if it can take it (see the module docs).
/// `needs_attempt`: the body is made from the attempt (the builder's `run`), which is then
/// made at once.
#[inline]
pub(crate) fn enter(lazy: &mut Lazy<'_>, needs_attempt: bool) -> Enter {
    let registry = lazy.registry.generation();
    // One access to this thread's state: nothing installed (else the full path joins what is),
    // and the entry cached, free to start (else the full path waits for a bulkhead, fails
    // fast on an open breaker, or reports that no time was left).
    let entered = thread::with(|thread| {
        let mut slots = thread.ambient.try_borrow_mut().ok()?;
        if !slots.is_empty() || thread.marker.is_installed() {
            return None;
        }
        let mut cache = thread.cache.try_borrow_mut().ok()?;
        let slot = cache.lend(registry, lazy.upstream, lazy.what.keyed_site())?;
        if spans_may_be_enabled()
            && let Some(handed) = spans_enabled(&mut cache, slot, lazy)
        {
            return Some(Enter::Full(Some(handed)));
        }
        match &*lazy.what {
            // `#[retry]`, and the builder's `call`: made when asked, from the static site.
            What::Site(site) if !needs_attempt => {
                let first = LazyFirst {
                    slot,
                    site: Some(site),
                };
                slots.install_lazy(&thread.marker, first, lazy.key.take(), None);
            }
            // The builder's `run`, whose closure is given the attempt (or a builder call with
            // its own operation name or an extension method): made now.
            what => {
                let made = cache.with_lent(slot, |upstream, spare| {
                    fill_first(upstream, spare, what, lazy.key.as_ref())
                });
                let first = LazyFirst { slot, site: None };
                slots.install_lazy(&thread.marker, first, None, Some(made));
            }
        }
        Some(Enter::Fast(Entered {
            slot: slot as u32,
            live: true,
        }))
    });
    match entered {
        Ok(Some(enter)) => enter,
        _ => Enter::Full(None),
    }
}

/// Spans may be enabled: made now, as the full path would make them, and if either is, the
/// full path takes the attempt over with them and the entry.
#[cold]
#[inline(never)]
fn spans_enabled(cache: &mut Cache, slot: usize, lazy: &Lazy<'_>) -> Option<Box<Handed>> {
    let spans = cache.with_lent(slot, |upstream, _| {
        let method = lazy.what.method();
        let safety = Safety::of(
            method,
            lazy.key.is_some(),
            upstream.config().dedups_idempotency_key,
        );
        let operation = lazy.what.operation().unwrap_or(upstream.name());
        let call = call_span(
            upstream.name(),
            operation,
            method,
            safety,
            lazy.key.as_ref(),
        );
        let attempt = attempt_span(&call, 1, method);
        (call, attempt)
    });
    if spans.0.is_disabled() && spans.1.is_disabled() {
        return None;
    }
    Some(Box::new(Handed {
        held: cache.take_lent(slot),
        spans: Some(spans),
    }))
}

impl Entered {
    /// Leaves the first attempt's first poll: [`Left::Ended`] if it `succeeded` and nothing
    /// read its time or opened its scope (the call was counted and is over).
    #[inline]
    pub(crate) fn leave(mut self, lazy: &mut Lazy<'_>, succeeded: bool) -> Left {
        self.live = false;
        let (slot, key) = (self.slot as usize, &mut *lazy.key);
        let left = thread::with(|thread| {
            let made = thread.marker.leave(&thread.ambient, key);
            if succeeded && made.is_none() {
                thread.cache.borrow_mut().give_back_happy(slot);
                return None;
            }
            Some(made)
        });
        match left {
            Ok(None) => {
                lazy.succeeded = true;
                Left::Ended
            }
            Ok(Some(made)) => Self::leave_made(lazy, slot, made, succeeded),
            Err(_) => unreachable!("the thread running the attempt is not ending"),
        }
    }

    /// Leaves a first poll that made the attempt: the call still ends here if the attempt
    /// succeeded and nothing read its time or opened its scope, as the full path would count
    /// it the same way; its state is kept for the next call (or recycled when this one ends).
    #[cold]
    fn leave_made(
        lazy: &mut Lazy<'_>,
        slot: usize,
        made: Option<(Attempt, Option<Operation>)>,
        succeeded: bool,
    ) -> Left {
        let attempt = match made {
            Some((attempt, None)) if succeeded && attempt.started_unread() => attempt,
            made => {
                if let Some((attempt, opened)) = made {
                    *lazy.made = Made::Continue(attempt, opened);
                }
                return Left::Continue { slot: slot as u32 };
            }
        };
        let unparked = thread::with(|thread| {
            let mut cache = thread.cache.borrow_mut();
            let unparked = cache.park_lent(slot, attempt);
            cache.give_back_happy(slot);
            unparked
        });
        lazy.succeeded = true;
        *lazy.made = match unparked {
            Ok(Some(attempt)) => Made::Recycle(Recycled(Some(attempt))),
            Ok(None) => Made::Nothing,
            Err(_) => unreachable!("the thread running the attempt is not ending"),
        };
        Left::Ended
    }
}

impl Drop for Entered {
    /// The body panicked: nothing stays installed or lent.
    #[inline]
    fn drop(&mut self) {
        if self.live {
            self.clean_up();
        }
    }
}

impl Entered {
    #[cold]
    fn clean_up(&mut self) {
        ambient::drop_lazy();
        hot::unlend(self.slot as usize);
    }
}

/// Takes the lent entry in `slot` out of this thread's cache, for the full path.
pub(crate) fn take_lent(slot: u32) -> HeldUpstream {
    hot::take_lent(slot as usize)
}

/// Makes a lazy call's first attempt and the call's unopened scope from its marker and key. An
/// empty operation name (the builder's sites) names the scope after the upstream.
pub(crate) fn make(first: LazyFirst, key: Option<&IdempotencyKey>) -> (Attempt, Unopened) {
    let Some(site) = first.site else {
        unreachable!("a marker without a call site has its attempt made already")
    };
    hot::with_lent(first.slot, |upstream, spare| {
        fill_first(upstream, spare, &What::Site(site), key)
    })
}

/// A first attempt and its call's unopened scope, exactly as the full path would have made
/// them: attempt 1, the whole deadline after a start not read yet, the attempt timeout within
/// it, the upstream's retries.
///
/// Takes the call's [`What`] rather than its method and name: a name made by the caller and
/// passed in went through memory written in parts and read back whole, which stalled; so did
/// the pair returned, when this was not inlined.
#[inline]
fn fill_first(
    upstream: &Arc<Upstream>,
    spare: &mut Option<Attempt>,
    what: &What,
    key: Option<&IdempotencyKey>,
) -> (Attempt, Unopened) {
    let config = upstream.config();
    let method = what.method();
    let unopened = Unopened::new(what.op_name(), config.max_attempts.saturating_sub(1));
    let attempt = Attempt::fill(spare.take(), upstream, |facts| {
        facts.renew(Fresh {
            number: 1,
            method,
            key,
            deadline: Deadline::AfterStart(config.deadline),
            timeout: config.attempt_timeout.min(config.deadline),
            started: Start::unread(),
            retries_left: Some(unopened.retries_left()),
            span: tracing::Span::none(),
        })
    });
    (attempt, unopened)
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
        match call.first(false) {
            First::Fast(entered) => {
                assert!(
                    matches!(call.leave_first(entered, true), super::Left::Ended),
                    "a success ends it"
                );
                assert_eq!(call.attempts(), 1);
                true
            }
            First::Full(_) | First::Failed(_) => false,
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
        let crate::call::First::Failed(error) = call.first(false) else {
            panic!("an unknown upstream fails the first attempt")
        };
        assert!(matches!(*error, crate::Error::UnknownUpstream { .. }));
    }
}
