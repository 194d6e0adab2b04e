//! Runtime draining: once a service starts shutting down, no new retry begins.
//!
//! A retry started during shutdown holds a worker and a connection for another backoff and
//! attempt the process may not live to finish. Draining lets in-flight attempts complete but
//! denies every further retry with [`DenyReason::RuntimeDraining`](crate::DenyReason): the
//! decision reads the switch, a backoff wakes when it flips, and a retry reads it again as the
//! last step before its attempt begins (after a credentials refresh, or a wait for a bulkhead
//! slot), so no retry begins after [`Drain::start`] returns.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A switch that, once flipped, denies new retries. Cheap to clone; clones share the switch.
///
/// Each [`Registry`](crate::Registry) carries one; the global registry's is
/// [`Drain::global`], so flipping it affects every call that uses the global registry.
#[derive(Debug, Clone, Default)]
pub struct Drain {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    flag: AtomicBool,
    /// Wakes calls waiting out a backoff, so they end at once instead of sending another attempt.
    started: tokio::sync::Notify,
}

impl Drain {
    /// A new switch, not draining.
    pub fn new() -> Self {
        Drain::default()
    }

    /// The process-wide switch used by the global registry.
    pub fn global() -> &'static Drain {
        static GLOBAL: std::sync::OnceLock<Drain> = std::sync::OnceLock::new();
        GLOBAL.get_or_init(Drain::new)
    }

    /// Starts draining: every later retry decision is denied, and no retry that has not begun
    /// its attempt by the time this returns begins it.
    pub fn start(&self) {
        if !self.inner.flag.swap(true, Ordering::AcqRel) {
            self.inner.started.notify_waiters();
            tracing::info!(target: "retry_runtime::drain", "draining: no new retries will start");
        }
    }

    /// `true` once [`start`](Drain::start) was called.
    pub fn is_draining(&self) -> bool {
        self.inner.flag.load(Ordering::Acquire)
    }

    /// Completes once draining has started (at once if it has).
    pub async fn started(&self) {
        // Made before the check: a `Notified` receives every `notify_waiters` from its
        // creation on, polled or not, so a `start` between the two still wakes it.
        let notified = self.inner.started.notified();
        if self.is_draining() {
            return;
        }
        notified.await;
    }

    /// Waits for SIGINT (Ctrl-C) or, on Unix, SIGTERM, then starts draining. Spawn it at
    /// start-up next to your server's own graceful shutdown:
    ///
    /// ```no_run
    /// # async fn start() {
    /// tokio::spawn(retry_runtime::Drain::global().clone().on_shutdown_signal());
    /// # }
    /// ```
    pub async fn on_shutdown_signal(self) {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = ctrl_c => {}
                        _ = term.recv() => {}
                    }
                }
                Err(error) => {
                    tracing::warn!(target: "retry_runtime::drain", %error, "cannot listen for SIGTERM; draining on Ctrl-C only");
                    let _ = ctrl_c.await;
                }
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        self.start();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_switch() {
        let a = Drain::new();
        let b = a.clone();
        assert!(!b.is_draining());
        a.start();
        assert!(b.is_draining());
        assert!(!Drain::new().is_draining());
    }
}
