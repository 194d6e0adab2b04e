//! Reading the TOML configuration file: a hand walk over the spanned tree, so every value keeps
//! its line and column (no serde derive: it would build syn 2 beside the macro's syn 3).
//!
//! The format, the keys and the environment scheme are documented on the [`registry`] module.
//!
//! [`registry`]: super

use std::collections::{HashMap, HashSet};
use std::path::Path;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::env::{self, Override};
use super::errors::{ConfigError, ConfigErrors, Location};
use super::keys::{
    self, BREAKER, BREAKER_KEYS, BUDGET, BUDGET_KEYS, HEDGE, HEDGE_KEYS, KeySpec, Settings,
    THROTTLE, THROTTLE_KEYS, UPSTREAM_KEYS, Value,
};
use crate::budget::BudgetConfig;
use crate::config::UpstreamConfig;
use crate::suggest::closest;

/// The one top-level table.
const UPSTREAMS: &str = "upstreams";

/// Parses a TOML configuration document, applies the environment overrides `env` on top, and
/// checks every rule of [`UpstreamConfig::violations`].
///
/// `source` names the document in error locations (usually its path). `env` is a list of
/// `(variable, value)`; only variables starting with `RETRY__` are read, so the whole process
/// environment may be passed. On error, every mistake is returned at once, sorted by position
/// (the file's first, then the environment's by variable name). A document that is not valid
/// TOML reports its syntax errors only: the keys of a broken document cannot be trusted.
///
/// ```
/// use retry_runtime::registry::parse_toml;
///
/// let configs = parse_toml(
///     "[upstreams.sber]\nmax_attempts = 3\n",
///     "upstreams.toml",
///     [("RETRY__SBER__DEADLINE".to_owned(), "4s".to_owned())],
/// )
/// .unwrap();
/// assert_eq!(configs[0].0, "sber");
/// assert_eq!(configs[0].1.deadline, std::time::Duration::from_secs(4));
///
/// let errors = parse_toml("[upstreams.sber]\nmax_attempts = 9\n", "upstreams.toml", []).unwrap_err();
/// assert!(errors.to_string().contains("upstreams.toml:2:16: upstream `sber`: max_attempts = 9"));
/// ```
pub fn parse_toml(
    toml: &str,
    source: impl AsRef<Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<(String, UpstreamConfig)>, ConfigErrors> {
    parse_with(toml, source.as_ref(), env, Vec::new())
}

/// [`parse_toml`], adding `errors` found earlier (while reading the environment).
pub(crate) fn parse_with(
    toml: &str,
    source: &Path,
    env: impl IntoIterator<Item = (String, String)>,
    mut errors: Vec<ConfigError>,
) -> Result<Vec<(String, UpstreamConfig)>, ConfigErrors> {
    let lines = Lines::new(toml, source);
    let (document, syntax) = DeTable::parse_recoverable(toml);
    if !syntax.is_empty() {
        errors.extend(syntax.iter().map(|e| {
            let offset = e.span().map_or(toml.len(), |s| s.start);
            ConfigError::new("", "", format!("invalid TOML: {}", e.message())).at(lines.at(offset))
        }));
        return Err(sorted(errors));
    }

    let mut drafts = read_document(document.get_ref(), &lines, &mut errors);
    if drafts.is_empty() && errors.is_empty() {
        errors.push(
            ConfigError::new(
                "",
                UPSTREAMS,
                "no upstream is configured: add a table such as [upstreams.sber] \
                 (an empty file would unload every upstream)",
            )
            .at(lines.at(0)),
        );
    }

    let names: Vec<&str> = drafts.iter().map(|d| d.name.as_str()).collect();
    let (overrides, env_errors) = env::resolve(env, &names);
    errors.extend(env_errors);
    for o in overrides {
        if let Some(draft) = drafts.iter_mut().find(|d| d.name == o.upstream) {
            draft.apply_override(&o, &mut errors);
        }
    }

    for draft in &drafts {
        draft.check(&mut errors);
    }
    if errors.is_empty() {
        Ok(drafts
            .into_iter()
            .map(|d| (d.name, d.settings.config()))
            .collect())
    } else {
        Err(sorted(errors))
    }
}

/// File positions first, in order; then whole sources (environment variables) by name.
fn sorted(mut errors: Vec<ConfigError>) -> ConfigErrors {
    errors.sort_by_key(|e| match &e.location {
        Some(l) if l.has_position() => (0, l.line, l.column, String::new()),
        Some(l) => (1, 0, 0, l.source.display().to_string()),
        None => (2, 0, 0, String::new()),
    });
    ConfigErrors(errors)
}

/// Byte offsets to 1-based lines and character columns.
struct Lines<'a> {
    text: &'a str,
    source: &'a Path,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str, source: &'a Path) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Lines {
            text,
            source,
            starts,
        }
    }

    fn at(&self, offset: usize) -> Location {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset);
        let start = self.starts.get(line.wrapping_sub(1)).copied().unwrap_or(0);
        let column = self
            .text
            .get(start..offset)
            .map_or(0, |s| s.chars().count())
            + 1;
        Location::file(self.source, line.max(1), column)
    }

    fn value<T>(&self, spanned: &Spanned<T>) -> Location {
        self.at(spanned.span().start)
    }
}

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

/// One upstream being read: its config so far and where each key was set.
struct Draft {
    name: String,
    header: Location,
    /// Where `[upstreams.<name>.budget]` and `.breaker` sit, by table name.
    subtable_headers: HashMap<&'static str, Location>,
    settings: Settings,
    /// Where the value that set each key (by path) sits.
    origins: HashMap<&'static str, Location>,
    /// Keys whose value was refused: their rules are not checked, since the config holds the
    /// default instead of what was written.
    refused: HashSet<&'static str>,
}

fn read_document(
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

    fn apply_override(&mut self, o: &Override, errors: &mut Vec<ConfigError>) {
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
    fn check(&self, errors: &mut Vec<ConfigError>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    use crate::backoff::Jitter;

    const EXAMPLE: &str = include_str!("../../examples/upstreams.toml");

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// `line:column field` of every error, in order.
    fn positions(errors: &ConfigErrors) -> Vec<String> {
        errors
            .errors()
            .iter()
            .map(|e| {
                let at = e.location.as_ref().map_or("-".to_owned(), |l| {
                    if l.has_position() {
                        format!("{}:{}", l.line, l.column)
                    } else {
                        l.source.display().to_string()
                    }
                });
                format!("{at} {}/{}", e.upstream, e.field)
            })
            .collect()
    }

    #[test]
    fn the_example_file_loads_with_its_documented_values() {
        let configs = parse_toml(EXAMPLE, "upstreams.toml", []).unwrap();
        let names: Vec<&str> = configs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["catalog", "sber", "sms-gateway"]);
        let sber = &configs[1].1;
        assert_eq!(sber, &UpstreamConfig::new());
        let catalog = &configs[0].1;
        assert_eq!(catalog.max_attempts, 2);
        assert_eq!(catalog.backoff.initial, Duration::from_millis(200));
        assert_eq!(catalog.backoff.jitter, Jitter::Decorrelated);
        assert!(catalog.transient_500);
        assert_eq!(catalog.budget.ratio, 0.1);
        assert_eq!(
            catalog.hedge,
            Some(crate::hedge::HedgeConfig::at_percentile(95.0))
        );
        let sms = &configs[2].1;
        assert!(!sms.dedups_idempotency_key);
        assert_eq!(sms.idempotency_header, "X-Request-Id");
        assert_eq!(sms.bulkhead, Some(20));
        assert!(!sms.propagate, "off by default");
        assert!(catalog.propagate, "turned on for our own service");
        assert_eq!(sms.breaker.unwrap().failure_rate, 0.3);
    }

    #[test]
    fn the_breaker_can_be_disabled_in_the_file_or_the_environment() {
        let text = "[upstreams.a.breaker]\nenabled = false\n[upstreams.b]\n";
        let configs = parse_toml(
            text,
            "f.toml",
            env(&[("RETRY__B__BREAKER__ENABLED", "false")]),
        )
        .unwrap();
        assert_eq!(configs[0].1.breaker, None);
        assert_eq!(configs[1].1.breaker, None);
        // A rule broken by a default is located at the sub-table's header, else the upstream's.
        let text = "[upstreams.a]\n[upstreams.a.breaker]\nenabled = true\n";
        let errors = parse_toml(text, "f.toml", env(&[("RETRY__A__BULKHEAD", "0")])).unwrap_err();
        assert_eq!(
            positions(&errors),
            ["environment: RETRY__A__BULKHEAD a/bulkhead"]
        );
    }

    #[test]
    fn toml_number_forms_are_accepted() {
        let text = "[upstreams.a]\nmax_attempts = 0b10\nmultiplier = 3\n\
                    budget = { ratio = 1e-1, min_per_second = 1_000 }\n";
        let configs = parse_toml(text, "f.toml", []).unwrap();
        let a = &configs[0].1;
        assert_eq!(a.max_attempts, 2);
        assert_eq!(a.backoff.multiplier, 3.0);
        assert_eq!(a.budget.ratio, 0.1);
        assert_eq!(a.budget.min_per_second, 1000);
        let errors = parse_toml("[upstreams.a]\nmax_attempts = -1\n", "f.toml", []).unwrap_err();
        assert_eq!(
            errors.errors()[0].message,
            "`max_attempts` = -1 is out of range: write `max_attempts = 3`"
        );
    }

    #[test]
    fn missing_keys_take_the_defaults() {
        let configs = parse_toml("[upstreams.bare]\n", "f.toml", []).unwrap();
        assert_eq!(configs, [("bare".to_owned(), UpstreamConfig::new())]);
    }

    /// Mistakes of nine kinds across two upstreams, every one reported with its position.
    const BROKEN: &str = r#"# two upstreams, many mistakes
[upstreams.sber]
max_attempts = 7
initial_backoff = "500"
multiplier = 1.0
jiter = "full"
backoff = "linear"
transient_500 = "no"

[upstreams.sber.budget]
ratio = 0.2
window = "5sec"

[upstreams.catalog]
attempt_timeout = "2s"
deadline = 5
bulkhead = 0
[upstreams.catalog.budget]
widnow = "10s"
[upstreams.catalog.breaker]
failure_rate = 1.5
"#;

    #[test]
    fn every_mistake_is_reported_with_its_position() {
        let errors = parse_toml(BROKEN, "upstreams.toml", []).unwrap_err();
        assert_eq!(
            positions(&errors),
            [
                "3:16 sber/max_attempts",
                "4:19 sber/initial_backoff",
                "5:14 sber/multiplier",
                "6:1 sber/jiter",
                "7:11 sber/backoff",
                "8:17 sber/transient_500",
                "12:10 sber/budget.window",
                // The window rule points at the upstream's header: max_attempts is unset.
                "14:1 catalog/max_attempts",
                "16:12 catalog/deadline",
                "17:12 catalog/bulkhead",
                "19:1 catalog/budget.widnow",
                "21:16 catalog/breaker.failure_rate",
            ]
        );
    }

    #[test]
    fn the_report_reads_well() {
        let errors = parse_toml(BROKEN, "upstreams.toml", []).unwrap_err();
        let expected = r#"12 configuration error(s):
  - upstreams.toml:3:16: upstream `sber`: max_attempts = 7 is outside 1..=5: 3 is typical; beyond 5, hand off to the durable queue
  - upstreams.toml:4:19: upstream `sber`: `initial_backoff` = "500" is not a valid duration: it has no unit: write "500ms" or "500s"
  - upstreams.toml:5:14: upstream `sber`: multiplier = 1 must be above 1: linear or fixed backoff hammers a failing upstream; use 2.0
  - upstreams.toml:6:1: upstream `sber`: unknown key `jiter` in [upstreams.sber]: did you mean `jitter`? valid keys: max_attempts, initial_backoff, multiplier, max_backoff, jitter, backoff, attempt_timeout, deadline, min_attempt_budget, transient_500, idempotency_header, dedups_idempotency_key, propagate, bulkhead, budget, throttle, breaker, hedge
  - upstreams.toml:7:11: upstream `sber`: backoff = "linear" is refused: linear retry piles load onto a failing upstream; use "exponential" with a multiplier such as 2.0
  - upstreams.toml:8:17: upstream `sber`: `transient_500` must be true or false, found a string: write `transient_500 = false`
  - upstreams.toml:12:10: upstream `sber`: `budget.window` = "5sec" is not a valid duration: unknown unit `sec`: use one of ns, us, ms, s, m, h
  - upstreams.toml:14:1: upstream `catalog`: the in-memory retry window is 7.5s (backoffs + max_attempts x attempt_timeout), above 5s: lower max_attempts, the backoffs or attempt_timeout, or hand longer outages to the durable queue
  - upstreams.toml:16:12: upstream `catalog`: `deadline` needs a unit: write `deadline = "5s"`
  - upstreams.toml:17:12: upstream `catalog`: bulkhead = 0 would refuse every attempt: use the upstream's capacity, or remove the key for no limit
  - upstreams.toml:19:1: upstream `catalog`: unknown key `widnow` in [upstreams.catalog.budget]: did you mean `window`? valid keys: ratio, min_per_second, window
  - upstreams.toml:21:16: upstream `catalog`: breaker failure_rate 1.5 is outside (0, 1]: use 0.8"#;
        assert_eq!(errors.to_string(), expected);
        // `?` in `main` prints `Debug`: the same list, not the struct.
        assert_eq!(format!("{errors:?}"), expected);
    }

    #[test]
    fn syntax_errors_are_all_reported_and_stop_the_walk() {
        let text = "[upstreams.sber]\nmax_attempts = \ndeadline = \"5s\n[upstreams.x\n";
        let errors = parse_toml(text, "f.toml", []).unwrap_err();
        let shown: Vec<String> = errors.errors().iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "f.toml:2:16: invalid TOML: string values must be quoted, expected literal string",
                "f.toml:3:15: invalid TOML: invalid basic string, expected `\"`",
                "f.toml:4:13: invalid TOML: unclosed table, expected `]`",
            ]
        );
    }

    #[test]
    fn structure_mistakes_are_located() {
        let text = "title = \"x\"\n[upstreams]\na = 1\nb.budget = 3\n[[upstreams.c]]\n";
        let errors = parse_toml(text, "f.toml", []).unwrap_err();
        assert_eq!(
            positions(&errors),
            ["1:1 /title", "3:5 a/", "4:12 b/budget", "5:1 c/"]
        );
        let errors = parse_toml("", "f.toml", []).unwrap_err();
        assert_eq!(positions(&errors), ["1:1 /upstreams"]);
        let errors = parse_toml("upstreams = []", "f.toml", []).unwrap_err();
        assert_eq!(positions(&errors), ["1:13 /upstreams"]);
        let errors = parse_toml("[upstreams.\" \"]", "f.toml", []).unwrap_err();
        assert_eq!(positions(&errors), ["1:12  /name"]);
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        let text = "[upstreams.\"сбер\"]\nidempotency_header = \"Ключ\" # кириллица\n";
        let errors = parse_toml(text, "f.toml", []).unwrap_err();
        assert_eq!(positions(&errors), ["2:22 сбер/idempotency_header"]);
        let text = "# ключ\r\n[upstreams.a]\r\nmax_attempts = 0\r\n";
        let errors = parse_toml(text, "f.toml", []).unwrap_err();
        assert_eq!(positions(&errors), ["3:16 a/max_attempts"]);
    }

    #[test]
    fn env_overrides_apply_on_top_of_the_file() {
        let configs = parse_toml(
            EXAMPLE,
            "upstreams.toml",
            env(&[
                ("RETRY__SBER__MAX_ATTEMPTS", "4"),
                ("RETRY__SBER__ATTEMPT_TIMEOUT", "300ms"),
                ("RETRY__SBER__BUDGET__RATIO", "0.1"),
                ("retry__sms_gateway__idempotency_header", "X-Dedup-Key"),
                ("RETRY__CATALOG__TRANSIENT_500", "false"),
                ("HOME", "/root"),
            ]),
        )
        .unwrap();
        let sber = &configs[1].1;
        assert_eq!(sber.max_attempts, 4);
        assert_eq!(sber.attempt_timeout, Duration::from_millis(300));
        assert_eq!(sber.budget.ratio, 0.1);
        assert_eq!(configs[2].1.idempotency_header, "X-Dedup-Key");
        assert!(!configs[0].1.transient_500);
    }

    #[test]
    fn env_overrides_are_validated_and_located() {
        let errors = parse_toml(
            EXAMPLE,
            "upstreams.toml",
            env(&[
                ("RETRY__SBER__MAX_ATTEMPTS", "8"),
                ("RETRY__SBER__DEADLINE", "soon"),
                ("RETRY__SBER__BUDGET__WINDOW", "2m"),
                ("RETRY__SBER__BACKOFF", "fixed"),
                ("RETRY__NOPE__MAX_ATTEMPTS", "3"),
            ]),
        )
        .unwrap_err();
        assert_eq!(
            errors.to_string(),
            "5 configuration error(s):
  - environment: RETRY__NOPE__MAX_ATTEMPTS: no upstream of the file is spelled `NOPE`: an override only adjusts an upstream the file defines (known: CATALOG, SBER, SMS_GATEWAY); fix the name or add the upstream to the file
  - environment: RETRY__SBER__BACKOFF: upstream `sber`: backoff = \"fixed\" is refused: fixed retry piles load onto a failing upstream; use \"exponential\" with a multiplier such as 2.0
  - environment: RETRY__SBER__BUDGET__WINDOW: upstream `sber`: budget window 120s is outside 1s..=60s: use 10s
  - environment: RETRY__SBER__DEADLINE: upstream `sber`: `deadline` = \"soon\" is not a valid duration: expected one number and one unit, such as \"500ms\" or \"1.5s\" (units: ns, us, ms, s, m, h)
  - environment: RETRY__SBER__MAX_ATTEMPTS: upstream `sber`: max_attempts = 8 is outside 1..=5: 3 is typical; beyond 5, hand off to the durable queue"
        );
    }

    #[test]
    fn an_env_override_can_repair_a_file_value() {
        let text = "[upstreams.a]\nmax_attempts = 9\ndeadline = \"x\"\n";
        let configs = parse_toml(
            text,
            "f.toml",
            env(&[
                ("RETRY__A__MAX_ATTEMPTS", "2"),
                ("RETRY__A__DEADLINE", "3s"),
            ]),
        );
        // A refused file value stays an error; a rule broken by a value is checked on the
        // final value.
        let errors = configs.unwrap_err();
        assert_eq!(positions(&errors), ["3:12 a/deadline"]);
    }

    #[test]
    fn a_deadline_beyond_the_in_memory_window_is_located_at_its_value() {
        let text = "[upstreams.a]\nmax_attempts = 2\ndeadline = \"1h\"\n";
        let errors = parse_toml(text, "f.toml", []).unwrap_err();
        assert_eq!(positions(&errors), ["3:12 a/deadline"]);
        assert!(
            errors.errors()[0]
                .to_string()
                .contains("above the 5s in-memory retry window"),
            "{}",
            errors.errors()[0]
        );
        // Through the environment, located at the variable.
        let errors = parse_toml(
            "[upstreams.a]\n",
            "f.toml",
            env(&[("RETRY__A__DEADLINE", "30m")]),
        )
        .unwrap_err();
        assert_eq!(
            errors.errors()[0]
                .location
                .as_ref()
                .map(|l| l.source.display().to_string()),
            Some("environment: RETRY__A__DEADLINE".to_owned())
        );
    }

    proptest! {
        /// The example file with random edits (a byte replaced, inserted or deleted, many
        /// times): parsing never panics, and every error it reports points inside the file.
        #[test]
        fn mutated_example_files_never_panic_and_errors_stay_located(
            edits in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<u8>()), 1..40),
        ) {
            let mut bytes = EXAMPLE.as_bytes().to_vec();
            for (at, kind, byte) in edits {
                let byte = if byte.is_ascii() { byte } else { b"\"[]=.\n#'"[usize::from(byte) % 8] };
                match kind {
                    0 if !bytes.is_empty() => { let i = at.index(bytes.len()); bytes[i] = byte; }
                    1 => { let i = at.index(bytes.len() + 1); bytes.insert(i, byte); }
                    _ if !bytes.is_empty() => { let i = at.index(bytes.len()); bytes.remove(i); }
                    _ => {}
                }
            }
            let text = String::from_utf8_lossy(&bytes);
            let lines = text.lines().count() + 1;
            if let Err(errors) = parse_toml(&text, "f.toml", []) {
                prop_assert!(!errors.errors().is_empty());
                for e in errors.errors() {
                    let at = e.location.as_ref();
                    prop_assert!(at.is_some(), "an error without a location: {e}");
                    let at = at.unwrap();
                    prop_assert!(!at.has_position() || (1..=lines).contains(&at.line), "{e}");
                }
            }
        }

        #[test]
        fn never_panics_on_arbitrary_text(text in "\\PC*") {
            let _ = parse_toml(&text, "f.toml", []);
        }

        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let text = String::from_utf8_lossy(&bytes);
            let _ = parse_toml(&text, "f.toml", []);
        }

        #[test]
        fn never_panics_on_toml_shaped_input(
            lines in proptest::collection::vec(
                "(\\[upstreams(\\.[a-z\"é-]{0,6}){0,3}\\]|[a-z_.]{0,20} ?= ?(\"[0-9a-zé.]{0,6}\"|-?[0-9.]{0,25}|true|\\[\\]|\\{\\})|\\PC{0,10})",
                0..12,
            ),
            env_value in "\\PC{0,12}",
        ) {
            let text = lines.join("\n");
            let env = vec![
                ("RETRY__A__MAX_ATTEMPTS".to_owned(), env_value.clone()),
                ("RETRY__A__BUDGET__WINDOW".to_owned(), env_value),
            ];
            let _ = parse_toml(&text, "f.toml", env);
        }

        #[test]
        fn every_error_of_a_file_has_a_position_inside_it(
            key in "[a-z_]{1,20}",
            value in "(\"[0-9a-z.]{0,8}\"|-?[0-9]{1,22}|[0-9]\\.[0-9]{1,3}|true)",
        ) {
            let text = format!("[upstreams.a]\n{key} = {value}\n");
            if let Err(errors) = parse_toml(&text, "f.toml", []) {
                for e in errors.errors() {
                    let at = e.location.as_ref().unwrap();
                    prop_assert!((1..=3).contains(&at.line), "{e}");
                }
            }
        }
    }
}
