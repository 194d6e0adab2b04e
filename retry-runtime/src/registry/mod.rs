//! The registry of named upstreams: where tuning lives.
//!
//! Code names an upstream (`#[retry(upstream = "sber")]`); the registry says how to retry it.
//! Configs come from a TOML file, environment overrides, or a builder in code, are validated at
//! load (every violation at once, with its position and the fix) and can be swapped at runtime
//! without a restart: calls in flight keep the config they started with.
//!
//! An unknown upstream is an error, never a silent default.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;

use crate::budget::RetryBudget;
use crate::config::UpstreamConfig;
use crate::engine::{DefaultEngine, EligibilityEngine};
use crate::{Drain, Error};

mod errors;
mod verify;
pub use errors::{ConfigError, ConfigErrors, Location};
pub use verify::{MissingUpstream, MissingUpstreams, Registration};

/// The error a credentials refresh may return.
pub type RefreshError = Box<dyn std::error::Error + Send + Sync>;

/// A per-upstream hook that refreshes credentials after a 401, before the one replay the engine
/// allows for safe, replayable operations.
pub trait RefreshAuth: Send + Sync {
    /// Refreshes the credentials the next attempt will use.
    fn refresh(&self) -> Pin<Box<dyn Future<Output = Result<(), RefreshError>> + Send + '_>>;
}

impl<F, Fut> RefreshAuth for F
where
    F: Fn() -> Fut + Send + Sync,
    Fut: Future<Output = Result<(), RefreshError>> + Send + 'static,
{
    fn refresh(&self) -> Pin<Box<dyn Future<Output = Result<(), RefreshError>> + Send + '_>> {
        Box::pin(self())
    }
}

/// One named upstream as the runtime uses it: config, budget and hooks.
pub struct Upstream {
    name: Arc<str>,
    config: UpstreamConfig,
    budget: Arc<RetryBudget>,
    refresh: Option<Arc<dyn RefreshAuth>>,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.name)
            .field("config", &self.config)
            .field("budget", &self.budget)
            .field("refresh", &self.refresh.is_some())
            .finish()
    }
}

impl Upstream {
    /// The upstream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name, shared.
    pub fn name_arc(&self) -> &Arc<str> {
        &self.name
    }

    /// Its configuration.
    pub fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    /// Its retry budget (shared across reloads while the budget settings stay the same).
    pub fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    /// The 401 refresh hook, if registered.
    pub fn refresh_hook(&self) -> Option<&Arc<dyn RefreshAuth>> {
        self.refresh.as_ref()
    }
}

#[derive(Default)]
struct Snapshot {
    upstreams: HashMap<Arc<str>, Arc<Upstream>>,
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
    hooks: Mutex<HashMap<String, Arc<dyn RefreshAuth>>>,
    drain: Drain,
    engine: Arc<dyn EligibilityEngine>,
    seed: Option<u64>,
    calls: AtomicU64,
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
            hooks: Mutex::new(HashMap::new()),
            drain: Drain::new(),
            engine: Arc::new(DefaultEngine),
            seed: None,
            calls: AtomicU64::new(0),
        }
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

    /// The upstream named `name`, or [`Error::UnknownUpstream`] listing the known ones.
    pub fn upstream(&self, name: &str) -> Result<Arc<Upstream>, Error> {
        let snapshot = self.snapshot.load();
        match snapshot.upstreams.get(name) {
            Some(u) => Ok(u.clone()),
            None => Err(Error::UnknownUpstream {
                name: name.to_owned(),
                known: sorted_names(&snapshot),
            }),
        }
    }

    /// The names of every configured upstream, sorted.
    pub fn names(&self) -> Vec<String> {
        sorted_names(&self.snapshot.load())
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
        let old = self.snapshot.load();
        let hooks = self.hooks.lock().unwrap_or_else(|p| p.into_inner());
        let mut upstreams = HashMap::with_capacity(configs.len());
        for (name, config) in configs {
            let budget = match old.upstreams.get(name.as_str()) {
                Some(u) if u.config.budget == config.budget => u.budget.clone(),
                _ => Arc::new(RetryBudget::new(config.budget).expect("validated above")),
            };
            let name: Arc<str> = name.into();
            let refresh = hooks.get(&*name).cloned();
            upstreams.insert(
                name.clone(),
                Arc::new(Upstream {
                    name,
                    config,
                    budget,
                    refresh,
                }),
            );
        }
        drop(hooks);
        self.snapshot.store(Arc::new(Snapshot { upstreams }));
        tracing::info!(target: "retry_runtime::registry", upstreams = ?self.names(), "registry loaded");
        Ok(())
    }

    /// Registers the 401 refresh hook of upstream `name` (kept across reloads).
    pub fn on_unauthorized(&self, name: &str, hook: impl RefreshAuth + 'static) {
        let hook: Arc<dyn RefreshAuth> = Arc::new(hook);
        self.hooks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned(), hook.clone());
        let old = self.snapshot.load();
        let mut upstreams = old.upstreams.clone();
        if let Some(u) = upstreams.get_mut(name) {
            *u = Arc::new(Upstream {
                name: u.name.clone(),
                config: u.config.clone(),
                budget: u.budget.clone(),
                refresh: Some(hook),
            });
            self.snapshot.store(Arc::new(Snapshot { upstreams }));
        }
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
