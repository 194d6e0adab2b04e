//! Hedging: one attempt run as up to three copies in flight.
//!
//! Each copy is an `AttemptFuture` of its own, polled in turn by the same task, each installing
//! its own attempt (and the call's one scope, opened first) around its polls, so the
//! integration of each copy finds its own attempt number. A further copy is an attempt like
//! any other: it needs time, the admission of every local gate (without waiting for capacity)
//! and a retry spent, through the same seam as a retry (`admission`). The loop's per-attempt
//! state (the last attempt's timing, its span, ...) describes the copy whose result is returned.

use std::pin::Pin;
use std::task::Poll;

use tokio::time::Instant;

use super::admission::{self, Admitted, AttemptKind, Permit};
use super::outcome::Local;
use super::state::Call;
use crate::ambient::Frame;
use crate::attempt::Attempt;
use crate::attempt_future::AttemptFuture;
use crate::category::Rejection;
use crate::classify::Classify;
use crate::decision::{Decision, Failure};
use crate::engine::Safety;
use crate::error::Error;
use crate::hedge::HedgeConfig;
use crate::replay::Replayability;

/// One copy of a hedged attempt in flight, with what let it start.
struct InFlight<F> {
    future: Pin<Box<AttemptFuture<'static, F>>>,
    permit: Permit,
    number: u32,
    started: Instant,
    ends: Instant,
    span: tracing::Span,
}

impl Call<'_> {
    /// Runs one attempt that may be hedged: like [`attempt_with`](Self::attempt_with), but
    /// `make` can make the body again, so that when the upstream has hedging configured
    /// ([`UpstreamConfig::hedge`](crate::UpstreamConfig::hedge)) and the call is safe to run
    /// twice at once, a further copy starts once the first has run for the hedge delay.
    /// Without hedging it is exactly [`attempt_with`](Self::attempt_with).
    ///
    /// Who is hedged: reads, and keyed writes whose upstream promises to deduplicate copies in
    /// flight ([`HedgeConfig::dedups_in_flight`]); never a write without that promise.
    ///
    /// A hedge is an attempt: it needs an attempt left (`max_attempts` counts every copy), time
    /// before the deadline, the breaker's admission, a free bulkhead slot at once (a hedge never
    /// waits for capacity), a retry from the operation's allowance and a retry budget token;
    /// without any of them no hedge is sent and the copies in flight carry on. It carries the
    /// same key and headers as the first copy, and its span (`retry.attempt`) says
    /// `reason = "hedge"`.
    ///
    /// The first success wins, and so does a failure that another copy could not improve on (a
    /// permanent failure, or a status the engine would not retry): the other copies are
    /// cancelled (their futures dropped, their permits with them) and, since their outcome is
    /// unknown, the breaker counts them neither as failures nor as successes. A failure that
    /// could be retried (no response, a 503, the attempt's timeout) while another copy is still
    /// in flight is counted by the breaker as any attempt's failure and set aside: the call
    /// waits for the other copies. Only when every copy has failed does the last failure go to
    /// [`settle`](Self::settle), as an ordinary attempt's would.
    pub(crate) async fn attempt_hedged_with<T, E, M, F>(&mut self, mut make: M) -> Result<T, E>
    where
        M: FnMut(&Attempt) -> F,
        F: Future<Output = Result<T, E>>,
        E: Classify + From<Error>,
    {
        let Some(hedge) = self.hedging() else {
            return self.attempt_with(make).await;
        };
        // Every copy installs the call's scope: it must be one scope, opened now.
        self.scope
            .open_now(self.upstream.name_arc(), self.timing.deadline());
        let mut attempt = self.next_attempt().map_err(E::from)?;
        let permit = self.admit_next(&mut attempt).await.map_err(E::from)?;
        let max_copies = hedge.max_copies as usize;
        let mut copies = Vec::with_capacity(max_copies);
        let delay = self.upstream.hedge_delay(attempt.started);
        let mut next_hedge = delay.map(|d| Box::pin(tokio::time::sleep_until(attempt.started + d)));
        copies.push(self.start_copy(attempt, permit, &mut make));
        loop {
            let event = std::future::poll_fn(|cx| {
                for (i, copy) in copies.iter_mut().enumerate() {
                    if let Poll::Ready(ended) = copy.future.as_mut().poll(cx) {
                        return Poll::Ready(Some((i, ended)));
                    }
                }
                match next_hedge.as_mut().map(|t| t.as_mut().poll(cx)) {
                    Some(Poll::Ready(())) => Poll::Ready(None),
                    _ => Poll::Pending,
                }
            })
            .await;
            let Some((i, ended)) = event else {
                next_hedge = None;
                if let Some((attempt, permit)) = self.admit_hedge(copies.len()) {
                    copies.push(self.start_copy(attempt, permit, &mut make));
                    if let (Some(d), true) = (delay, copies.len() < max_copies) {
                        next_hedge = Some(Box::pin(tokio::time::sleep(d)));
                    }
                }
                continue;
            };
            let copy = copies.swap_remove(i);
            self.timing.run(copy.started, copy.ends);
            self.outcome.set_local(Local::Untouched);
            if self.upstream.keeps_latency() {
                let now = Instant::now();
                self.upstream
                    .record_latency(now.saturating_duration_since(copy.started), now);
            }
            let result = self.end_attempt(ended, copy.permit, copy.number);
            let settled = match &result {
                Ok(_) => true,
                Err(_) if copies.is_empty() => true,
                Err(error) => self.is_final(error),
            };
            if settled {
                self.cancel(copies);
                return result;
            }
            // Set aside: another copy may still answer.
            self.on_copy_set_aside(copy.number, copies.len());
        }
    }

    /// The call's hedging settings, if its upstream hedges and the call is safe to run twice at
    /// once.
    fn hedging(&self) -> Option<HedgeConfig> {
        let hedge = self.upstream.config().hedge?;
        let safe = match self.request.safety() {
            Safety::Read => true,
            Safety::KeyedWrite => hedge.dedups_in_flight,
            Safety::UnsafeWrite => false,
        };
        safe.then_some(hedge)
    }

    /// Starts the body of an admitted copy, inside its own frame and span.
    fn start_copy<T, E, M, F>(
        &mut self,
        attempt: Attempt,
        permit: Permit,
        make: &mut M,
    ) -> InFlight<F>
    where
        M: FnMut(&Attempt) -> F,
        F: Future<Output = Result<T, E>>,
    {
        let body = make(&attempt);
        let (number, started, ends) = (attempt.number, attempt.started, attempt.ends());
        let span = attempt.span.clone();
        let frame = Frame::attempt(attempt, self.scope.for_attempt());
        InFlight {
            future: Box::pin(AttemptFuture::new(frame, ends, None, body)),
            permit,
            number,
            started,
            ends,
            span,
        }
    }

    /// A further copy, when it has what any attempt needs and a retry could have it too
    /// (attempts, time, no shutdown, a replayable body), then passes the gates and spends a
    /// retry. `None`: no hedge (the reason is logged; what a gate granted is given back as its
    /// permit drops).
    fn admit_hedge(&mut self, in_flight: usize) -> Option<(Attempt, Permit)> {
        let now = Instant::now();
        let refused = if self.counted_attempts() >= self.upstream.config().max_attempts {
            Some("max_attempts")
        } else if !self.has_time_at(now) {
            Some("deadline")
        } else if self.registry.drain().is_draining() {
            Some("draining")
        } else if !self.request.replay().can_replay() {
            Some("body_not_replayable")
        } else {
            None
        };
        if let Some(reason) = refused {
            self.on_no_hedge(reason, in_flight);
            return None;
        }
        let ask = self.ask(AttemptKind::Hedge, now);
        let (rng, registry) = (&mut self.rng, self.registry);
        let admitted = admission::admit(&self.upstream, ask, || rng.f64(registry));
        let permit = match admitted {
            Ok(Admitted::Now(permit)) => permit,
            // (Not answered to a hedge: the seam refuses it a slot it would have to wait for.)
            Ok(Admitted::Queue(_)) => {
                self.on_no_hedge(Rejection::BulkheadFull.as_str(), in_flight);
                return None;
            }
            Err(rejection) => {
                self.on_no_hedge(rejection.as_str(), in_flight);
                return None;
            }
        };
        let at = self.upstream.budget().moment(now);
        if let Err(reason) = admission::spend(&mut self.scope, &self.upstream, at) {
            self.on_no_hedge(reason.as_str(), in_flight);
            return None;
        }
        let attempt = self.begin_attempt(now);
        self.on_hedged(&attempt, in_flight);
        Some((attempt, permit))
    }

    /// Whether a failed copy's error ends the hedged attempt although another copy is in
    /// flight: a failure the engine would not retry even with every limit to spare (a
    /// permanent failure, a status it does not retry) is the upstream's answer.
    fn is_final<E: Classify>(&self, error: &E) -> bool {
        let mut failure = Failure::of(error);
        self.outcome.first_hand(&mut failure);
        let facts = self.facts(Replayability::Replayable, std::time::Duration::ZERO);
        !matches!(
            self.registry.engine().decide_with_room(&failure, &facts),
            Decision::Retry { .. }
        )
    }

    /// Cancels the copies still in flight once another has answered: dropped at once, their
    /// permits with them (bulkhead slots freed; the breaker counts them neither way, their
    /// outcome being unknown), and their latency so far (a lower bound) goes to the upstream's
    /// latency window.
    fn cancel<F>(&mut self, copies: Vec<InFlight<F>>) {
        if copies.is_empty() {
            return;
        }
        let now = Instant::now();
        self.on_copies_cancelled(copies.len());
        for copy in copies {
            let InFlight {
                future,
                permit,
                started,
                span,
                ..
            } = copy;
            drop(future);
            drop(permit);
            self.upstream
                .record_latency(now.saturating_duration_since(started), now);
            self.on_copy_cancelled(&span);
        }
    }
}
