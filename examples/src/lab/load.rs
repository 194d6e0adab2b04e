//! The load driver: an open-loop stream of user operations at a fixed mean rate (Poisson
//! arrivals from the seed), each one a request to the API, timed end to end.
//!
//! Open loop on purpose: users do not wait for the previous user, so a slow design accumulates
//! operations in flight instead of quietly lowering the load it is measured under.

use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::designs::SHED;

/// How an operation ended, as the user saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx.
    Ok,
    /// An error response or no response.
    Failed,
    /// The API said the write's outcome is unknown.
    Ambiguous,
    /// 202: the write was deferred to the durable queue, to be completed later.
    Deferred,
    /// The API had its bound of operations in flight and refused this one at once (a failure
    /// to the user, counted apart so the bound shows; see [`super::files`]).
    Shed,
}

/// How long a user waits for an operation before giving up (it then counts as failed).
pub const USER_TIMEOUT: Duration = Duration::from_secs(15);

/// One operation's record.
#[derive(Debug, Clone, Copy)]
pub struct OpRecord {
    /// The operation's id (the order id).
    pub id: u64,
    /// When it started, from the start of the load.
    pub start: Duration,
    /// How long it took.
    pub latency: Duration,
    /// How it ended.
    pub outcome: Outcome,
    /// How late it started against its schedule: the lab's own lag (a driver that cannot keep
    /// up with `--load` shows here, not in the designs' figures).
    pub lag: Duration,
}

/// Arrival offsets of a Poisson process at `rate` per second over `duration`, from `seed`.
pub fn schedule(seed: u64, rate: f64, duration: Duration) -> Vec<Duration> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut t = 0.0;
    let mut out = Vec::new();
    if rate <= 0.0 {
        return out;
    }
    loop {
        // Exponential inter-arrival time; 1 - u is in (0, 1].
        t += -(1.0 - rng.f64()).ln() / rate;
        if t >= duration.as_secs_f64() {
            return out;
        }
        out.push(Duration::from_secs_f64(t));
    }
}

/// How the user reads the API's answer: its status, and the API's [`OUTCOME`](super::designs::OUTCOME) header.
fn classify(status: http::StatusCode, tag: Option<&http::HeaderValue>) -> Outcome {
    match status {
        http::StatusCode::ACCEPTED => Outcome::Deferred,
        s if s.is_success() => Outcome::Ok,
        _ if tag.is_some_and(|v| v == "ambiguous") => Outcome::Ambiguous,
        _ if tag.is_some_and(|v| v == SHED) => Outcome::Shed,
        _ => Outcome::Failed,
    }
}

/// Sends one operation per entry of `schedule` to `api`, from `start`, with ids from
/// `first_id`; `write` selects `POST /orders/{id}/register` over `GET /orders/{id}`. `done` is
/// called as each one ends.
///
/// At most `max_in_flight` operations are in flight at once, the API's own bound: one that
/// starts while that many are is [`Outcome::Shed`] without a connection, as the API would
/// have shed it. Counted here too because a lab that falls behind its schedule would
/// otherwise open a socket per late operation before the API could refuse any.
pub async fn drive(
    api: std::net::SocketAddr,
    write: bool,
    schedule: &[Duration],
    start: Instant,
    first_id: u64,
    max_in_flight: usize,
    done: impl Fn() + Send + Sync + Clone + 'static,
) -> Vec<OpRecord> {
    let mut records = Vec::with_capacity(schedule.len());
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(max_in_flight.max(1)));
    let users = std::sync::Arc::new(super::users::Users::new(api));
    let (method, route) = if write {
        (http::Method::POST, "/register")
    } else {
        (http::Method::GET, "")
    };
    let mut ops = JoinSet::new();
    // One timer at a time: each operation is spawned when it is due, not all at the start
    // (thousands of tasks and timers the runtime would otherwise carry for the whole run).
    for (i, offset) in schedule.iter().enumerate() {
        let id = first_id + i as u64;
        let at = start + *offset;
        tokio::time::sleep_until(at).await;
        let users = users.clone();
        let method = method.clone();
        let done = done.clone();
        let slots = slots.clone();
        ops.spawn(async move {
            let began = Instant::now();
            let Ok(_slot) = slots.try_acquire_owned() else {
                done();
                return OpRecord {
                    id,
                    start: began.saturating_duration_since(start),
                    latency: Duration::ZERO,
                    outcome: Outcome::Shed,
                    lag: began.saturating_duration_since(at),
                };
            };
            let path = format!("/orders/{id}{route}");
            let outcome = match tokio::time::timeout(USER_TIMEOUT, users.call(method, &path)).await
            {
                Ok(Some((status, tag))) => classify(status, tag.as_ref()),
                _ => Outcome::Failed,
            };
            let record = OpRecord {
                id,
                start: began.saturating_duration_since(start),
                latency: began.elapsed(),
                outcome,
                lag: began.saturating_duration_since(at),
            };
            done();
            record
        });
        // Reap finished operations as the load runs, so the set holds what is in flight.
        while let Some(r) = ops.try_join_next() {
            records.extend(r.ok());
        }
    }
    while let Some(r) = ops.join_next().await {
        if let Ok(r) = r {
            records.push(r);
        }
    }
    records.sort_by_key(|r| r.id);
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_seeded_and_near_its_rate() {
        let a = schedule(1, 100.0, Duration::from_secs(10));
        assert_eq!(a, schedule(1, 100.0, Duration::from_secs(10)));
        assert!((900..1100).contains(&a.len()), "{}", a.len());
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
    }
}
