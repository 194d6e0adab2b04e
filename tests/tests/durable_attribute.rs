//! `#[retry(durable = ...)]` end to end: an adapter whose in-memory retries stop on a transient
//! failure defers to the durable queue, a worker replays it through the same function (same
//! key, same rules), and the application reads the result by task id. The upstream is a
//! loopback server that deduplicates by idempotency key, as the adapter's contract says.
//!
//! Time: the durable queue's clock is a [`ManualClock`]; the in-memory backoff is a few
//! milliseconds. Nothing sleeps to let time pass or waits on wall time.

mod durable_support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use retry_durable::{
    Durable, DurableQueue, DurableStore, ManualClock, Outcome, TaskStatus, Timestamp, Worker,
    WorkerConfig,
};
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::{Error, Registry, retry};
use retry_tests::loopback::{self, FnService, Req, Server};
use retry_tests::support::{UPSTREAM, fast_config};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc};

use durable_support::{PgDb, SqliteDb};

const OP: &str = "up.register";

/// The command a durable write stores: serializable, its key derived from it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Register {
    id: u64,
    name: String,
}

impl Register {
    fn key(&self) -> String {
        format!("register-{}", self.id)
    }
}

struct Adapter {
    client: reqwest::Client,
    base: String,
    registry: Registry,
}

impl Adapter {
    #[retry(upstream = "up", method = POST, idempotency = cmd.key(), durable = "up.register",
            registry = &self.registry)]
    async fn register(&self, cmd: &Register, note: String) -> Result<Durable<String>, Error> {
        let response = self
            .client
            .post(format!("{}/register", self.base))
            .body(format!("{} {} {note}", cmd.id, cmd.name))
            .send_attempt()
            .await?;
        Ok(response.read_text().await?)
    }
}

/// A key derived from a counter, not from the arguments: each call, and each replay, would be
/// a new write.
struct Counting {
    inner: Arc<Adapter>,
    next: std::sync::atomic::AtomicU64,
}

impl Counting {
    #[retry(upstream = "up", method = POST,
            idempotency = format!("k-{}", self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)),
            durable = "up.counting", registry = &self.inner.registry)]
    async fn register(&self, cmd: &Register) -> Result<Durable<String>, Error> {
        let response = self
            .inner
            .client
            .post(format!("{}/register", self.inner.base))
            .body(cmd.name.clone())
            .send_attempt()
            .await?;
        Ok(response.read_text().await?)
    }
}

/// What the upstream saw: every request's key, and each key's effects (applied once).
#[derive(Default)]
struct Seen {
    keys: Vec<String>,
    effects: HashMap<String, u32>,
    /// Requests still to answer 503.
    failing: usize,
    /// Hold the request that applies a key's effect, and report it (the crash test).
    hold_after_applying: Option<(mpsc::UnboundedSender<String>, Arc<Notify>)>,
}

async fn upstream(seen: Arc<Mutex<Seen>>) -> Server {
    loopback::serve(FnService(move |req: Req| {
        let seen = seen.clone();
        async move {
            // The key as the draft's servers read it: a structured-field string.
            let key = req
                .headers()
                .get("idempotency-key")
                .and_then(|v| retry_idempotency::key::parse_value(v.as_bytes(), 255).ok())
                .map(|k| k.as_str().to_owned())
                .unwrap_or_default();
            let hold = {
                let mut s = seen.lock().unwrap();
                s.keys.push(key.clone());
                if s.failing > 0 {
                    s.failing -= 1;
                    return loopback::respond(503, "down");
                }
                let first = !s.effects.contains_key(&key);
                *s.effects.entry(key.clone()).or_default() += 1;
                if first {
                    s.hold_after_applying.take()
                } else {
                    // A repeat of an applied key: the stored answer, no second effect.
                    *s.effects.get_mut(&key).unwrap() -= 1;
                    None
                }
            };
            if let Some((applied, release)) = hold {
                let _ = applied.send(key.clone());
                release.notified().await;
            }
            http::Response::new(Full::new(Bytes::from(format!("registered {key}"))))
        }
    }))
    .await
    .expect("serve")
}

fn adapter(server: &Server, queue: impl retry_durable::HandOff) -> Arc<Adapter> {
    adapter_with(server, queue, fast_config())
}

fn adapter_with(
    server: &Server,
    queue: impl retry_durable::HandOff,
    config: retry_runtime::UpstreamConfig,
) -> Arc<Adapter> {
    let registry = Registry::builder()
        .upstream(UPSTREAM, config)
        .seed(7)
        .build()
        .unwrap();
    registry.set_durable_queue(queue);
    Arc::new(Adapter {
        client: retry_tests::support::client(),
        base: server.url(),
        registry,
    })
}

fn clock() -> ManualClock {
    ManualClock::new(Timestamp::from_unix_millis(1_800_000_000_000))
}

fn worker<S: DurableStore>(store: S, clock: &ManualClock, id: &str, a: &Arc<Adapter>) -> Worker<S> {
    Worker::builder(store)
        .replay(Adapter::register_replay(a.clone()))
        .clock(clock.clone())
        .config(WorkerConfig::new().with_worker_id(id))
        .build()
        .unwrap()
}

fn cmd() -> Register {
    Register {
        id: 42,
        name: "ada".to_owned(),
    }
}

#[tokio::test]
async fn a_write_that_outlasts_its_retries_is_deferred_replayed_and_read_back() {
    let db = SqliteDb::new().await;
    deferred_replayed_and_read_back(db.store.clone()).await;
    db.cleanup().await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: source .ci/postgres.sh, then pass --include-ignored"]
async fn a_write_that_outlasts_its_retries_is_deferred_replayed_and_read_back_on_postgres() {
    let Some(db) = PgDb::new().await else { return };
    deferred_replayed_and_read_back(db.store.clone()).await;
    db.cleanup().await;
}

async fn deferred_replayed_and_read_back<S: DurableStore>(store: S) {
    let seen = Arc::new(Mutex::new(Seen {
        // The call's three attempts and the first replay's three.
        failing: 6,
        ..Seen::default()
    }));
    let server = upstream(seen.clone()).await;
    let clock = clock();
    let queue = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let a = adapter(&server, queue.clone());

    let answer = a.register(&cmd(), "first".to_owned()).await.unwrap();
    let Durable::Deferred(call) = answer else {
        panic!("503 on every attempt defers the write, got {answer:?}")
    };
    assert!(call.hand_off().created);
    assert_eq!(seen.lock().unwrap().keys.len(), 3, "the in-memory attempts");
    assert!(matches!(
        queue.outcome(&call).await.unwrap(),
        Outcome::Pending {
            attempts: 0,
            last_error: None,
            ..
        }
    ));
    let task = queue.get(call.task_id()).await.unwrap().unwrap();
    assert_eq!(task.idempotency_key, "register-42", "the call's own key");
    assert_eq!(task.operation, OP);

    // The first replay meets the outage too: the task waits for its durable backoff.
    let w = worker(store.clone(), &clock, "w1", &a);
    let stats = w.tick().await.unwrap();
    assert_eq!(stats.claimed, 1);
    let Outcome::Pending {
        attempts: 1,
        last_error: Some(error),
        ..
    } = queue.outcome(&call).await.unwrap()
    else {
        panic!("a transient replay failure leaves the task pending")
    };
    assert!(error.contains("503"), "{error}");
    assert_eq!(seen.lock().unwrap().keys.len(), 6);
    assert_eq!(w.tick().await.unwrap().claimed, 0, "not before its backoff");

    // After the backoff the upstream is back: the replay completes and its result is stored.
    clock.advance(std::time::Duration::from_secs(3600));
    assert_eq!(w.tick().await.unwrap().claimed, 1);
    assert_eq!(
        queue.outcome(&call).await.unwrap(),
        Outcome::Completed("registered register-42".to_owned())
    );
    assert_eq!(
        queue.outcome_of::<String>(call.task_id()).await.unwrap(),
        Outcome::Completed("registered register-42".to_owned()),
        "by task id alone"
    );

    {
        let s = seen.lock().unwrap();
        assert_eq!(s.keys.len(), 7);
        assert!(
            s.keys.iter().all(|k| k == "register-42"),
            "one key on every attempt and replay: {:?}",
            s.keys
        );
        assert_eq!(s.effects.get("register-42"), Some(&1), "processed once");
    }

    // The same call again (same key) finds the task: no second one is queued.
    seen.lock().unwrap().failing = 3;
    let again = a.register(&cmd(), "again".to_owned()).await.unwrap();
    let call2 = again.deferred().expect("deferred again");
    assert_eq!(call2.task_id(), call.task_id());
    assert!(!call2.hand_off().created);
    assert_eq!(call2.hand_off().status, TaskStatus::Succeeded);
}

#[tokio::test]
async fn a_replay_meets_the_open_breaker_and_waits_without_a_request() {
    let db = SqliteDb::new().await;
    let seen = Arc::new(Mutex::new(Seen {
        failing: usize::MAX,
        ..Seen::default()
    }));
    let server = upstream(seen.clone()).await;
    let clock = clock();
    let queue = DurableQueue::new(db.store.clone()).with_clock(clock.clone());
    // Opens after three failed attempts, and stays open for the rest of the test.
    let breaker = retry_runtime::breaker::BreakerConfig::new()
        .with_min_attempts(3)
        .with_open_for(std::time::Duration::from_secs(3600));
    let a = adapter_with(
        &server,
        queue.clone(),
        fast_config().with_breaker(Some(breaker)),
    );
    let call = match a.register(&cmd(), "n".to_owned()).await.unwrap() {
        Durable::Deferred(call) => call,
        done => panic!("expected a deferral, got {done:?}"),
    };
    assert_eq!(seen.lock().unwrap().keys.len(), 3);

    let w = worker(db.store.clone(), &clock, "w1", &a);
    assert_eq!(w.tick().await.unwrap().claimed, 1);
    assert_eq!(
        seen.lock().unwrap().keys.len(),
        3,
        "the open breaker refused the replay before any request"
    );
    let Outcome::Pending {
        attempts: 1,
        last_error: Some(error),
        ..
    } = queue.outcome(&call).await.unwrap()
    else {
        panic!("the task waits for its durable backoff")
    };
    assert!(error.contains("circuit breaker"), "{error}");
    db.cleanup().await;
}

#[tokio::test]
async fn a_replay_whose_key_changed_is_refused_before_sending() {
    let db = SqliteDb::new().await;
    let seen = Arc::new(Mutex::new(Seen {
        failing: 3,
        ..Seen::default()
    }));
    let server = upstream(seen.clone()).await;
    let clock = clock();
    let queue = DurableQueue::new(db.store.clone()).with_clock(clock.clone());
    let counting = Arc::new(Counting {
        inner: adapter(&server, queue.clone()),
        next: std::sync::atomic::AtomicU64::new(0),
    });
    let call = match counting.register(&cmd()).await.unwrap() {
        Durable::Deferred(call) => call,
        done => panic!("expected a deferral, got {done:?}"),
    };
    let w = Worker::builder(db.store.clone())
        .replay(Counting::register_replay(counting.clone()))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!(w.tick().await.unwrap().claimed, 1);
    let Outcome::Failed { last_error, .. } = queue.outcome(&call).await.unwrap() else {
        panic!("a replay that would be another write fails its task")
    };
    assert!(
        last_error.contains("differs from the one its task was queued with"),
        "{last_error}"
    );
    assert_eq!(
        seen.lock().unwrap().keys,
        ["k-0"; 3],
        "nothing sent by the replay"
    );
    db.cleanup().await;
}

#[tokio::test]
async fn a_permanent_failure_is_returned_at_once_and_a_success_is_done() {
    let db = SqliteDb::new().await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let server = upstream(seen.clone()).await;
    let queue = DurableQueue::new(db.store.clone());
    let a = adapter(&server, queue.clone());
    let done = a.register(&cmd(), "n".to_owned()).await.unwrap();
    assert_eq!(done, Durable::Done("registered register-42".to_owned()));

    // A 400 is the contract's answer: no retry, no task.
    let rejecting = loopback::serve(FnService(|_req: Req| async {
        loopback::respond(400, "bad")
    }))
    .await
    .unwrap();
    let b = adapter(&rejecting, queue.clone());
    let error = b.register(&cmd(), "n".to_owned()).await.unwrap_err();
    assert_eq!(
        retry_runtime::Classify::status(&error),
        Some(400),
        "{error}"
    );
    assert_eq!(queue.counts().await.unwrap().total(), 0, "nothing queued");
    db.cleanup().await;
}

#[tokio::test]
async fn a_registry_without_a_queue_fails_clearly_and_verify_names_the_function() {
    let seen = Arc::new(Mutex::new(Seen {
        failing: usize::MAX,
        ..Seen::default()
    }));
    let server = upstream(seen).await;
    let registry = Registry::builder()
        .upstream(UPSTREAM, fast_config())
        .build()
        .unwrap();
    let missing = registry
        .verify_where(|r| r.durable() == Some(OP))
        .unwrap_err();
    assert_eq!(missing.no_durable_queue.len(), 1);
    assert!(
        missing.to_string().contains("set_durable_queue")
            && missing.to_string().contains("register"),
        "{missing}"
    );
    let a = Adapter {
        client: retry_tests::support::client(),
        base: server.url(),
        registry,
    };
    let error = a.register(&cmd(), "n".to_owned()).await.unwrap_err();
    assert!(
        matches!(error, Error::NoDurableQueue { operation: OP, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("503"), "{error}");
}

#[tokio::test]
async fn a_worker_that_dies_mid_replay_loses_no_task_and_the_key_applies_once() {
    let db = SqliteDb::new().await;
    crash_mid_replay(db.store.clone()).await;
    db.cleanup().await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: source .ci/postgres.sh, then pass --include-ignored"]
async fn a_worker_that_dies_mid_replay_loses_no_task_and_the_key_applies_once_on_postgres() {
    let Some(db) = PgDb::new().await else { return };
    crash_mid_replay(db.store.clone()).await;
    db.cleanup().await;
}

async fn crash_mid_replay<S: DurableStore>(store: S) {
    let (applied_tx, mut applied) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let seen = Arc::new(Mutex::new(Seen {
        failing: 3,
        hold_after_applying: Some((applied_tx, release.clone())),
        ..Seen::default()
    }));
    let server = upstream(seen.clone()).await;
    let clock = clock();
    let queue = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let a = adapter(&server, queue.clone());
    let call = match a.register(&cmd(), "n".to_owned()).await.unwrap() {
        Durable::Deferred(call) => call,
        done => panic!("expected a deferral, got {done:?}"),
    };

    // Worker 1 replays; the upstream applies the write and the worker dies before the answer.
    let w1 = worker(store.clone(), &clock, "w1", &a);
    let dying = tokio::spawn(async move { w1.tick().await });
    assert_eq!(applied.recv().await.as_deref(), Some("register-42"));
    dying.abort();
    assert!(dying.await.unwrap_err().is_cancelled());
    assert_eq!(
        queue.get(call.task_id()).await.unwrap().unwrap().status,
        TaskStatus::Running,
        "the dead worker's lease still holds the task"
    );

    // Its lease expires; another worker rescues the task and replays it with the same key.
    let w2 = worker(store.clone(), &clock, "w2", &a);
    clock.advance(std::time::Duration::from_secs(3600));
    let stats = w2.tick().await.unwrap();
    assert_eq!(stats.rescued, 1);
    clock.advance(std::time::Duration::from_secs(3600));
    assert_eq!(w2.tick().await.unwrap().claimed, 1);
    assert_eq!(
        queue.outcome(&call).await.unwrap(),
        Outcome::Completed("registered register-42".to_owned()),
        "no task lost"
    );
    let s = seen.lock().unwrap();
    assert!(s.keys.iter().all(|k| k == "register-42"), "{:?}", s.keys);
    assert_eq!(
        s.keys.len(),
        5,
        "3 in memory, the dying replay, the rescue's replay"
    );
    assert_eq!(s.effects.get("register-42"), Some(&1), "applied once");
}
