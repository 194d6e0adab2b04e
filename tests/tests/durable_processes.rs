//! Several worker *processes* over one database, and a worker killed with SIGKILL mid-attempt.
//!
//! The child processes are this test binary re-executed with `RETRY_DURABLE_CHILD` set: the
//! `child_worker` test below is a no-op in a normal run and a worker process in a child. That
//! keeps the helper next to the tests and needs no extra binary target.

mod durable_support;

use std::collections::{BTreeSet, HashMap};
use std::process::Stdio;
use std::time::Duration;

use durable_support::upstream::{self, Upstream};
use durable_support::{PgDb, SqliteDb};
use retry_durable::{
    AttemptError, DEFAULT_BACKOFF, DurableQueue, DurableStore, EnqueueOptions, ManualClock,
    PgStore, PgStoreOptions, SqliteStore, TaskContext, TaskStatus, Timestamp, Worker, WorkerConfig,
};
use tokio::process::{Child, Command};

const CHILD: &str = "RETRY_DURABLE_CHILD";
const OP: &str = "payments.capture";
const LEASE: Duration = Duration::from_secs(60);

fn config(id: &str) -> WorkerConfig {
    WorkerConfig::new()
        .with_worker_id(id)
        .with_attempt_timeout(Duration::from_secs(30))
        .with_lease(LEASE)
        .with_batch_size(4)
        .with_backoff(DEFAULT_BACKOFF.with_initial(Duration::ZERO))
}

/// Every fifth task's first attempt fails after reaching the upstream (like a 503 sent after
/// the upstream applied the request), so second attempts are exercised too.
fn fails_first(key: &str) -> bool {
    key[1..]
        .parse::<u32>()
        .map(|n| n.is_multiple_of(5))
        .unwrap_or(false)
}

// ---------------------------------------------------------------------------------------------
// The child side.

#[test]
fn child_worker() {
    let Ok(mode) = std::env::var(CHILD) else {
        return; // a normal test run: nothing to do
    };
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("child needs {k}"));
    let id = env("RETRY_DURABLE_ID");
    let upstream: std::net::SocketAddr = env("RETRY_DURABLE_UPSTREAM").parse().unwrap();
    let workers: usize = env("RETRY_DURABLE_WORKERS").parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        match env("RETRY_DURABLE_BACKEND").as_str() {
            "sqlite" => {
                let store = SqliteStore::open(env("RETRY_DURABLE_LOCATION"))
                    .await
                    .unwrap();
                child_main(store, &mode, &id, upstream, workers).await;
            }
            "postgres" => {
                let opts = PgStoreOptions::new(env("RETRY_DURABLE_LOCATION"))
                    .with_schema(env("RETRY_DURABLE_SCHEMA"));
                let store = PgStore::connect_with(opts).await.unwrap();
                child_main(store, &mode, &id, upstream, workers).await;
            }
            other => panic!("unknown backend {other}"),
        }
    });
}

async fn child_main<S: DurableStore>(
    store: S,
    mode: &str,
    id: &str,
    upstream: std::net::SocketAddr,
    workers: usize,
) {
    let hang = mode == "hang";
    let mut handles = Vec::new();
    for w in 0..workers {
        let worker_id = format!("{id}-w{w}");
        let wid = worker_id.clone();
        let worker = Worker::builder(store.clone())
            .handler(OP, move |t: TaskContext| {
                let wid = wid.clone();
                async move {
                    let answer = upstream::send(upstream, &t.idempotency_key, t.attempt, &wid)
                        .await
                        .map_err(|e| AttemptError::retry(format!("upstream unreachable: {e}")))?;
                    if hang {
                        // Mid-attempt: the upstream has the request, the outcome is not
                        // recorded. The parent kills this process now.
                        std::future::pending::<()>().await;
                    }
                    if fails_first(&t.idempotency_key) && t.attempt == 1 {
                        return Err(AttemptError::retry(format!("503 after {answer}")));
                    }
                    Ok(())
                }
            })
            .config(config(&worker_id))
            .build()
            .unwrap();
        handles.push(tokio::spawn(async move {
            loop {
                let stats = worker.tick().await.unwrap();
                assert_eq!(stats.lost_leases, 0, "no lease is lost without a crash");
                if stats.claimed == 0 {
                    if worker.store().counts().await.unwrap().outstanding() == 0 {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// The parent side.

fn spawn_child(mode: &str, id: &str, backend: &[(&str, String)], upstream: &Upstream) -> Child {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "child_worker", "--nocapture", "--test-threads=1"])
        .env(CHILD, mode)
        .env("RETRY_DURABLE_ID", id)
        .env("RETRY_DURABLE_UPSTREAM", upstream.addr.to_string())
        .env("RETRY_DURABLE_WORKERS", "2")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for (k, v) in backend {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn worker process")
}

async fn several_processes<S: DurableStore>(store: S, backend: Vec<(&str, String)>) {
    const TASKS: usize = 120;
    let upstream = Upstream::start().await;
    let q = DurableQueue::new(store.clone());
    for i in 0..TASKS {
        q.enqueue(OP, &format!("k{i}"), b"", EnqueueOptions::new())
            .await
            .unwrap();
    }
    let mut children: Vec<Child> = (0..3)
        .map(|p| spawn_child("drain", &format!("p{p}"), &backend, &upstream))
        .collect();
    for c in &mut children {
        let status = c.wait().await.unwrap();
        assert!(status.success(), "worker process failed: {status}");
    }

    let deliveries = upstream.deliveries();
    let mut per_attempt: HashMap<(String, u32), u32> = HashMap::new();
    for d in &deliveries {
        *per_attempt.entry((d.key.clone(), d.attempt)).or_default() += 1;
    }
    let retried = (0..TASKS).filter(|i| i.is_multiple_of(5)).count();
    assert_eq!(
        deliveries.len(),
        TASKS + retried,
        "one delivery per attempt"
    );
    assert!(
        per_attempt.values().all(|&n| n == 1),
        "an attempt was claimed twice"
    );
    for i in 0..TASKS {
        let key = format!("k{i}");
        let expected = if fails_first(&key) { 2 } else { 1 };
        let attempts: BTreeSet<u32> = deliveries
            .iter()
            .filter(|d| d.key == key)
            .map(|d| d.attempt)
            .collect();
        assert_eq!(attempts, (1..=expected).collect(), "{key}");
        let t = store.find(OP, &key).await.unwrap().unwrap();
        assert_eq!(
            (t.status, t.retry_count),
            (TaskStatus::Succeeded, expected),
            "{key}"
        );
    }
    assert!(upstream.effects().values().all(|&n| n == 1));
    let processes: BTreeSet<&str> = deliveries
        .iter()
        .map(|d| d.worker.split('-').next().unwrap())
        .collect();
    eprintln!("attempts spread over worker processes {processes:?}");
}

async fn crash_mid_attempt<S: DurableStore>(store: S, backend: Vec<(&str, String)>) {
    let key = "order-7-capture";
    let upstream = Upstream::start().await;
    let q = DurableQueue::new(store.clone());
    let id = q
        .enqueue(OP, key, b"{}", EnqueueOptions::new())
        .await
        .unwrap()
        .task_id;

    let mut child = spawn_child("hang", "doomed", &backend, &upstream);
    // Wait until the doomed worker is mid-attempt: the upstream has its request.
    let mut waited = 0;
    while upstream.deliveries().is_empty() {
        assert!(
            waited < 6000,
            "the worker process never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += 1;
    }
    child.kill().await.expect("SIGKILL the worker process");

    let t = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        t.status,
        TaskStatus::Running,
        "the dead worker still holds the lease"
    );
    let dead_owner = t.locked_by.clone().unwrap();

    // Another instance, whose clock is past the dead worker's lease.
    let clock = ManualClock::new(Timestamp::now().saturating_add(LEASE + Duration::from_millis(1)));
    let addr = upstream.addr;
    let rescuer = Worker::builder(store.clone())
        .handler(OP, move |t: TaskContext| async move {
            upstream::send(addr, &t.idempotency_key, t.attempt, "rescuer")
                .await
                .map(|_| ())
                .map_err(|e| AttemptError::retry(e.to_string()))
        })
        .clock(clock.clone())
        .config(config("rescuer").with_backoff(DEFAULT_BACKOFF))
        .build()
        .unwrap();
    let stats = rescuer.tick().await.unwrap();
    assert_eq!((stats.rescued, stats.claimed), (1, 0));
    clock.advance(Duration::from_secs(2));
    let stats = rescuer.tick().await.unwrap();
    assert_eq!((stats.claimed, stats.succeeded), (1, 1));

    let t = store.get(id).await.unwrap().unwrap();
    assert_eq!((t.status, t.retry_count), (TaskStatus::Succeeded, 2));
    let deliveries = upstream.deliveries();
    let seen: Vec<(&str, u32, &str)> = deliveries
        .iter()
        .map(|d| (d.key.as_str(), d.attempt, d.worker.as_str()))
        .collect();
    assert_eq!(
        seen,
        vec![(key, 1, dead_owner.as_str()), (key, 2, "rescuer")]
    );
    assert_eq!(
        upstream.effects()[key],
        1,
        "the upstream applied the payment once"
    );
}

fn sqlite_env(db: &SqliteDb) -> Vec<(&'static str, String)> {
    vec![
        ("RETRY_DURABLE_BACKEND", "sqlite".to_owned()),
        ("RETRY_DURABLE_LOCATION", db.path.display().to_string()),
    ]
}

fn pg_env(db: &PgDb) -> Vec<(&'static str, String)> {
    vec![
        ("RETRY_DURABLE_BACKEND", "postgres".to_owned()),
        ("RETRY_DURABLE_LOCATION", db.url.clone()),
        ("RETRY_DURABLE_SCHEMA", db.schema.clone()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_processes_claim_each_attempt_once_sqlite() {
    let db = SqliteDb::new().await;
    several_processes(db.store.clone(), sqlite_env(&db)).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: source .ci/postgres.sh, then pass --include-ignored"]
async fn several_processes_claim_each_attempt_once_postgres() {
    let Some(db) = PgDb::new().await else { return };
    several_processes(db.store.clone(), pg_env(&db)).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_task_is_completed_once_by_another_sqlite() {
    let db = SqliteDb::new().await;
    crash_mid_attempt(db.store.clone(), sqlite_env(&db)).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: source .ci/postgres.sh, then pass --include-ignored"]
async fn killed_worker_task_is_completed_once_by_another_postgres() {
    let Some(db) = PgDb::new().await else { return };
    crash_mid_attempt(db.store.clone(), pg_env(&db)).await;
    db.cleanup().await;
}
