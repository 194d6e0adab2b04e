//! Loading a registry and swapping its upstreams: validate everything, then swap the whole
//! table at once, carrying each upstream's state over while its settings stay the same.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::errors::{ConfigError, ConfigErrors, Location};
use super::file::parse_toml;
use super::live::Registry;
use super::table::Snapshot;
use super::{env, file};
use crate::config::UpstreamConfig;
use crate::upstream::{RefreshAuth, Upstream};

impl Registry {
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
    /// switch of your choice, pass [`parse_toml`]'s result to [`RegistryBuilder::upstreams`](super::RegistryBuilder::upstreams).
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
