//! What the running code can see of the retry machinery: its operation scope and its attempt.
//!
//! A retrying call nested anywhere under an operation must find the operation's deadline and
//! retry allowance, and the HTTP integration must find the attempt it sends (key, number,
//! deadline). Both are *installed* for the duration of each poll of the future that owns them,
//! as a tokio task-local is: they follow the future from thread to thread, and a task spawned
//! inside does not inherit them.
//!
//! One thread-local holds both, and a [`Frame`] installs whichever of the two it sets, leaving
//! the other as it was (an operation opened inside an attempt still sees the attempt). Why not
//! two tokio task-locals: the attempt's future was wrapped in a scope per task-local, each
//! wrapping a copy of the future; those copies were the largest cost of a call in the
//! happy-path profile. A frame is swapped in and out by whatever future owns it (see
//! `attempt_future.rs`), so the attempt is wrapped once.
//!
//! The fast first attempt of a lazy call (`first.rs`) installs less still: a [`LazyFirst`]
//! marker, from which the attempt and the call's scope are made the first time anything asks
//! for either. A body that never asks costs nothing more than the marker moved in and out.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::attempt::Attempt;
use crate::scope::{OpName, Operation, Unopened};

#[derive(Debug)]
pub(crate) struct Slots {
    operation: Option<Operation>,
    /// A call's own scope not opened yet: the first to ask for the operation opens it.
    unopened: Option<Unopened>,
    attempt: Option<Attempt>,
    /// The attempt and scope made from the fast first attempt's [`Marker`], once made (only
    /// while the marker is installed).
    lazy_made: Option<Made>,
}

/// A fast first attempt in progress, beside the [`Slots`] (in the same thread-local): installed
/// when nothing else was, so whatever is installed above it (a frame of a call or an operation
/// inside) comes first.
///
/// In cells rather than in the slots' `RefCell`: a happy call installs it and takes it out
/// again without borrowing the slots, whose borrow flag, written and read back at once, was a
/// measurable part of such a call. The marker is `Copy` and its key apart, so installing and
/// leaving drop nothing.
pub(crate) struct Marker {
    first: Cell<Option<LazyFirst>>,
    /// Its key, moved in from `#[retry]`'s call until it leaves.
    key: Cell<Option<crate::IdempotencyKey>>,
    /// Whether `Slots::lazy_made` holds what was made from it.
    made: Cell<bool>,
}

impl Marker {
    /// No fast first attempt in progress.
    pub(crate) const fn empty() -> Marker {
        Marker {
            first: Cell::new(None),
            key: Cell::new(None),
            made: Cell::new(false),
        }
    }

    /// Whether a fast first attempt is in progress.
    #[inline]
    pub(crate) fn is_installed(&self) -> bool {
        self.first.get().is_some()
    }
}

impl Slots {
    pub(crate) const EMPTY: Slots = Slots {
        operation: None,
        unopened: None,
        attempt: None,
        lazy_made: None,
    };

    /// The innermost attempt: a frame's, or below every frame a fast first attempt's (once
    /// made; `lazy_made` is empty whenever no marker is installed).
    fn attempt(&self) -> Option<&Attempt> {
        match &self.attempt {
            Some(attempt) => Some(attempt),
            None => self.lazy_made.as_ref().map(|m| &m.attempt),
        }
    }
}

/// The ambient slots of this thread, and the marker beside them (see `thread.rs`).
#[inline]
fn with_slots<R>(
    f: impl FnOnce(&RefCell<Slots>, &Marker) -> R,
) -> Result<R, std::thread::AccessError> {
    crate::thread::with(|thread| f(&thread.ambient, &thread.marker))
}

/// What a fast first attempt installs: the lent cache slot (its upstream), and for `#[retry]`
/// its static call site, from which (with the key) the attempt and the call's scope are made
/// the first time anything asks. The builder's attempt is made at once (`site` is `None`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LazyFirst {
    pub(crate) slot: usize,
    pub(crate) site: Option<&'static crate::CallSite>,
}

/// The attempt and the scope made from a [`LazyFirst`].
#[derive(Debug)]
struct Made {
    attempt: Attempt,
    scope: Result<Operation, Unopened>,
}

impl Slots {
    /// What was made from the fast first attempt's marker, made now if nothing asked before.
    #[cold]
    fn lazy_made(&mut self, marker: &Marker) -> Option<&mut Made> {
        let first = marker.first.get()?;
        if self.lazy_made.is_none() {
            let key = marker.key.take();
            let (attempt, unopened) = crate::first::make(first, key.as_ref());
            marker.key.set(key);
            self.lazy_made = Some(Made {
                attempt,
                scope: Err(unopened),
            });
            marker.made.set(true);
        }
        self.lazy_made.as_mut()
    }

    /// The fast first attempt's call scope, made and opened now if nothing asked before.
    fn lazy_operation(&mut self, marker: &Marker) -> Option<Operation> {
        let made = self.lazy_made(marker)?;
        let unopened = match &made.scope {
            Ok(opened) => return Some(opened.clone()),
            Err(unopened) => unopened.clone(),
        };
        let attempt = &made.attempt;
        let opened = unopened.open(
            || OpName::Shared(attempt.state.upstream.name_arc().clone()),
            Some(attempt.state.facts.deadline()),
        );
        made.scope = Ok(opened.clone());
        Some(opened)
    }
}

impl Slots {
    /// Whether no operation, scope or attempt is installed (a call inside one takes the full
    /// path, to join it; the [`Marker`] is checked apart).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.operation.is_none() && self.unopened.is_none() && self.attempt.is_none()
    }

    /// Installs the marker of a fast first attempt holding the lent cache `slot`: for
    /// `#[retry]`, its `site` and `key` to make its attempt from when asked; for the builder,
    /// the attempt and scope `made` already.
    #[inline(always)]
    pub(crate) fn install_lazy(
        &mut self,
        marker: &Marker,
        first: LazyFirst,
        key: Option<crate::IdempotencyKey>,
        made: Option<(Attempt, Unopened)>,
    ) {
        marker.first.set(Some(first));
        if key.is_some() {
            marker.key.set(key);
        }
        if let Some((attempt, unopened)) = made {
            self.lazy_made = Some(Made {
                attempt,
                scope: Err(unopened),
            });
            marker.made.set(true);
        }
    }
}

impl Marker {
    /// Takes the fast first attempt's marker out, a key it holds back into `key`: the attempt
    /// (and the scope, if opened) made, if anything asked or it was made at once. Borrows
    /// `slots` only if something was made.
    #[inline]
    pub(crate) fn leave(
        &self,
        slots: &RefCell<Slots>,
        key: &mut Option<crate::IdempotencyKey>,
    ) -> Option<(Attempt, Option<Operation>)> {
        self.first.take()?;
        if let Some(held) = self.key.take() {
            *key = Some(held);
        }
        if !self.made.replace(false) {
            return None;
        }
        take_made(slots)
    }
}

/// What a fast first attempt made, taken out of the slots as it leaves.
#[cold]
#[inline(never)]
fn take_made(slots: &RefCell<Slots>) -> Option<(Attempt, Option<Operation>)> {
    let made = slots.borrow_mut().lazy_made.take()?;
    Some((made.attempt, made.scope.ok()))
}

/// Takes a fast first attempt's marker out, if one is installed (its attempt panicked).
pub(crate) fn drop_lazy() {
    let _ = with_slots(|slots, marker| {
        marker.first.set(None);
        marker.key.set(None);
        marker.made.set(false);
        if let Ok(mut slots) = slots.try_borrow_mut() {
            slots.lazy_made = None;
        }
    });
}

/// The scope an attempt's frame installs.
#[derive(Debug)]
pub(crate) enum Installs {
    /// None: the call joined the scope installed already.
    Nothing,
    /// The call's own scope.
    Operation(Operation),
    /// The call's own scope, to open if the attempt asks for it.
    Unopened(Unopened),
}

/// An operation and/or an attempt to install while a future is polled.
#[derive(Debug)]
pub(crate) struct Frame {
    operation: Option<Operation>,
    unopened: Option<Unopened>,
    attempt: Option<Attempt>,
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
            sets_attempt: true,
        }
    }

    /// Once no poll is in progress: the scope opened while the frame was installed (or the one
    /// it installed).
    pub(crate) fn take_operation(&mut self) -> Option<Operation> {
        self.operation.take()
    }

    /// Installs the frame until the guard drops (also when the code inside panics).
    pub(crate) fn enter(&mut self) -> Entered<'_> {
        self.swap();
        Entered { frame: self }
    }

    /// The attempt, while no poll is in progress.
    pub(crate) fn held_attempt(&self) -> Option<&Attempt> {
        self.attempt.as_ref()
    }

    /// The attempt back, once no poll is in progress (what it reported is inside).
    pub(crate) fn take_attempt(&mut self) -> Option<Attempt> {
        self.attempt.take()
    }

    /// Exchanges what this frame sets with what is installed: entering and leaving are the
    /// same operation. Outside a runtime thread's lifetime (thread-local storage being torn
    /// down) nothing is installed, and the code inside sees no operation and no attempt.
    fn swap(&mut self) {
        let _ = with_slots(|slots, _| {
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

/// The operation installed now, if any. An unopened scope is opened now, for the caller and
/// for the call that owns it (which takes it back when its attempt ends).
#[inline]
pub(crate) fn operation() -> Option<Operation> {
    let installed = with_slots(|slots, marker| match slots.try_borrow() {
        Ok(slots)
            if slots.unopened.is_none()
                && (slots.operation.is_some() || !marker.is_installed()) =>
        {
            Some(slots.operation.clone())
        }
        _ => None,
    });
    match installed {
        Ok(Some(operation)) => operation,
        Ok(None) => open_installed(),
        // Thread-local storage is gone: nothing is installed.
        Err(_) => None,
    }
}

/// Opens the unopened scope installed now (see [`operation`]).
#[cold]
fn open_installed() -> Option<Operation> {
    with_slots(|slots, marker| {
        // Inside `with_attempt`'s closure the scope cannot be opened: it stays unseen.
        let mut slots = slots.try_borrow_mut().ok()?;
        let Some(unopened) = slots.unopened.take() else {
            // Below every frame: a fast first attempt's own scope.
            return slots.lazy_operation(marker);
        };
        let attempt = slots.attempt.as_ref();
        let opened = unopened.open(
            || match attempt {
                Some(a) => OpName::Shared(a.state.upstream.name_arc().clone()),
                None => OpName::Static("operation"),
            },
            attempt.map(|a| a.state.facts.deadline()),
        );
        slots.operation = Some(opened.clone());
        Some(opened)
    })
    .ok()
    .flatten()
}

/// Runs `f` with the attempt installed now, without cloning it.
pub(crate) fn with_attempt<R>(f: impl FnOnce(Option<&Attempt>) -> R) -> R {
    let mut f = Some(f);
    let ran = with_slots(|slots, marker| {
        // Below every frame: a fast first attempt's own attempt, made the first time it is asked.
        if marker.is_installed()
            && !marker.made.get()
            && let Ok(mut slots) = slots.try_borrow_mut()
            && slots.attempt.is_none()
        {
            slots.lazy_made(marker);
        }
        let slots = slots.try_borrow().ok();
        f.take()
            .map(|f| f(slots.as_deref().and_then(Slots::attempt)))
    });
    match (ran, f) {
        (Ok(Some(r)), _) => r,
        // Thread-local storage is gone: the closure was never called.
        (_, Some(f)) => f(None),
        (_, None) => unreachable!("the closure ran and returned"),
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

impl<F> Scoped<F> {
    pub(crate) fn new(frame: Frame, fut: F) -> Self {
        Scoped { frame, fut }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::{OpName, Unopened};

    fn op(name: &'static str) -> Operation {
        Operation::root(OpName::Static(name), None, None)
    }

    #[test]
    fn an_operation_frame_leaves_the_attempt_and_restores_on_exit() {
        assert!(operation().is_none());
        let mut outer = Frame::operation(op("outer"));
        {
            let _e = outer.enter();
            assert_eq!(operation().unwrap().name(), "outer");
            let mut inner = Frame::operation(op("inner"));
            {
                let _e = inner.enter();
                assert_eq!(operation().unwrap().name(), "inner");
            }
            assert_eq!(operation().unwrap().name(), "outer");
            assert_eq!(inner.operation.as_ref().unwrap().name(), "inner");
        }
        assert!(operation().is_none());
        with_attempt(|a| assert!(a.is_none()));
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
            let first = operation().expect("opened on demand");
            let second = operation().expect("the same scope");
            assert!(first.take_retry());
            assert_eq!(second.retries_left(), Some(1), "one scope, shared");
            assert_eq!(first.name(), "lazy");
        }
        assert!(operation().is_none(), "nothing left installed");
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

    #[test]
    fn a_panic_inside_restores_the_previous_frame() {
        let mut frame = Frame::operation(op("boom"));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _e = frame.enter();
            panic!("inside");
        }));
        assert!(caught.is_err());
        assert!(operation().is_none());
    }
}
