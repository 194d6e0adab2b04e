//! Helpers the `#[retry]` expansion calls, re-exported through `__private`. Not a public API.
//!
//! Each exists so that a mistake in the annotated function is reported once, in words that name
//! the fix, at the user's tokens (the expansion spans each call at the argument or expression
//! concerned).

use crate::key::{IdempotencyKey, IntoIdempotencyKey};
use crate::{Classify, Error};

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
