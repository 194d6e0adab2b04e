//! The registry a program holds: the live table of its upstreams, swapped whole on a reload,
//! and what every call reads beside it (the drain switch, the engine, the random source).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
#[cfg(feature = "durable")]
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;

use super::table::{Snapshot, next_snapshot_number};
use crate::drain::Drain;
use crate::engine::{DefaultEngine, EligibilityEngine};
use crate::error::Error;
#[cfg(feature = "durable")]
use crate::hand_off::{EnqueueOptions, HandOff};
use crate::upstream::{RefreshAuth, Upstream};

/// Named upstream configurations, swappable at runtime.
///
/// Loaded from a TOML file ([`load_file`](Registry::load_file)) or built in code
/// ([`builder`](Registry::builder)); the file's format, the environment overrides and reloading
/// are described on the [`registry`](crate::registry) module.
///
/// ```
/// use retry_runtime::{Registry, UpstreamConfig};
///
/// let registry = Registry::builder()
///     .upstream("sber", UpstreamConfig::new().with_max_attempts(3))
///     .build()
///     .unwrap();
/// assert_eq!(registry.upstream("sber").unwrap().config().max_attempts, 3);
/// assert!(registry.upstream("nope").is_err());
/// ```
pub struct Registry {
    pub(super) snapshot: ArcSwap<Snapshot>,
    /// What the windows of every budget and breaker it makes count from, so one reading of
    /// the time serves an upstream's budget and breaker alike (see [`Upstream::tick`]).
    pub(super) origin: tokio::time::Instant,
    /// `snapshot`'s number (see [`Registry::snapshot_number`]).
    snapshot_number: AtomicU64,
    /// The refresh hooks by upstream name, and the lock every writer of `snapshot` holds from
    /// reading the old snapshot to storing the new one ([`Registry::replace`],
    /// [`Registry::on_unauthorized`]): without it a reload and a hook registration racing each
    /// other could each build on the snapshot before the other's, and the later store would
    /// silently revert the reload or lose the hook. Readers never take it.
    pub(super) hooks: Mutex<HashMap<String, Arc<dyn RefreshAuth>>>,
    /// Upstreams a reload removed and no later one brought back: [`Registry::record_gauges`]
    /// sets their gauges to zero. Changed under `hooks`' lock, with the snapshot.
    pub(super) removed: Mutex<BTreeSet<Arc<str>>>,
    drain: Drain,
    engine: Arc<dyn EligibilityEngine>,
    seed: Option<u64>,
    calls: AtomicU64,
    /// The durable queue of `#[retry(durable = ...)]` calls.
    #[cfg(feature = "durable")]
    pub(super) durable: DurableSlot,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("upstreams", &self.names())
            .finish()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    /// An empty registry with its own drain switch ([`Drain::new`]): it drains when
    /// [`Drain::global`] does (a shutdown signal, through [`Drain::on_shutdown_signal`]), or
    /// when its own [`drain`](Registry::drain) is started.
    pub fn new() -> Self {
        Registry::with(Arc::new(DefaultEngine), Drain::new(), None)
    }

    /// An empty registry deciding with `engine`, drained by `drain`, its jitter seeded with
    /// `seed` if there is one (else drawn from the thread's generator).
    pub(super) fn with(
        engine: Arc<dyn EligibilityEngine>,
        drain: Drain,
        seed: Option<u64>,
    ) -> Self {
        Registry {
            snapshot: ArcSwap::from_pointee(Snapshot::default()),
            origin: tokio::time::Instant::now(),
            snapshot_number: AtomicU64::new(next_snapshot_number()),
            hooks: Mutex::new(HashMap::new()),
            removed: Mutex::new(BTreeSet::new()),
            drain,
            engine,
            seed,
            calls: AtomicU64::new(0),
            #[cfg(feature = "durable")]
            durable: DurableSlot::default(),
        }
    }

    pub(super) fn swap_in(&self, snapshot: Snapshot) {
        self.snapshot.store(Arc::new(snapshot));
        // After the store: whoever reads the new number then finds the new snapshot.
        self.snapshot_number
            .store(next_snapshot_number(), Ordering::Release);
    }

    /// The number of the snapshot this registry holds: unique across every registry of the
    /// process and every reload, so a lookup kept with it is valid while it is unchanged.
    pub(crate) fn snapshot_number(&self) -> u64 {
        self.snapshot_number.load(Ordering::Acquire)
    }

    /// The process-wide registry used when a call names no registry (the macro, and
    /// [`Retry::upstream`](crate::Retry::upstream)). Empty until you load it, e.g. with
    /// [`Registry::load_file`] at start-up; its drain switch is [`Drain::global`].
    pub fn global() -> &'static Registry {
        static GLOBAL: OnceLock<Registry> = OnceLock::new();
        GLOBAL.get_or_init(|| Registry {
            drain: Drain::global().clone(),
            ..Registry::new()
        })
    }

    /// The upstream named `name`, or [`Error::UnknownUpstream`] listing known ones (at most
    /// [`KNOWN_IN_ERRORS`](super::KNOWN_IN_ERRORS), the closest to `name`).
    pub fn upstream(&self, name: &str) -> Result<Arc<Upstream>, Error> {
        let snapshot = self.snapshot.load();
        match snapshot.upstreams.get(name) {
            Some(u) => Ok(u.clone()),
            None => Err(Error::UnknownUpstream {
                name: name.to_owned(),
                known: snapshot.closest_names(name),
            }),
        }
    }

    /// The names of every configured upstream, sorted.
    pub fn names(&self) -> Vec<String> {
        self.snapshot.load().sorted_names()
    }

    /// Sets the `retry.budget.available` and `retry.breaker.state` gauges of every upstream to
    /// its state now (feature `metrics`; a no-op without it). Call it where metrics are scraped
    /// (or on a timer): the gauges are otherwise set only as calls retry, hedge or end, so a
    /// budget that refilled since, or a breaker whose open time ran out, would not show. Costs
    /// one pass over each upstream's window counters and the metrics' label per gauge.
    ///
    /// An upstream a reload removed reads 0 on both gauges (no retries, no breaker): the
    /// `metrics` facade cannot delete a series, and its last values would otherwise be
    /// scraped as if it were still there.
    pub fn record_gauges(&self) {
        let snapshot = self.snapshot.load();
        for (name, upstream) in &snapshot.upstreams {
            crate::observe::set_budget_gauge(name, upstream.budget());
            if let Some(breaker) = upstream.breaker() {
                crate::observe::breaker_state(name, breaker);
            }
            if let Some(throttle) = upstream.throttle() {
                crate::observe::throttle_state(name, throttle);
            }
        }
        let removed = self.removed.lock().unwrap_or_else(|p| p.into_inner());
        for name in removed.iter() {
            crate::observe::clear_gauges(name);
        }
    }

    /// This registry's drain switch. It follows [`Drain::global`], so the process-wide
    /// shutdown signal drains this registry too; starting it drains this registry alone.
    pub fn drain(&self) -> &Drain {
        &self.drain
    }

    /// The engine deciding retries.
    pub fn engine(&self) -> &dyn EligibilityEngine {
        &*self.engine
    }

    /// A random source for one call: seeded deterministically when the registry has a seed
    /// (tests, the outage lab), else from the thread's generator.
    pub(crate) fn rng(&self) -> fastrand::Rng {
        match self.seed {
            Some(seed) => {
                let n = self.calls.fetch_add(1, Ordering::Relaxed);
                fastrand::Rng::with_seed(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            }
            None => fastrand::Rng::new(),
        }
    }
}

/// The durable queue a registry's `#[retry(durable = ...)]` calls hand their work to, and the
/// options of each hand-off; read only when a call defers.
#[cfg(feature = "durable")]
#[derive(Default)]
pub(super) struct DurableSlot(pub(super) RwLock<Option<(Arc<dyn HandOff>, EnqueueOptions)>>);
