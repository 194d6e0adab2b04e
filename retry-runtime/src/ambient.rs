//! What follows a future as it is polled: the operation scope and the attempt it runs in.
//!
//! A retrying call nested in another's attempt must join the outer operation (its deadline and
//! retry allowance), and the HTTP integration must find the attempt it sends for (its key,
//! number and deadline). Both are *installed* around each poll of the future that owns them: a
//! [`Frame`] swaps its values into this thread's slots when the poll starts and back out when it
//! ends (also on panic), so they follow the future from thread to thread, like a tokio task-local,
//! with no allocation. The methods that read or install them ([`Operation::current`],
//! [`Operation::scope`], [`Attempt::current`], ...) live here, so `scope.rs` and `attempt.rs`
//! need nothing from this file.

use std::cell::RefCell;
use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::attempt::Attempt;
use crate::replay::Replayability;
use crate::scope::{Installs, OpName, Operation, OperationBuilder, Unopened};

/// What is installed now on this thread.
#[derive(Debug)]
struct Slots {
    /// The operation installed (an enclosing scope, or a call's own once opened).
    operation: Option<Operation>,
    /// A call's own scope, not opened yet: opened the first time something asks for it.
    unopened: Option<Unopened>,
    /// The attempt in progress.
    attempt: Option<Attempt>,
    /// The weakest body replayability the attempt in progress reported.
    reported: Replayability,
}

thread_local! {
    static SLOTS: RefCell<Slots> = const {
        RefCell::new(Slots {
            operation: None,
            unopened: None,
            attempt: None,
            reported: Replayability::Replayable,
        })
    };
}

/// An operation and/or an attempt to install while a future is polled.
#[derive(Debug)]
pub(crate) struct Frame {
    operation: Option<Operation>,
    unopened: Option<Unopened>,
    attempt: Option<Attempt>,
    reported: Replayability,
    sets_operation: bool,
    sets_attempt: bool,
}

impl Frame {
    /// Installs `operation` and leaves the attempt as it is.
    pub(crate) fn operation(operation: Operation) -> Self {
        Frame {
            operation: Some(operation),
            unopened: None,
            attempt: None,
            reported: Replayability::Replayable,
            sets_operation: true,
            sets_attempt: false,
        }
    }

    /// Installs `attempt` and the call's own scope (a call that joined an enclosing scope
    /// leaves it installed as it is).
    pub(crate) fn attempt(attempt: Attempt, scope: Installs) -> Self {
        let (operation, unopened) = match scope {
            Installs::Nothing => (None, None),
            Installs::Operation(op) => (Some(op), None),
            Installs::Unopened(u) => (None, Some(u)),
        };
        Frame {
            sets_operation: operation.is_some() || unopened.is_some(),
            operation,
            unopened,
            attempt: Some(attempt),
            reported: Replayability::Replayable,
            sets_attempt: true,
        }
    }

    /// Once no poll is in progress: the scope opened while the frame was installed (or the one
    /// it installed).
    pub(crate) fn take_operation(&mut self) -> Option<Operation> {
        self.operation.take()
    }

    /// Once no poll is in progress: the weakest body replayability the attempt reported.
    pub(crate) fn reported(&self) -> Replayability {
        self.reported
    }

    /// Installs the frame until the guard drops (also when the code inside panics).
    pub(crate) fn enter(&mut self) -> Entered<'_> {
        self.swap();
        Entered { frame: self }
    }

    /// Exchanges what this frame sets with what is installed: entering and leaving are the
    /// same operation. Outside a thread's lifetime (thread-local storage being torn down)
    /// nothing is installed, and the code inside sees no operation and no attempt.
    fn swap(&mut self) {
        let _ = SLOTS.try_with(|slots| {
            let mut slots = slots.try_borrow_mut().expect(
                "a retry scope was entered while `Attempt::with_current` was running: \
                 do not poll futures inside its closure",
            );
            if self.sets_operation {
                mem::swap(&mut slots.operation, &mut self.operation);
                mem::swap(&mut slots.unopened, &mut self.unopened);
            }
            if self.sets_attempt {
                mem::swap(&mut slots.attempt, &mut self.attempt);
                mem::swap(&mut slots.reported, &mut self.reported);
            }
        });
    }
}

/// An installed [`Frame`]; dropping it restores what was installed before.
pub(crate) struct Entered<'f> {
    frame: &'f mut Frame,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.frame.swap();
    }
}

pin_project_lite::pin_project! {
    /// A future polled inside a [`Frame`].
    pub(crate) struct Scoped<F> {
        frame: Frame,
        #[pin]
        fut: F,
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.frame.enter();
        this.fut.poll(cx)
    }
}

impl Operation {
    /// The operation scope the current task runs in, if any.
    pub fn current() -> Option<Operation> {
        let installed = SLOTS.try_with(|slots| {
            let slots = slots.try_borrow().ok()?;
            match &slots.unopened {
                None => Some(slots.operation.clone()),
                Some(_) => None,
            }
        });
        match installed {
            Ok(Some(operation)) => operation,
            Ok(None) => open_installed(),
            // Thread-local storage is gone: nothing is installed.
            Err(_) => None,
        }
    }

    /// Runs `f` (synchronously) inside this scope.
    pub fn sync_scope<R>(self, f: impl FnOnce() -> R) -> R {
        let mut frame = Frame::operation(self);
        let _entered = frame.enter();
        f()
    }

    /// Runs `fut` inside this scope.
    pub fn scope<F: Future>(self, fut: F) -> impl Future<Output = F::Output> {
        Scoped {
            frame: Frame::operation(self),
            fut,
        }
    }
}

/// Opens the unopened scope installed now, for the caller and for the call that owns it (which
/// takes it back when its attempt ends).
#[cold]
fn open_installed() -> Option<Operation> {
    SLOTS
        .try_with(|slots| {
            // Inside `with_current`'s closure the scope cannot be opened: it stays unseen.
            let mut slots = slots.try_borrow_mut().ok()?;
            let unopened = slots.unopened.take()?;
            let attempt = slots.attempt.as_ref();
            let opened = unopened.open(
                || match attempt {
                    Some(a) => OpName::Shared(a.upstream.name_arc().clone()),
                    None => OpName::Static("operation"),
                },
                attempt.map(|a| a.deadline),
            );
            slots.operation = Some(opened.clone());
            Some(opened)
        })
        .ok()
        .flatten()
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

    /// Runs `f` with the current attempt, without copying it. Do not poll futures inside `f`.
    pub fn with_current<R>(f: impl FnOnce(Option<&Attempt>) -> R) -> R {
        let mut f = Some(f);
        let ran = SLOTS.try_with(|slots| {
            let slots = slots.try_borrow().ok();
            f.take()
                .map(|f| f(slots.as_deref().and_then(|s| s.attempt.as_ref())))
        });
        match (ran, f) {
            (Ok(Some(r)), _) => r,
            // Thread-local storage is gone (or the slots are being changed): no attempt.
            (_, Some(f)) => f(None),
            (_, None) => unreachable!("the closure ran and returned"),
        }
    }

    /// Reports, for the attempt the current task runs in, that the request it sends has a body
    /// of replayability `replay` (a streaming body is [`Replayability::OneShot`]). The call then
    /// decides with the weakest of its declaration and every report: the current attempt still
    /// runs, but a one-shot body is never retried. The HTTP integration calls this itself.
    /// Outside an attempt it does nothing.
    pub fn report_body(replay: Replayability) {
        let _ = SLOTS.try_with(|slots| {
            if let Ok(mut slots) = slots.try_borrow_mut()
                && slots.attempt.is_some()
            {
                slots.reported = slots.reported.min(replay);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &'static str) -> Operation {
        Operation::root(OpName::Static(name), None, None)
    }

    #[test]
    fn an_operation_frame_leaves_the_attempt_and_restores_on_exit() {
        assert!(Operation::current().is_none());
        let mut outer = Frame::operation(op("outer"));
        {
            let _e = outer.enter();
            assert_eq!(Operation::current().unwrap().name(), "outer");
            let mut inner = Frame::operation(op("inner"));
            {
                let _e = inner.enter();
                assert_eq!(Operation::current().unwrap().name(), "inner");
            }
            assert_eq!(Operation::current().unwrap().name(), "outer");
            assert_eq!(inner.operation.as_ref().unwrap().name(), "inner");
        }
        assert!(Operation::current().is_none());
        Attempt::with_current(|a| assert!(a.is_none()));
    }

    #[tokio::test]
    async fn an_unopened_scope_is_opened_once_by_the_first_to_ask_and_handed_back() {
        let unopened = Unopened::new(Some(OpName::Static("lazy")), 2);
        let mut frame = Frame::attempt(
            crate::attempt::tests::attempt(),
            Installs::Unopened(unopened),
        );
        {
            let _e = frame.enter();
            let first = Operation::current().expect("opened on demand");
            let second = Operation::current().expect("the same scope");
            assert!(first.take_retry());
            assert_eq!(second.retries_left(), Some(1), "one scope, shared");
            assert_eq!(first.name(), "lazy");
        }
        assert!(Operation::current().is_none(), "nothing left installed");
        let opened = frame.take_operation().expect("handed back to the call");
        assert_eq!(opened.retries_left(), Some(1));

        let mut untouched = Frame::attempt(
            crate::attempt::tests::attempt(),
            Installs::Unopened(Unopened::new(Some(OpName::Static("idle")), 2)),
        );
        drop(untouched.enter());
        assert!(
            untouched.take_operation().is_none(),
            "never asked, never opened"
        );
    }

    #[tokio::test]
    async fn a_report_reaches_the_frame_of_the_attempt_in_progress_only() {
        Attempt::report_body(Replayability::OneShot);
        let mut frame = Frame::attempt(crate::attempt::tests::attempt(), Installs::Nothing);
        {
            let _e = frame.enter();
            Attempt::report_body(Replayability::Reopenable);
        }
        assert_eq!(frame.reported(), Replayability::Reopenable);
        {
            let _e = frame.enter();
            Attempt::report_body(Replayability::OneShot);
            Attempt::report_body(Replayability::Replayable);
        }
        assert_eq!(frame.reported(), Replayability::OneShot, "the weakest wins");
        let mut next = Frame::attempt(crate::attempt::tests::attempt(), Installs::Nothing);
        drop(next.enter());
        assert_eq!(next.reported(), Replayability::Replayable, "nothing leaks");
    }

    #[test]
    fn a_panic_inside_restores_the_previous_frame() {
        let mut frame = Frame::operation(op("boom"));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _e = frame.enter();
            panic!("inside");
        }));
        assert!(caught.is_err());
        assert!(Operation::current().is_none());
    }
}
