//! Reading the TOML configuration file: a hand walk over the spanned tree (the walk, the drafts
//! it fills and their positions are the sibling modules), so every value keeps its line and
//! column and every mistake is reported at once.
//!
//! The format, the keys and the environment scheme are documented on the [`registry`] module.
//!
//! [`registry`]: super

use std::path::Path;

use toml::de::DeTable;

use super::env;
use super::errors::{ConfigError, ConfigErrors};
use super::position::Lines;
use super::walk::{UPSTREAMS, read_document};
use crate::config::UpstreamConfig;

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

#[cfg(test)]
mod tests;
