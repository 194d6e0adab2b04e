//! The durable queue a registry's `#[retry(durable = ...)]` calls hand their work to.

use std::sync::Arc;

use super::live::Registry;
use crate::hand_off::{EnqueueOptions, HandOff};

impl Registry {
    /// Registers the durable queue that `#[retry(durable = ...)]` calls of this registry hand
    /// their work to when their in-memory retries stop on a transient failure, with the
    /// default [`EnqueueOptions`]. Set it at start-up, before [`verify`](Registry::verify).
    ///
    /// ```no_run
    /// # async fn start() -> Result<(), Box<dyn std::error::Error>> {
    /// use retry_durable::{DurableQueue, SqliteStore};
    /// use retry_runtime::Registry;
    ///
    /// let store = SqliteStore::open("var/retry-queue.sqlite").await?;
    /// Registry::global().set_durable_queue(DurableQueue::new(store));
    /// # Ok(()) }
    /// ```
    pub fn set_durable_queue(&self, queue: impl HandOff) {
        self.set_durable_queue_with(queue, EnqueueOptions::new());
    }

    /// Like [`set_durable_queue`](Registry::set_durable_queue), with the options of every
    /// hand-off (durable attempts before the task fails and alerts, first delay). A `Retry-After`
    /// longer than the delay delays the task that long.
    pub fn set_durable_queue_with(&self, queue: impl HandOff, options: EnqueueOptions) {
        let mut slot = self.durable.0.write().unwrap_or_else(|p| p.into_inner());
        *slot = Some((Arc::new(queue), options));
    }

    /// The durable queue, if one was registered.
    pub(crate) fn durable_queue(&self) -> Option<(Arc<dyn HandOff>, EnqueueOptions)> {
        self.durable
            .0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether a durable queue was registered.
    pub(crate) fn has_durable_queue(&self) -> bool {
        self.durable_queue().is_some()
    }
}
