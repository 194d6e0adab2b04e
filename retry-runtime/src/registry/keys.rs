//! The keys of an upstream's configuration, their types, and how a value sets one.
//!
//! Shared by the file reader and the environment overrides so both accept exactly the same keys
//! with the same rules.

use std::time::Duration;

use toml::de::DeValue;

use crate::backoff::Jitter;
use crate::breaker::BreakerConfig;
use crate::config::UpstreamConfig;
use crate::duration::parse_duration;
use crate::hedge::HedgeConfig;
use crate::throttle::ThrottleConfig;

/// What a key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A non-negative whole number (`u32`).
    Count,
    /// A number (`f64`); an integer is accepted.
    Number,
    /// `true` or `false`.
    Flag,
    /// A duration string, see [`parse_duration`].
    Duration,
    /// Free text.
    Text,
    /// `"full"` or `"decorrelated"`.
    Jitter,
    /// `"exponential"`.
    Backoff,
}

impl Kind {
    fn expected(self) -> &'static str {
        match self {
            Kind::Count => "a whole number",
            Kind::Number => "a number",
            Kind::Flag => "true or false",
            Kind::Duration => "a duration string such as \"500ms\"",
            Kind::Text => "a string",
            Kind::Jitter => "\"full\" or \"decorrelated\"",
            Kind::Backoff => "\"exponential\"",
        }
    }

    fn quoted(self) -> bool {
        matches!(
            self,
            Kind::Duration | Kind::Text | Kind::Jitter | Kind::Backoff
        )
    }
}

/// One configuration key.
#[derive(Debug)]
pub(crate) struct KeySpec {
    /// The name inside its table (`ratio`).
    pub(crate) name: &'static str,
    /// The dotted path inside the upstream (`budget.ratio`); also the [`ConfigError`] field.
    ///
    /// [`ConfigError`]: super::ConfigError
    pub(crate) path: &'static str,
    /// Its type.
    pub(crate) kind: Kind,
    /// A good value, unquoted (the default, or the recommended value).
    pub(crate) example: &'static str,
}

const fn key(name: &'static str, path: &'static str, kind: Kind, example: &'static str) -> KeySpec {
    KeySpec {
        name,
        path,
        kind,
        example,
    }
}

/// The table of budget settings inside an upstream.
pub(crate) const BUDGET: &str = "budget";
/// The table of adaptive throttle settings inside an upstream.
pub(crate) const THROTTLE: &str = "throttle";
/// The table of circuit-breaker settings inside an upstream.
pub(crate) const BREAKER: &str = "breaker";
/// The table of hedging settings inside an upstream.
pub(crate) const HEDGE: &str = "hedge";

/// The keys of `[upstreams.<name>]`, in documentation order (`budget` and `breaker` are
/// sub-tables).
#[rustfmt::skip]
pub(crate) const UPSTREAM_KEYS: &[KeySpec] = &[
    key("max_attempts",           "max_attempts",           Kind::Count,    "3"),
    key("initial_backoff",        "initial_backoff",        Kind::Duration, "500ms"),
    key("multiplier",             "multiplier",             Kind::Number,   "2.0"),
    key("max_backoff",            "max_backoff",            Kind::Duration, "1s"),
    key("jitter",                 "jitter",                 Kind::Jitter,   "full"),
    key("backoff",                "backoff",                Kind::Backoff,  "exponential"),
    key("attempt_timeout",        "attempt_timeout",        Kind::Duration, "1s"),
    key("deadline",               "deadline",               Kind::Duration, "5s"),
    key("min_attempt_budget",     "min_attempt_budget",     Kind::Duration, "50ms"),
    key("transient_500",          "transient_500",          Kind::Flag,     "false"),
    key("idempotency_header",     "idempotency_header",     Kind::Text,     "Idempotency-Key"),
    key("dedups_idempotency_key", "dedups_idempotency_key", Kind::Flag,     "true"),
    key("propagate",              "propagate",              Kind::Flag,     "false"),
    // No default: left out, the bulkhead is unlimited.
    key("bulkhead",               "bulkhead",               Kind::Count,    "100"),
];

/// The keys of `[upstreams.<name>.budget]`.
#[rustfmt::skip]
pub(crate) const BUDGET_KEYS: &[KeySpec] = &[
    key("ratio",          "budget.ratio",          Kind::Number,   "0.2"),
    key("min_per_second", "budget.min_per_second", Kind::Count,    "10"),
    key("window",         "budget.window",         Kind::Duration, "10s"),
];

/// The keys of `[upstreams.<name>.throttle]`.
#[rustfmt::skip]
pub(crate) const THROTTLE_KEYS: &[KeySpec] = &[
    key("enabled",    "throttle.enabled",    Kind::Flag,     "true"),
    key("multiplier", "throttle.multiplier", Kind::Number,   "3.0"),
    key("retry_multiplier", "throttle.retry_multiplier", Kind::Number, "1.0"),
    key("window",     "throttle.window",     Kind::Duration, "500ms"),
    key("wait",       "throttle.wait",       Kind::Flag,     "true"),
    key("hold",       "throttle.hold",       Kind::Duration, "600ms"),
    key("max_waiting", "throttle.max_waiting", Kind::Count,  "256"),
    key("release_ratio", "throttle.release_ratio", Kind::Number, "0.25"),
];

/// The keys of `[upstreams.<name>.breaker]`.
#[rustfmt::skip]
pub(crate) const BREAKER_KEYS: &[KeySpec] = &[
    key("enabled",          "breaker.enabled",          Kind::Flag,     "true"),
    key("failure_rate",     "breaker.failure_rate",     Kind::Number,   "0.8"),
    key("min_attempts",     "breaker.min_attempts",     Kind::Count,    "20"),
    key("window",           "breaker.window",           Kind::Duration, "10s"),
    key("open_for",         "breaker.open_for",         Kind::Duration, "5s"),
    key("half_open_probes", "breaker.half_open_probes", Kind::Count,    "3"),
];

/// The keys of `[upstreams.<name>.hedge]`. No defaults for the delays: hedging is off until
/// one is set.
#[rustfmt::skip]
pub(crate) const HEDGE_KEYS: &[KeySpec] = &[
    key("enabled",          "hedge.enabled",          Kind::Flag,     "true"),
    key("delay",            "hedge.delay",            Kind::Duration, "50ms"),
    key("percentile",       "hedge.percentile",       Kind::Number,   "95"),
    key("max_copies",       "hedge.max_copies",       Kind::Count,    "2"),
    key("dedups_in_flight", "hedge.dedups_in_flight", Kind::Flag,     "false"),
];

/// Every key, in documentation order.
pub(crate) fn all() -> impl Iterator<Item = &'static KeySpec> {
    UPSTREAM_KEYS
        .iter()
        .chain(BUDGET_KEYS)
        .chain(THROTTLE_KEYS)
        .chain(BREAKER_KEYS)
        .chain(HEDGE_KEYS)
}

/// Every key by its dotted path.
pub(crate) fn by_path(path: &str) -> Option<&'static KeySpec> {
    all().find(|k| k.path == path)
}

/// An upstream's settings while they are read. The breaker's settings are kept while it is
/// disabled, so `enabled` and the other breaker keys may come in any order (the file's keys are
/// read in name order, then the environment's).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    config: UpstreamConfig,
    throttle: ThrottleConfig,
    /// Whether any throttle key was written: writing one turns the throttle on...
    throttle_written: bool,
    /// ...unless `throttle.enabled = false` says otherwise.
    throttle_enabled: Option<bool>,
    breaker: BreakerConfig,
    /// Whether any breaker key was written: writing one turns the breaker on...
    breaker_written: bool,
    /// ...unless `breaker.enabled = false` says otherwise.
    breaker_enabled: Option<bool>,
    /// Hedging as written so far (its delays unset until a key sets them).
    hedge: HedgeConfig,
    /// Whether any hedge key was written: writing one turns hedging on...
    hedge_written: bool,
    /// ...unless `hedge.enabled = false` says otherwise.
    hedge_enabled: Option<bool>,
}

impl Settings {
    /// The defaults of [`UpstreamConfig::new`].
    pub(crate) fn new() -> Self {
        let config = UpstreamConfig::new();
        Settings {
            throttle: config.throttle.unwrap_or_default(),
            throttle_written: config.throttle.is_some(),
            throttle_enabled: None,
            breaker: config.breaker.unwrap_or_default(),
            breaker_written: config.breaker.is_some(),
            breaker_enabled: None,
            hedge: HedgeConfig {
                delay: None,
                ..HedgeConfig::after(Duration::ZERO)
            },
            hedge_written: false,
            hedge_enabled: None,
            config,
        }
    }

    /// The config these settings describe.
    pub(crate) fn config(&self) -> UpstreamConfig {
        let mut config = self.config.clone();
        config.throttle = self
            .throttle_enabled
            .unwrap_or(self.throttle_written)
            .then_some(self.throttle);
        config.breaker = self
            .breaker_enabled
            .unwrap_or(self.breaker_written)
            .then_some(self.breaker);
        config.hedge = self
            .hedge_enabled
            .unwrap_or(self.hedge_written)
            .then_some(self.hedge);
        config
    }
}

/// A value to set, from the file or from an environment variable.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'a> {
    /// A typed TOML value.
    Toml(&'a DeValue<'a>),
    /// The text of an environment variable, parsed according to the key's kind.
    Env(&'a str),
}

impl KeySpec {
    /// The fix to append to a message: how to write a good value in this source.
    fn fix(&self, value: Value<'_>) -> String {
        match value {
            Value::Toml(_) if self.kind.quoted() => {
                format!("write `{} = \"{}\"`", self.name, self.example)
            }
            Value::Toml(_) => format!("write `{} = {}`", self.name, self.example),
            Value::Env(_) => format!("set it to `{}`", self.example),
        }
    }

    fn wrong_type(&self, value: Value<'_>) -> String {
        let found = match value {
            Value::Toml(v) => format!("a {}", v.type_str()),
            Value::Env(s) => format!("`{s}`"),
        };
        format!(
            "`{}` must be {}, found {found}: {}",
            self.path,
            self.kind.expected(),
            self.fix(value)
        )
    }

    fn count(&self, value: Value<'_>) -> Result<u32, String> {
        let n: Option<i128> = match value {
            Value::Toml(DeValue::Integer(i)) => i128::from_str_radix(i.as_str(), i.radix()).ok(),
            Value::Env(s) => s.parse::<i128>().ok(),
            _ => None,
        };
        let Some(n) = n else {
            return Err(self.wrong_type(value));
        };
        u32::try_from(n)
            .map_err(|_| format!("`{}` = {n} is out of range: {}", self.path, self.fix(value)))
    }

    fn number(&self, value: Value<'_>) -> Result<f64, String> {
        let n = match value {
            Value::Toml(DeValue::Float(f)) => f.as_str().parse::<f64>().ok(),
            Value::Toml(DeValue::Integer(i)) => i128::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(|n| n as f64),
            Value::Env(s) => s.parse::<f64>().ok(),
            _ => None,
        };
        n.ok_or_else(|| self.wrong_type(value))
    }

    fn flag(&self, value: Value<'_>) -> Result<bool, String> {
        match value {
            Value::Toml(DeValue::Boolean(b)) => Ok(*b),
            Value::Env("true") => Ok(true),
            Value::Env("false") => Ok(false),
            _ => Err(self.wrong_type(value)),
        }
    }

    fn text<'v>(&self, value: Value<'v>) -> Result<&'v str, String> {
        match value {
            Value::Toml(DeValue::String(s)) => Ok(s),
            Value::Env(s) => Ok(s),
            _ => Err(self.wrong_type(value)),
        }
    }

    fn duration(&self, value: Value<'_>) -> Result<Duration, String> {
        if let Value::Toml(DeValue::Integer(_) | DeValue::Float(_)) = value {
            return Err(format!("`{}` needs a unit: {}", self.path, self.fix(value)));
        }
        let s = self.text(value)?;
        parse_duration(s)
            .map_err(|e| format!("`{}` = \"{s}\" is not a valid duration: {e}", self.path))
    }

    /// Sets this key of `settings` from `value`, or says what is wrong and how to fix it.
    pub(crate) fn apply(&self, settings: &mut Settings, value: Value<'_>) -> Result<(), String> {
        let config = &mut settings.config;
        let breaker = &mut settings.breaker;
        let throttle = &mut settings.throttle;
        let hedge = &mut settings.hedge;
        if self.path.starts_with("hedge.") && self.path != "hedge.enabled" {
            settings.hedge_written = true;
        }
        if self.path.starts_with("throttle.") && self.path != "throttle.enabled" {
            settings.throttle_written = true;
        }
        if self.path.starts_with("breaker.") && self.path != "breaker.enabled" {
            settings.breaker_written = true;
        }
        match self.path {
            "max_attempts" => config.max_attempts = self.count(value)?,
            "initial_backoff" => config.backoff.initial = self.duration(value)?,
            "multiplier" => config.backoff.multiplier = self.number(value)?,
            "max_backoff" => config.backoff.max_backoff = self.duration(value)?,
            "jitter" => {
                let s = self.text(value)?;
                config.backoff.jitter =
                    s.parse::<Jitter>().map_err(|e| format!("`jitter`: {e}"))?;
            }
            "backoff" => match self.text(value)? {
                "exponential" => {}
                s @ ("linear" | "fixed" | "constant") => {
                    return Err(format!(
                        "backoff = \"{s}\" is refused: {s} retry piles load onto a failing upstream; \
                         use \"exponential\" with a multiplier such as 2.0"
                    ));
                }
                s => {
                    return Err(format!(
                        "unknown backoff \"{s}\": the only accepted value is \"exponential\""
                    ));
                }
            },
            "attempt_timeout" => config.attempt_timeout = Some(self.duration(value)?),
            "deadline" => config.deadline = self.duration(value)?,
            "min_attempt_budget" => config.min_attempt_budget = self.duration(value)?,
            "transient_500" => config.transient_500 = self.flag(value)?,
            "idempotency_header" => config.idempotency_header = self.text(value)?.to_owned(),
            "dedups_idempotency_key" => config.dedups_idempotency_key = self.flag(value)?,
            "propagate" => config.propagate = self.flag(value)?,
            "budget.ratio" => config.budget.ratio = self.number(value)?,
            "budget.min_per_second" => config.budget.min_per_second = self.count(value)?,
            "budget.window" => config.budget.window = self.duration(value)?,
            "bulkhead" => {
                let n = self.count(value)?;
                config.bulkhead = Some(usize::try_from(n).map_err(|_| {
                    format!("`bulkhead` = {n} is out of range: {}", self.fix(value))
                })?);
            }
            "throttle.enabled" => settings.throttle_enabled = Some(self.flag(value)?),
            "throttle.multiplier" => throttle.multiplier = self.number(value)?,
            "throttle.retry_multiplier" => throttle.retry_multiplier = self.number(value)?,
            "throttle.window" => throttle.window = self.duration(value)?,
            "throttle.wait" => throttle.wait = self.flag(value)?,
            "throttle.hold" => throttle.hold = self.duration(value)?,
            "throttle.max_waiting" => throttle.max_waiting = self.count(value)?,
            "throttle.release_ratio" => throttle.release_ratio = self.number(value)?,
            "breaker.enabled" => settings.breaker_enabled = Some(self.flag(value)?),
            "breaker.failure_rate" => breaker.failure_rate = self.number(value)?,
            "breaker.min_attempts" => breaker.min_attempts = self.count(value)?,
            "breaker.window" => breaker.window = self.duration(value)?,
            "breaker.open_for" => breaker.open_for = self.duration(value)?,
            "breaker.half_open_probes" => breaker.half_open_probes = self.count(value)?,
            "hedge.enabled" => settings.hedge_enabled = Some(self.flag(value)?),
            "hedge.delay" => hedge.delay = Some(self.duration(value)?),
            "hedge.percentile" => hedge.percentile = Some(self.number(value)?),
            "hedge.max_copies" => hedge.max_copies = self.count(value)?,
            "hedge.dedups_in_flight" => hedge.dedups_in_flight = self.flag(value)?,
            other => {
                // Unreachable through the key tables; reported rather than panicking.
                return Err(format!("`{other}` cannot be set: remove it"));
            }
        }
        Ok(())
    }
}

/// `a, b, c` for messages.
pub(crate) fn list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    names.into_iter().collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests;
