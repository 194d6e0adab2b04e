//! The worker's two loops: one pass ([`tick`]) and the long-running drain ([`run`]).
//!
//! [`run`] claims while attempts are below `concurrency`, taking only as many tasks as it has
//! free slots, so every claimed task starts at once. An idle worker wakes when a task is
//! handed off (in this process, or in another through PostgreSQL's `LISTEN`/`NOTIFY`), and
//! polls as a fallback. Store errors are counted and logged, and what failed is tried again
//! on the next pass: a database outage must not kill the worker.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::alerts;
use super::config::HAND_OFF_COALESCE;
use super::in_flight::InFlight;
use super::inner::{Inner, TARGET};
use super::rescuer;
use super::stats::WorkerStats;
use crate::error::DurableError;
use crate::store::{DurableStore, WorkSignal};

/// Rescues expired leases, claims one batch, runs every claimed attempt to its end, then
/// delivers owed alerts.
pub(super) async fn tick<S: DurableStore>(
    inner: &Arc<Inner<S>>,
) -> Result<WorkerStats, DurableError> {
    let mut stats = WorkerStats {
        rescued: rescuer::rescue(inner).await?,
        ..WorkerStats::default()
    };
    let mut in_flight = InFlight::new();
    stats.claimed = in_flight.claim(inner, claim_cap(inner)).await? as u64;
    stats.absorb(in_flight.finish_all(inner).await);
    stats.alerted = alerts::dispatch(inner).await?;
    Ok(stats)
}

/// The most one claim takes: `batch_size`, and never more than `concurrency`.
fn claim_cap<S>(inner: &Inner<S>) -> u32 {
    let cfg = &inner.config;
    u32::try_from(cfg.concurrency)
        .unwrap_or(u32::MAX)
        .min(cfg.batch_size)
}

/// Runs until `shutdown` completes, then stops claiming, waits up to `shutdown_grace` for
/// in-flight attempts, aborts the rest and releases their leases.
pub(super) async fn run<S: DurableStore>(
    inner: &Arc<Inner<S>>,
    shutdown: impl Future<Output = ()>,
) -> WorkerStats {
    let cfg = &inner.config;
    let mut stats = WorkerStats::default();
    let mut in_flight = InFlight::new();
    let mut rescues = Every::new(cfg.rescue_interval);
    let mut hand_offs = HandOffs::new();
    // Alerts are checked at start-up (a crash may have left some owed), after any failure,
    // and on the rescue timer (rescues can fail tasks too).
    let mut alerts_due = true;
    // Claim again once half a batch of slots is free (or nothing runs), not per freed slot.
    let refill = (cfg.batch_size as usize).min(cfg.concurrency).div_ceil(2);
    let signal = survive(
        &mut stats,
        "cannot listen for hand-offs; polling only",
        inner.store.subscribe().await,
    )
    .unwrap_or_else(|| WorkSignal::new(Arc::default(), None));
    tokio::pin!(shutdown);
    tracing::info!(target: TARGET, worker = %inner.id, operations = ?inner.operations,
        "durable worker started");
    loop {
        if rescues.due() {
            stats.rescued += survive(
                &mut stats,
                "lease rescue failed",
                rescuer::rescue(inner).await,
            )
            .unwrap_or(0);
            alerts_due = true;
        }
        // Enabled before claiming, so a hand-off committed during the claim still wakes us.
        let handed_off = signal.notified();
        tokio::pin!(handed_off);
        handed_off.as_mut().enable();
        hand_offs.before_claim().await;
        let free = cfg.concurrency.saturating_sub(in_flight.len());
        let want = u32::try_from(free).unwrap_or(u32::MAX).min(cfg.batch_size);
        let mut claimed = 0;
        if want > 0 {
            claimed = survive(
                &mut stats,
                "claim failed",
                in_flight.claim(inner, want).await,
            )
            .unwrap_or(0);
            stats.claimed += claimed as u64;
        }
        if alerts_due
            && let Some(n) = survive(
                &mut stats,
                "alert dispatch failed",
                alerts::dispatch(inner).await,
            )
        {
            stats.alerted += n;
            alerts_due = false;
        }
        // A full batch suggests more is due: claim again at once while there is room, or
        // as soon as an attempt frees a slot. Otherwise poll.
        let more_due = want > 0 && claimed == want as usize;
        let has_room = in_flight.len() < cfg.concurrency;
        let wait = if more_due && has_room {
            Duration::ZERO
        } else {
            cfg.poll_interval
        };
        let wake_on_join = more_due || !has_room;
        let sleep = tokio::time::sleep(wait);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => {
                    stats.absorb(in_flight.shut_down(inner, cfg.shutdown_grace).await);
                    tracing::info!(target: TARGET, worker = %inner.id, ?stats,
                        "durable worker stopped");
                    return stats;
                }
                Some(joined) = in_flight.join_next(), if !in_flight.is_empty() => {
                    let settled = in_flight.settle(inner, joined).await;
                    alerts_due |= settled.failed > 0;
                    stats.absorb(settled);
                    let free = cfg.concurrency.saturating_sub(in_flight.len());
                    if wake_on_join && (free >= refill || in_flight.is_empty()) { break; }
                }
                () = &mut handed_off, if in_flight.len() < cfg.concurrency => {
                    hand_offs.woken();
                    break;
                }
                () = &mut sleep => break,
            }
        }
    }
}

/// A store error in the loop: counted and logged, and the loop carries on.
fn survive<T>(
    stats: &mut WorkerStats,
    what: &'static str,
    result: Result<T, DurableError>,
) -> Option<T> {
    result
        .inspect_err(|e| {
            stats.store_errors += 1;
            tracing::error!(target: TARGET, error = %e, "{what}");
        })
        .ok()
}

/// A timer for something done every `interval` (the first time at once).
struct Every {
    next: Instant,
    interval: Duration,
}

impl Every {
    fn new(interval: Duration) -> Self {
        Every {
            next: Instant::now(),
            interval,
        }
    }

    /// Whether it is due; if so, the next time is `interval` from now. An interval of
    /// `Duration::MAX` means "hardly ever", not a panic.
    fn due(&mut self) -> bool {
        let now = Instant::now();
        if now < self.next {
            return false;
        }
        self.next = now
            .checked_add(self.interval)
            .unwrap_or(now + Duration::from_secs(86_400 * 365));
        true
    }
}

/// Hand-offs arriving faster than claims return are taken together: a claim prompted by a
/// hand-off waits until [`HAND_OFF_COALESCE`] after the last claim started, and one that finds
/// the worker idle for longer claims at once.
struct HandOffs {
    last_claim: Instant,
    woken: bool,
}

impl HandOffs {
    fn new() -> Self {
        HandOffs {
            last_claim: Instant::now(),
            woken: false,
        }
    }

    /// A hand-off woke the worker.
    fn woken(&mut self) {
        self.woken = true;
    }

    /// Waits, if a hand-off prompted this claim, and notes when the claim starts.
    async fn before_claim(&mut self) {
        if self.woken {
            tokio::time::sleep_until(self.last_claim + HAND_OFF_COALESCE).await;
            self.woken = false;
        }
        self.last_claim = Instant::now();
    }
}
