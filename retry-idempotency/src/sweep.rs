//! Deleting expired keys, a small batch at a time.
//!
//! An expired key is already new again for the layer (it reads the record and takes it over),
//! so sweeping only reclaims space. Each batch is one short `DELETE` of at most `batch` rows, so
//! requests writing keys between batches never wait behind a long one (on SQLite every write
//! takes the one writer lock; on PostgreSQL rows another sweeper locked are skipped).

use std::sync::Arc;
use std::time::Duration;

use retry_durable::{Clock, SystemClock};

use crate::store::{KeyStore, StoreResult};

/// Deletes expired keys in the background.
///
/// # Default
/// - `batch`: 500 rows per `DELETE`
/// - `interval`: 60 s between sweeps (a sweep goes on batch after batch while they come full)
/// - clock: [`SystemClock`]
pub struct Sweeper<K> {
    store: K,
    batch: u32,
    interval: Duration,
    clock: Arc<dyn Clock>,
}

impl<K: std::fmt::Debug> std::fmt::Debug for Sweeper<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sweeper")
            .field("store", &self.store)
            .field("batch", &self.batch)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl<K: KeyStore> Sweeper<K> {
    /// A sweeper with the defaults.
    pub fn new(store: K) -> Self {
        Sweeper {
            store,
            batch: 500,
            interval: Duration::from_secs(60),
            clock: Arc::new(SystemClock),
        }
    }

    /// Sets the rows deleted per statement (at least 1).
    pub fn with_batch(mut self, batch: u32) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// Sets the pause between sweeps.
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Sets the clock expiry is read from (the layer's).
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// One sweep: batches until one comes back short. How many keys it deleted.
    pub async fn sweep(&self) -> StoreResult<u64> {
        let mut total = 0;
        loop {
            let n = self.store.sweep(self.clock.now(), self.batch).await?;
            total += n;
            if n < u64::from(self.batch) {
                return Ok(total);
            }
            // Let requests waiting for the database go between batches.
            tokio::task::yield_now().await;
        }
    }

    /// Sweeps every `interval` until `shutdown` completes. A failed sweep is logged and tried
    /// again at the next interval.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            match self.sweep().await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::debug!(target: "retry_idempotency", event = "sweep", deleted = n)
                }
                Err(e) => {
                    tracing::warn!(target: "retry_idempotency", error = %e, "sweeping expired keys failed")
                }
            }
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(self.interval) => {}
            }
        }
    }
}
