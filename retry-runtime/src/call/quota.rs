//! A partition over its quota: a retry (or replay) of a call whose partition a 429 pushed back
//! waits for the pushback to end, within the deadline; the rules and their reasons:
//! [`partition`](crate::partition).

use tokio::time::Instant;

use super::pacing::Waits;
use super::state::Call;
use crate::attempt::Attempt;
use crate::category::Rejection;
use crate::decision::Failure;
use crate::error::Error;
use crate::partition::Partition;

/// The longest a held call sleeps before it asks again whether its partition's pushback ended.
const QUOTA_STEP: std::time::Duration = std::time::Duration::from_millis(100);

impl Call<'_> {
    /// Holds `attempt` while the call's partition is pushed back: it starts after the pushback
    /// ends (spread over as long again), or, when that leaves no time for an attempt before
    /// the deadline (or shutdown starts meanwhile), it is refused, sending nothing.
    pub(super) async fn wait_for_quota(
        &mut self,
        partition: Partition,
        attempt: &mut Attempt,
    ) -> Result<(), Error> {
        let latest = self.latest_start();
        // A retry after the call's own 429 is part of the backlog the quota built, whether
        // the partition's pushback or the call's own `Retry-After` held it (`met_quota`): it
        // goes at the pace of the upstream's answers too (below).
        let mut held = self.met_quota();
        // Asked again after each wait: a call of the partition let go meanwhile may have met
        // the quota again and pushed it further.
        while let Some(left) = self
            .upstream
            .quotas()
            .held(partition, self.upstream.tick(attempt.started))
        {
            held = true;
            if !self.has_time_at(attempt.started + left) {
                return Err(self.refused(Rejection::Throttled));
            }
            // Spread over as long again as the call waits: the calls the pushback held go
            // about as they came, not together the instant it ends.
            let spread = left.mul_f64(self.rng.f64(self.registry));
            let go_at = attempt.started
                + (left + spread).min(latest.saturating_duration_since(attempt.started));
            self.on_paced(go_at - attempt.started);
            // In steps, so that an accepted answer ending the pushback lets it go soon.
            loop {
                let step = go_at
                    .saturating_duration_since(attempt.started)
                    .min(QUOTA_STEP);
                if self.back_off(attempt.started, step).await.is_err() {
                    return Err(self.refused(Rejection::Throttled));
                }
                let now = Instant::now();
                attempt.started = now;
                attempt.ends = self.attempt_ends(now);
                let tick = self.upstream.tick(now);
                let ended = self.upstream.quotas().held(partition, tick).is_none();
                if now >= go_at || ended {
                    break;
                }
            }
        }
        // Calls the pushback held go at the pace of the upstream's answers, not together when
        // it ends, whether it ran out or an accepted answer ended it: the partition is served
        // again, but the backlog it built is still a burst to an upstream with a capacity.
        if held {
            return self.wait_for_release(attempt, Waits::Caller).await;
        }
        Ok(())
    }

    /// An attempt of the call ended accepted: its partition's pushback, if any, ends.
    pub(super) fn quota_served(&self) {
        if let Some(partition) = self.pacing.partition() {
            self.upstream.quotas().accepted(partition);
        }
    }

    /// After a failed attempt: a 429 to a call with a partition pushes the partition back
    /// until the `Retry-After` it carried (the upstream's initial backoff without one), from
    /// `now`.
    pub(super) fn note_quota(&self, failure: &Failure, now: Instant) {
        let (Some(partition), Some(429)) = (self.pacing.partition(), failure.status) else {
            return;
        };
        let wait = failure
            .retry_after
            .unwrap_or(self.upstream.config().backoff.initial);
        let until = self.upstream.tick(now + wait);
        self.upstream.quotas().push_back(partition, until);
    }
}
