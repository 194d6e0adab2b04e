//! The end of a `#[retry(durable = ...)]` call: the expansion hands every ending but a success
//! to [`defer`], which returns a permanent failure at once and writes a transient one to the
//! durable queue, answering [`Durable::Deferred`].
//!
//! # The hand-off can still race the caller's deadline
//! A durable call stops its in-memory attempts [`HAND_OFF_RESERVE`] before its deadline, so
//! the hand-off (one insert) normally ends while the caller waits. On an overloaded machine
//! the insert's commit can take longer; a caller with a deadline of its own (an API calling
//! this service over HTTP) then stops waiting and reports the keyed write as unknown, while
//! the task is queued and runs once. Neither way of closing the race is clean:
//!
//! - recording the deferral before the deadline-bound work ends means a queue write before
//!   the last attempt of every durable call, including the great majority that succeed in
//!   memory (and a second write to retire it): the in-memory tier would pay the durable
//!   tier's commit on every call;
//! - making the caller wait for the hand-off's result stretches its deadline by a commit whose
//!   length nothing bounds, breaking the promise the deadline makes to the caller's caller;
//!   and a remote caller cannot be made to wait by the service it called.
//!
//! So the race is made rare (the reserve), visible (a `slow_hand_off` warning when the insert
//! outlasts the reserve) and harmless: nothing is lost, the key keeps the write applied once
//! upstream, and a caller that retries the same key finds the queued task instead of adding
//! a second one.

use std::fmt::Display;
use std::time::Instant;

use super::outcome::{DeferredCall, Durable};
use super::replay::ReplayContext;
use crate::call::Call;
use crate::error::{Ambiguous, Error};
use crate::hand_off::{Deferred, HAND_OFF_RESERVE, TaskStatus};

const TARGET: &str = "retry_runtime::durable";

/// Ends a durable call whose in-memory retries stopped with `error` (and `ambiguous`, when the
/// loop found the write's outcome unknown). `payload` serializes the call's arguments, only
/// when they are stored.
///
/// - A failure retrying cannot fix, or a write that repeating could apply twice, is returned
///   as the non-durable call would return it.
/// - Inside the replay of the same operation, the call is already in the queue: the failure is
///   recorded for the worker, which retries the task after its durable backoff.
/// - Otherwise the call is written to the registry's durable queue with its key (a read gets a
///   fresh one) and the caller gets [`Durable::Deferred`]. When the queue cannot take it, the
///   caller gets the in-memory failure (an `error` event says why), or
///   [`Error::NoDurableQueue`] when none is registered.
pub async fn defer<T, E, P>(
    call: &mut Call<'_>,
    operation: &'static str,
    error: E,
    ambiguous: Option<Box<Ambiguous>>,
    payload: P,
) -> Result<Durable<T>, E>
where
    E: From<Error> + Display,
    P: FnOnce() -> Result<Vec<u8>, String>,
{
    let Some(stop) = call.deferrable() else {
        return Err(match ambiguous {
            Some(ambiguous) => call.ambiguous(ambiguous),
            None => error,
        });
    };
    let last_error = error.to_string();
    // The loop's own record of the ending: an ambiguous write is counted as such.
    let ambiguous = ambiguous.map(|a| call.ambiguous::<Error>(a));
    if let Some(replay) = ReplayContext::current(operation) {
        tracing::info!(
            target: TARGET,
            event = "replay_stopped",
            task_id = replay.task_id.0,
            operation,
            reason = %stop.reason,
            error = %last_error,
            "the replay stopped on a transient failure: the task waits for its durable backoff"
        );
        replay.stopped(last_error, stop.retry_after);
        return Ok(Durable::Deferred(DeferredCall::new(Deferred {
            task_id: replay.task_id,
            created: false,
            status: TaskStatus::Running,
        })));
    }
    let in_memory = |ambiguous: Option<Error>, error: E| match ambiguous {
        Some(a) => E::from(a),
        None => error,
    };
    let Some((queue, options)) = call.registry().durable_queue() else {
        tracing::error!(
            target: TARGET,
            event = "no_queue",
            operation,
            error = %last_error,
            "a durable call cannot be deferred: no durable queue is registered"
        );
        return Err(E::from(Error::NoDurableQueue {
            operation,
            last_error,
        }));
    };
    let key = match call.key() {
        Some(key) => key.as_str().to_owned(),
        // A read carries no key upstream; its task needs one of its own.
        None => format!("read-{:032x}", fastrand::u128(..)),
    };
    let payload = match payload() {
        Ok(payload) => payload,
        Err(why) => {
            tracing::error!(target: TARGET, event = "not_deferred", operation, why = %why,
                error = %last_error, "a durable call could not be deferred");
            return Err(in_memory(ambiguous, error));
        }
    };
    let options = match stop.retry_after {
        Some(after) if after > options.delay() => options.with_delay(after),
        _ => options,
    };
    let started = Instant::now();
    let handed_off = queue.hand_off(operation, &key, &payload, options).await;
    let took = started.elapsed();
    if took > HAND_OFF_RESERVE {
        tracing::warn!(target: TARGET, event = "slow_hand_off", operation, ?took,
            reserve = ?HAND_OFF_RESERVE, "the hand-off outlasted the time reserved for it: \
            a caller with a deadline may have stopped waiting and report the write as unknown \
            (the task is queued and runs once)");
    }
    match handed_off {
        Ok(deferred) => {
            tracing::info!(
                target: TARGET,
                event = "deferred",
                task_id = deferred.task_id.0,
                operation,
                reason = %stop.reason,
                error = %last_error,
                "the in-memory retries stopped on a transient failure: deferred to the durable queue"
            );
            Ok(Durable::Deferred(DeferredCall::new(deferred)))
        }
        Err(why) => {
            tracing::error!(target: TARGET, event = "not_deferred", operation, why = %why,
                error = %last_error, "a durable call could not be deferred");
            Err(in_memory(ambiguous, error))
        }
    }
}
