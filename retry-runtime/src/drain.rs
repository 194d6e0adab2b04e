//! Runtime draining: once a service starts shutting down, no new retry begins.
//!
//! A retry started during shutdown holds a worker and a connection for another backoff and
//! attempt the process may not live to finish. Draining lets in-flight attempts complete but
//! denies every further retry with [`DenyReason::RuntimeDraining`](crate::DenyReason): the
//! decision reads the switch, a backoff wakes when it flips, and a retry reads it again as the
//! last step before its attempt begins (after a credentials refresh, or a wait for a bulkhead
//! slot), so no retry begins after [`Drain::start`] returns.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// A switch that, once flipped, denies new retries. Cheap to clone; clones share the switch.
///
/// Each [`Registry`](crate::Registry) carries one: the global registry's is [`Drain::global`];
/// every other registry's is made with [`Drain::new`].
///
/// # One signal drains every registry
/// Every switch made with [`Drain::new`] (so every [`Registry`](crate::Registry) a process
/// builds, with [`Registry::new`](crate::Registry::new), [`Registry::from_file`](crate::Registry::from_file)
/// or [`Registry::builder`](crate::Registry::builder)) also follows the process-wide switch,
/// [`Drain::global`]: starting the global one drains them all, so the one line a service adds
/// at start-up, `tokio::spawn(Drain::global().clone().on_shutdown_signal())`, reaches every
/// registry it builds, injected ones included. Starting a registry's own switch drains that
/// registry alone, which is what a test that drains one registry wants: the other tests of
/// the process keep retrying.
///
/// ```standalone_crate
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use retry_runtime::{Drain, Registry, UpstreamConfig};
///
/// let registry = Registry::builder().upstream("sber", UpstreamConfig::new()).build().unwrap();
/// let other = Registry::new();
/// registry.drain().start(); // this registry only
/// assert!(registry.drain().is_draining() && !other.drain().is_draining());
///
/// Drain::global().start(); // what `on_shutdown_signal` does on SIGTERM: every registry
/// assert!(other.drain().is_draining());
/// other.drain().started().await; // completes at once
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Drain {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    flag: AtomicBool,
    /// Wakes calls waiting out a backoff, so they end at once instead of sending another attempt
    /// (shared: a call keeps its own watch on it, [`Drain::watch`]).
    started: Arc<tokio::sync::Notify>,
    /// The process-wide switch this one follows; `None` for the process-wide switch itself.
    parent: Option<Drain>,
    /// The switches that follow this one, woken when it starts: a waiting call then waits on
    /// its own switch alone (one registration a backoff, not one per switch).
    followers: Mutex<Vec<Weak<Inner>>>,
}

impl Inner {
    /// The switches that follow this one (a list no panic can leave half-written: a poisoned
    /// lock is taken as it is).
    fn followers(&self) -> MutexGuard<'_, Vec<Weak<Inner>>> {
        self.followers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Default for Drain {
    /// [`Drain::new`].
    fn default() -> Self {
        Drain::new()
    }
}

impl Drain {
    /// A new switch, not draining, that also drains when [`Drain::global`] does.
    pub fn new() -> Self {
        Drain::with_parent(Some(Drain::global().clone()))
    }

    fn with_parent(parent: Option<Drain>) -> Self {
        let inner = Arc::new(Inner {
            parent,
            ..Inner::default()
        });
        if let Some(parent) = &inner.parent {
            let mut followers = parent.inner.followers();
            followers.retain(|follower| follower.strong_count() > 0);
            followers.push(Arc::downgrade(&inner));
        }
        Drain { inner }
    }

    /// The process-wide switch: the global registry's, and the one every other switch
    /// follows. Starting it drains every registry of the process.
    pub fn global() -> &'static Drain {
        static GLOBAL: std::sync::OnceLock<Drain> = std::sync::OnceLock::new();
        GLOBAL.get_or_init(|| Drain::with_parent(None))
    }

    /// Starts draining: every later retry decision is denied, and no retry that has not begun
    /// its attempt by the time this returns begins it. On [`Drain::global`], every switch of
    /// the process drains.
    pub fn start(&self) {
        if !self.inner.flag.swap(true, Ordering::AcqRel) {
            self.inner.started.notify_waiters();
            for follower in self.inner.followers().iter().filter_map(Weak::upgrade) {
                follower.started.notify_waiters();
            }
            tracing::info!(target: "retry_runtime::drain", "draining: no new retries will start");
        }
    }

    /// `true` once [`start`](Drain::start) was called on this switch or on [`Drain::global`].
    pub fn is_draining(&self) -> bool {
        self.inner.flag.load(Ordering::Acquire)
            || self
                .inner
                .parent
                .as_ref()
                .is_some_and(|parent| parent.inner.flag.load(Ordering::Acquire))
    }

    /// Completes once draining has started (at once if it has), on this switch or on
    /// [`Drain::global`].
    pub async fn started(&self) {
        // Made before the check: a `Notified` receives every `notify_waiters` from its
        // creation on, polled or not, so a `start` between the two still wakes it. Starting
        // the switch this one follows wakes this one's waiters too (`followers`), and its flag
        // is set before it does.
        let started = self.inner.started.notified();
        if self.is_draining() {
            return;
        }
        started.await
    }

    /// A watch on this switch that completes once draining starts: like
    /// [`started`](Self::started) without reading the flag, and owned, so a call keeps one for
    /// all its backoffs. It receives every start from its making on, polled or not: read the
    /// flag after making it.
    pub(crate) fn watch(&self) -> tokio::sync::futures::OwnedNotified {
        Arc::clone(&self.inner.started).notified_owned()
    }

    /// Waits for SIGINT (Ctrl-C) or, on Unix, SIGTERM, then starts draining. Spawn it at
    /// start-up next to your server's own graceful shutdown; on [`Drain::global`] it drains
    /// every registry of the process:
    ///
    /// ```no_run
    /// # async fn start() {
    /// tokio::spawn(retry_runtime::Drain::global().clone().on_shutdown_signal());
    /// # }
    /// ```
    ///
    /// Called inside a tokio runtime (as above), it listens for the signals before it returns,
    /// so a signal that arrives before the spawned task first runs drains instead of ending the
    /// process with the signal's default action. Outside one, it starts listening when first
    /// polled.
    pub fn on_shutdown_signal(self) -> impl Future<Output = ()> + Send + 'static {
        let listening = tokio::runtime::Handle::try_current()
            .is_ok()
            .then(Signals::listen);
        async move {
            let signals = match listening {
                Some(signals) => signals,
                None => Signals::listen(),
            };
            signals.recv().await;
            self.start();
        }
    }
}

/// The shutdown signals, listened for from creation on.
struct Signals {
    #[cfg(unix)]
    interrupt: std::io::Result<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: std::io::Result<tokio::signal::unix::Signal>,
}

impl Signals {
    fn listen() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Signals {
                interrupt: signal(SignalKind::interrupt()),
                terminate: signal(SignalKind::terminate()),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// Completes on the first signal (or never, when none can be listened for).
    async fn recv(self) {
        #[cfg(unix)]
        {
            let Signals {
                interrupt,
                terminate,
            } = self;
            for (name, result) in [("SIGINT", &interrupt), ("SIGTERM", &terminate)] {
                if let Err(error) = result {
                    tracing::warn!(target: "retry_runtime::drain", %error, "cannot listen for {name}; draining on the other signal only");
                }
            }
            let mut interrupt = interrupt.ok();
            let mut terminate = terminate.ok();
            tokio::select! {
                Some(_) = recv(&mut interrupt) => {}
                Some(_) = recv(&mut terminate) => {}
                else => std::future::pending::<()>().await,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The next signal of `signal`, or `None` at once when it could not be listened for.
#[cfg(unix)]
async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    signal.as_mut()?.recv().await
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

    /// A call waiting on its registry's switch wakes when the switch it follows starts
    /// (registered once, on its own switch), and a waiter that comes after finds it started.
    #[tokio::test(start_paused = true)]
    async fn starting_the_followed_switch_wakes_a_followers_waiters() {
        let followed = Drain::with_parent(None);
        let follower = Drain::with_parent(Some(followed.clone()));
        let waiting = follower.started();
        tokio::pin!(waiting);
        tokio::select! {
            biased;
            () = &mut waiting => panic!("nothing started yet"),
            () = std::future::ready(()) => {}
        }
        followed.start();
        let woken = tokio::time::timeout(std::time::Duration::from_secs(60), waiting).await;
        assert!(woken.is_ok(), "the follower's waiter was not woken");
        assert!(follower.is_draining());
        follower.started().await;
    }

    #[test]
    fn a_dropped_follower_is_forgotten() {
        let followed = Drain::with_parent(None);
        for _ in 0..100 {
            drop(Drain::with_parent(Some(followed.clone())));
        }
        let _kept = Drain::with_parent(Some(followed.clone()));
        assert_eq!(followed.inner.followers.lock().unwrap().len(), 1);
    }
}
