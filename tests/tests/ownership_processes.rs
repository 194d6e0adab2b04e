//! One retry owner per operation, across two real processes on loopback .
//!
//! ```text
//! API (this test process)  --HTTP-->  middle (tests/src/bin/middle.rs)  --HTTP-->  catalog (this test process)
//! Retry + send_attempt()              ScopeLayer + Retry + send_attempt()          hyper 1, ground truth
//! ```
//!
//! Only the propagation headers (`retry-deadline-ms`, `retry-attempt`, `retry-retries-left`) and
//! the pushback (`retry-pushback`) cross the process boundary. The catalog runs here so the test
//! knows exactly what it received, and when (the API's clock is the same process's clock).

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_runtime::http::{HttpError, RequestBuilderExt, ResponseExt};
use retry_runtime::propagation::{DEADLINE_MS, RETRIES_LEFT};
use retry_runtime::{Error, Method, Operation, Pushback, Registry, Retry};
use retry_tests::loopback::{self, FnService, Req, Server};
use retry_tests::support::fast_config;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

// ---------------------------------------------------------------------------------------------
// The catalog: always 503 (or never answers), recording every request.

#[derive(Debug, Clone)]
struct Seen {
    op: String,
    deadline_ms: Option<u64>,
    retries_left: Option<u32>,
    at: Instant,
}

#[derive(Debug, Default)]
struct Catalog {
    /// Woken whenever a handler is dropped.
    changed: tokio::sync::Notify,
    /// Never answer (hold the request until the caller drops it) instead of answering 503.
    hang: bool,
    seen: Mutex<Vec<Seen>>,
    /// Handlers running now (hang mode).
    live: AtomicUsize,
    /// Handlers dropped before they finished (the caller went away).
    cancelled: AtomicUsize,
}

struct LiveGuard(Arc<Catalog>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
        self.0.cancelled.fetch_add(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

fn header<T: std::str::FromStr>(request: &Req, name: &str) -> Option<T> {
    request.headers().get(name)?.to_str().ok()?.parse().ok()
}

impl Catalog {
    async fn start(hang: bool) -> (Arc<Catalog>, Server) {
        let catalog = Arc::new(Catalog {
            hang,
            ..Catalog::default()
        });
        let c = catalog.clone();
        let server = loopback::serve(FnService(move |request: Req| {
            let catalog = c.clone();
            let seen = Seen {
                op: request
                    .uri()
                    .path()
                    .strip_prefix("/item/")
                    .unwrap_or("")
                    .to_owned(),
                deadline_ms: header(&request, DEADLINE_MS),
                retries_left: header(&request, RETRIES_LEFT),
                at: Instant::now(),
            };
            catalog.seen.lock().unwrap().push(seen);
            async move {
                if catalog.hang {
                    catalog.live.fetch_add(1, Ordering::SeqCst);
                    let guard = LiveGuard(catalog.clone());
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    std::mem::forget(guard); // finished: not cancelled
                }
                loopback::respond(503, "catalog unavailable")
            }
        }))
        .await
        .expect("catalog server");
        (catalog, server)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until no handler is running (an event; the bound only turns a hang into a
    /// failure).
    async fn idle(&self) {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                let mut changed = std::pin::pin!(changed);
                changed.as_mut().enable();
                if self.live.load(Ordering::SeqCst) == 0 {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .expect("every catalog handler ends");
    }

    fn calls_per_op(&self) -> HashMap<String, usize> {
        let mut map = HashMap::new();
        for s in self.seen() {
            *map.entry(s.op).or_default() += 1;
        }
        map
    }
}

// ---------------------------------------------------------------------------------------------
// The middle: a child process.

struct Middle {
    // Killed on drop; its stdin (kept open here) closing also ends it.
    _child: Child,
    url: String,
    /// The middle's stdout after its port: a `done <op>` line as each operation ends there.
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Middle {
    /// Waits until the middle reports that operation `op` is over in its process.
    async fn done(&mut self, op: &str) {
        let wait = async {
            while let Some(line) = self.lines.next_line().await.expect("the middle's stdout") {
                if line.strip_prefix("done ") == Some(op) {
                    return;
                }
            }
            panic!("the middle exited before reporting {op} done");
        };
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .expect("the middle reports the operation done");
    }
}

async fn middle(catalog: &Server, args: &[&str]) -> Middle {
    let mut child = Command::new(env!("CARGO_BIN_EXE_middle"))
        .arg(format!("catalog={}", catalog.url()))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the middle process");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the middle printed its port")
        .expect("read the middle's stdout")
        .expect("the middle printed its port before exiting");
    let port: u16 = line.trim().parse().expect("a port number");
    Middle {
        _child: child,
        url: format!("http://127.0.0.1:{port}"),
        lines,
    }
}

// ---------------------------------------------------------------------------------------------
// The API side.

fn api_registry() -> Registry {
    Registry::builder()
        .upstream(
            "middle",
            fast_config().with_attempt_timeout(Duration::from_millis(1500)),
        )
        .seed(11)
        .build()
        .expect("valid API config")
}

fn client() -> reqwest::Client {
    retry_runtime::http::client_builder()
        .no_proxy()
        .build()
        .expect("client")
}

/// One retrying API call to the middle (3 attempts); counts the attempts it made and records
/// the instant just before each attempt was handed to the send path.
async fn api_call(
    registry: &Registry,
    client: &reqwest::Client,
    url: String,
    attempts: &AtomicU32,
    sent: &Mutex<Vec<Instant>>,
) -> Result<String, Error> {
    Retry::in_registry(registry, "middle")
        .method(Method::GET)
        .run(|_attempt| {
            attempts.fetch_add(1, Ordering::SeqCst);
            sent.lock().unwrap().push(Instant::now());
            let request = client.get(&url);
            async move { Ok(request.send_attempt().await?.read_text().await?) }
        })
        .await
}

fn http_error(error: &Error) -> &HttpError {
    match error {
        Error::Http(e) => e,
        other => panic!("expected the middle's HTTP error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Amplification: 3 catalog calls per operation, not 9.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_each_allowing_three_attempts_make_three_catalog_calls_not_nine() {
    let (catalog, server) = Catalog::start(false).await;
    let middle = middle(&server, &[]).await;
    let (registry, client) = (api_registry(), client());

    for op in 0..3 {
        let attempts = AtomicU32::new(0);
        let sent = Mutex::new(Vec::new());
        let url = format!("{}/op/{op}", middle.url);
        let err = api_call(&registry, &client, url, &attempts, &sent)
            .await
            .unwrap_err();
        let e = http_error(&err);
        assert_eq!(e.status(), Some(http::StatusCode::SERVICE_UNAVAILABLE));
        assert_eq!(
            e.pushback(),
            Some(Pushback::RetriesSpent),
            "the middle says it already retried: {err}"
        );
        assert_eq!(
            attempts.load(Ordering::SeqCst),
            1,
            "the API did not retry a failure the middle already retried"
        );
        let seen: Vec<_> = catalog
            .seen()
            .into_iter()
            .filter(|s| s.op == op.to_string())
            .collect();
        assert_eq!(seen.len(), 3, "3 catalog calls, not 9: {seen:?}");
        // The middle's allowance is the API's (2 retries left), spent across its attempts.
        let left: Vec<_> = seen.iter().map(|s| s.retries_left).collect();
        assert_eq!(left, [Some(2), Some(1), Some(0)]);
    }

    // The caller's allowance crosses the process boundary: an API operation allowed one retry
    // in total gets two catalog calls, although the middle alone would make three.
    let attempts = AtomicU32::new(0);
    let sent = Mutex::new(Vec::new());
    let url = format!("{}/op/tight", middle.url);
    let err = retry_runtime::operation("tight")
        .max_retries(1)
        .run(api_call(&registry, &client, url, &attempts, &sent))
        .await
        .unwrap_err();
    assert_eq!(http_error(&err).pushback(), Some(Pushback::RetriesSpent));
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    assert_eq!(catalog.calls_per_op()["tight"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_against_a_dead_catalog_stays_within_the_middles_retry_budget() {
    // The catalog upstream's budget in the middle: retries may add 10 % of the calls, plus a
    // floor of 1/s over a 10 s window (10 retries), so N operations may cost the catalog at
    // most (1 + 0.1) x N + 1 x 10 calls (the burst lasts well under the window).
    const N: usize = 200;
    const RATIO: f64 = 0.1;
    const FLOOR_PER_SECOND: usize = 1;
    const WINDOW_SECS: usize = 10;
    let bound = ((1.0 + RATIO) * N as f64).floor() as usize + FLOOR_PER_SECOND * WINDOW_SECS;

    let (catalog, server) = Catalog::start(false).await;
    let middle = middle(
        &server,
        &[
            &format!("ratio={RATIO}"),
            &format!("floor={FLOOR_PER_SECOND}"),
            &format!("window_secs={WINDOW_SECS}"),
        ],
    )
    .await;
    let registry = Arc::new(api_registry());
    let client = client();
    let api_attempts = Arc::new(AtomicU32::new(0));
    let mut burst = tokio::task::JoinSet::new();
    for op in 0..N {
        let (registry, client, attempts) = (registry.clone(), client.clone(), api_attempts.clone());
        let url = format!("{}/op/{op}", middle.url);
        burst.spawn(async move {
            let sent = Mutex::new(Vec::new());
            api_call(&registry, &client, url, &attempts, &sent).await
        });
    }
    let mut failures = 0;
    while let Some(result) = burst.join_next().await {
        assert!(result.expect("no panic").is_err(), "the catalog is dead");
        failures += 1;
    }
    assert_eq!(failures, N);

    let total = catalog.seen().len();
    let per_op = catalog.calls_per_op();
    eprintln!(
        "burst: {N} operations, {total} catalog calls (bound {bound}), {} API attempts",
        api_attempts.load(Ordering::SeqCst)
    );
    assert_eq!(per_op.len(), N, "every operation reached the catalog");
    assert_eq!(
        api_attempts.load(Ordering::SeqCst) as usize,
        N,
        "the API retried none: the middle answered every failure with a pushback \
         (`retries-spent` when it retried, `overloaded` when its budget refused the retry)"
    );
    assert!(
        per_op.values().all(|n| *n <= 3),
        "at most 3 catalog calls per operation: {per_op:?}"
    );
    assert!(
        total <= bound,
        "{total} catalog calls for {N} operations: above (1 + {RATIO}) x {N} + {FLOOR_PER_SECOND} x {WINDOW_SECS} = {bound}"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. One deadline across processes.

/// The API's checkout through the middle at `middle_url`, under a 300 ms operation deadline:
/// its result, the operation's deadline, and when the API sent each attempt.
async fn checkout_in_300ms(middle_url: &str) -> (Result<String, Error>, Instant, Vec<Instant>) {
    let (registry, client) = (api_registry(), client());
    let attempts = AtomicU32::new(0);
    let sent = Mutex::new(Vec::new());
    let deadline = Mutex::new(None);
    let url = format!("{middle_url}/op/checkout");
    let result = retry_runtime::operation("checkout")
        .deadline(Duration::from_millis(300))
        .run(async {
            *deadline.lock().unwrap() = Operation::current().and_then(|op| op.deadline());
            api_call(&registry, &client, url, &attempts, &sent).await
        })
        .await;
    let deadline = deadline
        .into_inner()
        .unwrap()
        .expect("the operation has a deadline");
    (result, deadline, sent.into_inner().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apis_300ms_deadline_reaches_the_catalog_shrunk_by_the_time_spent() {
    // A 40 ms backoff in the middle, so its three catalog attempts are spread in time.
    let (catalog, server) = Catalog::start(false).await;
    let middle = middle(&server, &["backoff_ms=40"]).await;
    let (result, deadline, sent) = checkout_in_300ms(&middle.url).await;
    assert!(result.is_err());
    let sent = sent[0];
    // However many of its three attempts the middle fit in the 300 ms (on a loaded machine,
    // maybe fewer), each must carry what was left; the count is not the property.
    let seen = catalog.seen();
    assert!(
        (1..=3).contains(&seen.len()),
        "the middle made one to three attempts: {seen:?}"
    );

    // What is provable with a relative header: the API sent `floor(D - t_send)` at some
    // t_send >= `sent`; the middle's deadline is that much after it received the request, and
    // each of its attempts sends `floor(its deadline - now)`. So the catalog's k-th request
    // carries at most (D - sent) minus the time the middle had already spent, which is more
    // than the gap between the catalog's first and (k-1)-th requests. The time a request
    // spends on the wire is not subtracted (no header can know it), which is why the bound is
    // anchored at the sender's side: that is the "300 ms minus elapsed" the catalog can rely on.
    let budget_at_send = deadline - sent;
    assert!(budget_at_send <= Duration::from_millis(300));
    for (k, s) in seen.iter().enumerate() {
        let received = Duration::from_millis(s.deadline_ms.expect("retry-deadline-ms sent"));
        let spent_in_middle = if k == 0 {
            Duration::ZERO
        } else {
            seen[k - 1].at - seen[0].at
        };
        assert!(
            received <= budget_at_send.saturating_sub(spent_in_middle),
            "catalog request {k}: told {received:?}, but the API had {budget_at_send:?} left when it sent \
             and the middle had spent more than {spent_in_middle:?} since: {seen:?}"
        );
        // Diagnostic only: the same comparison at the catalog's receive time, which the
        // wire time (not knowable by any header) may exceed by a fraction of a millisecond.
        let at_catalog = deadline.saturating_duration_since(s.at);
        eprintln!("catalog request {k}: told {received:?}, API's real remaining {at_catalog:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_api_gives_up_the_middle_stops_and_the_catalog_sees_no_later_request() {
    // A catalog that never answers, and a middle whose own limits would let it keep a catalog
    // request open for 1.5 s and then try again: only the API's propagated 300 ms stop it.
    let (catalog, server) = Catalog::start(true).await;
    let mut middle = middle(&server, &["attempt_timeout_ms=1500"]).await;
    let (result, deadline, _) = checkout_in_300ms(&middle.url).await;
    assert!(result.is_err(), "the catalog never answers");

    // The middle reports when the operation is over in its process (its handler finished or
    // was dropped by the server layer): after that it can start no catalog request for it.
    middle.done("checkout").await;
    // And the catalog sees its requests dropped (the middle went away from them).
    catalog.idle().await;
    let seen = catalog.seen();
    assert!(!seen.is_empty(), "the catalog was reached");
    for s in &seen {
        // What stopped the middle is the API's deadline, propagated: every catalog request
        // carried at most the 300 ms the API had, never the middle's own 1.5 s.
        let told = s.deadline_ms.expect("retry-deadline-ms sent");
        assert!(told <= 300, "a catalog request was told {told} ms");
        assert!(
            s.at < deadline,
            "a catalog request started {:?} after the API's deadline",
            s.at - deadline
        );
    }
    assert_eq!(
        catalog.cancelled.load(Ordering::SeqCst),
        seen.len(),
        "every catalog handler was stopped by its caller going away"
    );
}
