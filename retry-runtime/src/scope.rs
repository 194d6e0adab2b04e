//! The operation scope: one deadline and one retry allowance per business operation.
//!
//! Two layers that each allow 3 attempts turn one user action into 9 calls on a failing
//! dependency. The scope fixes that: every retrying call inside one operation shares
//! the scope's absolute deadline and its retry allowance, so the operation as a whole makes at
//! most the first owner's attempts, however deep the call chain.
//!
//! A scope is opened explicitly with [`operation`] or implicitly by the first retrying call
//! that finds none. It is installed while the future that opened it is polled (see
//! `ambient.rs`), so it follows the future, not the thread. A call's deadline is the earlier of
//! its upstream's operation deadline and its scope's, fixed when the call starts.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::deadline::{deadline_after, min_deadline};

const UNSET: u32 = u32::MAX;

/// Retries left for a whole operation, shared by every retrying call inside it.
#[derive(Debug)]
struct Allowance {
    /// [`UNSET`] until the first retrying call (or the scope's opener) fixes the limit.
    retries_left: AtomicU32,
    /// Incremented whenever a retrying call inside returns a failure it already retried, so an
    /// enclosing call can tell that its attempt's failure was retried below.
    retried_failures: AtomicU64,
    /// Set when a retrying call inside was denied its retry because its upstream is unhealthy
    /// or saturated fleet-wide (budget exhausted, breaker open, bulkhead full), so the server
    /// layer can tell its caller not to retry the whole chain either.
    overloaded: AtomicBool,
}

impl Allowance {
    fn new(retries: Option<u32>) -> Self {
        Allowance {
            retries_left: AtomicU32::new(retries.map_or(UNSET, |r| r.min(UNSET - 1))),
            retried_failures: AtomicU64::new(0),
            overloaded: AtomicBool::new(false),
        }
    }
}

/// An operation's name: static in the common case, so naming costs no allocation.
#[derive(Debug, Clone)]
pub(crate) enum OpName {
    Static(&'static str),
    Shared(Arc<str>),
}

impl OpName {
    fn as_str(&self) -> &str {
        match self {
            OpName::Static(s) => s,
            OpName::Shared(s) => s,
        }
    }
}

impl From<String> for OpName {
    fn from(name: String) -> Self {
        OpName::Shared(name.into())
    }
}

impl From<Cow<'static, str>> for OpName {
    #[inline]
    fn from(name: Cow<'static, str>) -> Self {
        match name {
            Cow::Borrowed(s) => OpName::Static(s),
            Cow::Owned(s) => OpName::Shared(s.into()),
        }
    }
}

/// A handle to the current business operation: its name, absolute deadline and shared retry
/// allowance. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Operation {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    name: OpName,
    deadline: Option<Instant>,
    /// The allowance of a root scope; a nested scope uses its root's.
    allowance: Allowance,
    /// The root scope, for a nested scope.
    root: Option<Operation>,
}

impl Operation {
    /// The operation's name (for traces).
    pub fn name(&self) -> &str {
        self.inner.name.as_str()
    }

    fn allowance(&self) -> &Allowance {
        match &self.inner.root {
            Some(root) => &root.inner.allowance,
            None => &self.inner.allowance,
        }
    }

    /// The absolute deadline, if one was set.
    pub fn deadline(&self) -> Option<Instant> {
        self.inner.deadline
    }

    /// Time left until the deadline (`None`: no deadline).
    pub fn remaining(&self) -> Option<Duration> {
        self.inner
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Retries the operation may still make (`None` while no limit has been fixed).
    pub fn retries_left(&self) -> Option<u32> {
        match self.allowance().retries_left.load(Ordering::Acquire) {
            UNSET => None,
            n => Some(n),
        }
    }

    /// Fixes the limit if none is set yet (the first retrying call owns it) and returns the
    /// retries left.
    pub(crate) fn init_allowance(&self, retries: u32) -> u32 {
        let a = &self.allowance().retries_left;
        match a.compare_exchange(
            UNSET,
            retries.min(UNSET - 1),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => retries.min(UNSET - 1),
            Err(current) => current,
        }
    }

    /// Takes one retry from the shared allowance; `false` when none is left.
    pub(crate) fn take_retry(&self) -> bool {
        self.allowance()
            .retries_left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| match n {
                0 => None,
                UNSET => Some(UNSET),
                n => Some(n - 1),
            })
            .is_ok()
    }

    /// Gives back a retry taken by [`take_retry`](Self::take_retry) that did not happen.
    pub(crate) fn give_back_retry(&self) {
        let _ =
            self.allowance()
                .retries_left
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    if n == UNSET { None } else { Some(n + 1) }
                });
    }

    pub(crate) fn retried_failures(&self) -> u64 {
        self.inner
            .allowance
            .retried_failures
            .load(Ordering::Acquire)
    }

    pub(crate) fn note_retried_failure(&self) {
        self.inner
            .allowance
            .retried_failures
            .fetch_add(1, Ordering::AcqRel);
        // Retried below is retried below for every enclosing scope too: the root's retrying
        // calls and the server layer (which reads the root) must see it.
        if let Some(root) = &self.inner.root {
            root.inner
                .allowance
                .retried_failures
                .fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Whether a retrying call in this operation was denied for an upstream-wide reason.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) fn overloaded(&self) -> bool {
        self.allowance().overloaded.load(Ordering::Acquire)
    }

    pub(crate) fn note_overloaded(&self) {
        self.allowance().overloaded.store(true, Ordering::Release);
    }

    /// A root operation (no enclosing scope).
    pub(crate) fn root(
        name: impl Into<OpName>,
        deadline: Option<Instant>,
        retries: Option<u32>,
    ) -> Self {
        Operation {
            inner: Arc::new(Inner {
                name: name.into(),
                deadline,
                allowance: Allowance::new(retries),
                root: None,
            }),
        }
    }

    /// A scope nested in `self`: the earlier deadline wins and the allowance is shared.
    pub(crate) fn nested(&self, name: impl Into<OpName>, deadline: Option<Instant>) -> Self {
        let root = self.inner.root.clone().unwrap_or_else(|| self.clone());
        Operation {
            inner: Arc::new(Inner {
                name: name.into(),
                deadline: min_deadline(self.inner.deadline, deadline),
                allowance: Allowance::new(None),
                root: Some(root),
            }),
        }
    }
}

/// The scope an attempt's frame installs.
#[derive(Debug)]
pub(crate) enum Installs {
    /// The call's scope: the one it joined, or its own.
    Operation(Operation),
    /// The call's own scope, to open if the attempt asks for it.
    Unopened(Unopened),
}

/// The scope a retrying call runs in: an enclosing one it joined, or its own.
///
/// A call that finds no enclosing scope opens its own only when something needs it: a retrying
/// call nested in one of its attempts (which must share its deadline and allowance), or a
/// retry. Until then the scope is [`Unopened`], so a call whose first attempt succeeds opens
/// none.
#[derive(Debug)]
pub(crate) enum CallScope {
    /// An enclosing scope.
    Joined(Operation),
    /// The call's own scope, opened.
    Own(Operation),
    /// The call's own scope, not opened yet.
    Unopened(Unopened),
}

/// A scope to open when first needed (see [`CallScope`]).
#[derive(Debug, Clone)]
pub(crate) struct Unopened {
    /// `None`: named after the call's upstream (no reference counted name is held, or shared
    /// between threads, until the scope opens).
    name: Option<OpName>,
    retries_left: u32,
}

impl Unopened {
    pub(crate) fn new(name: Option<OpName>, retries: u32) -> Self {
        Unopened {
            name,
            retries_left: retries.min(UNSET - 1),
        }
    }

    /// Opens the scope, with what is left of its allowance and the call's `deadline`;
    /// `upstream` names a scope that has no name of its own.
    pub(crate) fn open(
        self,
        upstream: impl FnOnce() -> OpName,
        deadline: Option<Instant>,
    ) -> Operation {
        let name = self.name.unwrap_or_else(upstream);
        Operation::root(name, deadline, Some(self.retries_left))
    }
}

impl CallScope {
    /// The scope's name; `upstream` is the name of a scope named after the call's upstream.
    pub(crate) fn name<'a>(&'a self, upstream: &'a str) -> &'a str {
        match self {
            CallScope::Joined(op) | CallScope::Own(op) => op.name(),
            CallScope::Unopened(u) => u.name.as_ref().map_or(upstream, OpName::as_str),
        }
    }

    pub(crate) fn retries_left(&self) -> Option<u32> {
        match self {
            CallScope::Joined(op) | CallScope::Own(op) => op.retries_left(),
            CallScope::Unopened(u) => Some(u.retries_left),
        }
    }

    pub(crate) fn retried_failures(&self) -> u64 {
        match self {
            CallScope::Joined(op) | CallScope::Own(op) => op.retried_failures(),
            CallScope::Unopened(_) => 0,
        }
    }

    /// Nothing to tell when the scope was never opened: nobody else can see it.
    pub(crate) fn note_retried_failure(&self) {
        if let CallScope::Joined(op) | CallScope::Own(op) = self {
            op.note_retried_failure();
        }
    }

    pub(crate) fn note_overloaded(&self) {
        if let CallScope::Joined(op) | CallScope::Own(op) = self {
            op.note_overloaded();
        }
    }

    pub(crate) fn take_retry(&mut self) -> bool {
        match self {
            CallScope::Joined(op) | CallScope::Own(op) => op.take_retry(),
            CallScope::Unopened(u) => match u.retries_left.checked_sub(1) {
                Some(n) => {
                    u.retries_left = n;
                    true
                }
                None => false,
            },
        }
    }

    pub(crate) fn give_back_retry(&mut self) {
        match self {
            CallScope::Joined(op) | CallScope::Own(op) => op.give_back_retry(),
            CallScope::Unopened(u) => u.retries_left = u.retries_left.saturating_add(1),
        }
    }

    /// What an attempt installs: its own scope (opened or not), or nothing when it joined one
    /// (the enclosing scope is installed already).
    pub(crate) fn for_attempt(&self) -> Installs {
        match self {
            CallScope::Joined(op) | CallScope::Own(op) => Installs::Operation(op.clone()),
            CallScope::Unopened(u) => Installs::Unopened(u.clone()),
        }
    }

    /// Opens the call's own scope now if it is not open yet, so several copies of an attempt in
    /// flight at once share one scope (each installs a clone of what this holds).
    pub(crate) fn open_now(&mut self, upstream: &Arc<str>, deadline: Instant) {
        if let CallScope::Unopened(u) = self {
            let op = u
                .clone()
                .open(|| OpName::Shared(upstream.clone()), Some(deadline));
            *self = CallScope::Own(op);
        }
    }

    /// After an attempt: a nested call may have opened the scope.
    pub(crate) fn adopt(&mut self, opened: Option<Operation>) {
        if let (CallScope::Unopened(_), Some(op)) = (&*self, opened) {
            *self = CallScope::Own(op);
        }
    }
}

/// Opens a business operation scope: every retrying call inside shares its deadline and retry
/// allowance.
///
/// ```
/// use std::time::Duration;
/// # async fn checkout() -> Result<(), ()> { Ok(()) }
/// # async fn run() {
/// let result = retry_runtime::operation("checkout")
///     .deadline(Duration::from_millis(300))
///     .max_retries(2)
///     .run(checkout())
///     .await;
/// # }
/// ```
pub fn operation(name: impl Into<Cow<'static, str>>) -> OperationBuilder {
    OperationBuilder {
        name: name.into(),
        timeout: None,
        max_retries: None,
    }
}

/// Configures an operation scope before running it; see [`operation`].
///
/// # Default
/// - no deadline of its own (an enclosing scope's, or each upstream's default operation
///   deadline, still applies)
/// - the retry allowance is fixed by the first retrying call inside (its max attempts - 1)
#[derive(Debug, Clone)]
#[must_use = "an operation does nothing until `.run(fut)` is awaited"]
pub struct OperationBuilder {
    name: Cow<'static, str>,
    timeout: Option<Duration>,
    max_retries: Option<u32>,
}

impl OperationBuilder {
    /// The operation must finish within `timeout` from when `run` starts. Nested inside another
    /// operation, the earlier of the two deadlines applies.
    pub fn deadline(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// At most `retries` retries across every retrying call inside (a root scope only; a nested
    /// scope shares its parent's allowance).
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = Some(retries);
        self
    }

    /// The scope this builder describes, nested in `parent` if there is one (see
    /// [`run`](Self::run)).
    pub(crate) fn build(self, parent: Option<Operation>) -> Operation {
        let deadline = self.timeout.map(|t| deadline_after(Instant::now(), t));
        match parent {
            Some(parent) => parent.nested(self.name, deadline),
            None => Operation::root(self.name, deadline, self.max_retries),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn nested_scopes_take_the_earlier_deadline_and_share_the_allowance() {
        let start = Instant::now();
        operation("outer")
            .deadline(Duration::from_millis(300))
            .max_retries(2)
            .run(async {
                let outer = Operation::current().unwrap();
                operation("inner")
                    .deadline(Duration::from_secs(10))
                    .run(async {
                        let inner = Operation::current().unwrap();
                        assert_eq!(inner.name(), "inner");
                        assert_eq!(inner.deadline(), Some(start + Duration::from_millis(300)));
                        assert!(inner.take_retry());
                    })
                    .await;
                assert_eq!(outer.retries_left(), Some(1));
                operation("tighter")
                    .deadline(Duration::from_millis(100))
                    .run(async {
                        let d = Operation::current().unwrap().deadline();
                        assert_eq!(d, Some(start + Duration::from_millis(100)));
                    })
                    .await;
            })
            .await;
        assert!(Operation::current().is_none());
    }

    #[tokio::test]
    async fn an_unopened_scope_counts_its_allowance_and_adopts_the_scope_opened_for_it() {
        let mut scope = CallScope::Unopened(Unopened::new(Some(OpName::Static("s")), 1));
        assert_eq!(scope.retries_left(), Some(1));
        assert!(scope.take_retry());
        assert!(!scope.take_retry(), "never below zero");
        scope.give_back_retry();
        assert_eq!(scope.retries_left(), Some(1));
        let Installs::Unopened(unopened) = scope.for_attempt() else {
            panic!("an unopened scope is installed unopened");
        };
        let opened = unopened.open(|| OpName::Static("unused"), None);
        assert_eq!(opened.retries_left(), Some(1), "opened with what is left");
        scope.adopt(Some(opened.clone()));
        assert!(matches!(scope, CallScope::Own(_)));
        assert!(scope.take_retry());
        assert_eq!(
            opened.retries_left(),
            Some(0),
            "the call now spends the shared allowance"
        );
    }

    #[tokio::test]
    async fn allowance_is_fixed_once_and_never_underflows() {
        let op = Operation::root(OpName::Static("x"), None, None);
        assert_eq!(op.retries_left(), None);
        assert_eq!(op.init_allowance(2), 2);
        assert_eq!(op.init_allowance(5), 2, "the first owner fixes the limit");
        assert!(op.take_retry());
        assert!(op.take_retry());
        assert!(!op.take_retry());
        assert_eq!(op.retries_left(), Some(0));
        op.give_back_retry();
        assert_eq!(op.retries_left(), Some(1));
    }
}
