//! Environment overrides: `RETRY__<UPSTREAM>__<KEY>` and `RETRY__<UPSTREAM>__BUDGET__<KEY>`.
//!
//! - Only variables starting with [`ENV_PREFIX`] (`RETRY__`, matched without regard to case)
//!   are read; segments are separated by a double underscore.
//! - `<UPSTREAM>` names an upstream the file defines, spelled in upper case with every character
//!   that is not an ASCII letter or digit written as `_`: `sber-online` is `SBER_ONLINE`. An
//!   override never creates an upstream: a name that matches none is an error (a typo must not
//!   be silently ignored), and so is one that matches two (`a-b` and `a_b`: rename one).
//! - `<KEY>` is a key of the file in upper case (`MAX_ATTEMPTS`, `BUDGET__RATIO`,
//!   `BREAKER__ENABLED`).
//! - The value is the bare text a key takes in the file, without TOML quoting: `4`, `0.1`,
//!   `true`, `750ms`, `decorrelated`.

use std::ffi::OsString;

use super::errors::{ConfigError, Location};
use super::keys::{self, KeySpec};
use crate::suggest::closest;

/// The prefix of every override variable.
pub const ENV_PREFIX: &str = "RETRY__";

/// One override, resolved to an upstream and a key.
#[derive(Debug)]
pub(crate) struct Override {
    /// The variable, for locating errors.
    pub(crate) var: String,
    /// The upstream's name as the file spells it.
    pub(crate) upstream: String,
    /// The key set.
    pub(crate) key: &'static KeySpec,
    /// The raw value.
    pub(crate) value: String,
}

/// `SBER_ONLINE` for `sber-online`.
fn env_spelling(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Keeps the `RETRY__` variables of `env`, resolves each to an upstream among `upstreams` and a
/// key, and reports every one that does not resolve. Overrides come back sorted by variable so
/// the result does not depend on the order of the environment.
pub(crate) fn resolve(
    env: impl IntoIterator<Item = (String, String)>,
    upstreams: &[&str],
) -> (Vec<Override>, Vec<ConfigError>) {
    let mut vars: Vec<(String, String)> = env.into_iter().filter(|(k, _)| has_prefix(k)).collect();
    vars.sort();
    let spellings: Vec<(String, &str)> = upstreams.iter().map(|n| (env_spelling(n), *n)).collect();
    let mut overrides = Vec::new();
    let mut errors = Vec::new();
    for (var, value) in vars {
        let at = Location::environment(&var);
        let rest = var[ENV_PREFIX.len()..].to_ascii_uppercase();
        // The longest upstream spelling followed by `__` wins, so names may contain `__` too.
        let mut matches: Vec<(&str, &str)> = spellings
            .iter()
            .filter_map(|(spelling, name)| {
                rest.strip_prefix(spelling.as_str())
                    .and_then(|r| r.strip_prefix("__"))
                    .map(|r| (*name, r))
            })
            .collect();
        let shortest_rest = matches.iter().map(|(_, r)| r.len()).min();
        matches.retain(|(_, r)| Some(r.len()) == shortest_rest);
        let (upstream, key_part) = match matches.as_slice() {
            [] => {
                let mut known: Vec<&str> = spellings.iter().map(|(s, _)| s.as_str()).collect();
                known.sort_unstable();
                known.dedup();
                let known = known.join(", ");
                let upstream_part = rest.split("__").next().unwrap_or_default();
                errors.push(
                    ConfigError::new(
                        "",
                        "",
                        format!(
                            "no upstream of the file is spelled `{upstream_part}`: an override only \
                             adjusts an upstream the file defines (known: {known}); fix the name or \
                             add the upstream to the file"
                        ),
                    )
                    .at(at),
                );
                continue;
            }
            [(upstream, key_part)] => (*upstream, *key_part),
            [(a, _), (b, _), ..] => {
                errors.push(
                    ConfigError::new(
                        a,
                        "",
                        format!(
                            "the variable matches upstreams `{a}` and `{b}`, which are spelled alike \
                             in the environment: rename one of them"
                        ),
                    )
                    .at(at),
                );
                continue;
            }
        };
        let path = key_part.to_ascii_lowercase().replace("__", ".");
        match keys::by_path(&path) {
            Some(key) => overrides.push(Override {
                var,
                upstream: upstream.to_owned(),
                key,
                value,
            }),
            None => {
                let valid = keys::all().map(|k| k.path).collect::<Vec<_>>();
                let hint = match closest(&path, valid.iter().copied()) {
                    Some(close) => format!("did you mean `{}`? ", env_key(close)),
                    None => String::new(),
                };
                errors.push(
                    ConfigError::new(
                        upstream,
                        key_part.to_owned(),
                        format!(
                            "unknown key `{key_part}`: {hint}valid keys: {}",
                            valid
                                .iter()
                                .map(|k| env_key(k))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                    .at(at),
                );
            }
        }
    }
    (overrides, errors)
}

/// `BUDGET__RATIO` for `budget.ratio`.
fn env_key(path: &str) -> String {
    path.to_ascii_uppercase().replace('.', "__")
}

fn has_prefix(var: &str) -> bool {
    var.get(..ENV_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(ENV_PREFIX))
}

/// The `RETRY__` variables of the process. A variable that is not UTF-8 is an error, not
/// silently skipped.
pub(crate) fn process_env() -> (Vec<(String, String)>, Vec<ConfigError>) {
    collect(std::env::vars_os())
}

fn collect(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> (Vec<(String, String)>, Vec<ConfigError>) {
    let mut env = Vec::new();
    let mut errors = Vec::new();
    for (k, v) in vars {
        let key = k.to_string_lossy();
        if !has_prefix(&key) {
            continue;
        }
        match (k.to_str(), v.into_string()) {
            (Some(k), Ok(v)) => env.push((k.to_owned(), v)),
            _ => errors.push(
                ConfigError::new(
                    "",
                    "",
                    "the variable is not valid UTF-8: set it to plain text",
                )
                .at(Location::environment(&key)),
            ),
        }
    }
    (env, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn names_and_keys_resolve_case_insensitively() {
        let (o, e) = resolve(
            env(&[
                ("RETRY__SBER_ONLINE__MAX_ATTEMPTS", "4"),
                ("retry__sber__budget__ratio", "0.1"),
                ("PATH", "/bin"),
                ("RETRY_SBER__MAX_ATTEMPTS", "9"),
            ]),
            &["sber", "sber-online"],
        );
        assert_eq!(e, vec![]);
        let got: Vec<_> = o
            .iter()
            .map(|o| (o.upstream.as_str(), o.key.path, o.value.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("sber-online", "max_attempts", "4"),
                ("sber", "budget.ratio", "0.1"),
            ]
        );
    }

    #[test]
    fn unknown_upstreams_keys_and_clashes_are_errors() {
        let (o, e) = resolve(
            env(&[
                ("RETRY__SBRE__MAX_ATTEMPTS", "4"),
                ("RETRY__SBER__MAX_ATTEMPT", "4"),
                ("RETRY__A_B__DEADLINE", "1s"),
            ]),
            &["sber", "a-b", "a_b"],
        );
        assert!(o.is_empty());
        let shown: Vec<String> = e.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "environment: RETRY__A_B__DEADLINE: upstream `a-b`: the variable matches upstreams \
                 `a-b` and `a_b`, which are spelled alike in the environment: rename one of them",
                "environment: RETRY__SBER__MAX_ATTEMPT: upstream `sber`: unknown key `MAX_ATTEMPT`: \
                 did you mean `MAX_ATTEMPTS`? valid keys: MAX_ATTEMPTS, INITIAL_BACKOFF, MULTIPLIER, \
                 MAX_BACKOFF, JITTER, BACKOFF, ATTEMPT_TIMEOUT, DEADLINE, MIN_ATTEMPT_BUDGET, \
                 TRANSIENT_500, IDEMPOTENCY_HEADER, DEDUPS_IDEMPOTENCY_KEY, PROPAGATE, BULKHEAD, \
                 BUDGET__RATIO, BUDGET__MIN_PER_SECOND, BUDGET__WINDOW, THROTTLE__ENABLED, \
                 THROTTLE__MULTIPLIER, THROTTLE__RETRY_MULTIPLIER, THROTTLE__WINDOW, \
                 THROTTLE__WAIT, THROTTLE__HOLD, THROTTLE__MAX_WAITING, THROTTLE__RELEASE_RATIO, \
                 BREAKER__ENABLED, \
                 BREAKER__FAILURE_RATE, \
                 BREAKER__MIN_ATTEMPTS, BREAKER__WINDOW, BREAKER__OPEN_FOR, BREAKER__HALF_OPEN_PROBES, \
                 HEDGE__ENABLED, HEDGE__DELAY, HEDGE__PERCENTILE, HEDGE__MAX_COPIES, \
                 HEDGE__DEDUPS_IN_FLIGHT",
                "environment: RETRY__SBRE__MAX_ATTEMPTS: no upstream of the file is spelled `SBRE`: \
                 an override only adjusts an upstream the file defines (known: A_B, SBER); fix \
                 the name or add the upstream to the file",
            ]
        );
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_variables_are_errors() {
        use std::os::unix::ffi::OsStringExt;
        let (vars, errors) = collect([
            (
                OsString::from("RETRY__SBER__DEADLINE"),
                OsString::from_vec(vec![0xff]),
            ),
            (OsString::from("OTHER"), OsString::from_vec(vec![0xff])),
        ]);
        assert!(vars.is_empty());
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0]
                .to_string()
                .starts_with("environment: RETRY__SBER__DEADLINE: ")
        );
    }
}
