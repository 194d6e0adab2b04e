//! The lease a handler runs under, as the handler can see it: [`KeyLease::current`].
//!
//! The first request with a key records it as running until `now + lease`. If that request's
//! process dies, the record is not stuck: once the lease lapses, the next request with the key
//! takes it over and runs the handler. The cost is the case where the first handler did *not*
//! die but ran past its lease (a stalled process, a slow dependency): then it can run at the
//! same time as the second. Its own response still reaches its client, but it is not stored
//! (the write is fenced on the run's token), and the key replays the second run's response. A
//! handler about to do something it cannot take back asks first whether the key is still its
//! own; that narrows the window to the gap between the check and the step.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use retry_durable::{Clock, Timestamp};

use crate::key::Key;

tokio::task_local! {
    static LEASE: KeyLease;
}

/// The lease of the keyed request whose handler is running in this task (also in the request's
/// extensions, for axum's `Extension<KeyLease>`).
///
/// ```
/// use retry_idempotency::KeyLease;
///
/// async fn capture() -> Result<(), &'static str> {
///     // ... prepare the capture ...
///     if let Some(lease) = KeyLease::current()
///         && lease.remaining() < std::time::Duration::from_secs(2)
///     {
///         // Another request with this key may run the handler by now (or soon).
///         return Err("lease about to lapse: not capturing");
///     }
///     // ... capture ...
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct KeyLease {
    key: Key,
    until: Timestamp,
    clock: Arc<dyn Clock>,
}

impl KeyLease {
    pub(crate) fn new(key: Key, until: Timestamp, clock: Arc<dyn Clock>) -> Self {
        KeyLease { key, until, clock }
    }

    /// The lease of the handler running in this task; `None` outside a keyed request (or in a
    /// task the handler spawned: the lease is lent to the handler's own future).
    pub fn current() -> Option<KeyLease> {
        LEASE.try_with(KeyLease::clone).ok()
    }

    /// Whether the lease has not lapsed by the layer's clock: until then no other request with
    /// the key runs the handler (with replicas' clocks in step).
    pub fn holds(&self) -> bool {
        self.clock.now() < self.until
    }

    /// How long the lease has left (zero once it lapsed). Ask for a margin above the time the
    /// irreversible step takes plus the clock skew between replicas.
    pub fn remaining(&self) -> Duration {
        self.until.since(self.clock.now())
    }

    /// When the lease lapses.
    pub fn until(&self) -> Timestamp {
        self.until
    }

    /// The request's key.
    pub fn key(&self) -> &str {
        self.key.as_str()
    }

    pub(crate) fn in_sync<R>(self, f: impl FnOnce() -> R) -> R {
        LEASE.sync_scope(self, f)
    }

    pub(crate) fn scope<F: std::future::Future>(
        self,
        f: F,
    ) -> impl std::future::Future<Output = F::Output> {
        LEASE.scope(self, f)
    }
}

impl fmt::Debug for KeyLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyLease")
            .field("key", &self.key)
            .field("until", &self.until)
            .finish_non_exhaustive()
    }
}
