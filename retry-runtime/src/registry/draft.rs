//! One upstream being read: its settings so far, where each value was set, the environment's
//! overrides on top, and its rules checked and located at the values that break them.

use std::collections::{HashMap, HashSet};

use super::env::Override;
use super::errors::{ConfigError, Location};
use super::keys::{Settings, Value};
use crate::budget::BudgetConfig;

/// One upstream being read: its config so far and where each key was set.
pub(super) struct Draft {
    pub(super) name: String,
    pub(super) header: Location,
    /// Where `[upstreams.<name>.budget]` and `.breaker` sit, by table name.
    pub(super) subtable_headers: HashMap<&'static str, Location>,
    pub(super) settings: Settings,
    /// Where the value that set each key (by path) sits.
    pub(super) origins: HashMap<&'static str, Location>,
    /// Keys whose value was refused: their rules are not checked, since the config holds the
    /// default instead of what was written.
    pub(super) refused: HashSet<&'static str>,
}

impl Draft {
    pub(super) fn apply_override(&mut self, o: &Override, errors: &mut Vec<ConfigError>) {
        let at = Location::environment(&o.var);
        match o.key.apply(&mut self.settings, Value::Env(&o.value)) {
            Ok(()) => {
                self.refused.remove(o.key.path);
                self.origins.insert(o.key.path, at);
            }
            Err(message) => {
                self.refused.insert(o.key.path);
                errors.push(ConfigError::new(&self.name, o.key.path, message).at(at));
            }
        }
    }

    /// Every rule of the config, located at the value that breaks it, or at the upstream's
    /// header when the key was left at its default.
    pub(super) fn check(&self, errors: &mut Vec<ConfigError>) {
        let config = self.settings.config();
        for violation in config.violations() {
            let path = match violation.field {
                // `BudgetConfig::validate` checks the ratio first: if the ratio alone passes,
                // the window is at fault.
                "budget" => {
                    let ratio_only = BudgetConfig {
                        window: BudgetConfig::new().window,
                        ..config.budget
                    };
                    if ratio_only.validate().is_err() {
                        "budget.ratio"
                    } else {
                        "budget.window"
                    }
                }
                field => field,
            };
            if self.refused.contains(path) {
                continue;
            }
            let subtable = path.split_once('.').map(|(table, _)| table);
            let at = self
                .origins
                .get(path)
                .or_else(|| self.subtable_headers.get(subtable?))
                .unwrap_or(&self.header);
            errors.push(ConfigError::new(&self.name, path, violation.message).at(at.clone()));
        }
    }
}
