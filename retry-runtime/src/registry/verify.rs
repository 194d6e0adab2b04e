//! The start-up check: every upstream a `#[retry]` function (or a builder call site named with
//! [`upstream!`](crate::upstream!)) in the binary names is configured.
//!
//! Each `#[retry(upstream = "...")]` function registers itself at compile time (through
//! [`inventory`], which collects the registrations when the program starts, before `main`).
//! [`Registry::verify`] compares them with the loaded configuration, so a misspelt or forgotten
//! upstream fails the deployment at start-up, all names at once, instead of failing the first
//! request that needs it.

use std::collections::BTreeMap;
use std::fmt;

use super::live::Registry;
use crate::suggest::closest;

/// One place in the binary that names an upstream: a `#[retry]` function, or a builder call
/// site that names it with [`upstream!`](crate::upstream!). Created by those macros only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    upstream: &'static str,
    function: &'static str,
    file: &'static str,
    line: u32,
    /// The `registry = ...` expression as written (`&self.registry`), when the function does
    /// not use the global registry.
    registry: Option<&'static str>,
    /// A builder call site (`Retry::upstream(upstream!(..))`), not a `#[retry]` function.
    builder: bool,
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
            builder: false,
            durable: None,
        }
    }

    #[doc(hidden)]
    pub const fn builder_site(mut self) -> Self {
        self.builder = true;
        self
    }

    /// `true` for a builder call site named with [`upstream!`](crate::upstream!); `function`
    /// is then the module it is in.
    pub fn is_builder_site(&self) -> bool {
        self.builder
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

    /// The `registry = ...` expression of the function as written (`Some("&self.registry")`),
    /// or `None` when it uses the global registry.
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
        if self.builder {
            f.write_str("a builder call in ")?;
        }
        write!(f, "{} ({}:{}", self.function, self.file, self.line)?;
        if let Some(registry) = self.registry {
            write!(f, ", registry = {registry}")?;
        }
        f.write_str(")")
    }
}

/// Names an upstream at a builder call site so [`Registry::verify`] checks it at start-up, as
/// it checks `#[retry]` functions: `Retry::upstream(upstream!("sber"))`. Evaluates to the name
/// (a `&'static str`); a misspelt name then fails the deployment at start-up instead of the
/// first request that takes this path.
///
/// ```standalone_crate
/// use retry_runtime::{Registry, Retry, UpstreamConfig, upstream};
///
/// fn charge() -> Retry<'static> {
///     Retry::upstream(upstream!("sbr")) // a typo
/// }
///
/// let registry = Registry::builder().upstream("sber", UpstreamConfig::new()).build().unwrap();
/// let missing = registry.verify().unwrap_err();
/// assert_eq!(missing.missing[0].upstream, "sbr");
/// assert!(missing.to_string().contains("did you mean `sber`?"));
/// # let _ = charge;
/// ```
#[macro_export]
macro_rules! upstream {
    ($name:literal) => {{
        $crate::__private::inventory::submit! {
            $crate::registry::Registration::new(
                $name,
                ::core::module_path!(),
                ::core::file!(),
                ::core::line!(),
            )
            .builder_site()
        }
        $name
    }};
}

inventory::collect!(Registration);

/// An upstream named by `#[retry]` functions but missing from the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingUpstream {
    /// The upstream's name.
    pub upstream: &'static str,
    /// Every function that names it, sorted.
    pub functions: Vec<Registration>,
}

/// Every upstream used by a `#[retry]` function in the binary but missing from the registry.
///
/// `Debug` prints the same list as `Display`, so `?` in `main` shows it as a person reads it.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
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
                 one at start-up with `Registry::set_durable_queue` (in a binary that never calls \
                 them, check with `Registry::verify_without_durable` instead): ",
                self.no_durable_queue.len()
            )?;
            for (i, r) in self.no_durable_queue.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{r}")?;
            }
            if self.missing.is_empty() {
                return Ok(());
            }
            writeln!(f)?;
        }
        write!(
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
            write!(f, "\n  - `{}`", m.upstream)?;
            if let Some(close) = closest(m.upstream, self.known.iter().map(String::as_str)) {
                write!(f, " (did you mean `{close}`?)")?;
            }
            f.write_str(", used by ")?;
            for (i, r) in m.functions.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{r}")?;
            }
        }
        let injected = self
            .missing
            .iter()
            .flat_map(|m| &m.functions)
            .any(|r| r.registry.is_some());
        if injected {
            f.write_str(
                "\nA function given its registry (`registry = ...`) is checked against the registry \
                 verified; if it runs on another one, verify each registry on the functions that \
                 use it with `Registry::verify_where`",
            )?;
        }
        Ok(())
    }
}

impl fmt::Debug for MissingUpstreams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
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

    /// Checks that every upstream named in the binary, by a `#[retry]` function or by a builder
    /// call site through [`upstream!`](crate::upstream!), is configured here, whichever
    /// registry the function names: the global one, or an injected one
    /// (`#[retry(registry = &self.registry)]`). Call it at start-up on the registry the
    /// service runs on, after loading the configuration: [`Registry::global()`], or the
    /// registry it builds and hands to its adapters ([`Registry::from_file`]). It reports every
    /// missing upstream at once, with the functions that name it, and every
    /// `#[retry(durable = ...)]` function when no durable queue is registered
    /// ([`set_durable_queue`](Registry::set_durable_queue), feature `durable`).
    ///
    /// ```standalone_crate
    /// use std::sync::Arc;
    /// use retry_runtime::{Registry, UpstreamConfig, retry};
    ///
    /// struct Inventory {
    ///     registry: Arc<Registry>,
    /// }
    ///
    /// impl Inventory {
    ///     #[retry(upstream = "inventory", method = GET, registry = &self.registry)]
    ///     async fn stock(&self, sku: &str) -> Result<u32, retry_runtime::Error> {
    ///         Ok(sku.len() as u32)
    ///     }
    /// }
    ///
    /// // The service's own registry (usually `Registry::from_file("upstreams.toml")?`),
    /// // missing the upstream the adapter names:
    /// let registry = Registry::builder().upstream("payments", UpstreamConfig::new()).build().unwrap();
    /// let missing = registry.verify().unwrap_err();
    /// assert_eq!(missing.missing[0].upstream, "inventory");
    /// assert!(missing.to_string().contains("registry = &self.registry"), "{missing}");
    ///
    /// // Configured, it passes.
    /// let registry = Registry::builder().upstream("inventory", UpstreamConfig::new()).build().unwrap();
    /// registry.verify().unwrap();
    /// # let _ = Inventory { registry: Arc::new(registry) };
    /// ```
    ///
    /// # Several registries
    /// A process whose registries hold different upstreams (one per tenant, say) verifies each
    /// on the functions that use it, with [`verify_where`](Registry::verify_where).
    ///
    /// # Durable functions
    /// A `#[retry(durable = ...)]` function without a queue fails its call only when the
    /// upstream is already failing (that is when it defers), so `verify` reports it at start-up
    /// rather than in the middle of an outage. The registrations are per binary, not per use:
    /// a binary that links such functions but never calls them (a CLI, a read-only service
    /// sharing the adapter crate) checks with
    /// [`verify_without_durable`](Registry::verify_without_durable) instead.
    pub fn verify(&self) -> Result<(), MissingUpstreams> {
        self.check(|_| true, true)
    }

    /// Like [`verify`](Registry::verify), without the durable queue check: for a binary that
    /// links `#[retry(durable = ...)]` functions it never calls. Every upstream is still
    /// checked; a durable call made anyway fails with
    /// [`Error::NoDurableQueue`](crate::Error::NoDurableQueue).
    pub fn verify_without_durable(&self) -> Result<(), MissingUpstreams> {
        self.check(|_| true, false)
    }

    /// Like [`verify`](Registry::verify), for the functions (and builder call sites) `select`
    /// picks: in a process with several registries, those that use this one. A function's
    /// `registry = ...` expression reads as written:
    ///
    /// ```
    /// # let registry = retry_runtime::Registry::new();
    /// // The adapters given `registry = &self.registry`:
    /// let result = registry.verify_where(|r| r.registry() == Some("&self.registry"));
    /// // Everything that uses the global registry:
    /// let result = registry.verify_where(|r| r.registry().is_none());
    /// ```
    pub fn verify_where(
        &self,
        select: impl Fn(&Registration) -> bool,
    ) -> Result<(), MissingUpstreams> {
        self.check(select, true)
    }

    fn check(
        &self,
        select: impl Fn(&Registration) -> bool,
        durable: bool,
    ) -> Result<(), MissingUpstreams> {
        let known = self.names();
        let mut missing: BTreeMap<&'static str, Vec<Registration>> = BTreeMap::new();
        let mut no_durable_queue = Vec::new();
        for r in Registry::retry_functions()
            .into_iter()
            .filter(|r| select(r))
        {
            if durable && r.durable.is_some() && !self.has_queue() {
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
