//! Configuration errors: every violation, located, with its fix.

use std::fmt;
use std::path::PathBuf;

/// Where in a configuration source a value sits.
///
/// Displayed as `file:line:column`, or as the source alone when it has no lines (an environment
/// variable: `environment: RETRY__SBER__MAX_ATTEMPTS`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Location {
    /// The file (or a description of the source, such as `environment: RETRY__SBER__DEADLINE`).
    pub source: PathBuf,
    /// 1-based line; 0 when the source has no lines.
    pub line: usize,
    /// 1-based column, counted in characters; 0 when the source has no lines.
    pub column: usize,
}

impl Location {
    /// A position in a file (1-based line and column).
    pub fn file(source: impl Into<PathBuf>, line: usize, column: usize) -> Self {
        Location {
            source: source.into(),
            line,
            column,
        }
    }

    /// A whole source without a line, such as a file that cannot be read.
    pub fn whole(source: impl Into<PathBuf>) -> Self {
        Location {
            source: source.into(),
            line: 0,
            column: 0,
        }
    }

    /// The environment variable `var`, displayed as `environment: VAR`.
    pub fn environment(var: &str) -> Self {
        Location::whole(format!("environment: {var}"))
    }

    /// Whether this is a line and column in a file rather than a whole source such as an
    /// environment variable.
    pub fn has_position(&self) -> bool {
        self.line > 0
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.has_position() {
            write!(f, "{}:{}:{}", self.source.display(), self.line, self.column)
        } else {
            write!(f, "{}", self.source.display())
        }
    }
}

/// One configuration mistake.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigError {
    /// The upstream concerned (empty for file-level errors).
    pub upstream: String,
    /// The key concerned.
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
    /// Where, when the config came from a file or the environment.
    pub location: Option<Location>,
}

impl ConfigError {
    /// An error without a location.
    pub fn new(upstream: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            upstream: upstream.to_owned(),
            field: field.into(),
            message: message.into(),
            location: None,
        }
    }

    /// Attaches a location.
    pub fn at(mut self, location: Location) -> Self {
        self.location = Some(location);
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(loc) = &self.location {
            write!(f, "{loc}: ")?;
        }
        if !self.upstream.is_empty() {
            write!(f, "upstream `{}`: ", self.upstream)?;
        }
        f.write_str(&self.message)
    }
}

/// Every mistake found in one configuration, reported together.
///
/// `Debug` prints the same located list as `Display`, so `?` in a `main` that returns
/// `Result<(), Box<dyn Error>>` shows it as a person reads it (the fields are public for code
/// that wants them):
///
/// ```text
/// Error: 2 configuration error(s):
///   - upstreams.toml:2:16: upstream `payments`: max_attempts = 9 is outside 1..=5: ...
///   - upstreams.toml:3:1: upstream `payments`: unknown key `timeout`; did you mean `attempt_timeout`?
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The individual errors.
    pub fn errors(&self) -> &[ConfigError] {
        &self.0
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} configuration error(s):", self.0.len())?;
        for e in &self.0 {
            write!(f, "\n  - {e}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for ConfigErrors {}
