//! A fresh registry, a trace capture, and one way to run an adapter's calls under both.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use retry_runtime::backoff::Backoff;
use retry_runtime::registry::ConfigErrors;
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

/// Builds a [`Kit`]: its upstreams, seed and backoff.
///
/// # Default
/// - no upstream (add at least the one the adapter names)
/// - `seed`: [`DEFAULT_SEED`]
/// - `shrink_backoff`: 1 (the configured backoff as it is)
#[derive(Debug, Clone)]
pub struct KitBuilder {
    upstreams: Vec<(String, UpstreamConfig)>,
    seed: u64,
    shrink: u32,
}

impl Default for KitBuilder {
    fn default() -> Self {
        KitBuilder {
            upstreams: Vec::new(),
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

    /// The kit, or the registry's errors for an invalid configuration.
    pub fn build(self) -> Result<Kit, ConfigErrors> {
        let shrink = self.shrink.max(1);
        let upstreams = self.upstreams.into_iter().map(|(name, config)| {
            let backoff = config.backoff;
            let backoff = Backoff {
                initial: backoff.initial / shrink,
                max_backoff: backoff.max_backoff / shrink,
                ..backoff
            };
            (name, config.with_backoff(backoff))
        });
        let registry = Registry::builder()
            .upstreams(upstreams)
            .seed(self.seed)
            .build()?;
        Ok(Kit::with_registry(Arc::new(registry)))
    }
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

    /// A builder with the defaults listed on [`KitBuilder`].
    pub fn builder() -> KitBuilder {
        KitBuilder::default()
    }

    /// A kit over a registry built elsewhere (loaded from the service's own TOML, say). Seed it
    /// ([`RegistryBuilder::seed`](retry_runtime::registry::RegistryBuilder::seed)) for
    /// repeatable jitter.
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

    /// Runs `calls` (any future: one adapter call, or several) and returns its output with the
    /// trace of every retrying call it made and the requests `upstream` received meanwhile.
    ///
    /// The trace is collected by a `tracing` subscriber that is the current one while `calls`
    /// is polled, and only then: a subscriber the test installed sees everything else, but not
    /// the events of `calls` itself. Tasks `calls` spawns are not traced (a retrying call's
    /// attempts, hedged copies included, are polled in the calling task). Runs of one kit
    /// take turns: two at once would share one trace.
    pub async fn run<F: Future>(&self, upstream: &Upstream, calls: F) -> Run<F::Output> {
        let before = upstream.requests().len();
        let (output, trace) = self.trace(calls).await;
        let mut requests = upstream.requests();
        requests.drain(..before.min(requests.len()));
        Run {
            output,
            trace,
            requests,
            registry: self.registry.clone(),
        }
    }

    /// Runs `calls` and returns its output with the trace, for calls to an upstream that is not
    /// a scripted one (a [`FaultLayer`](crate::fault::FaultLayer) in front of a real service).
    pub async fn trace<F: Future>(&self, calls: F) -> (F::Output, Trace) {
        self.capture.take();
        let output = calls.with_subscriber(self.dispatch.clone()).await;
        (output, self.capture.take())
    }
}

/// What a [`Kit::run`] saw: the calls' output, the decision trace and the requests received.
///
/// Its `Display` (the trace, then the requests) is what every assertion prints when it fails.
pub struct Run<T> {
    /// What the future returned (the adapter's `Result`).
    pub output: T,
    /// What the runtime decided.
    pub trace: Trace,
    /// What the upstream received during the run, in arrival order.
    pub requests: Vec<Request>,
    pub(crate) registry: Arc<Registry>,
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
