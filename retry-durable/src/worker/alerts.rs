//! Alert delivery: each failed task's alert hook called until it answers, at least once.
//!
//! A failed task owes its alert in the same write that fails it; the alert is reserved for
//! `alert_lease` while the hook runs and recorded only after the hook returns, so a crash in
//! between re-alerts instead of staying silent.

use super::inner::{Inner, TARGET};
use crate::error::DurableError;
use crate::store::DurableStore;

/// Delivers owed alerts for failed tasks; how many were delivered.
pub(super) async fn dispatch<S: DurableStore>(inner: &Inner<S>) -> Result<u64, DurableError> {
    let now = inner.clock.now();
    let owed = inner
        .store
        .claim_alerts(
            inner.config.batch_size,
            now.saturating_add(inner.config.alert_lease),
            now,
        )
        .await?;
    let mut delivered = 0;
    for task in owed {
        let task_id = task.id;
        tracing::error!(target: TARGET, event = "alert", task_id = task_id.0,
            operation = %task.operation, idempotency_key = %task.idempotency_key,
            attempts = task.retry_count,
            last_error = task.last_error.as_deref().unwrap_or(""),
            "durable task failed for good; a human must look");
        let call = inner.alert.alert(task);
        match tokio::time::timeout(inner.config.alert_lease, call).await {
            Ok(Ok(())) => {
                if inner.store.ack_alert(task_id, inner.clock.now()).await? {
                    delivered += 1;
                }
            }
            Ok(Err(e)) => tracing::warn!(target: TARGET, task_id = task_id.0, error = %e,
                "alert hook failed; the alert stays owed and is retried after the alert lease"),
            Err(_) => tracing::warn!(target: TARGET, task_id = task_id.0,
                "alert hook timed out; the alert stays owed and is retried after the alert lease"),
        }
    }
    Ok(delivered)
}
