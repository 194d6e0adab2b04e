//! The start of a call: what it is ([`CallSpec`]), and [`Call::new`], which places it in its
//! operation (joined, or its own prepared), fixes its deadline and counts it in the upstream's
//! retry budget.

use std::borrow::Cow;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::backoff::{Backoff, BackoffSlot};
use super::events;
use super::outcome::Outcome;
use super::pacing::Pacing;
use super::request::Request;
use super::rng::LazyRng;
use super::rotations::Rotations;
use super::spans::Spans;
use super::state::Call;
use super::timing::Timing;
use crate::deadline::{deadline_after, min_deadline};
use crate::engine::Safety;
use crate::error::Error;
use crate::key::IdempotencyKey;
use crate::partition::Partition;
use crate::registry::Registry;
use crate::replay::Replayability;
use crate::scope::{CallScope, OpName, Operation, Unopened};
use crate::site::CallSite;
use crate::upstream::Upstream;

/// What a retrying call is: which upstream, which method, which key.
#[derive(Debug)]
pub struct CallSpec<'r> {
    /// The registry the call runs in.
    pub(crate) registry: &'r Registry,
    /// The upstream's entry in it.
    pub(crate) upstream: Arc<Upstream>,
    /// The HTTP method the call sends.
    pub(crate) method: http::Method,
    /// The idempotency key, fixed before the first attempt.
    pub(crate) key: Option<IdempotencyKey>,
    /// The request body's replayability.
    pub(crate) replay: Replayability,
    /// The name of the call's own scope (defaults to the upstream's name).
    pub(crate) operation: Option<Cow<'static, str>>,
    /// Time kept back from the deadline for the end of the call (a durable call's hand-off).
    pub(crate) reserve: Duration,
    /// The part of the upstream's traffic the call belongs to, for its quotas (`partition`).
    pub(crate) partition: Option<Partition>,
    /// Whether the call is held work (a durable queue's replay), let go at the pace of the
    /// upstream's answers.
    pub(crate) held: bool,
}

impl<'r> CallSpec<'r> {
    /// The call `#[retry]`'s `site` makes (with `key`) through `registry`: fails only when
    /// `registry` has no such upstream.
    pub fn at(
        registry: &'r Registry,
        site: &'static CallSite,
        key: Option<IdempotencyKey>,
    ) -> Result<Self, Error> {
        Ok(CallSpec {
            registry,
            upstream: site.upstream_in(registry)?,
            method: site.method.clone(),
            key,
            replay: Replayability::Replayable,
            operation: Some(Cow::Borrowed(site.operation)),
            reserve: site.reserve,
            partition: None,
            held: false,
        })
    }

    /// The call is held work when `held` (a durable queue's replay of it, which the
    /// `#[retry(durable = ...)]` expansion says): its first attempt goes only when the
    /// upstream's throttle lets it go at the pace of the upstream's answers, as a call held
    /// through an outage does ([`throttle`](crate::throttle#letting-go)).
    pub fn held(mut self, held: bool) -> Self {
        self.held = held;
        self
    }

    /// The call belongs to `partition` (a tenant, an API key) for the upstream's quotas: a 429
    /// holds the partition's retries, not the upstream's (see [`partition`](crate::partition)).
    pub fn with_partition(mut self, partition: Option<Partition>) -> Self {
        self.partition = partition;
        self
    }
}

impl<'r> Call<'r> {
    /// Joins the enclosing operation scope (or prepares the call's own), fixes the deadline
    /// and counts the call in the upstream's retry budget.
    ///
    /// It cannot fail: what can (finding the upstream) is done making the spec. A `Call` is
    /// large, and returned bare it is built in place in the caller's future, not moved there
    /// out of a `Result`. Its backoffs wait in `slot`, an empty [`BackoffSlot`] the caller's
    /// future pins beside it.
    pub fn new(spec: CallSpec<'r>, slot: Pin<&'r mut BackoffSlot>) -> Self {
        let upstream = spec.upstream;
        let config = upstream.config();
        let retries = config.max_attempts.saturating_sub(1);
        let min_attempt_budget = config.min_attempt_budget;
        let now = Instant::now();
        // The reserve (a durable call's hand-off) is kept back from whichever deadline binds.
        let own = deadline_after(now, config.deadline.saturating_sub(spec.reserve));
        let (scope, deadline) = match Operation::current() {
            Some(op) => {
                let allowed = op.init_allowance(retries);
                if allowed < retries {
                    // An enclosing scope (or, behind the server layer, the caller's propagated
                    // limits) allows fewer retries than this upstream's `max_attempts`.
                    events::on_fewer_retries(&upstream, &op, allowed);
                }
                let reserved = op
                    .deadline()
                    .map(|d| d.checked_sub(spec.reserve).unwrap_or(d));
                let deadline = min_deadline(reserved, Some(own)).unwrap_or(own);
                (CallScope::Joined(op), deadline)
            }
            None => {
                let name = spec.operation.map(OpName::from);
                (CallScope::Unopened(Unopened::new(name, retries)), own)
            }
        };
        // Calls earn retries: the budget sees this one as it starts.
        let created_tick = upstream.tick(now);
        upstream.budget().deposit_on(created_tick);
        let safety = Safety::of(
            &spec.method,
            spec.key.is_some(),
            config.dedups_idempotency_key,
        );
        let span = events::call_span(
            upstream.name(),
            scope.name(upstream.name()),
            &spec.method,
            safety,
            spec.key.as_ref(),
        );
        Call {
            registry: spec.registry,
            upstream,
            request: Request::new(spec.method, safety, spec.key, spec.replay),
            scope,
            timing: Timing::new(now, created_tick, deadline, min_attempt_budget),
            pacing: Pacing::new(spec.partition, spec.held),
            outcome: Outcome::new(),
            backoff: Backoff::new(slot),
            rng: LazyRng::default(),
            spans: Spans::new(span),
            rotations: Rotations::default(),
            auth_refresh_used: false,
        }
    }

    /// Lowers the body's replayability once it is known to be weaker than declared (e.g. the
    /// integration found the body cannot be copied for another attempt). Never raises it.
    pub fn downgrade_replay(&mut self, replay: Replayability) {
        self.request.lower_replay(replay);
    }
}
