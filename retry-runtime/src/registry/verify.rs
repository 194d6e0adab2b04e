//! The start-up check: every upstream a `#[retry]` function in the binary names is configured.
//!
//! Each `#[retry(upstream = "...")]` function registers itself at compile time (through
//! [`inventory`], which collects the registrations when the program starts, before `main`).
//! [`Registry::verify`] compares them with the loaded configuration, so a misspelt or forgotten
//! upstream fails the deployment at start-up, all names at once, instead of failing the first
//! request that needs it.

use std::collections::BTreeMap;
use std::fmt;

use super::Registry;

/// One `#[retry]` function: the upstream it names and where it is. Created by the macro only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    upstream: &'static str,
    function: &'static str,
    file: &'static str,
    line: u32,
    /// The `registry = ...` expression, when the function does not use the global registry.
    registry: Option<&'static str>,
    /// The `durable = ...` operation, when the function defers to the durable queue.
    durable: Option<&'static str>,
}

impl Registration {
    #[doc(hidden)]
    pub const fn new(
        upstream: &'static str,
        function: &'static str,
        file: &'static str,
        line: u32,
    ) -> Self {
        Registration {
            upstream,
            function,
            file,
            line,
            registry: None,
            durable: None,
        }
    }

    #[doc(hidden)]
    pub const fn with_durable(mut self, operation: &'static str) -> Self {
        self.durable = Some(operation);
        self
    }

    /// The `durable = ...` operation of the function, when it defers to the durable queue.
    pub fn durable(&self) -> Option<&'static str> {
        self.durable
    }

    #[doc(hidden)]
    pub const fn with_registry(mut self, expression: &'static str) -> Self {
        self.registry = Some(expression);
        self
    }

    /// The `registry = ...` expression of the function, or `None` when it uses the global
    /// registry.
    pub fn registry(&self) -> Option<&'static str> {
        self.registry
    }

    /// The upstream the function names.
    pub fn upstream(&self) -> &'static str {
        self.upstream
    }

    /// The function: its module path and name (for a method, the module of its `impl`).
    pub fn function(&self) -> &'static str {
        self.function
    }

    /// The source file of the function.
    pub fn file(&self) -> &'static str {
        self.file
    }

    /// The line of the `#[retry]` attribute.
    pub fn line(&self) -> u32 {
        self.line
    }
}

impl fmt::Display for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}:{})", self.function, self.file, self.line)
    }
}

inventory::collect!(Registration);

/// An upstream named by `#[retry]` functions but missing from the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingUpstream {
    /// The upstream's name.
    pub upstream: &'static str,
    /// Every function that names it, sorted.
    pub functions: Vec<Registration>,
}

/// Every upstream used by a `#[retry]` function in the binary but missing from the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingUpstreams {
    /// The missing upstreams, sorted by name.
    pub missing: Vec<MissingUpstream>,
    /// The upstreams the registry knows, sorted.
    pub known: Vec<String>,
    /// The `#[retry(durable = ...)]` functions of a registry without a durable queue
    /// ([`Registry::set_durable_queue`]): their deferred calls would have nowhere to go.
    pub no_durable_queue: Vec<Registration>,
}

impl fmt::Display for MissingUpstreams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.no_durable_queue.is_empty() {
            write!(
                f,
                "{} #[retry(durable = ...)] function(s) have no durable queue to defer to; register \
                 one at start-up with `Registry::set_durable_queue`: ",
                self.no_durable_queue.len()
            )?;
            for (i, r) in self.no_durable_queue.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{r}")?;
            }
            writeln!(f)?;
            if self.missing.is_empty() {
                return Ok(());
            }
        }
        writeln!(
            f,
            "{} upstream(s) named by #[retry] functions are missing from the retry registry \
             (configured: {}); add them to the configuration, or fix the name in the attribute:",
            self.missing.len(),
            if self.known.is_empty() {
                "none; was the registry loaded?".to_owned()
            } else {
                self.known.join(", ")
            }
        )?;
        for m in &self.missing {
            write!(f, "  - `{}`, used by ", m.upstream)?;
            for (i, r) in m.functions.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{r}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl std::error::Error for MissingUpstreams {}

impl Registry {
    /// Every `#[retry]` function linked into this binary, sorted by upstream, then function.
    pub fn retry_functions() -> Vec<Registration> {
        let mut all: Vec<Registration> = inventory::iter::<Registration>
            .into_iter()
            .copied()
            .collect();
        all.sort_by(|a, b| (a.upstream, a.function, a.line).cmp(&(b.upstream, b.function, b.line)));
        all.dedup();
        all
    }

    /// Checks that every upstream named by a `#[retry]` function of the binary that uses the
    /// global registry (no `registry = ...`) is configured here. Call it on
    /// [`Registry::global()`] at start-up, after loading the configuration: it reports every
    /// missing upstream at once, with the functions that name it, and every
    /// `#[retry(durable = ...)]` function when no durable queue is registered
    /// ([`set_durable_queue`](Registry::set_durable_queue), feature `durable`). Functions with an injected
    /// registry are checked with [`verify_where`](Registry::verify_where).
    ///
    /// ```standalone_crate
    /// use retry_runtime::{Registry, UpstreamConfig};
    ///
    /// let registry = Registry::builder().upstream("sber", UpstreamConfig::new()).build().unwrap();
    /// // No `#[retry]` function in this doctest, so nothing is missing.
    /// registry.verify().unwrap();
    /// ```
    pub fn verify(&self) -> Result<(), MissingUpstreams> {
        self.verify_where(|r| r.registry().is_none())
    }

    /// Like [`verify`](Registry::verify), for the `#[retry]` functions `select` picks, e.g. those
    /// whose injected registry is this one:
    /// `registry.verify_where(|r| r.registry() == Some("& self.registry"))` (the expression as
    /// tokens, spaced).
    pub fn verify_where(
        &self,
        select: impl Fn(&Registration) -> bool,
    ) -> Result<(), MissingUpstreams> {
        let known = self.names();
        let mut missing: BTreeMap<&'static str, Vec<Registration>> = BTreeMap::new();
        let mut no_durable_queue = Vec::new();
        for r in Registry::retry_functions()
            .into_iter()
            .filter(|r| select(r))
        {
            if r.durable.is_some() && !self.has_queue() {
                no_durable_queue.push(r);
            }
            if known
                .binary_search_by(|k| k.as_str().cmp(r.upstream))
                .is_err()
            {
                missing.entry(r.upstream).or_default().push(r);
            }
        }
        if missing.is_empty() && no_durable_queue.is_empty() {
            return Ok(());
        }
        Err(MissingUpstreams {
            missing: missing
                .into_iter()
                .map(|(upstream, functions)| MissingUpstream {
                    upstream,
                    functions,
                })
                .collect(),
            known,
            no_durable_queue,
        })
    }

    #[cfg(feature = "durable")]
    fn has_queue(&self) -> bool {
        self.has_durable_queue()
    }

    /// Without the `durable` feature no `#[retry(durable = ...)]` function compiles.
    #[cfg(not(feature = "durable"))]
    fn has_queue(&self) -> bool {
        false
    }
}
