//! What a `#[retry]` call's attempts are and see: each call counted in the budget at once, the
//! attempt (key, deadline, allowance) and the call's scope available to the body, nested calls
//! joining the scope, failures retried, waits timed out from the attempt's start, one span per
//! call and per attempt, nothing left behind by a panic.
//!
//! Each test has its own registry (injected), on tokio's paused clock.
#![deny(unused_qualifications)]

use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_runtime::{Attempt, Operation, Registry, UpstreamConfig, operation, retry};
use retry_tests::AdapterError;
use tokio::time::Instant;

/// An adapter on an injected registry, with a count of its attempts.
struct Adapter {
    registry: Registry,
    attempts: AtomicU32,
}

impl Adapter {
    fn new(config: UpstreamConfig) -> Self {
        let registry = Registry::builder()
            .upstream("fast", config.clone())
            .upstream("inner", config)
            .build()
            .expect("valid test upstreams");
        Adapter {
            registry,
            attempts: AtomicU32::new(0),
        }
    }

    fn attempt(&self) -> u32 {
        self.attempts.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Completes at once.
    #[retry(upstream = "fast", method = GET, registry = &self.registry)]
    async fn ready(&self) -> Result<u32, AdapterError> {
        Ok(self.attempt())
    }

    /// Completes at once with what its attempt says of itself.
    #[retry(upstream = "fast", method = POST, idempotency = key, registry = &self.registry)]
    async fn describe(
        &self,
        key: &str,
    ) -> Result<(u32, String, Duration, Option<u32>), AdapterError> {
        self.attempt();
        let attempt = Attempt::current().expect("an attempt is installed");
        Ok((
            attempt.number(),
            attempt
                .idempotency_key()
                .expect("keyed")
                .as_str()
                .to_owned(),
            attempt.remaining(),
            attempt.retries_left(),
        ))
    }

    /// Fails at once (a 503) on its first attempt, succeeds on the next.
    #[retry(upstream = "fast", method = GET, registry = &self.registry)]
    async fn fails_once(&self) -> Result<u32, AdapterError> {
        match self.attempt() {
            1 => Err(AdapterError::status(503)),
            n => Ok(n),
        }
    }

    /// Waits `wait` on every attempt.
    #[retry(upstream = "fast", method = GET, registry = &self.registry)]
    async fn waits(&self, wait: Duration) -> Result<u32, AdapterError> {
        let n = self.attempt();
        tokio::time::sleep(wait).await;
        Ok(n)
    }

    /// Calls `inner` at once, returning what the inner call's body saw of the operation.
    #[retry(upstream = "fast", method = GET, registry = &self.registry)]
    async fn outer(&self) -> Result<(String, Option<u32>), AdapterError> {
        self.inner().await
    }

    #[retry(upstream = "inner", method = GET, registry = &self.registry)]
    async fn inner(&self) -> Result<(String, Option<u32>), AdapterError> {
        let op = Operation::current().expect("the outer call's scope");
        Ok((op.name().to_owned(), op.retries_left()))
    }

    /// Opens an operation of its own inside its attempt and reports what it sees inside and
    /// outside it.
    #[retry(upstream = "fast", method = GET, registry = &self.registry)]
    async fn opens_its_own(&self) -> Result<(String, String), AdapterError> {
        let inside = operation("explicit")
            .run(async { Operation::current().expect("installed").name().to_owned() })
            .await;
        let outside = Operation::current().expect("the call's scope");
        Ok((inside, outside.name().to_owned()))
    }

    #[retry(upstream = "missing", method = GET, registry = &self.registry)]
    async fn missing(&self) -> Result<u32, AdapterError> {
        Ok(self.attempt())
    }

    #[retry(upstream = "fast", method = GET, registry = &self.registry)]
    async fn panics(&self) -> Result<u32, AdapterError> {
        if self.attempt() > 0 {
            panic!("the body panicked");
        }
        Ok(0)
    }
}

/// The throttle is tested on its own: here, with a handful of scripted failures in a paused
/// clock's window, it would refuse some of the calls these tests time.
fn config() -> UpstreamConfig {
    UpstreamConfig::new()
        .with_max_attempts(3)
        .with_throttle(None)
}

fn budget(adapter: &Adapter) -> u64 {
    adapter
        .registry
        .upstream("fast")
        .unwrap()
        .budget()
        .available()
}

#[tokio::test(start_paused = true)]
async fn every_call_is_counted_in_the_budget_as_it_happens() {
    let adapter = Adapter::new(config());
    let before = budget(&adapter);
    let calls = 10;
    for n in 1..=calls {
        adapter.ready().await.unwrap();
        // Each call is counted as it happens: 20 % of the calls so far, in whole tokens.
        assert_eq!(
            budget(&adapter),
            before + u64::from(n) / 5,
            "after {n} calls"
        );
    }
    assert_eq!(
        adapter.attempts.load(Ordering::SeqCst),
        calls,
        "one attempt each"
    );
}

#[tokio::test(start_paused = true)]
async fn a_body_that_asks_gets_the_first_attempt_with_its_key_deadline_and_allowance() {
    let adapter = Adapter::new(config().with_deadline(Duration::from_secs(4)));
    let (number, key, remaining, retries_left) = adapter.describe("order-1:pay").await.unwrap();
    assert_eq!(number, 1);
    assert_eq!(key, "order-1:pay");
    assert_eq!(
        remaining,
        Duration::from_secs(4),
        "the whole deadline, from now"
    );
    assert_eq!(retries_left, Some(2), "3 attempts: 2 retries");
}

#[tokio::test(start_paused = true)]
async fn a_first_attempt_that_fails_at_once_is_retried() {
    let adapter = Adapter::new(config());
    assert_eq!(adapter.fails_once().await.unwrap(), 2, "the second attempt");
    assert_eq!(adapter.attempts.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_first_attempt_that_waits_is_timed_out_from_its_start() {
    let adapter = Adapter::new(
        config()
            .with_max_attempts(1)
            .with_attempt_timeout(Duration::from_millis(300)),
    );
    let start = Instant::now();
    let error = adapter.waits(Duration::from_secs(5)).await.unwrap_err();
    assert!(
        matches!(
            error,
            AdapterError::Runtime(retry_runtime::Error::AttemptTimeout { attempt: 1, .. })
        ),
        "{error:?}"
    );
    assert_eq!(start.elapsed(), Duration::from_millis(300));

    let quick = adapter.waits(Duration::from_millis(100)).await.unwrap();
    assert_eq!(quick, 2, "a wait within the timeout completes");
}

#[tokio::test(start_paused = true)]
async fn a_call_inside_an_attempt_joins_its_scope() {
    let adapter = Adapter::new(config());
    let (name, retries_left) = adapter.outer().await.unwrap();
    assert!(name.ends_with("::outer"), "the outer call's scope: {name}");
    assert_eq!(retries_left, Some(2), "its allowance, shared");
}

#[tokio::test(start_paused = true)]
async fn an_operation_opened_inside_comes_first_and_the_calls_scope_stays_below() {
    let adapter = Adapter::new(config());
    let (inside, outside) = adapter.opens_its_own().await.unwrap();
    assert_eq!(inside, "explicit");
    assert!(outside.ends_with("::opens_its_own"), "{outside}");
    assert!(Operation::current().is_none(), "nothing left installed");
    assert!(Attempt::current().is_none());
}

#[tokio::test(start_paused = true)]
async fn an_unknown_upstream_fails_the_call_before_its_body_runs() {
    let adapter = Adapter::new(config());
    let error = adapter.missing().await.unwrap_err();
    assert!(
        matches!(
            &error,
            AdapterError::Runtime(retry_runtime::Error::UnknownUpstream { name, .. }) if name == "missing"
        ),
        "{error:?}"
    );
    assert_eq!(adapter.attempts.load(Ordering::SeqCst), 0, "nothing ran");
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_an_attempt_leaves_nothing_installed() {
    let adapter = Arc::new(Adapter::new(config()));
    let task = {
        let adapter = adapter.clone();
        tokio::spawn(async move { adapter.panics().await })
    };
    assert!(task.await.unwrap_err().is_panic());
    assert!(Operation::current().is_none(), "no scope left installed");
    assert!(Attempt::current().is_none(), "no attempt left installed");
    // The next calls run and are counted.
    let before = budget(&adapter);
    for _ in 0..5 {
        adapter.ready().await.unwrap();
    }
    assert_eq!(budget(&adapter), before + 1, "5 calls: one more token");
}

/// Writes what the subscriber prints into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn with_spans_enabled_a_call_makes_each_span_once() {
    let adapter = Adapter::new(config());
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::NEW)
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .finish();
    {
        let _default = tracing::subscriber::set_default(subscriber);
        adapter.ready().await.unwrap();
    }
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    // A new span's line ends with " new" and names it last, after the spans around it.
    let new_spans = |name: &str| {
        let innermost = |l: &str| {
            ["retry.call{", "retry.attempt{"]
                .into_iter()
                .max_by_key(|span| l.rfind(span).map_or(-1, |i| i as i64))
                .map(|span| span.trim_end_matches('{').to_owned())
        };
        log.lines()
            .filter(|l| l.ends_with(" new") && innermost(l).as_deref() == Some(name))
            .count()
    };
    assert_eq!(new_spans("retry.call"), 1, "{log}");
    assert_eq!(new_spans("retry.attempt"), 1, "{log}");
}

/// A `#[retry]` function's future can be spawned on a multi-thread runtime.
#[test]
fn a_retry_functions_future_is_send() {
    fn send<T: Send>(_: &T) {}
    let adapter = Adapter::new(config());
    send(&adapter.fails_once());
    send(&adapter.outer());
}
