//! What operators see: counters through the `metrics` facade (Resilience4j's names) and one
//! tracing event per decision with its named reason.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
    Unit,
};
use retry_fixtures::AdapterError;
use retry_runtime::backoff::Backoff;
use retry_runtime::{Error, Evidence, Method, Registry, Retry, UpstreamConfig};

/// Counters by `name{label=value,...}`.
#[derive(Default, Clone)]
struct Capture(Arc<Mutex<BTreeMap<String, Arc<AtomicU64>>>>);

struct Cell(Arc<AtomicU64>);
impl CounterFn for Cell {
    fn increment(&self, v: u64) {
        self.0.fetch_add(v, Ordering::SeqCst);
    }
    fn absolute(&self, v: u64) {
        self.0.store(v, Ordering::SeqCst);
    }
}
impl GaugeFn for Cell {
    fn increment(&self, _: f64) {}
    fn decrement(&self, _: f64) {}
    fn set(&self, v: f64) {
        self.0.store(v as u64, Ordering::SeqCst);
    }
}

impl Capture {
    fn cell(&self, key: &Key) -> Arc<AtomicU64> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        self.0.lock().unwrap().entry(name).or_default().clone()
    }
    fn get(&self, name: &str) -> u64 {
        self.0
            .lock()
            .unwrap()
            .get(name)
            .map_or(0, |c| c.load(Ordering::SeqCst))
    }
}

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(Cell(self.cell(key))))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(Arc::new(Cell(self.cell(key))))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// tracing caches each callsite's interest process-wide; a callsite first hit on another test's
/// thread while this file's subscriber is being installed can be cached as uninteresting. The
/// tests of this file therefore run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A current-thread runtime on tokio's paused clock.
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

fn registry() -> Registry {
    registry_with(None)
}

fn registry_with(breaker: Option<retry_runtime::breaker::BreakerConfig>) -> Registry {
    let quick = Backoff::new()
        .with_initial(std::time::Duration::from_millis(1))
        .with_max_backoff(std::time::Duration::from_millis(2));
    Registry::builder()
        .upstream(
            "up",
            UpstreamConfig::new()
                .with_backoff(quick)
                .with_breaker(breaker)
                // The throttle's own metrics are tested apart: here it would refuse some of
                // the scripted failures' retries.
                .with_throttle(None),
        )
        .seed(1)
        .build()
        .unwrap()
}

async fn calls(reg: &Registry) {
    // succeeded without retry
    let _: Result<(), Error> = Retry::in_registry(reg, "up")
        .method(Method::GET)
        .run(|_| async { Ok(()) })
        .await;
    // succeeded with retry
    let _: Result<(), Error> = Retry::in_registry(reg, "up")
        .method(Method::GET)
        .run(|a| async move {
            if a.number() == 1 {
                Err(timeout())
            } else {
                Ok(())
            }
        })
        .await;
    // failed with retry (max attempts)
    let _: Result<(), Error> = Retry::in_registry(reg, "up")
        .method(Method::GET)
        .run(|_| async { Err(timeout()) })
        .await;
    // ambiguous: an unkeyed write that may have been sent
    let _: Result<(), Error> = Retry::in_registry(reg, "up")
        .method(Method::POST)
        .run(|_| async { Err(timeout()) })
        .await;
}

fn timeout() -> Error {
    Error::AttemptTimeout {
        upstream: "up".into(),
        attempt: 1,
        timeout: Default::default(),
    }
}

#[test]
fn counters_follow_resilience4j_names() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let capture = Capture::default();
    let rt = paused_runtime();
    let registry = registry_with(Some(retry_runtime::breaker::BreakerConfig::new()));
    metrics::with_local_recorder(&capture, || rt.block_on(calls(&registry)));
    let kind = |k: &str| capture.get(&format!("retry.calls{{upstream=up,kind={k}}}"));
    assert_eq!(kind("successful_without_retry"), 1);
    assert_eq!(kind("successful_with_retry"), 1);
    assert_eq!(kind("failed_with_retry"), 1);
    assert_eq!(kind("ambiguous"), 1);
    assert_eq!(capture.get("retry.ambiguous{upstream=up}"), 1);
    assert_eq!(
        capture.get("retry.retries{upstream=up,reason=transport}"),
        3,
        "1 + 2 retries, each after a timeout"
    );
    assert_eq!(
        capture.get("retry.denials{upstream=up,reason=max_attempts}"),
        1
    );
    assert!(capture.get("retry.budget.available{upstream=up}") > 0);
    assert_eq!(capture.get("retry.breaker.state{upstream=up}"), 0, "closed");
    assert!(
        capture
            .0
            .lock()
            .unwrap()
            .contains_key("retry.breaker.state{upstream=up}")
    );
}

/// A writer collecting what the fmt subscriber prints.
#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);
impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a `fmt` subscriber at `level` prints (span closes included) while `work` runs on a
/// paused current-thread runtime.
fn logged<F: std::future::Future<Output = ()>>(level: tracing::Level, work: F) -> String {
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(level)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .finish();
    let rt = paused_runtime();
    tracing::subscriber::with_default(subscriber, || rt.block_on(work));
    String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
}

#[test]
fn every_decision_is_an_event_with_its_named_reason_and_the_key_never_appears() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let out = logged(tracing::Level::DEBUG, async {
        let reg = registry();
        calls(&reg).await;
        let _: Result<(), Error> = Retry::in_registry(&reg, "up")
            .method(Method::PUT)
            .idempotency("secret-order-42")
            .run(|_| async { Err(timeout()) })
            .await;
    });
    assert!(out.contains("decision=\"retry\""), "{out}");
    assert!(out.contains("reason=max_attempts"), "{out}");
    assert!(out.contains("decision=\"ambiguous\""), "{out}");
    assert!(
        out.contains("retry.call{upstream=up"),
        "a span per call: {out}"
    );
    assert!(
        out.contains("retry.attempt{attempt=2"),
        "a span per attempt: {out}"
    );
    assert!(out.contains("upstream=up"), "{out}");
    assert!(
        out.contains(&format!(
            "evidence=\"{}\"",
            Evidence::SentNoResponse.as_str()
        )),
        "{out}"
    );
    assert!(
        !out.contains("secret-order-42"),
        "the key is never logged in clear"
    );
}

/// A waiting attempt says how the throttle let it go: a burst met by half a second of fast
/// 503s, then by half a second of timeouts (no call after it, so a waiting call probes, and
/// once the probe is accepted the backlog goes at the pace of the answers).
#[test]
fn a_waiting_attempt_says_how_it_was_let_go() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let fast: fn() -> AdapterError = || AdapterError::Status(503);
    let slow: fn() -> AdapterError = || AdapterError::Runtime(timeout());
    for failure in [fast, slow] {
        let out = logged(tracing::Level::DEBUG, async move {
            let reg = Arc::new(
                Registry::builder()
                    .upstream("up", UpstreamConfig::new())
                    .seed(1)
                    .build()
                    .unwrap(),
            );
            let start = tokio::time::Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..50 {
                let reg = reg.clone();
                tasks.spawn(async move {
                    let _: Result<(), AdapterError> = Retry::in_registry(&reg, "up")
                        .method(Method::GET)
                        .run(|_| {
                            let failed =
                                (start.elapsed() < Duration::from_millis(500)).then(failure);
                            async move { failed.map_or(Ok(()), Err) }
                        })
                        .await;
                });
            }
            while tasks.join_next().await.is_some() {}
        });
        assert!(out.contains("decision=\"let_go\" how=\"probe\""), "{out}");
        assert!(out.contains("decision=\"let_go\" how=\"backlog\""), "{out}");
    }
}

/// Spans are at `DEBUG`: a service logging at `INFO` gets every decision as an event, and pays
/// for no span on a call that succeeds.
#[test]
fn at_info_decisions_are_events_and_calls_make_no_span() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let out = logged(tracing::Level::INFO, async {
        calls(&registry()).await;
    });
    assert!(out.contains("decision=\"retry\""), "{out}");
    assert!(out.contains("reason=max_attempts"), "{out}");
    assert!(!out.contains("retry.call{"), "no call span at INFO: {out}");
    assert!(
        !out.contains("retry.attempt{"),
        "no attempt span at INFO: {out}"
    );
}

/// The budget gauge shows the budget when scraped, not when the last retry happened: calls
/// that never retry still earn tokens, and `record_gauges` (called where metrics are scraped)
/// publishes them.
#[test]
fn the_budget_gauge_shows_the_state_when_recorded() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let capture = Capture::default();
    let registry = Registry::builder()
        .upstream(
            "up",
            UpstreamConfig::new()
                .with_budget(retry_runtime::budget::BudgetConfig::new().with_min_per_second(0)),
        )
        .build()
        .unwrap();
    let budget = "retry.budget.available{upstream=up}";
    metrics::with_local_recorder(&capture, || {
        registry.record_gauges();
        assert_eq!(capture.get(budget), 0, "no calls yet, no floor");
        for _ in 0..200 {
            registry.upstream("up").unwrap().budget().deposit();
        }
        registry.record_gauges();
    });
    assert_eq!(capture.get(budget), 40, "200 calls at 0.2");
    assert_eq!(capture.get("retry.breaker.state{upstream=up}"), 0, "closed");
}

/// A hedged read whose first copy is slow: the hedge answers first.
async fn hedged_call() {
    let config = UpstreamConfig::new()
        .with_breaker(None)
        .with_throttle(None)
        .with_hedge(Some(retry_runtime::hedge::HedgeConfig::after(
            std::time::Duration::from_millis(50),
        )));
    let reg = Registry::builder()
        .upstream("up", config)
        .seed(1)
        .build()
        .unwrap();
    let result: Result<u32, Error> = Retry::in_registry(&reg, "up")
        .method(Method::GET)
        .hedged()
        .run(|a| async move {
            let slow = a.number() == 1;
            let wait = if slow { 1000 } else { 10 };
            tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
            Ok(a.number())
        })
        .await;
    assert_eq!(result.unwrap(), 2);
}

#[test]
fn a_hedge_is_an_attempt_with_its_reason_and_the_loser_is_marked_cancelled() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let capture = Capture::default();
    let rt = paused_runtime();
    metrics::with_local_recorder(&capture, || rt.block_on(hedged_call()));
    assert_eq!(capture.get("retry.hedges{upstream=up}"), 1);
    assert_eq!(capture.get("retry.hedges.cancelled{upstream=up}"), 1);
    assert!(
        !capture
            .0
            .lock()
            .unwrap()
            .keys()
            .any(|k| k.starts_with("retry.retries")),
        "a hedge is not a retry (no retry series at all, whatever its reason)"
    );

    let out = logged(tracing::Level::DEBUG, hedged_call());
    let hedge = out
        .lines()
        .find(|l| l.contains("decision=\"hedge\""))
        .unwrap_or_else(|| panic!("a hedge event:\n{out}"));
    assert!(
        hedge.contains("reason=\"hedge\"") && hedge.contains("attempt=2"),
        "{hedge}"
    );
    let closed: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("retry.attempt") && l.contains("close"))
        .collect();
    assert_eq!(closed.len(), 2, "{out}");
    assert!(
        closed
            .iter()
            .any(|l| l.contains("attempt=1") && l.contains("cancelled=true")),
        "{out}"
    );
    assert!(
        closed
            .iter()
            .any(|l| l.contains("attempt=2") && l.contains("reason=\"hedge\"")),
        "{out}"
    );
}

/// Tried with a real exporter, as a dashboard sees them: every metric carries its HELP text,
/// retries say why, attempt durations form a histogram, and refusals by an open breaker are
/// counted apart from retry denials.
#[test]
fn a_prometheus_scrape_shows_help_reasons_durations_and_refusals() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let rt = paused_runtime();
    metrics::with_local_recorder(&recorder, || {
        // Built under the recorder: the registry registers the descriptions.
        let registry = registry_with(Some(
            retry_runtime::breaker::BreakerConfig::new()
                .with_min_attempts(2)
                .with_failure_rate(0.5),
        ));
        rt.block_on(async {
            calls(&registry).await;
            // The breaker is open by now: this call is refused without sending.
            let refused: Result<(), Error> = Retry::in_registry(&registry, "up")
                .method(Method::GET)
                .run(|_| async { Ok(()) })
                .await;
            assert!(
                matches!(refused, Err(Error::CircuitOpen { .. })),
                "{refused:?}"
            );
        });
    });
    let scrape = handle.render();
    for metric in [
        "retry_calls",
        "retry_retries",
        "retry_attempt_duration",
        "retry_denials",
        "retry_rejections",
        "retry_breaker_transitions",
        "retry_breaker_state",
        "retry_budget_available",
    ] {
        assert!(
            scrape.contains(&format!("# HELP {metric}")),
            "no HELP for {metric} in:\n{scrape}"
        );
    }
    let has = |needle: &str| {
        assert!(scrape.contains(needle), "no `{needle}` in:\n{scrape}");
    };
    has(r#"reason="transport""#);
    has(r#"retry_rejections{upstream="up",reason="circuit_open"}"#);
    has(r#"retry_breaker_transitions{upstream="up",to="open"}"#);
    has(r#"retry_attempt_duration{upstream="up",outcome="failure",quantile="0.5"}"#);
}

/// A retry after a reconcile check is logged as what it is, not as "not sent".
#[test]
fn a_retry_after_a_reconcile_check_says_so() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let out = logged(tracing::Level::INFO, async {
        let reg = registry();
        let _: Result<u32, Error> = Retry::in_registry(&reg, "up")
            .method(Method::POST)
            .run_reconciled(
                |a| async move {
                    match a.number() {
                        1 => Err(timeout()),
                        _ => Ok(1),
                    }
                },
                || async { retry_runtime::Reconciled::NotHappened },
            )
            .await;
    });
    assert!(
        out.contains("reason=the reconcile check found the write did not happen"),
        "{out}"
    );
    assert!(!out.contains("reason=not sent"), "{out}");
}

/// Prints the paused clock's time since the first line, in whole milliseconds.
struct VirtualTime(std::sync::OnceLock<tokio::time::Instant>);

impl tracing_subscriber::fmt::time::FormatTime for VirtualTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        let start = *self.0.get_or_init(tokio::time::Instant::now);
        write!(w, "t={}ms", start.elapsed().as_millis())
    }
}

/// An attempt's span ends with the attempt: it does not stay open through the backoff that
/// follows (a trace would show the wait as part of the attempt's duration).
#[test]
fn the_attempt_span_closes_before_the_backoff() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_timer(VirtualTime(std::sync::OnceLock::new()))
        .with_max_level(tracing::Level::DEBUG)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .finish();
    let rt = paused_runtime();
    let second = Duration::from_secs(1);
    let registry = Registry::builder()
        .upstream(
            "up",
            UpstreamConfig::new().with_backoff(
                Backoff::new()
                    .with_initial(second)
                    .with_max_backoff(second)
                    .with_jitter(retry_runtime::backoff::Jitter::Decorrelated),
            ),
        )
        .build()
        .unwrap();
    tracing::subscriber::with_default(subscriber, || {
        rt.block_on(async {
            let _: Result<(), Error> = Retry::in_registry(&registry, "up")
                .method(Method::GET)
                .run(|a| async move {
                    match a.number() {
                        1 => Err(timeout()),
                        _ => Ok(()),
                    }
                })
                .await;
        })
    });
    let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let closes: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("retry.attempt{") && l.contains(": close "))
        .collect();
    assert_eq!(closes.len(), 2, "{out}");
    assert!(closes[0].starts_with("t=0ms"), "{out}");
    assert!(closes[1].starts_with("t=1000ms"), "{out}");
}

/// What a recorder that keeps the facade's names receives (an OpenTelemetry bridge is one): the
/// dotted names, the attempt duration in seconds, each label.
#[test]
fn a_recorder_that_keeps_names_receives_dotted_names_and_seconds() {
    #[derive(Default)]
    struct Names {
        described: Mutex<Vec<(String, Option<Unit>)>>,
        histograms: Mutex<Vec<String>>,
    }
    impl Recorder for Names {
        fn describe_counter(&self, name: KeyName, unit: Option<Unit>, _: SharedString) {
            self.described
                .lock()
                .unwrap()
                .push((name.as_str().to_owned(), unit));
        }
        fn describe_gauge(&self, name: KeyName, unit: Option<Unit>, _: SharedString) {
            self.described
                .lock()
                .unwrap()
                .push((name.as_str().to_owned(), unit));
        }
        fn describe_histogram(&self, name: KeyName, unit: Option<Unit>, _: SharedString) {
            self.described
                .lock()
                .unwrap()
                .push((name.as_str().to_owned(), unit));
        }
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            self.histograms
                .lock()
                .unwrap()
                .push(format!("{}{{{}}}", key.name(), labels.join(",")));
            Histogram::noop()
        }
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let names = Names::default();
    let rt = paused_runtime();
    metrics::with_local_recorder(&names, || {
        let registry = registry();
        rt.block_on(calls(&registry));
    });
    let described = names.described.lock().unwrap();
    assert!(
        described.contains(&("retry.attempt.duration".to_owned(), Some(Unit::Seconds))),
        "{described:?}"
    );
    assert!(
        described.contains(&("retry.calls".to_owned(), Some(Unit::Count))),
        "{described:?}"
    );
    let histograms = names.histograms.lock().unwrap();
    assert!(
        histograms.contains(&"retry.attempt.duration{upstream=up,outcome=success}".to_owned()),
        "{histograms:?}"
    );
}

/// With the helper's buckets the Prometheus exporter renders attempt durations as a histogram
/// (aggregatable across instances), not as a per-process summary.
#[cfg(feature = "prometheus")]
#[test]
fn the_bucket_helper_makes_attempt_durations_a_prometheus_histogram() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let recorder =
        retry_runtime::prometheus_buckets(metrics_exporter_prometheus::PrometheusBuilder::new())
            .unwrap()
            .build_recorder();
    let handle = recorder.handle();
    let rt = paused_runtime();
    metrics::with_local_recorder(&recorder, || {
        let registry = registry();
        rt.block_on(calls(&registry));
    });
    let scrape = handle.render();
    assert!(
        scrape.contains("# TYPE retry_attempt_duration histogram"),
        "{scrape}"
    );
    for le in retry_runtime::ATTEMPT_DURATION_BUCKETS {
        let bucket = format!(
            r#"retry_attempt_duration_bucket{{upstream="up",outcome="success",le="{le}"}}"#
        );
        assert!(scrape.contains(&bucket), "no `{bucket}` in:\n{scrape}");
    }
    assert!(
        !scrape.contains("retry_attempt_duration{"),
        "no summary:\n{scrape}"
    );
}

/// A response without a status is a mistake in the adapter only when the engine needs the
/// status: an error that declares itself permanent is denied before any status rule, so it
/// logs nothing at `WARN`; one that states neither is named.
#[test]
fn a_response_without_a_status_warns_unless_the_error_declares_it_permanent() {
    #[derive(Debug, retry_runtime::Classify)]
    enum StatuslessError {
        #[classify(from)]
        Retry(Error),
        #[classify(evidence = "response_received", permanent = "contract")]
        Rejected,
        #[classify(evidence = "response_received")]
        Unstated,
    }
    impl std::fmt::Display for StatuslessError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{self:?}")
        }
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let failing = |error: fn() -> StatuslessError| async move {
        let _: Result<(), StatuslessError> = Retry::in_registry(&registry(), "up")
            .method(Method::GET)
            .run(|_| async move { Err(error()) })
            .await;
    };
    let out = logged(tracing::Level::WARN, failing(|| StatuslessError::Rejected));
    assert_eq!(out, "", "a permanent failure needs no status");
    let out = logged(tracing::Level::WARN, failing(|| StatuslessError::Unstated));
    assert!(
        out.contains("WARN") && out.contains("neither its status nor a permanent category"),
        "{out}"
    );
    assert!(
        out.contains("StatuslessError"),
        "the error type is named: {out}"
    );
}

/// A hedge spends a budget token as a retry does, and the budget gauge follows it: the gauge
/// is not left at the balance from before the hedges.
#[test]
fn hedges_refresh_the_budget_gauge() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let capture = Capture::default();
    let hedge =
        retry_runtime::hedge::HedgeConfig::after(Duration::from_millis(50)).with_max_copies(3);
    // No ratio, 1 retry per second over 4 s: 4 tokens, and calls earn none.
    let budget = retry_runtime::budget::BudgetConfig::new()
        .with_ratio(0.0)
        .with_min_per_second(1)
        .with_window(Duration::from_secs(4));
    let reg = Registry::builder()
        .upstream(
            "up",
            UpstreamConfig::new()
                .with_breaker(None)
                .with_throttle(None)
                .with_hedge(Some(hedge))
                .with_budget(budget),
        )
        .seed(1)
        .build()
        .unwrap();
    let rt = paused_runtime();
    let gauge = "retry.budget.available{upstream=up}";
    metrics::with_local_recorder(&capture, || {
        reg.record_gauges();
        assert_eq!(capture.get(gauge), 4);
        // The first two copies are slow; the third (the second hedge) answers.
        let result: Result<u32, Error> = rt.block_on(
            Retry::in_registry(&reg, "up")
                .method(Method::GET)
                .hedged()
                .run(|a| async move {
                    let wait = if a.number() < 3 { 900 } else { 10 };
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                    Ok(a.number())
                }),
        );
        assert_eq!(result.unwrap(), 3);
    });
    assert_eq!(capture.get("retry.hedges{upstream=up}"), 2);
    let available = reg.upstream("up").unwrap().budget().available();
    assert_eq!(available, 2, "two hedges, two tokens");
    assert_eq!(
        capture.get(gauge),
        available,
        "the gauge shows what is left"
    );
}

/// An upstream a reload removed is no longer there: `record_gauges` reads its gauges as zero
/// instead of leaving its last values in every scrape.
#[test]
fn record_gauges_zeroes_an_upstream_a_reload_removed() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let capture = Capture::default();
    // Opens on the first failure.
    let breaker = retry_runtime::breaker::BreakerConfig::new().with_min_attempts(1);
    let gone = UpstreamConfig::new()
        .with_max_attempts(1)
        .with_breaker(Some(breaker));
    let reg = Registry::builder()
        .upstream("stays", UpstreamConfig::new())
        .upstream("gone", gone)
        .build()
        .unwrap();
    let rt = paused_runtime();
    let (budget, state) = (
        "retry.budget.available{upstream=gone}",
        "retry.breaker.state{upstream=gone}",
    );
    metrics::with_local_recorder(&capture, || {
        let failed: Result<(), Error> = rt.block_on(
            Retry::in_registry(&reg, "gone")
                .method(Method::GET)
                .run(|_| async { Err(timeout()) }),
        );
        assert!(failed.is_err());
        reg.record_gauges();
        assert_eq!(capture.get(budget), 100, "10/s over 10 s");
        assert_eq!(capture.get(state), 2, "open");

        reg.replace([("stays".to_owned(), UpstreamConfig::new())])
            .unwrap();
        reg.record_gauges();
    });
    assert_eq!(capture.get(budget), 0, "a removed upstream has no retries");
    assert_eq!(capture.get(state), 0, "nor a breaker");
    assert_eq!(capture.get("retry.budget.available{upstream=stays}"), 100);
}

/// The default admission, as a dashboard sees it: against an upstream that fails every call,
/// the throttle's refusals are counted apart (`reason = "throttled"`), its refusal probability
/// is a gauge, and its change of state is a `WARN` event.
#[test]
fn a_prometheus_scrape_shows_the_throttle_refusing_a_failing_upstream() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let rt = paused_runtime();
    let out = Arc::new(Mutex::new(Vec::new()));
    let writer = {
        let out = out.clone();
        move || Buf(out.clone())
    };
    let subscriber = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    metrics::with_local_recorder(&recorder, || {
        // Refused calls fail at once rather than wait for the upstream (`wait = false`), so
        // the scrape is taken while the window still holds the timeouts.
        let throttle = retry_runtime::throttle::ThrottleConfig::new().with_wait(false);
        let registry = Registry::builder()
            .upstream(
                "up",
                UpstreamConfig::new()
                    .with_max_attempts(1)
                    .with_throttle(Some(throttle)),
            )
            .seed(1)
            .build()
            .unwrap();
        assert!(registry.upstream("up").unwrap().throttle().is_some());
        let registry = Arc::new(registry);
        rt.block_on(async {
            // 50 concurrent calls that outlast the 1 s attempt timeout: none is accepted...
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..50 {
                let registry = registry.clone();
                tasks.spawn(async move {
                    let _: Result<(), Error> = Retry::in_registry(&registry, "up")
                        .method(Method::GET)
                        .run(|_| async {
                            tokio::time::sleep(Duration::from_secs(2)).await;
                            Ok(())
                        })
                        .await;
                });
            }
            while tasks.join_next().await.is_some() {}
            // ...so most of the next 20 are refused before anything is sent.
            for _ in 0..20 {
                let _: Result<(), Error> = Retry::in_registry(&registry, "up")
                    .method(Method::GET)
                    .run(|_| async { Ok(()) })
                    .await;
            }
        });
    });
    let scrape = handle.render();
    let has = |needle: &str| {
        assert!(scrape.contains(needle), "no `{needle}` in:\n{scrape}");
    };
    has("# HELP retry_throttle_refusal_probability");
    has(r#"retry_rejections{upstream="up",reason="throttled"}"#);
    let probability: f64 = scrape
        .lines()
        .find(|l| l.starts_with(r#"retry_throttle_refusal_probability{upstream="up"}"#))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .expect("the gauge's value");
    assert!(probability > 0.5, "{probability}");
    let events = String::from_utf8(out.lock().unwrap().clone()).unwrap();
    assert!(
        events.contains("retry_runtime::throttle") && events.contains("state=\"throttling\""),
        "{events}"
    );
}
