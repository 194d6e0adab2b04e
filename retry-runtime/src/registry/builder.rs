//! A registry configured in code.

use std::sync::Arc;

use super::errors::{ConfigError, ConfigErrors};
use super::live::Registry;
use crate::config::UpstreamConfig;
use crate::drain::Drain;
use crate::engine::{DefaultEngine, EligibilityEngine};

impl Registry {
    /// A builder for a registry configured in code.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }
}

/// Builds a [`Registry`] in code.
///
/// # Default
/// - no upstreams
/// - [`DefaultEngine`]
/// - a drain switch of its own ([`Drain::new`]): it drains when [`Drain::global`] does, or
///   when the registry's own [`drain`](Registry::drain) is started
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

    /// Adds several upstreams, such as the result of [`parse_toml`](super::parse_toml).
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

    /// Uses `drain` as the drain switch (e.g. one shared by several registries).
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
        let registry = Registry::with(
            self.engine.unwrap_or_else(|| Arc::new(DefaultEngine)),
            self.drain.unwrap_or_default(),
            self.seed,
        );
        registry.replace(self.upstreams)?;
        Ok(registry)
    }
}
