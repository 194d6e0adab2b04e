//! The loop every entry point runs: the builder's forms and the tower layer call [`drive`] with
//! their [`Attempts`]; the macro writes the same loop out around [`Call::turn`] (its body
//! borrows `&mut self` and the arguments afresh on every attempt, and so does its reconcile
//! check, in the function's own frame).

use std::fmt::Display;

use super::backoff::BackoffSlot;
use super::ending::Reconciled;
use super::start::CallSpec;
use super::state::Call;
use super::step::Step;
use crate::attempt::Attempt;
use crate::classify::Classify;
use crate::error::Error;

/// How a call's turns run their attempts: one body made afresh for each attempt.
pub(crate) trait Attempts<T, E> {
    /// The call's next attempt ([`Call::attempt_with`], or its hedged form): the future the
    /// loop awaits (returned, not wrapped in one more, so a call's future moves no more bytes
    /// than its attempts need).
    fn attempt(&mut self, call: &mut Call<'_>) -> impl Future<Output = Result<T, E>>;
}

/// Attempts whose bodies `make` makes, never hedged.
pub(crate) struct Plain<M>(pub(crate) M);

/// Attempts whose bodies `make` makes, hedged when the upstream hedges and the call is safe to
/// run twice at once (`make` then makes each copy).
pub(crate) struct Hedged<M>(pub(crate) M);

impl<T, E, M, F> Attempts<T, E> for Plain<M>
where
    M: FnMut(&Attempt) -> F,
    F: Future<Output = Result<T, E>>,
    E: Classify + From<Error>,
{
    fn attempt(&mut self, call: &mut Call<'_>) -> impl Future<Output = Result<T, E>> {
        call.attempt_with(&mut self.0)
    }
}

impl<T, E, M, F> Attempts<T, E> for Hedged<M>
where
    M: FnMut(&Attempt) -> F,
    F: Future<Output = Result<T, E>>,
    E: Classify + From<Error>,
{
    fn attempt(&mut self, call: &mut Call<'_>) -> impl Future<Output = Result<T, E>> {
        call.attempt_hedged_with(&mut self.0)
    }
}

/// The loop every entry point but the macro runs (the macro writes it out around
/// [`Call::turn`]): starts the call `spec` describes (when first polled: the spec's lookups
/// happen then, and the call is built in place in this future), then turns until it is done;
/// an ambiguous outcome goes to `reconcile` first (`Happened` returns its value, `NotHappened`
/// lets the remaining rules decide a retry, `Unknown` reports it).
pub(crate) async fn drive<'r, T, E, S, A, R, RF>(
    spec: S,
    mut attempts: A,
    mut reconcile: R,
) -> Result<T, E>
where
    S: FnOnce() -> Result<CallSpec<'r>, Error>,
    A: Attempts<T, E>,
    R: FnMut() -> RF,
    RF: Future<Output = Reconciled<T>>,
    E: Classify + From<Error> + Display,
{
    let slot = std::pin::pin!(BackoffSlot::new());
    let mut call = Call::new(spec()?, slot);
    loop {
        let result = attempts.attempt(&mut call).await;
        let mut step = call.settle(result).await;
        if let Step::Ambiguous { error, ambiguous } = step {
            step = match reconcile().await {
                Reconciled::Happened(value) => return Ok(call.happened(value)),
                Reconciled::NotHappened => call.settle_not_happened(error).await,
                Reconciled::Unknown => return Err(call.ambiguous(ambiguous)),
            };
        }
        match step {
            Step::Retry => continue,
            Step::Done(result) => return result,
            Step::Ambiguous { ambiguous, .. } => return Err(call.ambiguous(ambiguous)),
        }
    }
}

/// The `reconcile` of a call without a reconcile check: the outcome stays ambiguous.
pub(crate) fn no_reconcile<T>() -> std::future::Ready<Reconciled<T>> {
    std::future::ready(Reconciled::Unknown)
}
