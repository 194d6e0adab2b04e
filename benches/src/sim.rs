//! A deterministic discrete-event reproduction of the contention simulation behind AWS's
//! "Exponential Backoff And Jitter" post (the published `aws-arch-backoff-simulator`), driven
//! by `retry_runtime::backoff::Backoff`.
//!
//! The model: one row guarded by optimistic concurrency control. Each client reads the row's
//! version, then writes with that version; the write succeeds only if nobody wrote in between.
//! A failed client backs off, then starts over with a read. Every message crosses the network
//! with a delay of `|N(10 ms, 2 ms)|`. A run ends when every client has written once; "time" is
//! when the last client learns its write succeeded and "calls" counts writes (the work).
//!
//! Mapping to our backoff (the simulator's retry number `n` starts at 1 and its exponential
//! ceiling is `base * 2^n`, so its first ceiling is `2 * base`):
//! - full jitter: `Backoff { initial: 2 * base = 10 ms, multiplier: 2, max_backoff: 2 s }`,
//!   giving `U(0, min(cap, base * 2^n))` exactly as the simulator;
//! - decorrelated: `Backoff { initial: base = 5 ms, multiplier: 3, max_backoff: 2 s }`, giving
//!   `min(cap, U(base, previous * 3))` exactly as the simulator;
//! - exponential without jitter: the full-jitter config's [`Backoff::ceiling`];
//! - equal jitter (reference only, not offered by the runtime): `v/2 + U(0, v/2)` of that ceiling;
//! - no backoff: zero.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

use retry_runtime::backoff::{Backoff, Jitter};

/// Base delay of the published simulation.
pub const BASE: Duration = Duration::from_millis(5);
/// Cap of the published simulation.
pub const CAP: Duration = Duration::from_secs(2);

/// A backoff strategy of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Exponential without jitter.
    Exponential,
    /// Retry immediately.
    NoBackoff,
    /// Half fixed, half random (reference only).
    Equal,
    /// `Backoff` with [`Jitter::Full`].
    Full,
    /// `Backoff` with [`Jitter::Decorrelated`].
    Decorrelated,
}

impl Strategy {
    /// Every strategy, in the published table's column order.
    pub const ALL: [Strategy; 5] = [
        Strategy::Exponential,
        Strategy::NoBackoff,
        Strategy::Equal,
        Strategy::Full,
        Strategy::Decorrelated,
    ];

    /// The column name.
    pub const fn name(self) -> &'static str {
        match self {
            Strategy::Exponential => "Exponential (no jitter)",
            Strategy::NoBackoff => "No backoff",
            Strategy::Equal => "Equal jitter (ref)",
            Strategy::Full => "Full jitter",
            Strategy::Decorrelated => "Decorrelated",
        }
    }
}

/// Our full-jitter backoff with the simulation's parameters.
pub const fn full_jitter() -> Backoff {
    Backoff::new()
        .with_initial(Duration::from_millis(2 * BASE.as_millis() as u64))
        .with_multiplier(2.0)
        .with_max_backoff(CAP)
        .with_jitter(Jitter::Full)
}

/// Our decorrelated-jitter backoff with the simulation's parameters.
pub const fn decorrelated_jitter() -> Backoff {
    Backoff::new()
        .with_initial(BASE)
        .with_multiplier(3.0)
        .with_max_backoff(CAP)
        .with_jitter(Jitter::Decorrelated)
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A read request reaches the server.
    Read,
    /// The read's answer reaches the client.
    ReadResponse(u64),
    /// A write request (with the version read) reaches the server.
    Write(u64),
    /// The write's answer reaches the client.
    WriteResponse(bool),
}

#[derive(Debug)]
struct Event {
    at: f64,
    seq: u64,
    client: usize,
    kind: Kind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    // Min-heap on (time, insertion order).
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at
            .total_cmp(&self.at)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// `|N(mean, sd)|` in milliseconds (Box-Muller).
fn net_delay(rng: &mut fastrand::Rng) -> f64 {
    let u1 = 1.0 - rng.f64(); // (0, 1]
    let u2 = rng.f64();
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    (10.0 + 2.0 * z).abs()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The outcome of one simulated run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Run {
    /// Completion time in milliseconds.
    pub time_ms: f64,
    /// Writes made (work).
    pub calls: f64,
}

/// One run: `clients` clients each write the row once.
pub fn run(clients: usize, strategy: Strategy, rng: &mut fastrand::Rng) -> Run {
    let full = full_jitter();
    let decorrelated = decorrelated_jitter();
    let mut retries = vec![0u32; clients];
    let mut previous = vec![Duration::ZERO; clients];
    let mut heap = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |heap: &mut BinaryHeap<Event>, at: f64, client: usize, kind: Kind| {
        seq += 1;
        heap.push(Event {
            at,
            seq,
            client,
            kind,
        });
    };
    for c in 0..clients {
        let at = net_delay(rng);
        push(&mut heap, at, c, Kind::Read);
    }
    let (mut version, mut calls, mut now) = (0u64, 0u64, 0.0f64);
    while let Some(ev) = heap.pop() {
        debug_assert!(ev.at >= now, "time moves forward");
        now = ev.at;
        let c = ev.client;
        match ev.kind {
            Kind::Read => {
                let at = now + net_delay(rng);
                push(&mut heap, at, c, Kind::ReadResponse(version));
            }
            Kind::ReadResponse(v) => {
                let at = now + net_delay(rng);
                push(&mut heap, at, c, Kind::Write(v));
            }
            Kind::Write(v) => {
                calls += 1;
                let ok = v == version;
                if ok {
                    version += 1;
                }
                let at = now + net_delay(rng);
                push(&mut heap, at, c, Kind::WriteResponse(ok));
            }
            Kind::WriteResponse(true) => {}
            Kind::WriteResponse(false) => {
                retries[c] += 1;
                let n = retries[c];
                let sleep = match strategy {
                    Strategy::NoBackoff => Duration::ZERO,
                    Strategy::Exponential => full.ceiling(n),
                    Strategy::Equal => {
                        let v = full.ceiling(n);
                        v / 2 + Duration::from_secs_f64(rng.f64() * v.as_secs_f64() / 2.0)
                    }
                    Strategy::Full => full.delay(n, previous[c], rng),
                    Strategy::Decorrelated => decorrelated.delay(n, previous[c], rng),
                };
                previous[c] = sleep;
                let at = now + net_delay(rng) + ms(sleep);
                push(&mut heap, at, c, Kind::Read);
            }
        }
    }
    Run {
        time_ms: now,
        calls: calls as f64,
    }
}

/// The mean of `runs` runs with one seeded generator (the published script averages 100).
pub fn mean(clients: usize, strategy: Strategy, seed: u64, runs: u32) -> Run {
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut time, mut calls) = (0.0, 0.0);
    for _ in 0..runs {
        let r = run(clients, strategy, &mut rng);
        time += r.time_ms;
        calls += r.calls;
    }
    Run {
        time_ms: time / f64::from(runs),
        calls: calls / f64::from(runs),
    }
}
