//! The walk over the document's tables: `[upstreams.<name>]` and its sub-tables, each key read
//! through the key table, every unknown key or misplaced value reported with its position.

use std::collections::{HashMap, HashSet};

use toml::de::{DeTable, DeValue};

use super::draft::Draft;
use super::errors::ConfigError;
use super::keys::{
    self, BREAKER, BREAKER_KEYS, BUDGET, BUDGET_KEYS, HEDGE, HEDGE_KEYS, KeySpec, Settings,
    THROTTLE, THROTTLE_KEYS, UPSTREAM_KEYS, Value,
};
use super::position::Lines;
use crate::suggest::closest;

/// The one top-level table.
pub(super) const UPSTREAMS: &str = "upstreams";

/// Which table of an upstream is being read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Table {
    /// `[upstreams.<name>]`.
    Upstream,
    /// `[upstreams.<name>.budget]`.
    Budget,
    /// `[upstreams.<name>.throttle]`.
    Throttle,
    /// `[upstreams.<name>.breaker]`.
    Breaker,
    /// `[upstreams.<name>.hedge]`.
    Hedge,
}

impl Table {
    /// The sub-tables of an upstream.
    const SUBTABLES: [Table; 4] = [Table::Budget, Table::Throttle, Table::Breaker, Table::Hedge];

    fn keys(self) -> &'static [KeySpec] {
        match self {
            Table::Upstream => UPSTREAM_KEYS,
            Table::Budget => BUDGET_KEYS,
            Table::Throttle => THROTTLE_KEYS,
            Table::Breaker => BREAKER_KEYS,
            Table::Hedge => HEDGE_KEYS,
        }
    }

    /// The key naming this table inside an upstream (empty for the upstream itself).
    fn name(self) -> &'static str {
        match self {
            Table::Upstream => "",
            Table::Budget => BUDGET,
            Table::Throttle => THROTTLE,
            Table::Breaker => BREAKER,
            Table::Hedge => HEDGE,
        }
    }
}

/// Every upstream of the document, read table by table; what cannot be read is reported in
/// `errors` and skipped, so one mistake does not hide the next.
pub(super) fn read_document(
    root: &DeTable<'_>,
    lines: &Lines<'_>,
    errors: &mut Vec<ConfigError>,
) -> Vec<Draft> {
    let mut drafts = Vec::new();
    for (key, value) in root {
        if key.get_ref() != UPSTREAMS {
            errors.push(
                ConfigError::new(
                    "",
                    key.get_ref().as_ref(),
                    format!(
                        "unknown top-level key `{}`: every setting belongs to an upstream, \
                         under [upstreams.<name>]",
                        key.get_ref()
                    ),
                )
                .at(lines.value(key)),
            );
            continue;
        }
        let DeValue::Table(upstreams) = value.get_ref() else {
            errors.push(
                ConfigError::new(
                    "",
                    UPSTREAMS,
                    format!(
                        "`upstreams` must be a table, found a {}: write [upstreams.sber]",
                        value.get_ref().type_str()
                    ),
                )
                .at(lines.value(value)),
            );
            continue;
        };
        for (name, table) in upstreams {
            let name_str: &str = name.get_ref();
            if name_str.trim().is_empty() {
                errors.push(
                    ConfigError::new(
                        name_str,
                        "name",
                        "an upstream name is empty: name it after the system it calls",
                    )
                    .at(lines.value(name)),
                );
                continue;
            }
            let DeValue::Table(table_value) = table.get_ref() else {
                errors.push(
                    ConfigError::new(
                        name_str,
                        "",
                        format!(
                            "an upstream must be a table, found a {}: write [upstreams.{name_str}]",
                            table.get_ref().type_str()
                        ),
                    )
                    .at(lines.value(table)),
                );
                continue;
            };
            let mut draft = Draft {
                name: name_str.to_owned(),
                header: lines.value(table),
                subtable_headers: HashMap::new(),
                settings: Settings::new(),
                origins: HashMap::new(),
                refused: HashSet::new(),
            };
            draft.read_table(table_value, Table::Upstream, lines, errors);
            drafts.push(draft);
        }
    }
    drafts
}

impl Draft {
    fn read_table(
        &mut self,
        values: &DeTable<'_>,
        table: Table,
        lines: &Lines<'_>,
        errors: &mut Vec<ConfigError>,
    ) {
        for (key, value) in values {
            let name: &str = key.get_ref();
            let subtable = Table::SUBTABLES.into_iter().find(|t| t.name() == name);
            if let (Table::Upstream, Some(subtable)) = (table, subtable) {
                match value.get_ref() {
                    DeValue::Table(values) => {
                        self.subtable_headers
                            .insert(subtable.name(), lines.value(value));
                        self.read_table(values, subtable, lines, errors);
                    }
                    other => errors.push(
                        ConfigError::new(
                            &self.name,
                            name,
                            format!(
                                "`{name}` must be a table, found a {}: write [upstreams.{}.{name}]",
                                other.type_str(),
                                self.name
                            ),
                        )
                        .at(lines.value(value)),
                    ),
                }
                continue;
            }
            let Some(spec) = table.keys().iter().find(|s| s.name == name) else {
                errors.push(self.unknown_key(name, table).at(lines.value(key)));
                continue;
            };
            let at = lines.value(value);
            match spec.apply(&mut self.settings, Value::Toml(value.get_ref())) {
                Ok(()) => {
                    self.origins.insert(spec.path, at);
                }
                Err(message) => {
                    self.refused.insert(spec.path);
                    errors.push(ConfigError::new(&self.name, spec.path, message).at(at));
                }
            }
        }
    }

    fn unknown_key(&self, name: &str, table: Table) -> ConfigError {
        let mut valid: Vec<&str> = table.keys().iter().map(|s| s.name).collect();
        let (header, field) = match table {
            Table::Upstream => {
                valid.extend(Table::SUBTABLES.map(Table::name));
                (format!("[upstreams.{}]", self.name), name.to_owned())
            }
            sub => (
                format!("[upstreams.{}.{}]", self.name, sub.name()),
                format!("{}.{name}", sub.name()),
            ),
        };
        let hint = match closest(name, valid.iter().copied()) {
            Some(close) => format!("did you mean `{close}`? "),
            None => String::new(),
        };
        ConfigError::new(
            &self.name,
            field,
            format!(
                "unknown key `{name}` in {header}: {hint}valid keys: {}",
                keys::list(valid)
            ),
        )
    }
}
