//! The backoff between attempts: one timer per call, made at the first retry and reset for the
//! next ones (and lent to the attempts after it as their timeout), woken at once when shutdown
//! starts.

use std::time::Duration;

use tokio::time::Instant;

use super::Call;
use crate::scope::deadline_after;

/// Shutdown started while waiting.
pub(super) struct Drained;

impl Call<'_> {
    /// Sleeps `delay` from `from`, or less if shutdown starts meanwhile (`Err`).
    pub(super) async fn back_off(&mut self, from: Instant, delay: Duration) -> Result<(), Drained> {
        let drain = self.registry.drain();
        let until = deadline_after(from, delay);
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                sleep.as_mut().reset(until);
                sleep
            }
            None => self.sleep.insert(Box::pin(tokio::time::sleep_until(until))),
        };
        // The timer first: a backoff that is over never registers with the drain again, and
        // the flag is read once more after it, so a shutdown that started meanwhile still ends
        // the call before another attempt.
        tokio::select! {
            biased;
            () = sleep.as_mut() => {}
            () = drain.started() => return Err(Drained),
        }
        match drain.is_draining() {
            true => Err(Drained),
            false => Ok(()),
        }
    }
}
