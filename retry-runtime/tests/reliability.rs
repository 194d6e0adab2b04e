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
