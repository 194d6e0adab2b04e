//! Helpers the `#[retry]` expansion calls, re-exported through `__private`. Not a public API.
//!
//! Each exists so that a mistake in the annotated function is reported once, in words that name
//! the fix, at the user's tokens (the expansion spans each call at the argument or expression
//! concerned).

use crate::classify::Classify;
use crate::error::Error;
use crate::key::{IdempotencyKey, IntoIdempotencyKey};

/// Converts the `idempotency = ...` expression's value into a key, once, before the first
/// attempt. An invalid key fails the call before anything is sent.
pub fn idempotency_key<K: IntoIdempotencyKey>(key: K) -> Result<IdempotencyKey, Error> {
    key.into_idempotency_key()
        .map_err(Error::InvalidIdempotencyKey)
}

/// A by-value argument of a `#[retry]` function: every attempt gets its own clone.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is passed by value to a `#[retry]` function but is not `Clone`",
    label = "every attempt needs its own copy of this argument",
    note = "take it by reference (`&{Self}`), or derive or implement `Clone` for it"
)]
pub trait AttemptArg {
    /// A fresh copy for one attempt.
    fn for_attempt(&self) -> Self;
}

impl<T: Clone> AttemptArg for T {
    fn for_attempt(&self) -> Self {
        self.clone()
    }
}

/// Clones a by-value argument (or receiver) for one attempt.
pub fn attempt_arg<T: AttemptArg>(arg: &T) -> T {
    arg.for_attempt()
}

/// A wrapped error as the `dyn Classify` that `#[derive(Classify)]`'s `via` returns (spanned at
/// the variant, so a field type that is not `Classify` is reported there).
pub fn classify_ref<C: Classify>(error: &C) -> &dyn Classify {
    error
}

/// Hands a [`Stop`](crate::Stop) to a wrapped error, for `#[derive(Classify)]`'s `stopped`.
///
/// A field whose type is not `Classify` is already reported once, by [`classify_ref`]; the two
/// traits below (method resolution prefers `ForwardStop`, which applies only to a `Classify`
/// field, over `NoStop`, which applies to any) keep that mistake from being reported a second
/// time here.
pub struct StopVia<'a, T: ?Sized>(pub &'a mut T);

/// Forwards the stop to a `Classify` field.
pub trait ForwardStop {
    /// Forwards `stop`.
    fn forward_stop(&mut self, stop: crate::decision::Stop);
}

impl<T: Classify + ?Sized> ForwardStop for StopVia<'_, T> {
    fn forward_stop(&mut self, stop: crate::decision::Stop) {
        self.0.stopped(stop);
    }
}

/// The fallback for a field that is not `Classify` (already an error elsewhere).
pub trait NoStop {
    /// Does nothing.
    fn forward_stop(&mut self, stop: crate::decision::Stop);
}

impl<T: ?Sized> NoStop for &mut StopVia<'_, T> {
    fn forward_stop(&mut self, _: crate::decision::Stop) {}
}
