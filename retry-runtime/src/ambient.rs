//! What follows a future as it is polled: the operation scope and the attempt it runs in.
//!
//! A retrying call nested in another's attempt must join the outer operation (its deadline and
//! retry allowance), and the HTTP integration must find the attempt it sends for (its key,
//! number and deadline). Both are *installed* around each poll of the future that owns them:
//! lent, by reference, to one of this thread's two slots while the poll runs (the previous
//! value comes back when it ends, also on panic), so they follow the future from thread to
//! thread like a tokio task-local, with no allocation and nothing copied. The slots are
//! `scoped-tls` keys (a pointer set for the duration of a closure, nested polls nesting theirs):
//!
//! - `ATTEMPT`: the attempt in progress, with its call's scope (the one the call joined, or its
//!   own). An attempt is polled far more often than a scope is entered, so one slot serves both
//!   and an attempt's poll sets one pointer.
//! - `SCOPE`: a scope entered with [`Operation::scope`] or [`Operation::sync_scope`], which
//!   records the attempt it was entered inside. It is the current scope while that attempt is
//!   still the current one; inside an attempt started within it, that attempt's call's scope is
//!   nearer (usually the same one: a call joins the scope it starts in).
//!
//! The methods that read or install them ([`Operation::current`], [`Operation::scope`],
//! [`Attempt::current`], ...) live here, so `scope.rs` and `attempt.rs` need nothing from this
//! file.

use std::cell::{Cell, OnceCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::attempt::Attempt;
use crate::replay::Replayability;
use crate::scope::{Installs, OpName, Operation, OperationBuilder, Unopened};

scoped_tls::scoped_thread_local!(static ATTEMPT: Frame);
scoped_tls::scoped_thread_local!(static SCOPE: Entered);

/// An attempt to install while its body is polled, with its call's scope.
#[derive(Debug)]
pub(crate) struct Frame {
    attempt: Attempt,
    /// The weakest body replayability reported while the attempt ran.
    reported: Cell<Replayability>,
    /// The call's scope (`None` once taken back).
    scope: Option<FrameScope>,
}

/// A call's scope (the one it joined, or its own), as its attempt installs it.
#[derive(Debug)]
enum FrameScope {
    Open(Operation),
    /// Opened the first time something asks for it (see [`CallScope`](crate::scope::CallScope)).
    Unopened {
        unopened: Unopened,
        opened: OnceCell<Operation>,
    },
}

/// A scope entered with [`Operation::scope`] or [`Operation::sync_scope`].
#[derive(Debug)]
struct Entered {
    operation: Operation,
    /// The attempt installed when the scope was entered ([`attempt_id`]).
    inside: Cell<usize>,
}

/// Which attempt is installed: its frame's address (0: none). Only compared, while both frames
/// compared are installed (so alive and distinct).
fn attempt_id() -> usize {
    if ATTEMPT.is_set() {
        ATTEMPT.with(|frame| std::ptr::from_ref(frame).addr())
    } else {
        0
    }
}

impl Frame {
    /// Installs `attempt` and its call's scope.
    pub(crate) fn attempt(attempt: Attempt, scope: Installs) -> Self {
        Frame {
            attempt,
            reported: Cell::new(Replayability::Replayable),
            scope: Some(match scope {
                Installs::Operation(op) => FrameScope::Open(op),
                Installs::Unopened(unopened) => FrameScope::Unopened {
                    unopened,
                    opened: OnceCell::new(),
                },
            }),
        }
    }

    /// Once no poll is in progress: the scope opened while the frame was installed (or the one
    /// it installed).
    pub(crate) fn take_operation(&mut self) -> Option<Operation> {
        match self.scope.take()? {
            FrameScope::Open(op) => Some(op),
            FrameScope::Unopened { opened, .. } => opened.into_inner(),
        }
    }

    /// Once no poll is in progress: the weakest body replayability the attempt reported.
    pub(crate) fn reported(&self) -> Replayability {
        self.reported.get()
    }

    /// The attempt's span.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.attempt.span
    }

    /// Once the attempt ended: its span, for its call to record the outcome on.
    pub(crate) fn take_span(&mut self) -> tracing::Span {
        std::mem::replace(&mut self.attempt.span, tracing::Span::none())
    }

    /// Runs `f` with the frame installed; what was installed before comes back when `f`
    /// returns or panics.
    pub(crate) fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        ATTEMPT.set(self, f)
    }

    /// The call's scope, opened now if it was not: the first to ask opens it, for itself and
    /// for the call (which takes it back when its attempt ends), named after the attempt's
    /// upstream unless it has a name, and bounded by the attempt's deadline.
    fn call_scope(&self) -> Option<Operation> {
        match self.scope.as_ref()? {
            FrameScope::Open(op) => Some(op.clone()),
            FrameScope::Unopened { unopened, opened } => Some(
                opened
                    .get_or_init(|| {
                        unopened.clone().open(
                            || OpName::Shared(self.attempt.upstream.name_arc().clone()),
                            Some(self.attempt.deadline),
                        )
                    })
                    .clone(),
            ),
        }
    }
}

impl Entered {
    fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        self.inside.set(attempt_id());
        SCOPE.set(self, f)
    }
}

pin_project_lite::pin_project! {
    /// A future polled inside an operation scope.
    struct Scoped<F> {
        entered: Entered,
        #[pin]
        fut: F,
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let fut = this.fut;
        this.entered.run(|| fut.poll(cx))
    }
}

impl Operation {
    /// The operation scope the current task runs in, if any.
    pub fn current() -> Option<Operation> {
        let attempt = attempt_id();
        let entered = SCOPE.is_set();
        // A scope entered inside the attempt in progress (or, with no attempt, any scope
        // entered) is the nearest.
        if entered
            && let Some(op) =
                SCOPE.with(|e| (e.inside.get() == attempt).then(|| e.operation.clone()))
        {
            return Some(op);
        }
        if attempt != 0
            && let Some(op) = ATTEMPT.with(Frame::call_scope)
        {
            return Some(op);
        }
        entered.then(|| SCOPE.with(|e| e.operation.clone()))
    }

    /// Runs `f` (synchronously) inside this scope.
    pub fn sync_scope<R>(self, f: impl FnOnce() -> R) -> R {
        Entered {
            operation: self,
            inside: Cell::new(0),
        }
        .run(f)
    }

    /// Runs `fut` inside this scope.
    pub fn scope<F: Future>(self, fut: F) -> impl Future<Output = F::Output> {
        Scoped {
            entered: Entered {
                operation: self,
                inside: Cell::new(0),
            },
            fut,
        }
    }
}

impl OperationBuilder {
    /// Runs `fut` inside the scope. A deadline alone does not cancel `fut`: retrying calls
    /// inside stop starting attempts once it passes and clamp each attempt to what remains.
    pub async fn run<F: Future>(self, fut: F) -> F::Output {
        self.build(Operation::current()).scope(fut).await
    }
}

impl Attempt {
    /// The attempt the current task runs in, if any (a copy: see
    /// [`with_current`](Self::with_current) to read it in place).
    pub fn current() -> Option<Attempt> {
        Attempt::with_current(|a| a.cloned())
    }

    /// Runs `f` with the current attempt, without copying it.
    pub fn with_current<R>(f: impl FnOnce(Option<&Attempt>) -> R) -> R {
        if ATTEMPT.is_set() {
            ATTEMPT.with(|frame| f(Some(&frame.attempt)))
        } else {
            f(None)
        }
    }

    /// Reports, for the attempt the current task runs in, that the request it sends has a body
    /// of replayability `replay` (a streaming body is [`Replayability::OneShot`]). The call then
    /// decides with the weakest of its declaration and every report: the current attempt still
    /// runs, but a one-shot body is never retried. The HTTP integration calls this itself.
    /// Outside an attempt it does nothing.
    pub fn report_body(replay: Replayability) {
        if ATTEMPT.is_set() {
            ATTEMPT.with(|frame| frame.reported.set(frame.reported.get().min(replay)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &'static str) -> Operation {
        Operation::root(OpName::Static(name), None, None)
    }

    /// An attempt of a call in the scope `name`.
    fn attempt_in(number: u32, name: &'static str) -> Frame {
        Frame::attempt(
            crate::attempt::tests::attempt_number(number),
            Installs::Operation(op(name)),
        )
    }

    #[test]
    fn a_scope_leaves_the_attempt_and_restores_on_exit() {
        assert!(Operation::current().is_none());
        attempt_in(7, "call").run(|| {
            op("outer").sync_scope(|| {
                assert_eq!(Operation::current().unwrap().name(), "outer");
                op("inner").sync_scope(|| {
                    assert_eq!(Operation::current().unwrap().name(), "inner");
                    assert_eq!(Attempt::current().map(|a| a.number()), Some(7));
                });
                assert_eq!(Operation::current().unwrap().name(), "outer");
            });
            assert_eq!(Operation::current().unwrap().name(), "call");
        });
        assert!(Operation::current().is_none());
        Attempt::with_current(|a| assert!(a.is_none()));
    }

    #[tokio::test]
    async fn the_nearest_scope_is_current_whichever_slot_holds_it() {
        let own = |name| Installs::Operation(op(name));
        let outer = Frame::attempt(crate::attempt::tests::attempt_number(1), own("call"));
        outer.run(|| {
            assert_eq!(Operation::current().unwrap().name(), "call");
            op("entered").sync_scope(|| {
                assert_eq!(Operation::current().unwrap().name(), "entered");
                // A call that joined the entered scope: its attempt leaves it current.
                let entered = Operation::current().expect("entered");
                let joined = Frame::attempt(
                    crate::attempt::tests::attempt_number(2),
                    Installs::Operation(entered),
                );
                joined.run(|| {
                    assert_eq!(Operation::current().unwrap().name(), "entered");
                    assert_eq!(Attempt::current().map(|a| a.number()), Some(2));
                    op("deeper").sync_scope(|| {
                        assert_eq!(Operation::current().unwrap().name(), "deeper");
                    });
                });
                // An attempt with its own scope, inside the entered one: its own is nearer.
                let nested =
                    Frame::attempt(crate::attempt::tests::attempt_number(3), own("nested"));
                nested.run(|| assert_eq!(Operation::current().unwrap().name(), "nested"));
                assert_eq!(Operation::current().unwrap().name(), "entered");
            });
            assert_eq!(Operation::current().unwrap().name(), "call");
        });
        op("around").sync_scope(|| {
            let inside = Frame::attempt(crate::attempt::tests::attempt_number(1), own("own"));
            inside.run(|| assert_eq!(Operation::current().unwrap().name(), "own"));
            assert_eq!(Operation::current().unwrap().name(), "around");
        });
    }

    #[tokio::test]
    async fn an_unopened_scope_is_opened_once_by_the_first_to_ask_and_handed_back() {
        let unopened = Unopened::new(Some(OpName::Static("lazy")), 2);
        let mut frame = Frame::attempt(
            crate::attempt::tests::attempt(),
            Installs::Unopened(unopened),
        );
        frame.run(|| {
            let first = Operation::current().expect("opened on demand");
            let second = Operation::current().expect("the same scope");
            assert!(first.take_retry());
            assert_eq!(second.retries_left(), Some(1), "one scope, shared");
            assert_eq!(first.name(), "lazy");
        });
        assert!(Operation::current().is_none(), "nothing left installed");
        let opened = frame.take_operation().expect("handed back to the call");
        assert_eq!(opened.retries_left(), Some(1));

        let mut untouched = Frame::attempt(
            crate::attempt::tests::attempt(),
            Installs::Unopened(Unopened::new(Some(OpName::Static("idle")), 2)),
        );
        untouched.run(|| {});
        assert!(
            untouched.take_operation().is_none(),
            "never asked, never opened"
        );
    }

    #[tokio::test]
    async fn an_unnamed_scope_opens_named_after_and_bounded_by_its_attempt() {
        let attempt = crate::attempt::tests::attempt();
        let deadline = attempt.deadline;
        let mut frame = Frame::attempt(attempt, Installs::Unopened(Unopened::new(None, 1)));
        frame.run(|| Operation::current().expect("opened"));
        let opened = frame.take_operation().expect("handed back");
        assert_eq!(opened.name(), "up");
        assert_eq!(opened.deadline(), Some(deadline));
    }

    #[tokio::test]
    async fn a_report_reaches_the_frame_of_the_attempt_in_progress_only() {
        Attempt::report_body(Replayability::OneShot);
        let frame = attempt_in(1, "call");
        frame.run(|| Attempt::report_body(Replayability::Reopenable));
        assert_eq!(frame.reported(), Replayability::Reopenable);
        frame.run(|| {
            Attempt::report_body(Replayability::OneShot);
            Attempt::report_body(Replayability::Replayable);
        });
        assert_eq!(frame.reported(), Replayability::OneShot, "the weakest wins");
        let next = attempt_in(1, "call");
        next.run(|| {});
        assert_eq!(next.reported(), Replayability::Replayable, "nothing leaks");
    }

    #[test]
    fn a_panic_inside_restores_the_previous_frame() {
        let caught = std::panic::catch_unwind(|| op("boom").sync_scope(|| panic!("inside")));
        assert!(caught.is_err());
        assert!(Operation::current().is_none());
        let frame = attempt_in(1, "call");
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            frame.run(|| panic!("inside"))
        }));
        assert!(caught.is_err());
        assert!(Attempt::current().is_none());
    }
}
