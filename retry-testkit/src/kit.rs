//! A fresh registry, a trace capture, and one way to run an adapter's calls under both.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use retry_runtime::registry::{ConfigError, ConfigErrors, Location, parse_toml};
use retry_runtime::{Registry, UpstreamConfig};
use tracing::instrument::WithSubscriber;
use tracing_subscriber::layer::SubscriberExt;

use crate::record::Request;
use crate::trace::{Capture, Trace};
use crate::upstream::Upstream;

/// The seed a kit's registry draws its jitter from unless [`KitBuilder::seed`] says otherwise.
pub const DEFAULT_SEED: u64 = 0x5eed;

/// A fresh registry for one test, and the trace of what the runtime decided in it.
///
/// Hand [`registry`](Kit::registry) to the adapter (`#[retry(registry = ...)]` or
/// [`Retry::in_registry`](retry_runtime::Retry::in_registry)), then [`run`](Kit::run) its
/// calls: the adapter is the production code, unchanged.
///
/// # Time
/// The calls run in real time: they go over real sockets, and tokio's paused clock would fire
/// the attempt timeouts while a socket waits (it jumps to the next timer whenever the runtime
/// is idle, and a runtime waiting on I/O is idle). The delays are what keep a retry test slow,
/// so give the kit a configuration with a backoff in milliseconds, or shrink the production one
/// with [`KitBuilder::shrink_backoff`]. Which delays were chosen is in the trace either way,
/// and [`Run::assert_delays_within_backoff`] checks them against the configured bounds.
///
/// # Determinism
/// The registry is seeded ([`DEFAULT_SEED`]), so the same script gives the same decisions and
/// the same jitter on every run: two [`Trace`]s of the same test compare equal.
pub struct Kit {
    registry: Arc<Registry>,
    capture: Capture,
    dispatch: tracing::Dispatch,
}

impl fmt::Debug for Kit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kit")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Kit`]: its upstreams (in code, from the service's TOML file, or a registry built
/// elsewhere), seed and backoff.
///
/// ```
/// use retry_testkit::Kit;
/// # let dir = std::env::temp_dir().join(format!("kit-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// # let path = dir.join("upstreams.toml");
/// # std::fs::write(&path, "[upstreams.payments]\ninitial_backoff = \"100ms\"\nmax_backoff = \"400ms\"\n").unwrap();
///
/// // The production file, its backoff divided by 100: 100 ms doubling to 400 ms becomes
/// // 1 ms doubling to 4 ms, every other setting as deployed.
/// let kit = Kit::builder().file(&path).shrink_backoff(100).build().unwrap();
/// let backoff = kit.registry().upstream("payments").unwrap().config().backoff;
/// assert_eq!(backoff.initial, std::time::Duration::from_millis(1));
/// assert_eq!(backoff.max_backoff, std::time::Duration::from_millis(4));
/// ```
///
/// # Default
/// - no upstream (add at least the one the adapter names)
/// - `seed`: [`DEFAULT_SEED`]
/// - `shrink_backoff`: 1 (the configured backoff as it is)
#[derive(Debug, Clone)]
pub struct KitBuilder {
    upstreams: Vec<(String, UpstreamConfig)>,
    files: Vec<PathBuf>,
    registry: Option<Arc<Registry>>,
    seed: u64,
    shrink: u32,
}

impl Default for KitBuilder {
    fn default() -> Self {
        KitBuilder {
            upstreams: Vec::new(),
            files: Vec::new(),
            registry: None,
            seed: DEFAULT_SEED,
            shrink: 1,
        }
    }
}

impl KitBuilder {
    /// Adds upstream `name` with `config` (the registry validates it, as in production).
    pub fn upstream(mut self, name: impl Into<String>, config: UpstreamConfig) -> Self {
        self.upstreams.push((name.into(), config));
        self
    }

    /// Adds several upstreams, such as the result of
    /// [`parse_toml`](retry_runtime::registry::parse_toml).
    pub fn upstreams(
        mut self,
        upstreams: impl IntoIterator<Item = (String, UpstreamConfig)>,
    ) -> Self {
        self.upstreams.extend(upstreams);
        self
    }

    /// Adds every upstream of the TOML file at `path`: the service's own configuration, read
    /// and validated by [`build`](Self::build) as [`Registry::load_file`] reads it in
    /// production (the format is on [`retry_runtime::registry`]), every mistake reported at
    /// its `file:line:column`. The process's `RETRY__*` environment overrides are not applied,
    /// so a test does not depend on the shell it runs in.
    pub fn file(mut self, path: impl AsRef<Path>) -> Self {
        self.files.push(path.as_ref().to_owned());
        self
    }

    /// Uses `registry`, built elsewhere, instead of a fresh one: [`build`](Self::build) shrinks
    /// its backoff in place (a reload, [`Registry::replace`]) when
    /// [`shrink_backoff`](Self::shrink_backoff) asks. Its jitter is seeded as it was built
    /// ([`RegistryBuilder::seed`](retry_runtime::registry::RegistryBuilder::seed)), not with
    /// [`seed`](Self::seed). Upstreams given with [`upstream`](Self::upstream),
    /// [`upstreams`](Self::upstreams) or [`file`](Self::file) as well are an error: which
    /// would the adapter use?
    pub fn registry(mut self, registry: Arc<Registry>) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Seeds the jitter.
    pub const fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Divides every upstream's backoff (initial delay and cap) by `factor`, so a production
    /// configuration (500 ms doubling to a 1 s cap) retries in milliseconds and the test stays fast.
    /// The shape (multiplier, jitter) is kept; `0` is read as 1.
    pub const fn shrink_backoff(mut self, factor: u32) -> Self {
        self.shrink = factor;
        self
    }

    /// The kit, or every configuration error at once (an unreadable or invalid file, an invalid
    /// upstream, a registry given beside upstreams).
    pub fn build(self) -> Result<Kit, ConfigErrors> {
        let shrink = self.shrink.max(1);
        let mut upstreams = self.upstreams;
        let mut errors = Vec::new();
        for path in &self.files {
            match read(path) {
                Ok(found) => upstreams.extend(found),
                Err(ConfigErrors(found)) => errors.extend(found),
            }
        }
        if let Some(registry) = self.registry {
            if !upstreams.is_empty() || !self.files.is_empty() {
                errors.push(ConfigError::new(
                    "",
                    "registry",
                    "a kit takes a registry or upstreams (`upstream`, `upstreams`, `file`), not \
                     both: load the upstreams into the registry, or leave the registry out",
                ));
            }
            if !errors.is_empty() {
                return Err(ConfigErrors(errors));
            }
            if shrink > 1 {
                let configs = registry.names().into_iter().filter_map(|name| {
                    let config = registry.upstream(&name).ok()?.config().clone();
                    Some((name, shrunk(config, shrink)))
                });
                registry.replace(configs.collect::<Vec<_>>())?;
            }
            return Ok(Kit::with_registry(registry));
        }
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        let upstreams = upstreams
            .into_iter()
            .map(|(name, config)| (name, shrunk(config, shrink)));
        let registry = Registry::builder()
            .upstreams(upstreams)
            .seed(self.seed)
            .build()?;
        Ok(Kit::with_registry(Arc::new(registry)))
    }
}

/// `config` with its backoff's initial delay and cap divided by `shrink`.
fn shrunk(config: UpstreamConfig, shrink: u32) -> UpstreamConfig {
    let backoff = config.backoff;
    let backoff = backoff
        .with_initial(backoff.initial / shrink)
        .with_max_backoff(backoff.max_backoff / shrink);
    config.with_backoff(backoff)
}

/// The upstreams of the TOML file at `path`, without environment overrides.
fn read(path: &Path) -> Result<Vec<(String, UpstreamConfig)>, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![
            ConfigError::new(
                "",
                "",
                format!("cannot read the configuration file: {e}: check the path (a relative one is read from the directory the test runs in, the package's: build it from `env!(\"CARGO_MANIFEST_DIR\")`)"),
            )
            .at(Location::whole(path)),
        ])
    })?;
    parse_toml(&text, path, [])
}

impl Kit {
    /// A kit whose registry holds one upstream, `name`, with `config`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_runtime::UpstreamConfig;
    /// use retry_runtime::backoff::Backoff;
    ///
    /// let config = UpstreamConfig::new()
    ///     .with_backoff(Backoff::new().with_initial(Duration::from_millis(1)));
    /// let kit = retry_testkit::Kit::new("payments", config).unwrap();
    /// assert!(kit.registry().upstream("payments").is_ok());
    /// ```
    pub fn new(name: impl Into<String>, config: UpstreamConfig) -> Result<Kit, ConfigErrors> {
        Kit::builder().upstream(name, config).build()
    }

    /// A kit whose registry holds every upstream of the TOML file at `path` (the service's own
    /// configuration, as [`KitBuilder::file`] reads it). To shrink its backoff, use
    /// `Kit::builder().file(path).shrink_backoff(..)`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Kit, ConfigErrors> {
        Kit::builder().file(path).build()
    }

    /// A builder with the defaults listed on [`KitBuilder`].
    pub fn builder() -> KitBuilder {
        KitBuilder::default()
    }

    /// A kit over a registry built elsewhere, as it is. Seed it
    /// ([`RegistryBuilder::seed`](retry_runtime::registry::RegistryBuilder::seed)) for
    /// repeatable jitter; to shrink its backoff, use
    /// `Kit::builder().registry(registry).shrink_backoff(..)` ([`KitBuilder::registry`]).
    pub fn with_registry(registry: Arc<Registry>) -> Kit {
        let capture = Capture::new(registry.clone());
        let subscriber = tracing_subscriber::registry().with(capture.clone());
        Kit {
            registry,
            capture,
            dispatch: tracing::Dispatch::new(subscriber),
        }
    }

    /// The registry to hand to the adapter.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Runs `calls` (any future: one adapter call, or several) against a scripted `upstream`
    /// and returns a [`Run`]: its output, the trace of every retrying call it made and the
    /// requests `upstream` received meanwhile. Every assertion on [`Run`] applies.
    ///
    /// The trace is collected by a `tracing` subscriber that is the current one while `calls`
    /// is polled, and only then: a subscriber the test installed sees everything else, but not
    /// the events of `calls` itself. Tasks `calls` spawns are not traced (a retrying call's
    /// attempts, hedged copies included, are polled in the calling task). Runs of one kit
    /// take turns: two at once would share one trace.
    pub async fn run<F: Future>(&self, upstream: &Upstream, calls: F) -> Run<F::Output> {
        let before = upstream.requests().len();
        let (output, trace) = self.capture(calls).await;
        let mut requests = upstream.requests();
        requests.drain(..before.min(requests.len()));
        Run {
            output,
            trace,
            requests,
            recorded: true,
            registry: self.registry.clone(),
        }
    }

    /// Runs `calls` against a service the kit does not script (your own service behind a
    /// [`FaultLayer`](crate::fault::FaultLayer), a container) and returns a [`Run`] like
    /// [`run`](Self::run)'s, traced the same way. The kit has not seen the requests, so
    /// [`Run::requests`] is empty and the assertions about them
    /// ([`assert_requests`](Run::assert_requests), [`assert_one_key`](Run::assert_one_key),
    /// [`assert_no_unkeyed_write_twice`](Run::assert_no_unkeyed_write_twice)) fail saying so,
    /// rather than pass on nothing; every assertion on the trace applies.
    pub async fn trace<F: Future>(&self, calls: F) -> Run<F::Output> {
        let (output, trace) = self.capture(calls).await;
        Run {
            output,
            trace,
            requests: Vec::new(),
            recorded: false,
            registry: self.registry.clone(),
        }
    }

    async fn capture<F: Future>(&self, calls: F) -> (F::Output, Trace) {
        self.capture.take();
        let output = calls.with_subscriber(self.dispatch.clone()).await;
        (output, self.capture.take())
    }
}

/// What a [`Kit::run`] or a [`Kit::trace`] saw: the calls' output, the decision trace and the
/// requests received (for a scripted upstream).
///
/// Its `Display` (the trace, then the requests) is what every assertion prints when it fails.
pub struct Run<T> {
    /// What the future returned (the adapter's `Result`).
    pub output: T,
    /// What the runtime decided.
    pub trace: Trace,
    /// What the upstream received during the run, in arrival order; empty for a
    /// [`Kit::trace`], whose upstream the kit does not see.
    pub requests: Vec<Request>,
    /// Whether `requests` was recorded (a scripted upstream's run).
    pub(crate) recorded: bool,
    pub(crate) registry: Arc<Registry>,
}

impl<T> Run<T> {
    /// Panics, naming `assertion`, when the run has no request log.
    #[track_caller]
    pub(crate) fn require_requests(&self, assertion: &str) {
        assert!(
            self.recorded,
            "{assertion} needs the requests the upstream received, and this run has none: it \
             was made with Kit::trace, against a service the kit does not script; use Kit::run \
             with a scripted Upstream, or assert on the trace (assert_attempts, assert_denied, \
             assert_ambiguous, assert_delays_within_backoff)\n{self}"
        );
    }
}

impl<T: fmt::Debug> fmt::Debug for Run<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Run")
            .field("output", &self.output)
            .field("trace", &self.trace)
            .field("requests", &self.requests)
            .finish()
    }
}

impl<T> fmt::Display for Run<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "decision trace:")?;
        for line in self.trace.to_string().lines() {
            writeln!(f, "  {line}")?;
        }
        if !self.recorded {
            return writeln!(
                f,
                "requests: not recorded (Kit::trace: the upstream is not scripted)"
            );
        }
        writeln!(
            f,
            "requests the upstream received ({}):",
            self.requests.len()
        )?;
        for request in &self.requests {
            writeln!(f, "    {request}")?;
        }
        Ok(())
    }
}
