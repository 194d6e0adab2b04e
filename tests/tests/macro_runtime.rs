//! `#[retry]` at runtime: the key, the reconcile check, and the registry entry drive the loop.
//!
//! Every test runs on tokio's paused clock, so backoffs and timeouts pass in virtual time and
//! every assertion is about behaviour (attempts made, keys sent, virtual deadlines), never about
//! how long the test took. Upstream names are unique per test because tests share the process
//! and its global registry, installed once for the whole file by [`setup`].
#![deny(unused_qualifications)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

use retry_runtime::backoff::{Backoff, Jitter};
use retry_runtime::{Attempt, Error, Reconciled, Registry, UpstreamConfig, retry};
use retry_tests::AdapterError;
use tokio::time::Instant;

fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let fast = Backoff::new()
            .with_initial(Duration::from_millis(10))
            .with_max_backoff(Duration::from_millis(40));
        // The throttle is tested on its own: here it would refuse some scripted retries.
        let base = UpstreamConfig::new().with_backoff(fast).with_throttle(None);
        let upstreams = [
            ("lint", base.clone()),
            ("macro-instrumented", base.clone().with_max_attempts(3)),
            ("macro-key", base.clone().with_max_attempts(3)),
            ("macro-once", base.clone().with_max_attempts(3)),
            ("macro-reconcile", base.clone().with_max_attempts(3)),
            ("macro-attempts-2", base.clone().with_max_attempts(2)),
            ("macro-partition", base.clone().with_max_attempts(2)),
            ("macro-attempts-4", base.clone().with_max_attempts(4)),
            (
                "macro-backoff",
                base.clone().with_max_attempts(3).with_backoff(
                    Backoff::new()
                        .with_initial(Duration::from_millis(300))
                        .with_multiplier(2.0)
                        .with_max_backoff(Duration::from_millis(700))
                        .with_jitter(Jitter::Decorrelated),
                ),
            ),
            (
                "macro-deadline",
                base.clone()
                    .with_max_attempts(5)
                    .with_attempt_timeout(Duration::from_millis(400))
                    .with_deadline(Duration::from_secs(1)),
            ),
        ];
        Registry::global()
            .replace(upstreams.map(|(name, c)| (name.to_owned(), c)))
            .expect("valid test upstreams");
    });
}

/// A command whose key method counts its calls.
#[derive(Debug)]
struct Cmd {
    id: u32,
    key_calls: AtomicU32,
}

impl Cmd {
    fn new(id: u32) -> Self {
        Cmd {
            id,
            key_calls: AtomicU32::new(0),
        }
    }

    fn key(&self) -> String {
        self.key_calls.fetch_add(1, Ordering::SeqCst);
        format!("register-{}", self.id)
    }
}

/// A scripted adapter: attempt `n` fails with `script[n - 1]`, or succeeds past the script.
#[derive(Default)]
struct Adapter {
    script: Vec<fn() -> AdapterError>,
    seen_keys: Mutex<Vec<Option<String>>>,
    attempts: AtomicU32,
    reconcile_answer: Mutex<Option<Reconciled<u32>>>,
    reconcile_calls: AtomicU32,
}

impl Adapter {
    fn scripted(script: Vec<fn() -> AdapterError>) -> Self {
        Adapter {
            script,
            ..Adapter::default()
        }
    }

    /// Records the attempt and answers as scripted.
    fn attempt(&self) -> Result<u32, AdapterError> {
        let attempt = Attempt::current().expect("the body runs inside an attempt");
        self.seen_keys
            .lock()
            .unwrap()
            .push(attempt.idempotency_key().map(|k| k.as_str().to_owned()));
        let n = self.attempts.fetch_add(1, Ordering::SeqCst) as usize;
        match self.script.get(n) {
            Some(fail) => Err(fail()),
            None => Ok(attempt.number()),
        }
    }

    #[retry(upstream = "macro-key", method = POST, idempotency = cmd.key())]
    async fn register(&self, cmd: &Cmd) -> Result<u32, AdapterError> {
        self.attempt()
    }

    #[retry(upstream = "macro-partition", method = GET, partition = tenant)]
    async fn stock(&self, tenant: &str) -> Result<u32, AdapterError> {
        let _ = tenant;
        self.attempt()
    }

    #[retry(upstream = "macro-once", method = PUT, idempotency = cmd.key())]
    async fn put(&self, cmd: &Cmd) -> Result<u32, AdapterError> {
        let n = self.attempt()?;
        Ok(n * 100 + cmd.id)
    }

    #[retry(upstream = "macro-reconcile", method = POST, reconcile = Self::find)]
    async fn pay(&self, cmd: &Cmd) -> Result<u32, AdapterError> {
        let _ = cmd;
        self.attempt()
    }

    async fn find(&self, cmd: &Cmd) -> Reconciled<u32> {
        assert_eq!(cmd.id, 7, "the check gets the call's arguments");
        self.reconcile_calls.fetch_add(1, Ordering::SeqCst);
        self.reconcile_answer
            .lock()
            .unwrap()
            .clone()
            .expect("answer set")
    }
}

#[tokio::test(start_paused = true)]
async fn a_keyed_write_sends_the_same_key_on_every_attempt() {
    setup();
    let adapter = Adapter::scripted(vec![
        AdapterError::lost_response,
        AdapterError::lost_response,
    ]);
    let cmd = Cmd::new(42);
    let result = adapter.register(&cmd).await;
    assert_eq!(result.unwrap(), 3, "succeeds on the third attempt");
    let keys = adapter.seen_keys.lock().unwrap().clone();
    assert_eq!(keys, vec![Some("register-42".to_owned()); 3]);
}

#[tokio::test(start_paused = true)]
async fn the_key_expression_runs_once_per_call() {
    setup();
    let adapter = Adapter::scripted(vec![AdapterError::lost_response, AdapterError::not_sent]);
    let cmd = Cmd::new(5);
    assert_eq!(adapter.put(&cmd).await.unwrap(), 305);
    assert_eq!(adapter.attempts.load(Ordering::SeqCst), 3);
    assert_eq!(cmd.key_calls.load(Ordering::SeqCst), 1);
}

async fn pay_with(answer: Reconciled<u32>) -> (Adapter, Result<u32, AdapterError>) {
    setup();
    let adapter = Adapter::scripted(vec![AdapterError::lost_response]);
    *adapter.reconcile_answer.lock().unwrap() = Some(answer);
    let result = adapter.pay(&Cmd::new(7)).await;
    (adapter, result)
}

#[tokio::test(start_paused = true)]
async fn reconcile_happened_returns_its_value_without_retrying() {
    let (adapter, result) = pay_with(Reconciled::Happened(99)).await;
    assert_eq!(result.unwrap(), 99);
    assert_eq!(adapter.attempts.load(Ordering::SeqCst), 1);
    assert_eq!(adapter.reconcile_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn reconcile_not_happened_permits_the_retry() {
    let (adapter, result) = pay_with(Reconciled::NotHappened).await;
    assert_eq!(
        result.unwrap(),
        2,
        "the retry is the second attempt, which succeeds"
    );
    assert_eq!(adapter.attempts.load(Ordering::SeqCst), 2);
    assert_eq!(adapter.reconcile_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn reconcile_unknown_returns_the_ambiguous_outcome() {
    let (adapter, result) = pay_with(Reconciled::Unknown).await;
    let error = result.unwrap_err();
    let ambiguous = error.as_ambiguous().expect("an ambiguous outcome");
    assert_eq!(&*ambiguous.upstream, "macro-reconcile");
    assert_eq!(ambiguous.attempts, 1);
    assert_eq!(adapter.attempts.load(Ordering::SeqCst), 1);
}

static FORGETFUL: AtomicU32 = AtomicU32::new(0);

#[retry(upstream = "macro-attempts-4", method = GET)]
async fn forgetful_read() -> Result<(), AdapterError> {
    FORGETFUL.fetch_add(1, Ordering::SeqCst);
    Err(AdapterError::forgot_status())
}

#[tokio::test(start_paused = true)]
async fn an_error_that_forgets_its_status_is_never_read_as_some_status() {
    setup();
    // A read: not retried blind (the old rule read the missing status as "status 0").
    assert!(forgetful_read().await.is_err());
    assert_eq!(FORGETFUL.load(Ordering::SeqCst), 1);
    // An unkeyed write: nothing proves it did not happen, so the caller gets an ambiguous
    // outcome and the reconcile check is asked, never a plain failure.
    let adapter = Adapter::scripted(vec![AdapterError::forgot_status]);
    *adapter.reconcile_answer.lock().unwrap() = Some(Reconciled::Unknown);
    let error = adapter.pay(&Cmd::new(7)).await.unwrap_err();
    let ambiguous = error.as_ambiguous().expect("an ambiguous outcome");
    assert_eq!(
        ambiguous.reason,
        retry_runtime::AmbiguityReason::StatusUnknown
    );
    assert_eq!(adapter.reconcile_calls.load(Ordering::SeqCst), 1);
    // A keyed write: ambiguous too, carrying the key to replay with.
    let adapter = Adapter::scripted(vec![AdapterError::forgot_status]);
    let error = adapter.register(&Cmd::new(8)).await.unwrap_err();
    let ambiguous = error.as_ambiguous().expect("an ambiguous outcome");
    assert_eq!(
        ambiguous.idempotency_key.as_ref().map(|k| k.as_str()),
        Some("register-8")
    );
}

static CALLS_2: AtomicU32 = AtomicU32::new(0);
static CALLS_4: AtomicU32 = AtomicU32::new(0);

#[retry(upstream = "macro-attempts-2", method = GET)]
async fn always_503_two() -> Result<(), AdapterError> {
    CALLS_2.fetch_add(1, Ordering::SeqCst);
    Err(AdapterError::status(503))
}

#[retry(upstream = "macro-attempts-4", method = GET)]
async fn always_503_four() -> Result<(), AdapterError> {
    CALLS_4.fetch_add(1, Ordering::SeqCst);
    Err(AdapterError::status(503))
}

#[tokio::test(start_paused = true)]
async fn max_attempts_come_from_the_registry_entry() {
    setup();
    let two = always_503_two().await.unwrap_err();
    let four = always_503_four().await.unwrap_err();
    assert!(matches!(two, AdapterError::Status(503)));
    assert!(matches!(four, AdapterError::Status(503)));
    assert_eq!(CALLS_2.load(Ordering::SeqCst), 2);
    assert_eq!(CALLS_4.load(Ordering::SeqCst), 4);
}

#[retry(upstream = "macro-backoff", method = GET)]
async fn flaky_read(starts: &Mutex<Vec<Instant>>) -> Result<u32, AdapterError> {
    let mut starts = starts.lock().unwrap();
    starts.push(Instant::now());
    if starts.len() < 3 {
        Err(AdapterError::status(503))
    } else {
        Ok(starts.len() as u32)
    }
}

#[tokio::test(start_paused = true)]
async fn backoff_comes_from_the_registry_entry() {
    setup();
    let starts = Mutex::new(Vec::new());
    assert_eq!(flaky_read(&starts).await.unwrap(), 3);
    let starts = starts.into_inner().unwrap();
    // Decorrelated jitter: each delay lies between the entry's initial backoff and its cap.
    for gap in starts.windows(2).map(|w| w[1] - w[0]) {
        assert!(
            gap >= Duration::from_millis(300),
            "{gap:?} below the entry's initial backoff"
        );
        assert!(
            gap <= Duration::from_millis(700),
            "{gap:?} above the entry's max backoff"
        );
    }
}

#[retry(upstream = "macro-deadline", method = GET)]
async fn hangs(seen: &Mutex<Vec<(Instant, Duration)>>) -> Result<(), AdapterError> {
    let attempt = Attempt::current().expect("inside an attempt");
    seen.lock()
        .unwrap()
        .push((attempt.deadline(), attempt.timeout()));
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn deadline_and_attempt_timeout_come_from_the_registry_entry() {
    setup();
    let seen = Mutex::new(Vec::new());
    let start = Instant::now();
    let error = hangs(&seen).await.unwrap_err();
    let seen = seen.into_inner().unwrap();
    assert!(!seen.is_empty());
    for (deadline, _) in &seen {
        assert_eq!(
            *deadline,
            start + Duration::from_secs(1),
            "the entry's deadline"
        );
    }
    assert_eq!(
        seen[0].1,
        Duration::from_millis(400),
        "the entry's attempt timeout"
    );
    assert!(
        seen.len() < 5,
        "the deadline, not max_attempts, ended the call"
    );
    assert!(
        matches!(
            error,
            AdapterError::Runtime(Error::AttemptTimeout { .. } | Error::DeadlineExceeded { .. })
        ),
        "{error}"
    );
    assert!(Instant::now() <= start + Duration::from_secs(1));
}

/// State behind `&mut self`, mutated by every attempt.
#[derive(Debug, Default)]
struct Counter {
    attempts: u32,
    notes: Vec<String>,
}

impl Counter {
    // One span per attempt: `instrument` wraps the body, `retry` wraps that.
    #[tracing::instrument(skip(self))]
    #[retry(upstream = "macro-instrumented", method = GET)]
    async fn per_attempt_span(&mut self, note: String) -> Result<u32, AdapterError> {
        self.attempts += 1;
        self.notes.push(note);
        if self.attempts < 3 {
            return Err(AdapterError::status(503));
        }
        Ok(self.attempts)
    }

    // One span per call: `retry` expands first, `instrument` wraps the whole loop.
    #[retry(upstream = "macro-instrumented", method = GET)]
    #[tracing::instrument(skip(self), err)]
    async fn per_call_span(&mut self, note: &str) -> Result<u32, AdapterError> {
        self.attempts += 1;
        self.notes.push(note.to_owned());
        if self.attempts % 3 != 0 {
            Err(AdapterError::status(503))?;
        }
        Ok(self.attempts)
    }
}

#[tokio::test(start_paused = true)]
async fn mut_self_and_by_value_arguments_are_fresh_on_every_attempt_with_instrument() {
    setup();
    let mut counter = Counter::default();
    assert_eq!(counter.per_attempt_span("a".to_owned()).await.unwrap(), 3);
    assert_eq!(counter.notes, ["a", "a", "a"]);
    assert_eq!(counter.per_call_span("b").await.unwrap(), 6);
    assert_eq!(counter.notes, ["a", "a", "a", "b", "b", "b"]);
}

/// A builder call site named with `upstream!` is checked at start-up like a `#[retry]` function.
#[allow(dead_code)]
fn builder_site() -> retry_runtime::Retry<'static> {
    retry_runtime::Retry::upstream(retry_runtime::upstream!("macro-onse"))
}

#[test]
fn verify_names_every_missing_upstream_and_its_functions() {
    let registry = Registry::builder()
        .upstream("macro-key", UpstreamConfig::new())
        .build()
        .unwrap();
    let missing = registry.verify().unwrap_err();
    let names: Vec<_> = missing.missing.iter().map(|m| m.upstream).collect();
    assert_eq!(
        names,
        [
            "lint",
            "macro-attempts-2",
            "macro-attempts-4",
            "macro-backoff",
            "macro-deadline",
            "macro-instrumented",
            "macro-once",
            "macro-onse",
            "macro-partition",
            "macro-reconcile",
            "only-injected",
        ]
    );
    let builder = &missing.missing[7];
    assert!(builder.functions[0].is_builder_site());
    assert_eq!(builder.functions[0].function(), "macro_runtime");
    let reconcile = &missing.missing[9];
    assert_eq!(reconcile.functions.len(), 1);
    assert_eq!(reconcile.functions[0].function(), "macro_runtime::pay");
    assert!(reconcile.functions[0].file().ends_with("macro_runtime.rs"));
    // A function given its registry is checked too, and says which registry it names.
    let injected = &missing.missing[10].functions[0];
    assert_eq!(injected.registry(), Some("&self.registry"));
    let text = missing.to_string();
    assert!(text.contains("11 upstream(s)"), "{text}");
    assert!(
        text.contains("`macro-onse`, used by a builder call in macro_runtime"),
        "{text}"
    );
    assert!(
        text.contains("`macro-once`, used by macro_runtime::put"),
        "{text}"
    );
    assert!(
        text.contains("macro_runtime::read (") && text.contains(", registry = &self.registry)"),
        "{text}"
    );
    assert!(text.contains("Registry::verify_where"), "{text}");

    setup();
    // Every global `#[retry]` function's upstream is installed; the builder site's typo and
    // the injected adapter's upstream (configured in its own registry only) are caught, the
    // typo with the name it was meant to be.
    let global = Registry::global().verify().unwrap_err();
    let names: Vec<_> = global.missing.iter().map(|m| m.upstream).collect();
    assert_eq!(names, ["macro-onse", "only-injected"], "{global}");
    assert!(
        global
            .to_string()
            .contains("`macro-onse` (did you mean `macro-once`?)"),
        "{global}"
    );
    // In a process with several registries, each is verified on the functions that use it.
    let injected = Registry::builder()
        .upstream("only-injected", UpstreamConfig::new())
        .build()
        .unwrap();
    injected
        .verify_where(|r| r.registry() == Some("&self.registry"))
        .expect("the injected registry has it");
    let typo = Registry::global()
        .verify_where(|r| r.registry().is_none())
        .unwrap_err();
    assert_eq!(typo.missing.len(), 1, "{typo}");
}

/// Every shape of annotated function, compiled under clippy (`cargo clippy --all-targets`) and
/// the strictest lints, so generated code stays lint-clean.
#[deny(clippy::all, clippy::pedantic, unused_qualifications, unused)]
#[allow(dead_code, clippy::unused_async)]
mod lint_clean {
    use retry_runtime::{Reconciled, retry};
    use retry_tests::AdapterError;

    #[derive(Clone, Debug)]
    pub struct Cmd {
        pub id: u64,
    }

    #[derive(Clone, Debug)]
    pub struct Gateway {
        calls: u64,
    }

    impl Gateway {
        #[retry(upstream = "lint", method = GET)]
        pub async fn shared(&self, cmd: &Cmd) -> Result<u64, AdapterError> {
            Ok(cmd.id + self.calls)
        }

        #[retry(upstream = "lint", method = POST, idempotency = cmd.id.to_string())]
        pub async fn exclusive(&mut self, cmd: Cmd, mut note: String) -> Result<u64, AdapterError> {
            self.calls += 1;
            note.push('!');
            Ok(cmd.id + note.len() as u64)
        }

        #[retry(upstream = "lint", method = POST, reconcile = Self::check)]
        pub async fn owned(self, (a, b): (u64, u64)) -> Result<u64, AdapterError> {
            Ok(self.calls + a + b)
        }

        async fn check(self, pair: (u64, u64)) -> Reconciled<u64> {
            Reconciled::Happened(self.calls + pair.0)
        }

        #[tracing::instrument]
        #[retry(upstream = "lint", method = GET)]
        pub async fn traced_per_attempt(&mut self, cmd: Cmd) -> Result<u64, AdapterError> {
            self.calls += 1;
            Ok(cmd.id)
        }

        #[retry(upstream = "lint", method = GET)]
        #[tracing::instrument(skip(self), err)]
        pub async fn traced_per_call(&mut self, cmd: &Cmd) -> Result<u64, AdapterError> {
            self.calls += 1;
            Ok(cmd.id)
        }
    }
}

/// An adapter whose registry is injected, not the global one.
struct Injected {
    registry: std::sync::Arc<Registry>,
    calls: AtomicU32,
}

impl Injected {
    #[retry(upstream = "only-injected", method = GET, registry = &self.registry)]
    async fn read(&self) -> Result<u32, AdapterError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n < 2 {
            Err(AdapterError::from(Error::AttemptTimeout {
                upstream: "only-injected".into(),
                attempt: n,
                timeout: Duration::ZERO,
            }))
        } else {
            Ok(n)
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_injected_registry_configures_the_call() {
    setup();
    let registry = Registry::builder()
        .upstream(
            "only-injected",
            UpstreamConfig::new()
                .with_max_attempts(2)
                .with_breaker(None)
                .with_throttle(None),
        )
        .build()
        .unwrap();
    let adapter = Injected {
        registry: std::sync::Arc::new(registry),
        calls: AtomicU32::new(0),
    };
    assert_eq!(
        adapter.read().await.unwrap(),
        2,
        "retried per the injected entry"
    );
    assert!(
        Registry::global().upstream("only-injected").is_err(),
        "the global registry never knew this upstream"
    );
}

/// `partition = expr` names the call's partition: a 429 holds that partition's retries until
/// its `Retry-After`, and no other partition's calls.
#[tokio::test(start_paused = true)]
async fn a_partitions_429_holds_its_retries_and_no_other() {
    setup();
    let adapter = Adapter::scripted(vec![
        || AdapterError::over_quota(Duration::from_secs(1)),
        || AdapterError::status(503),
    ]);
    let start = Instant::now();
    let timed = |tenant: &'static str, after: Duration| {
        let adapter = &adapter;
        async move {
            tokio::time::sleep(after).await;
            let began = start.elapsed();
            let result = adapter.stock(tenant).await;
            (result.is_ok(), began, start.elapsed())
        }
    };
    // The first call meets the quota; the second a 503 that its backoff (at most 40 ms) alone
    // would retry.
    let (over, failed, other) = tokio::join!(
        timed("tenant-a", Duration::ZERO),
        timed("tenant-a", Duration::ZERO),
        timed("tenant-b", Duration::from_millis(1)),
    );
    assert!(over.0 && failed.0 && other.0);
    assert!(
        failed.2 >= Duration::from_secs(1),
        "the partition's retry waits for the Retry-After another call got: {failed:?}"
    );
    assert_eq!(other.2, other.1, "another partition goes at once");
}
