//! What a turn of the loop tells its caller: retry, done, or an ambiguous outcome to reconcile.

use crate::error::Ambiguous;

/// What to do after an attempt.
#[derive(Debug)]
pub enum Step<T, E> {
    /// Retry: the backoff has already been slept.
    Retry,
    /// The call is over.
    Done(Result<T, E>),
    /// The outcome is ambiguous: reconcile, or report it with
    /// [`Call::ambiguous`](super::Call::ambiguous).
    Ambiguous {
        /// The last attempt's error.
        error: E,
        /// What is known (boxed, as [`Error::Ambiguous`](crate::Error::Ambiguous) keeps it:
        /// every step is returned by value, and a rare ambiguous one should not make each of
        /// them large to move).
        ambiguous: Box<Ambiguous>,
    },
}
