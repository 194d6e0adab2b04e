//! The faults the lab forces on the catalog, and which request each scenario sends.
//!
//! Every fault decision is a pure function of the seed, the order and how many times the catalog
//! has already seen that order, so a run with the same `--seed` injects the same faults into
//! the same requests under every design.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// One forced failure mode of the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scenario {
    /// The catalog answers every request with 503 (a dead dependency).
    Always503,
    /// Half the requests get 429 with `Retry-After: 1` (a rate-limited dependency).
    RateLimited429,
    /// Half the requests get 503 without `Retry-After` (a flapping dependency).
    Flaky503,
    /// 503 on every request during a window in the middle of the run, then healthy again.
    Transient,
    /// A catalog with a limited capacity slows down briefly: requests queue, time out and are
    /// retried, and a design whose retries outgrow the catalog's capacity keeps it saturated
    /// long after the slowdown (a metastable failure). The catalog honours the caller's
    /// `retry-deadline-ms` (it skips a queued request whose caller stopped waiting).
    Slowdown,
    /// The same slowdown, but the catalog ignores `retry-deadline-ms`, as a third-party
    /// service would: it serves every queued request, whether or not anyone still waits.
    SlowdownIgnoresDeadline,
    /// A third of the requests take 1 s, far past the 300 ms attempt timeout.
    Slow,
    /// A rare slow tail: 2 % of the requests take 1 s, the rest the usual ~10 ms.
    SlowTail,
    /// Writes with an idempotency key; the catalog executes half the writes and then resets the
    /// connection before answering.
    ResetKeyed,
    /// The same resets on writes without an idempotency key.
    ResetUnkeyed,
    /// Writes without a key, but with a way to check the result (`GET /orders/{id}`): design B
    /// asks before retrying.
    ResetReconciled,
    /// Keyed writes through an outage longer than any in-memory retry window (three quarters
    /// of a run twice as long as the others): designs B and B-tuned defer the writes to the
    /// durable queue (`#[retry(durable = ...)]`), whose worker replays them after the outage.
    LongOutage,
    /// One tenant over its quota: the catalog answers 429 with `Retry-After: 1` to tenant A
    /// (three operations in four) during a window in the middle of the run, and serves tenant
    /// B; the adapter names the tenant as the call's partition.
    TenantQuota,
    /// The transient outage with the middle service as ten replicas, each with a registry (a
    /// throttle, a budget) of its own, sharing the load round-robin: a fleet of small clients.
    FleetTransient,
}

impl Scenario {
    /// Every scenario, in report order.
    pub const ALL: [Scenario; 14] = [
        Scenario::Always503,
        Scenario::RateLimited429,
        Scenario::Flaky503,
        Scenario::Transient,
        Scenario::Slowdown,
        Scenario::SlowdownIgnoresDeadline,
        Scenario::Slow,
        Scenario::SlowTail,
        Scenario::ResetKeyed,
        Scenario::ResetUnkeyed,
        Scenario::ResetReconciled,
        Scenario::LongOutage,
        Scenario::TenantQuota,
        Scenario::FleetTransient,
    ];

    /// The flag value and report name.
    pub const fn name(self) -> &'static str {
        match self {
            Scenario::Always503 => "always-503",
            Scenario::RateLimited429 => "429-retry-after",
            Scenario::Flaky503 => "503-no-retry-after",
            Scenario::Transient => "transient-outage",
            Scenario::Slowdown => "brief-slowdown",
            Scenario::SlowdownIgnoresDeadline => "brief-slowdown-ignores-deadline",
            Scenario::Slow => "slow-catalog",
            Scenario::SlowTail => "slow-tail",
            Scenario::ResetKeyed => "reset-write-keyed",
            Scenario::ResetUnkeyed => "reset-write-unkeyed",
            Scenario::ResetReconciled => "reset-write-reconciled",
            Scenario::LongOutage => "long-outage",
            Scenario::TenantQuota => "tenant-429",
            Scenario::FleetTransient => "fleet-transient-outage",
        }
    }

    /// One line for `--help` and the report.
    pub const fn describe(self) -> &'static str {
        match self {
            Scenario::Always503 => "every catalog request answers 503",
            Scenario::RateLimited429 => "half the catalog requests answer 429 with Retry-After: 1",
            Scenario::Flaky503 => "half the catalog requests answer 503 without Retry-After",
            Scenario::Transient => {
                "every catalog request answers 503 from 20% to 60% of --duration, then healthy \
                 (for 5 s more)"
            }
            Scenario::Slowdown => {
                "the catalog serves one request at a time per 40 operations/s of load, 10 ms \
                 each (2.5 times the load); from 20% to 40% of --duration each takes 500 ms \
                 (then healthy, for 5 s more); it \
                 skips a queued request whose caller said (retry-deadline-ms) it stopped waiting"
            }
            Scenario::SlowdownIgnoresDeadline => {
                "the same slowdown, but the catalog ignores retry-deadline-ms, as a third-party \
                 service would: it serves every queued request, whether anyone still waits or not"
            }
            Scenario::Slow => "a third of the catalog requests take 1 s (attempt timeout 300 ms)",
            Scenario::SlowTail => "2% of the catalog requests take 1 s, the rest ~10 ms",
            Scenario::ResetKeyed => {
                "writes with an idempotency key; half are executed, then the connection is reset"
            }
            Scenario::ResetUnkeyed => "the same resets on writes without an idempotency key",
            Scenario::ResetReconciled => {
                "writes without a key whose result can be checked (GET /orders/{id})"
            }
            Scenario::LongOutage => {
                "keyed writes; every catalog request answers 503 from 12.5% to 87.5% of twice \
                 --duration (6 s of 8 s by default; --duration 20: 30 s of 40 s), then 5 s \
                 healthy; B and B-tuned defer to the durable queue (SQLite)"
            }
            Scenario::TenantQuota => {
                "tenant A (3 operations in 4) gets 429 with Retry-After: 1 from 20% to 60% of \
                 --duration, tenant B is served; the adapter names the tenant as its partition"
            }
            Scenario::FleetTransient => {
                "the transient outage, with the middle as 10 replicas of a registry each, the \
                 load round-robin over them"
            }
        }
    }

    /// Whether the operations are writes (`POST /orders/{id}/register`).
    pub const fn is_write(self) -> bool {
        matches!(
            self,
            Scenario::ResetKeyed
                | Scenario::ResetUnkeyed
                | Scenario::ResetReconciled
                | Scenario::LongOutage
        )
    }

    /// How long this scenario's measured load runs for a `--duration` of `duration`: the span
    /// its fault is placed in (twice `duration` for the long outage, so its outage outlasts
    /// the in-memory retry window (5 s at most) at the default `--duration`), and, for a fault
    /// that clears, [`AFTER_FAULT`] more of healthy load, so that recovery is measured rather
    /// than cut off by the end of the run.
    pub fn run_length(self, duration: Duration) -> Duration {
        let span = match self {
            Scenario::LongOutage => duration * 2,
            _ => duration,
        };
        match self.clears() {
            true => span + AFTER_FAULT,
            false => span,
        }
    }

    /// Whether the fault ends before the run does.
    pub const fn clears(self) -> bool {
        matches!(
            self,
            Scenario::Transient
                | Scenario::LongOutage
                | Scenario::Slowdown
                | Scenario::SlowdownIgnoresDeadline
                | Scenario::TenantQuota
                | Scenario::FleetTransient
        )
    }

    /// How the write is protected: a key, a reconcile check, or nothing.
    pub const fn write_contract(self) -> WriteContract {
        match self {
            Scenario::ResetKeyed => WriteContract::Keyed,
            Scenario::ResetReconciled => WriteContract::Reconciled,
            Scenario::LongOutage => WriteContract::Durable,
            _ => WriteContract::None,
        }
    }

    /// The fault window of the transient scenarios in a run of `length` (the scenario's
    /// [`run_length`](Self::run_length)), as fractions of the span before the
    /// [`AFTER_FAULT`] tail.
    pub fn outage_window(self, length: Duration) -> Option<(Duration, Duration)> {
        let duration = length.saturating_sub(AFTER_FAULT);
        match self {
            Scenario::Transient | Scenario::TenantQuota | Scenario::FleetTransient => {
                Some((duration.mul_f64(0.2), duration.mul_f64(0.6)))
            }
            Scenario::LongOutage => Some((duration.mul_f64(0.125), duration.mul_f64(0.875))),
            Scenario::Slowdown | Scenario::SlowdownIgnoresDeadline => {
                Some((duration.mul_f64(0.2), duration.mul_f64(0.4)))
            }
            _ => None,
        }
    }

    /// Whether the catalog skips a queued request whose caller said it stopped waiting.
    pub const fn honours_deadline(self) -> bool {
        !matches!(self, Scenario::SlowdownIgnoresDeadline)
    }

    /// How many requests the catalog works on at once under `load` operations per second
    /// (`None`: as many as arrive). Every upstream has a capacity, and a retry design that
    /// looks fine against an unlimited one can overload a real one as it recovers: every
    /// fault scenario's catalog has one, a little above the load ([`CAPACITY`] times it, with
    /// the [service time](Self::service_time) that gives); the slowdowns' is 2.5 times the
    /// load (one worker per 40 operations/s at 10 ms a request). A limited catalog queues the
    /// rest, and keeps working on a request whose client has given up, as a server that does
    /// not notice the client left does, unless the client said how long it would wait (design
    /// B propagates it) and the catalog [honours it](Self::honours_deadline). Its fast faults
    /// (503, 429) are answered at once, without a worker, as a server shedding at its door
    /// does. The latency and lost-response scenarios keep an unlimited catalog: they are about
    /// the tail and the writes, not about capacity.
    pub fn workers(self, load: f64) -> Option<usize> {
        match self {
            Scenario::Slowdown | Scenario::SlowdownIgnoresDeadline => {
                Some(((load / 40.0).round() as usize).max(1))
            }
            _ if self.capacity_limited() => {
                Some(((CAPACITY * load / 100.0).ceil() as usize).max(1))
            }
            _ => None,
        }
    }

    /// What one request takes a worker under `load` (see [`workers`](Self::workers)): 10 ms
    /// in the slowdowns; elsewhere what makes the workers' capacity [`CAPACITY`] times the load.
    pub fn service_time(self, load: f64) -> Duration {
        match (self.capacity_limited(), self.workers(load)) {
            (true, Some(workers)) if load > 0.0 => {
                Duration::from_secs_f64(workers as f64 / (CAPACITY * load))
            }
            _ => Duration::from_millis(10),
        }
    }

    /// Whether the catalog's capacity is [`CAPACITY`] times the load (the fault scenarios).
    const fn capacity_limited(self) -> bool {
        matches!(
            self,
            Scenario::Always503
                | Scenario::RateLimited429
                | Scenario::Flaky503
                | Scenario::Transient
                | Scenario::LongOutage
                | Scenario::TenantQuota
                | Scenario::FleetTransient
        )
    }

    /// Whether each design runs alone on the machine: the slowdowns, whose effect depends on
    /// how fast a queue drains, so on timing, not on the seed alone.
    pub const fn isolated(self) -> bool {
        matches!(self, Scenario::Slowdown | Scenario::SlowdownIgnoresDeadline)
    }

    /// How many replicas of the middle service (each with registries of its own) share the
    /// load.
    pub const fn middle_replicas(self) -> usize {
        match self {
            Scenario::FleetTransient => 10,
            _ => 1,
        }
    }
}

/// How long a scenario whose fault clears runs after its fault span: recovery is measured
/// over it.
pub const AFTER_FAULT: Duration = Duration::from_secs(5);

/// The capacity of a fault scenario's catalog, in times the load: a little above it, as a
/// service sized for its traffic with some headroom is.
pub const CAPACITY: f64 = 1.5;

/// The tenant an operation belongs to, in `tenant-429`: three in four are tenant A's (as the
/// adapter names it: [`OrderId::tenant`](crate::adapters::OrderId::tenant)).
pub fn tenant_of(order: u64) -> &'static str {
    crate::adapters::OrderId(order).tenant()
}

/// What a request takes on top of the catalog's service time during the slowdown.
const SLOWDOWN_EXTRA: Duration = Duration::from_millis(490);

/// What makes a write safe to retry in a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteContract {
    /// Nothing: the write must not be repeated once it may have reached the catalog.
    None,
    /// An idempotency key the catalog deduplicates.
    Keyed,
    /// A way to ask the catalog whether the write happened.
    Reconciled,
    /// An idempotency key, and (designs B and B-tuned) the durable queue for a write whose
    /// in-memory retries stop on a transient failure.
    Durable,
}

impl WriteContract {
    /// Whether the write carries an idempotency key.
    pub const fn keyed(self) -> bool {
        matches!(self, WriteContract::Keyed | WriteContract::Durable)
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Scenario::ALL
            .into_iter()
            .find(|sc| sc.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Scenario::ALL.iter().map(|s| s.name()).collect();
                format!("unknown scenario `{s}`: use one of {}", names.join(", "))
            })
    }
}

/// What the catalog does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Serve it normally.
    None,
    /// Answer 503 without `Retry-After`.
    Unavailable,
    /// Answer 429 with `Retry-After: 1`.
    TooManyRequests,
    /// Serve it after this long.
    Slow(Duration),
    /// Execute the write, then reset the connection instead of answering.
    ResetAfterWrite,
}

/// How long a slow request takes.
pub const SLOW: Duration = Duration::from_secs(1);

impl Scenario {
    /// The fault for the `nth` request (0-based) the catalog sees for `order`, `elapsed` after
    /// the load started. `write` is whether the request is the write itself (a reconcile check
    /// is a read and is never reset).
    pub fn fault(
        self,
        seed: u64,
        order: u64,
        nth: u32,
        elapsed: Duration,
        duration: Duration,
        write: bool,
    ) -> Fault {
        let coin = |p: f64| unit(seed, order, nth) < p;
        match self {
            Scenario::Always503 => Fault::Unavailable,
            Scenario::RateLimited429 if coin(0.5) => Fault::TooManyRequests,
            Scenario::Flaky503 if coin(0.5) => Fault::Unavailable,
            Scenario::Transient | Scenario::LongOutage | Scenario::FleetTransient => {
                match self.outage_window(duration) {
                    Some((from, until)) if elapsed >= from && elapsed < until => Fault::Unavailable,
                    _ => Fault::None,
                }
            }
            Scenario::Slowdown | Scenario::SlowdownIgnoresDeadline => {
                match self.outage_window(duration) {
                    Some((from, until)) if elapsed >= from && elapsed < until => {
                        Fault::Slow(SLOWDOWN_EXTRA)
                    }
                    _ => Fault::None,
                }
            }
            Scenario::TenantQuota => match self.outage_window(duration) {
                Some((from, until))
                    if elapsed >= from && elapsed < until && tenant_of(order) == "tenant-a" =>
                {
                    Fault::TooManyRequests
                }
                _ => Fault::None,
            },
            Scenario::Slow if coin(1.0 / 3.0) => Fault::Slow(SLOW),
            Scenario::SlowTail if coin(0.02) => Fault::Slow(SLOW),
            Scenario::ResetKeyed | Scenario::ResetUnkeyed | Scenario::ResetReconciled
                if write && coin(0.5) =>
            {
                Fault::ResetAfterWrite
            }
            _ => Fault::None,
        }
    }
}

/// A deterministic number in `[0, 1)` from the seed, the order and the request's rank
/// (SplitMix64 finaliser).
pub fn unit(seed: u64, order: u64, nth: u32) -> f64 {
    let mut z = seed
        ^ order.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ u64::from(nth).wrapping_mul(0xd1b5_4a32_d192_ed03);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Scenario::ALL {
            assert_eq!(s.name().parse::<Scenario>().unwrap(), s);
        }
        assert!(
            "nope"
                .parse::<Scenario>()
                .unwrap_err()
                .contains("always-503")
        );
    }

    #[test]
    fn faults_are_deterministic_and_near_their_rate() {
        let d = Duration::from_secs(5);
        let hits = (0..10_000)
            .filter(|o| {
                Scenario::Flaky503.fault(7, *o, 0, Duration::ZERO, d, false) == Fault::Unavailable
            })
            .count();
        assert!((4_500..5_500).contains(&hits), "{hits}");
        assert_eq!(
            Scenario::Flaky503.fault(7, 3, 1, Duration::ZERO, d, false),
            Scenario::Flaky503.fault(7, 3, 1, Duration::ZERO, d, false)
        );
    }

    #[test]
    fn the_slowdown_slows_what_is_served_during_it_and_limits_the_workers() {
        let d = Scenario::Slowdown.run_length(Duration::from_secs(5));
        assert_eq!(d, Duration::from_secs(10), "5 s more after the fault span");
        let during = Duration::from_millis(1500);
        let after = Duration::from_millis(2500);
        assert_eq!(
            Scenario::Slowdown.fault(7, 1, 0, during, d, false),
            Fault::Slow(SLOWDOWN_EXTRA)
        );
        assert_eq!(
            Scenario::Slowdown.fault(7, 1, 0, after, d, false),
            Fault::None
        );
        assert_eq!(Scenario::Slowdown.workers(40.0), Some(1));
        assert_eq!(Scenario::Slowdown.workers(2000.0), Some(50));
        assert_eq!(Scenario::ALL.iter().filter(|s| s.isolated()).count(), 2);
        assert_eq!(Scenario::Transient.workers(40.0), Some(1));
        assert_eq!(
            Scenario::Transient.service_time(40.0),
            Duration::from_secs_f64(1.0 / 60.0)
        );
        assert_eq!(Scenario::Slow.workers(40.0), None);
        assert!(Scenario::Slowdown.honours_deadline());
        assert!(!Scenario::SlowdownIgnoresDeadline.honours_deadline());
    }
}
