//! The registry of named upstreams: where tuning lives.
//!
//! Code names an upstream (`#[retry(upstream = "sber")]`); the registry says how to retry it.
//! Configs come from a TOML file, environment overrides, or a builder in code, are validated at
//! load (every violation at once, with its position and the fix) and can be swapped at runtime
//! without a restart: calls in flight keep the config they started with.
//!
//! An unknown upstream is an error, never a silent default.
//!
//! # The configuration file
//!
//! One table per upstream under `upstreams`; the budget, the circuit breaker and hedging are
//! sub-tables. Every key is optional
//! and defaults to [`UpstreamConfig::new`] (the table below restates its `# Default` section).
//!
//! ```toml
//! [upstreams.sber]
//! max_attempts = 3
//! initial_backoff = "500ms"
//! multiplier = 2.0
//! max_backoff = "1s"
//! jitter = "full"            # or "decorrelated"
//! backoff = "exponential"    # the only accepted value
//! attempt_timeout = "1s"
//! deadline = "5s"
//! min_attempt_budget = "50ms"
//! transient_500 = false
//! idempotency_header = "Idempotency-Key"
//! dedups_idempotency_key = true
//! propagate = true           # your own service behind the server layer (default false)
//! bulkhead = 100             # no default: left out, unlimited
//!
//! [upstreams.sber.budget]
//! ratio = 0.2
//! min_per_second = 10
//! window = "10s"
//!
//! [upstreams.sber.throttle]   # no default: left out, no throttle
//! multiplier = 3.0
//! retry_multiplier = 1.0
//! window = "500ms"
//!
//! [upstreams.sber.breaker]
//! enabled = true
//! failure_rate = 0.8
//! min_attempts = 20
//! window = "10s"
//! open_for = "5s"
//! half_open_probes = 3
//!
//! [upstreams.sber.hedge]     # no default: left out, never hedged
//! percentile = 95            # or a fixed delay = "50ms", not both
//! max_copies = 2
//! dedups_in_flight = false   # keyed writes too, if the upstream dedups copies in flight
//! ```
//!
//! | key | type | default | rule |
//! |---|---|---|---|
//! | `max_attempts` | integer | 3 | 1..=5; beyond 5, hand off to a durable queue |
//! | `initial_backoff` | duration | `"500ms"` | above zero |
//! | `multiplier` | number | 2.0 | above 1 |
//! | `max_backoff` | duration | `"1s"` | at least `initial_backoff` |
//! | `jitter` | `"full"` or `"decorrelated"` | `"full"` | |
//! | `backoff` | `"exponential"` | `"exponential"` | `"linear"`, `"fixed"` are refused |
//! | `attempt_timeout` | duration | `"1s"` | above zero |
//! | `deadline` | duration | `"5s"` | above zero, at most 5s (the in-memory window) |
//! | `min_attempt_budget` | duration | `"50ms"` | below `attempt_timeout` |
//! | `transient_500` | boolean | `false` | |
//! | `idempotency_header` | string | `"Idempotency-Key"` | a valid header name |
//! | `dedups_idempotency_key` | boolean | `true` | |
//! | `propagate` | boolean | `false` | turn on for your own services that run the server layer |
//! | `bulkhead` | integer | none (unlimited) | at least 1 |
//! | `budget.ratio` | number | 0.2 | 0.0..=1000.0 |
//! | `budget.min_per_second` | integer | 10 | |
//! | `budget.window` | duration | `"10s"` | 1s..=60s |
//! | `throttle.enabled` | boolean | `true` once a throttle key is set | opt-in adaptive admission: see [`throttle`](crate::throttle) |
//! | `throttle.multiplier` | number | 3.0 | 1..=100: first attempts reach at most this many times what the upstream accepts |
//! | `throttle.retry_multiplier` | number | 1.0 | 1..=100: the same for retries and hedges |
//! | `throttle.window` | duration | `"500ms"` | 500ms..=600s |
//! | `breaker.enabled` | boolean | `true` | retries without a breaker keep hitting a dead upstream |
//! | `breaker.failure_rate` | number | 0.8 | above 0, at most 1 (below 0.8 it opens on an upstream that is only flaky) |
//! | `breaker.min_attempts` | integer | 20 | at least 1 |
//! | `breaker.window` | duration | `"10s"` | 1s..=600s |
//! | `breaker.open_for` | duration | `"5s"` | above zero |
//! | `breaker.half_open_probes` | integer | 3 | at least 1 |
//! | `hedge.enabled` | boolean | `true` once a hedge key is set | `false` turns hedging off (an environment override) |
//! | `hedge.delay` | duration | none | above zero, below `attempt_timeout`; not with `percentile` |
//! | `hedge.percentile` | number | none | above 0, below 100 (of the last 5-10 s of latencies; no hedge before 20 are known) |
//! | `hedge.max_copies` | integer | 2 | 2..=3, at most `max_attempts` |
//! | `hedge.dedups_in_flight` | boolean | `false` | the upstream answers concurrent copies of a keyed write with one execution |
//!
//! The deadline is the longest a call may wait in memory, whatever a server's `Retry-After`
//! asks, so it is held to the same 5 s as the window below.
//!
//! Across keys: the worst-case in-memory retry window (every backoff at its ceiling plus
//! `max_attempts` x `attempt_timeout`) must not exceed 5 s; longer outages
//! belong to a durable task queue.
//!
//! **Durations** are strings of one number and one unit (`ns`, `us`, `ms`, `s`, `m`, `h`):
//! `"500ms"`, `"2s"`, `"1m"`, `"1.5s"`. A bare number is refused (seconds or milliseconds?), as
//! are signs, spaces, compound forms (`"1m30s"`) and fractions of a nanosecond.
//!
//! **Errors.** Loading reports every mistake at once, each at its `file:line:column` (columns
//! count characters) with the fix: unknown keys (with the closest valid one), wrong types, bad
//! durations, and every rule of [`UpstreamConfig::violations`], located at the offending value
//! or, when the key was left at its default, at the upstream's table header. A file that is not
//! valid TOML reports its syntax errors only. A file with no upstream is refused, so that a
//! truncated file cannot unload every upstream. A sample file with every key, its default and
//! its reason: [`retry-runtime/examples/upstreams.toml`](https://github.com/retry-rs/retry/blob/main/retry-runtime/examples/upstreams.toml).
//!
//! # Environment overrides
//!
//! `RETRY__<UPSTREAM>__<KEY>=<value>` overrides one key of an upstream the file defines, on top
//! of the file: `RETRY__SBER__MAX_ATTEMPTS=4`, `RETRY__SBER__BUDGET__RATIO=0.1`. Segments are
//! separated by a double underscore and matched without regard to case. `<UPSTREAM>` is the
//! name in upper case with every character other than an ASCII letter or digit written `_`
//! (`sms-gateway` is `SMS_GATEWAY`); `<KEY>` is the key in upper case, prefixed `BUDGET__`,
//! `BREAKER__` or `HEDGE__` for a key of those tables. The value is the bare text of the file's value (`750ms`, not `"750ms"`). An override
//! that names no upstream of the file, or two of them, is an error: overrides never create an
//! upstream. Errors are located as `environment: RETRY__SBER__MAX_ATTEMPTS`. Tests and tools
//! pass the variables explicitly to [`Registry::load_str`] or [`parse_toml`];
//! [`Registry::load_file`] reads the process environment.
//!
//! # Reloading
//!
//! Calling [`Registry::load_file`] again reloads without a restart. The new configuration
//! replaces the old one in a single atomic swap ([`Registry::replace`]) only if it is valid
//! entirely; otherwise nothing changes and the errors are returned. A call holds the
//! `Arc<Upstream>` it started with, so calls in flight finish on the old settings while new
//! calls see the new ones. Budgets whose settings did not change carry over.
//!
//! ```
//! use retry_runtime::Registry;
//!
//! let registry = Registry::new();
//! let env = [("RETRY__SBER__MAX_ATTEMPTS".to_owned(), "2".to_owned())];
//! registry
//!     .load_str("[upstreams.sber]\nmax_attempts = 3\n", "upstreams.toml", env)
//!     .unwrap();
//! assert_eq!(registry.upstream("sber").unwrap().config().max_attempts, 2);
//!
//! // A bad reload changes nothing and says what to fix.
//! let errors = registry
//!     .load_str("[upstreams.sber]\nmax_attempts = 10\n", "upstreams.toml", [])
//!     .unwrap_err();
//! assert_eq!(
//!     errors.errors()[0].to_string(),
//!     "upstreams.toml:2:16: upstream `sber`: max_attempts = 10 is outside 1..=5: 3 is typical; \
//!      beyond 5, hand off to the durable queue"
//! );
//! assert_eq!(registry.upstream("sber").unwrap().config().max_attempts, 2);
//! ```
//!
//! At start-up, `Registry::global().load_file("upstreams.toml")` configures the registry that
//! `#[retry]` and [`Retry::upstream`](crate::Retry::upstream) use.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;

use crate::config::UpstreamConfig;
use crate::drain::Drain;
use crate::engine::{DefaultEngine, EligibilityEngine};
use crate::error::Error;

#[cfg(feature = "durable")]
mod durable;
mod env;
mod errors;
mod file;
pub(crate) mod keys;
mod verify;
pub use env::ENV_PREFIX;
pub use errors::{ConfigError, ConfigErrors, Location};
pub use file::parse_toml;
pub use verify::{MissingUpstream, MissingUpstreams, Registration};

pub use crate::upstream::{RefreshAuth, RefreshError, Upstream};

/// The next snapshot's number, for any registry.
fn next_snapshot_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[derive(Default)]
struct Snapshot {
    /// Hashed with FNV-1a: every call looks its upstream up, and SipHash (the default, which
    /// resists collision attacks on untrusted keys) cost more than the rest of the lookup. The
    /// names come from the operator's configuration, not from requests.
    upstreams: HashMap<Arc<str>, Arc<Upstream>, fnv::FnvBuildHasher>,
}

/// Named upstream configurations, swappable at runtime.
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
    snapshot: ArcSwap<Snapshot>,
    /// What the windows of every budget and breaker it makes count from, so one reading of
    /// the time serves an upstream's budget and breaker alike (see [`Upstream::tick`]).
    origin: tokio::time::Instant,
    /// `snapshot`'s number (see [`Registry::snapshot_number`]).
    snapshot_number: AtomicU64,
    /// The refresh hooks by upstream name, and the lock every writer of `snapshot` holds from
    /// reading the old snapshot to storing the new one ([`Registry::replace`],
    /// [`Registry::on_unauthorized`]): without it a reload and a hook registration racing each
    /// other could each build on the snapshot before the other's, and the later store would
    /// silently revert the reload or lose the hook. Readers never take it.
    hooks: Mutex<HashMap<String, Arc<dyn RefreshAuth>>>,
    /// Upstreams a reload removed and no later one brought back: [`Registry::record_gauges`]
    /// sets their gauges to zero. Changed under `hooks`' lock, with the snapshot.
    removed: Mutex<BTreeSet<Arc<str>>>,
    drain: Drain,
    engine: Arc<dyn EligibilityEngine>,
    seed: Option<u64>,
    calls: AtomicU64,
    /// The durable queue of `#[retry(durable = ...)]` calls.
    #[cfg(feature = "durable")]
    durable: durable::DurableSlot,
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
    /// An empty registry with its own drain switch.
    pub fn new() -> Self {
        Registry {
            snapshot: ArcSwap::from_pointee(Snapshot::default()),
            origin: tokio::time::Instant::now(),
            snapshot_number: AtomicU64::new(next_snapshot_number()),
            hooks: Mutex::new(HashMap::new()),
            removed: Mutex::new(BTreeSet::new()),
            drain: Drain::new(),
            engine: Arc::new(DefaultEngine),
            seed: None,
            calls: AtomicU64::new(0),
            #[cfg(feature = "durable")]
            durable: durable::DurableSlot::default(),
        }
    }

    fn swap_in(&self, snapshot: Snapshot) {
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

    /// A builder for a registry configured in code.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
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
    /// [`KNOWN_IN_ERRORS`], the closest to `name`).
    pub fn upstream(&self, name: &str) -> Result<Arc<Upstream>, Error> {
        let snapshot = self.snapshot.load();
        match snapshot.upstreams.get(name) {
            Some(u) => Ok(u.clone()),
            None => Err(Error::UnknownUpstream {
                name: name.to_owned(),
                known: closest_names(&snapshot, name),
            }),
        }
    }

    /// The names of every configured upstream, sorted.
    pub fn names(&self) -> Vec<String> {
        sorted_names(&self.snapshot.load())
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

    /// This registry's drain switch.
    pub fn drain(&self) -> &Drain {
        &self.drain
    }

    /// The engine deciding retries.
    pub fn engine(&self) -> &dyn EligibilityEngine {
        &*self.engine
    }

    /// Validates `configs` and, if every one is valid, swaps them in atomically. Calls in flight
    /// keep the config they started with. Budgets of upstreams whose budget settings did not
    /// change carry over, so a reload does not refill an exhausted budget; refresh hooks carry
    /// over by name. On error nothing changes and every violation is returned.
    pub fn replace(
        &self,
        configs: impl IntoIterator<Item = (String, UpstreamConfig)>,
    ) -> Result<(), ConfigErrors> {
        // The metrics' HELP texts, for the recorder installed by now (usually at start-up).
        crate::observe::describe_metrics();
        let configs: Vec<_> = configs.into_iter().collect();
        let mut errors = Vec::new();
        for (name, config) in &configs {
            if name.trim().is_empty() {
                errors.push(ConfigError::new(
                    name,
                    "name",
                    "an upstream name is empty: name it after the system it calls",
                ));
            }
            for v in config.violations() {
                errors.push(ConfigError::new(name, v.field, v.message));
            }
        }
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        // Held until the new snapshot is stored: see the field's docs.
        let hooks = self.hooks.lock().unwrap_or_else(|p| p.into_inner());
        let old = self.snapshot.load();
        let mut upstreams =
            HashMap::with_capacity_and_hasher(configs.len(), fnv::FnvBuildHasher::default());
        for (name, config) in configs {
            let name: Arc<str> = name.into();
            let previous = old.upstreams.get(&*name).map(|u| &**u);
            let refresh = hooks.get(&*name).cloned();
            let upstream = Upstream::new(name.clone(), config, previous, refresh, self.origin);
            upstreams.insert(name, Arc::new(upstream));
        }
        let mut removed = self.removed.lock().unwrap_or_else(|p| p.into_inner());
        removed.extend(
            old.upstreams
                .keys()
                .filter(|name| !upstreams.contains_key(&***name))
                .cloned(),
        );
        removed.retain(|name| !upstreams.contains_key(&**name));
        drop(removed);
        self.swap_in(Snapshot { upstreams });
        drop(hooks);
        tracing::info!(target: "retry_runtime::registry", upstreams = ?self.names(), "registry loaded");
        Ok(())
    }

    /// Reads the TOML file at `path`, applies the process's `RETRY__*` environment overrides,
    /// validates everything and, if valid, swaps it in ([`Registry::replace`]). Call it again to
    /// reload without a restart. On error nothing changes and every mistake is returned, located
    /// (see the [module docs](crate::registry) for the format).
    pub fn load_file(&self, path: impl AsRef<Path>) -> Result<(), ConfigErrors> {
        let path = path.as_ref();
        let text = read_config(path)?;
        let (env, env_errors) = env::process_env();
        self.replace(file::parse_with(&text, path, env, env_errors)?)
    }

    /// Like [`Registry::load_file`] for a document already in memory: `source` names it in
    /// error locations and `env` supplies the overrides (`[]` for none), so tests and tools need
    /// not touch the process environment.
    pub fn load_str(
        &self,
        toml: &str,
        source: impl AsRef<Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<(), ConfigErrors> {
        self.replace(parse_toml(toml, source, env)?)
    }

    /// A new registry loaded with [`Registry::load_file`]. For a seed, an engine or a drain
    /// switch of your choice, pass [`parse_toml`]'s result to [`RegistryBuilder::upstreams`].
    pub fn from_file(path: impl AsRef<Path>) -> Result<Registry, ConfigErrors> {
        let registry = Registry::new();
        registry.load_file(path)?;
        Ok(registry)
    }

    /// Registers the 401 refresh hook of upstream `name` (kept across reloads).
    pub fn on_unauthorized(&self, name: &str, hook: impl RefreshAuth + 'static) {
        let hook: Arc<dyn RefreshAuth> = Arc::new(hook);
        // Held until the new snapshot is stored, so a reload cannot slip in between the load
        // and the store (and be reverted by it): see the field's docs.
        let mut hooks = self.hooks.lock().unwrap_or_else(|p| p.into_inner());
        hooks.insert(name.to_owned(), hook.clone());
        let old = self.snapshot.load();
        let mut upstreams = old.upstreams.clone();
        if let Some(u) = upstreams.get_mut(name) {
            *u = Arc::new(u.with_refresh(hook));
            self.swap_in(Snapshot { upstreams });
        }
        drop(hooks);
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

fn read_config(path: &Path) -> Result<String, ConfigErrors> {
    std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![
            ConfigError::new(
                "",
                "",
                format!(
                    "cannot read the configuration file: {e}: check the path and its permissions"
                ),
            )
            .at(Location::whole(path)),
        ])
    })
}

/// The most names an [`Error::UnknownUpstream`] lists.
///
/// A miss must stay cheap even with many upstreams and names that come from input: listing and
/// sorting 10,000 names took 25 ms per miss. The error lists the names sharing the longest
/// prefix with the one asked for (ties in name order), found in one pass that copies at most
/// this many; [`Registry::names`] lists them all.
pub const KNOWN_IN_ERRORS: usize = 16;

/// Up to [`KNOWN_IN_ERRORS`] names closest to `name`, sorted.
fn closest_names(snapshot: &Snapshot, name: &str) -> Vec<String> {
    let shared = |k: &str| {
        k.bytes()
            .zip(name.bytes())
            .take_while(|(a, b)| a == b)
            .count()
    };
    // Best first: longest shared prefix, then name order.
    let mut best: Vec<(usize, &str)> = Vec::with_capacity(KNOWN_IN_ERRORS + 1);
    for key in snapshot.upstreams.keys() {
        let candidate = (shared(key), &**key);
        let worse = |a: &(usize, &str), b: &(usize, &str)| b.0.cmp(&a.0).then(a.1.cmp(b.1));
        if best.len() == KNOWN_IN_ERRORS && worse(&candidate, best.last().expect("full")).is_ge() {
            continue;
        }
        let at = best.partition_point(|held| worse(held, &candidate).is_lt());
        best.insert(at, candidate);
        best.truncate(KNOWN_IN_ERRORS);
    }
    let mut names: Vec<String> = best.into_iter().map(|(_, k)| k.to_owned()).collect();
    names.sort();
    names
}

fn sorted_names(snapshot: &Snapshot) -> Vec<String> {
    let mut names: Vec<String> = snapshot.upstreams.keys().map(|k| k.to_string()).collect();
    names.sort();
    names
}

/// Builds a [`Registry`] in code.
///
/// # Default
/// - no upstreams
/// - [`DefaultEngine`]
/// - a drain switch of its own (not the global one)
/// - jitter from the thread's random generator (no seed)
#[derive(Default)]
#[must_use]
pub struct RegistryBuilder {
    upstreams: Vec<(String, UpstreamConfig)>,
    engine: Option<Arc<dyn EligibilityEngine>>,
    drain: Option<Drain>,
    seed: Option<u64>,
}

impl RegistryBuilder {
    /// Adds an upstream.
    pub fn upstream(mut self, name: impl Into<String>, config: UpstreamConfig) -> Self {
        self.upstreams.push((name.into(), config));
        self
    }

    /// Adds several upstreams, such as the result of [`parse_toml`].
    pub fn upstreams(
        mut self,
        upstreams: impl IntoIterator<Item = (String, UpstreamConfig)>,
    ) -> Self {
        self.upstreams.extend(upstreams);
        self
    }

    /// Replaces the decision engine.
    pub fn engine(mut self, engine: impl EligibilityEngine + 'static) -> Self {
        self.engine = Some(Arc::new(engine));
        self
    }

    /// Uses `drain` as the drain switch (e.g. [`Drain::global`]).
    pub fn drain(mut self, drain: Drain) -> Self {
        self.drain = Some(drain);
        self
    }

    /// Seeds jitter so delays are reproducible (tests, simulations).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Validates every upstream and builds the registry.
    pub fn build(self) -> Result<Registry, ConfigErrors> {
        let mut names = std::collections::HashSet::new();
        let mut dup = Vec::new();
        for (name, _) in &self.upstreams {
            if !names.insert(name.clone()) {
                dup.push(ConfigError::new(
                    name,
                    "name",
                    format!("upstream `{name}` is configured twice: keep one"),
                ));
            }
        }
        if !dup.is_empty() {
            return Err(ConfigErrors(dup));
        }
        let registry = Registry {
            engine: self.engine.unwrap_or_else(|| Arc::new(DefaultEngine)),
            drain: self.drain.unwrap_or_default(),
            seed: self.seed,
            ..Registry::new()
        };
        registry.replace(self.upstreams)?;
        Ok(registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    const EXAMPLE: &str = include_str!("../../examples/upstreams.toml");

    /// A file under the system's temp directory, removed on drop.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, text: &str) -> Self {
            let path = std::env::temp_dir()
                .join(format!("retry-runtime-{}-{name}.toml", std::process::id()));
            std::fs::write(&path, text).unwrap();
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn loads_the_example_file_from_disk() {
        let file = TempFile::new("example", EXAMPLE);
        let registry = Registry::from_file(&file.0).unwrap();
        assert_eq!(registry.names(), ["catalog", "sber", "sms-gateway"]);
        assert_eq!(
            registry
                .upstream("catalog")
                .unwrap()
                .config()
                .attempt_timeout,
            Duration::from_millis(800)
        );
        assert!(registry.upstream("unknown").is_err());
    }

    #[test]
    fn a_missing_file_is_a_clear_error_naming_the_path() {
        let path = std::env::temp_dir().join("retry-runtime-does-not-exist.toml");
        let errors = Registry::from_file(&path).unwrap_err();
        assert_eq!(errors.errors().len(), 1);
        let shown = errors.errors()[0].to_string();
        assert!(
            shown.starts_with(&format!(
                "{}: cannot read the configuration file: ",
                path.display()
            )),
            "{shown}"
        );
        assert!(
            shown.ends_with("check the path and its permissions"),
            "{shown}"
        );
    }

    #[test]
    fn errors_in_a_file_on_disk_name_the_file() {
        let file = TempFile::new("broken", "[upstreams.a]\nmax_attempts = 6\n");
        let errors = Registry::new().load_file(&file.0).unwrap_err();
        let at = errors.errors()[0].location.clone().unwrap();
        assert_eq!(at, Location::file(&file.0, 2, 16));
    }

    #[test]
    fn a_failed_reload_keeps_the_old_config() {
        let file = TempFile::new("reload", "[upstreams.a]\nmax_attempts = 2\n");
        let registry = Registry::from_file(&file.0).unwrap();
        std::fs::write(&file.0, "[upstreams.a]\nmax_attempts = 9\n[upstreams.b]\n").unwrap();
        assert!(registry.load_file(&file.0).is_err());
        assert_eq!(registry.names(), ["a"]);
        assert_eq!(registry.upstream("a").unwrap().config().max_attempts, 2);
        // An unreadable file or a syntax error changes nothing either.
        std::fs::write(&file.0, "[upstreams.a\n").unwrap();
        assert!(registry.load_file(&file.0).is_err());
        assert!(registry.load_file(file.0.with_extension("gone")).is_err());
        assert_eq!(registry.upstream("a").unwrap().config().max_attempts, 2);
        // And a good reload applies.
        std::fs::write(&file.0, "[upstreams.a]\nmax_attempts = 3\n[upstreams.b]\n").unwrap();
        registry.load_file(&file.0).unwrap();
        assert_eq!(registry.names(), ["a", "b"]);
        assert_eq!(registry.upstream("a").unwrap().config().max_attempts, 3);
    }

    #[test]
    fn a_call_in_flight_keeps_the_config_it_started_with() {
        let registry = Registry::new();
        registry
            .load_str("[upstreams.a]\nmax_attempts = 2\n", "v1.toml", [])
            .unwrap();
        let in_flight = registry.upstream("a").unwrap();
        registry
            .load_str(
                "[upstreams.a]\nmax_attempts = 3\n",
                "v2.toml",
                [("RETRY__A__DEADLINE".to_owned(), "3s".to_owned())],
            )
            .unwrap();
        assert_eq!(in_flight.config().max_attempts, 2);
        assert_eq!(in_flight.config().deadline, Duration::from_secs(5));
        let now = registry.upstream("a").unwrap();
        assert_eq!(now.config().max_attempts, 3);
        assert_eq!(now.config().deadline, Duration::from_secs(3));
        // The budget settings did not change, so the budget carried over.
        assert!(std::ptr::eq(in_flight.budget(), now.budget()));
    }

    #[tokio::test(start_paused = true)]
    async fn an_upstreams_budget_and_breaker_count_from_one_origin_across_reloads() {
        let registry = Registry::new();
        registry
            .replace([(
                "a".to_owned(),
                UpstreamConfig::new().with_breaker(Some(crate::breaker::BreakerConfig::new())),
            )])
            .unwrap();
        let before = registry.upstream("a").unwrap();
        tokio::time::advance(Duration::from_secs(3)).await;
        // The breaker's settings change, the budget's do not: a new breaker beside the old
        // budget, made seconds later, still counts from the same origin.
        let breaker = crate::breaker::BreakerConfig {
            min_attempts: 7,
            ..crate::breaker::BreakerConfig::new()
        };
        registry
            .replace([(
                "a".to_owned(),
                UpstreamConfig::new().with_breaker(Some(breaker)),
            )])
            .unwrap();
        let after = registry.upstream("a").unwrap();
        assert!(std::ptr::eq(before.budget(), after.budget()));
        let breaker = after.breaker().expect("a breaker");
        assert!(!std::ptr::eq(before.breaker().unwrap(), breaker));
        // One reading serves both: a tick from another origin fails a debug assertion, so
        // this fails if either counts from its own creation.
        let tick = after.tick(tokio::time::Instant::now());
        after.budget().deposit_on(tick);
        breaker.record_on(breaker.admit().expect("closed"), false, tick);
    }

    #[test]
    fn a_misspelt_upstream_name_is_answered_with_the_close_one() {
        let registry = Registry::builder()
            .upstream("sber", UpstreamConfig::new())
            .upstream("catalog", UpstreamConfig::new())
            .build()
            .unwrap();
        let message = registry.upstream("sbr").unwrap_err().to_string();
        assert!(message.contains("did you mean `sber`?"), "{message}");
        let message = registry.upstream("payments").unwrap_err().to_string();
        assert!(!message.contains("did you mean"), "{message}");
    }

    #[test]
    fn an_unknown_name_lists_a_bounded_set_of_the_closest_names() {
        let small = Registry::builder()
            .upstream("b", UpstreamConfig::new())
            .upstream("a", UpstreamConfig::new())
            .build()
            .unwrap();
        let Err(Error::UnknownUpstream { known, .. }) = small.upstream("c") else {
            panic!("a miss is an error")
        };
        assert_eq!(
            known,
            ["a", "b"],
            "a small registry lists every name, sorted"
        );

        let many = Registry::builder()
            .upstreams((0..10_000).map(|i| (format!("svc-{i:05}"), UpstreamConfig::new())))
            .build()
            .unwrap();
        let Err(Error::UnknownUpstream { name, known }) = many.upstream("svc-0420x") else {
            panic!("a miss is an error")
        };
        assert_eq!(name, "svc-0420x");
        assert_eq!(known.len(), KNOWN_IN_ERRORS);
        // The ten sharing "svc-0420", then the first six sharing "svc-042".
        let expected: Vec<String> = (4200..4216).map(|i| format!("svc-{i:05}")).collect();
        assert_eq!(known, expected);
    }

    #[test]
    fn the_builder_takes_parsed_upstreams() {
        let registry = Registry::builder()
            .seed(7)
            .upstreams(parse_toml(EXAMPLE, "upstreams.toml", []).unwrap())
            .build()
            .unwrap();
        assert_eq!(registry.names().len(), 3);
    }
}
