//! Regression tests for the shared state of the runtime: sliding windows that count late, and
//! the registry's writers racing each other. Time is tokio's paused clock; races loop many times
//! and assert on what is left, never on how long anything took.

use std::time::Duration;

use retry_runtime::budget::{BudgetConfig, RetryBudget};

/// A call counted at its start after running longer than the window lands in the slot of the
/// newest deposits: it is outside the window and must not reset that slot.
#[tokio::test(start_paused = true)]
async fn a_late_deposit_does_not_erase_newer_deposits() {
    let b = RetryBudget::new(
        BudgetConfig::new()
            .with_min_per_second(0)
            .with_window(Duration::from_secs(1)),
    )
    .unwrap();
    tokio::time::advance(Duration::from_secs(5)).await;
    for _ in 0..100 {
        b.deposit();
    }
    b.deposit_at(tokio::time::Instant::now() - Duration::from_secs(1));
    assert_eq!(b.available(), 20, "100 calls at 0.2 earn 20 retries");
}

/// A withdrawal dated before the window the budget now counts (a caller passing an instant it
/// read long ago) falls outside the window, which drops the count: it must not be granted
/// without being counted. It is counted in the newest window instead, so a budget of one
/// grants one.
#[tokio::test(start_paused = true)]
async fn a_stale_withdrawal_is_counted_not_granted_for_free() {
    let b = RetryBudget::new(
        BudgetConfig::new()
            .with_ratio(0.0)
            .with_min_per_second(1)
            .with_window(Duration::from_secs(1)),
    )
    .unwrap();
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(b.available(), 1, "the floor: 1 per second over 1 s");
    let stale = tokio::time::Instant::now() - Duration::from_secs(5);
    let granted = (0..1_000).filter(|_| b.withdraw_at(stale)).count();
    assert_eq!(granted, 1);
    assert_eq!(b.available(), 0);
    assert!(!b.withdraw(), "the stale withdrawal spent the token");
}

/// A hot reload racing a refresh-hook registration: a writer that built on the snapshot it read
/// before the other stored its own would silently revert the reload or drop the hook. Every
/// round here races one reload against one registration, then checks that both took effect.
#[test]
fn a_reload_racing_a_hook_registration_loses_neither() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Barrier};

    use retry_runtime::{Registry, UpstreamConfig};

    const NAMES: usize = 64;
    const ROUNDS: u64 = 10_000;
    let name = |i: usize| format!("u{i}");
    let configs = |round: u64| {
        (0..NAMES).map(move |i| {
            let config = UpstreamConfig::new().with_idempotency_header(format!("x-round-{round}"));
            (format!("u{i}"), config)
        })
    };
    let registry = Registry::builder().upstreams(configs(0)).build().unwrap();
    // The round whose hook last ran, per name: tells this round's hook from an older one.
    let ran: Arc<Vec<AtomicU64>> = Arc::new((0..NAMES).map(|_| AtomicU64::new(0)).collect());
    let start = Barrier::new(2);
    let done = Barrier::new(2);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for round in 1..=ROUNDS {
                let slot = round as usize % NAMES;
                let ran = ran.clone();
                start.wait();
                registry.on_unauthorized(&name(slot), move || {
                    ran[slot].store(round, Ordering::SeqCst);
                    std::future::ready(Ok(()))
                });
                done.wait();
            }
        });
        // Failures are collected, not asserted inside the rounds: a panic here would leave the
        // other thread waiting at the barrier for ever.
        let mut lost = Vec::new();
        for round in 1..=ROUNDS {
            start.wait();
            registry.replace(configs(round)).unwrap();
            done.wait();
            let slot = round as usize % NAMES;
            let upstream = registry.upstream(&name(slot)).unwrap();
            if upstream.config().idempotency_header != format!("x-round-{round}") {
                lost.push(format!("round {round}: the reload was reverted"));
            }
            match upstream.refresh_hook() {
                None => lost.push(format!("round {round}: the hook was lost")),
                Some(hook) => {
                    runtime.block_on(hook.refresh()).unwrap();
                    if ran[slot].load(Ordering::SeqCst) != round {
                        lost.push(format!("round {round}: an older hook replaced this one"));
                    }
                }
            }
        }
        assert_eq!(lost, Vec::<String>::new());
    });
}
