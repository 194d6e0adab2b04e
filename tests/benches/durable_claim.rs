//! The durable queue draining a backlog, on SQLite and PostgreSQL, with a no-op handler.
//!
//! `cargo bench -p retry-tests --bench durable_claim` (PostgreSQL only with `TEST_DATABASE_URL`,
//! e.g. after `source .ci/postgres.sh`). Filling the backlog is not timed: each measured
//! sample first inserts `iters` due tasks in one statement, then times draining them.
//!
//! - `claim_complete_each`: one caller claims batches of 32 and completes each task with its
//!   own statement: the cost of one completion write per task.
//! - `worker_run`: [`Worker::run`] at its default settings drains the backlog (claims of up
//!   to 512, up to 1,024 attempts in flight, successes recorded in batches) and stops once
//!   every task ran. Other sizes: `DURABLE_BENCH_BATCH`, `DURABLE_BENCH_CONCURRENCY`.
//!
//! After criterion, `latency` (skipped when a filter excludes it) hands off tasks at a steady
//! rate for 5 s (1,000/s on PostgreSQL; 250/s on SQLite, whose every hand-off is a commit
//! waiting for `fsync`) to an idle worker at its default settings and prints the
//! enqueue-to-start latency percentiles. On PostgreSQL the hand-offs go through a second pool,
//! as another instance's would, so only `LISTEN`/`NOTIFY` can wake the worker early.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use retry_durable::sqlx::{self, AssertSqlSafe};
use retry_durable::{
    DurableQueue, DurableStore, EnqueueOptions, PgStore, PgStoreOptions, SqliteStore, TaskContext,
    Timestamp, Worker, WorkerConfig,
};
use tokio::sync::Notify;

const OP: &str = "bench.op";
const BATCH: u32 = 32;
static KEY: AtomicU64 = AtomicU64::new(0);

/// Inserts `n` due tasks in one statement (the fill is not what is measured).
trait Fill: DurableStore {
    async fn fill(&self, n: u64);
    /// Deletes finished tasks, so every sample starts from the same table.
    async fn clear(&self);
}

const FILL_SELECT: &str = "SELECT 'bench.op', 'k' || (i + {first}), CAST(x'7b7d' AS BLOB), \
    'pending', 0, 10, 0, 0, 0";
const INSERT: &str = "INSERT INTO retry_durable_task (operation, idempotency_key, payload, \
    status, retry_count, max_attempts, next_attempt_at, created_at, updated_at) ";
const CLEAR: &str = "DELETE FROM retry_durable_task WHERE status = 'succeeded'";

fn keys(n: u64) -> u64 {
    KEY.fetch_add(n, Ordering::Relaxed)
}

impl Fill for SqliteStore {
    async fn fill(&self, n: u64) {
        let select = FILL_SELECT.replace("{first}", &keys(n).to_string());
        let sql = format!(
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n}) \
             {INSERT}{select} FROM s"
        );
        sqlx::query(AssertSqlSafe(sql))
            .execute(self.pool())
            .await
            .unwrap();
    }

    async fn clear(&self) {
        sqlx::query(CLEAR).execute(self.pool()).await.unwrap();
    }
}

impl Fill for PgStore {
    async fn fill(&self, n: u64) {
        let select = FILL_SELECT
            .replace("{first}", &keys(n).to_string())
            .replace("CAST(x'7b7d' AS BLOB)", "'\\x7b7d'::bytea");
        // PostgreSQL keeps the keys in a table of their own (migration 4).
        let sql = format!(
            "WITH t AS ({INSERT}{select} FROM generate_series(1, {n}) AS s(i) \
             RETURNING task_id, operation, idempotency_key) \
             INSERT INTO retry_durable_key (operation, idempotency_key, task_id) \
             SELECT operation, idempotency_key, task_id FROM t"
        );
        sqlx::query(AssertSqlSafe(sql))
            .execute(self.pool())
            .await
            .unwrap();
        // A settled table, as a backlog that built up over an outage would be: the previous
        // sample's dead rows are not left for autovacuum to clean during this one.
        sqlx::query("VACUUM ANALYZE retry_durable_task")
            .execute(self.pool())
            .await
            .unwrap();
    }

    async fn clear(&self) {
        sqlx::query(CLEAR).execute(self.pool()).await.unwrap();
    }
}

async fn drain_each<S: DurableStore>(store: &S) -> u64 {
    let ops = vec![OP.to_owned()];
    let mut done = 0;
    loop {
        let now = Timestamp::now();
        let lease = now.saturating_add(Duration::from_secs(60));
        let tasks = store.claim("each", &ops, BATCH, lease, now).await.unwrap();
        if tasks.is_empty() {
            return done;
        }
        for t in tasks {
            let fence = t.fence().unwrap();
            assert!(
                store
                    .complete(&fence, None, Timestamp::now())
                    .await
                    .unwrap()
            );
            done += 1;
        }
    }
}

/// A worker that counts its attempts and says when `target` were run.
struct Counted<S> {
    worker: Worker<S>,
    ran: Arc<AtomicU64>,
    target: Arc<AtomicU64>,
    all_ran: Arc<Notify>,
}

fn counted<S: DurableStore>(store: S, config: WorkerConfig) -> Counted<S> {
    let ran = Arc::new(AtomicU64::new(0));
    let target = Arc::new(AtomicU64::new(u64::MAX));
    let all_ran = Arc::new(Notify::new());
    let (r, t, a) = (ran.clone(), target.clone(), all_ran.clone());
    let worker = Worker::builder(store)
        .handler(OP, move |_t: TaskContext| {
            if r.fetch_add(1, Ordering::Relaxed) + 1 == t.load(Ordering::Relaxed) {
                a.notify_one();
            }
            async { Ok(()) }
        })
        .config(config)
        .build()
        .unwrap();
    Counted {
        worker,
        ran,
        target,
        all_ran,
    }
}

impl<S: DurableStore> Counted<S> {
    /// Runs the worker until `n` more attempts ran, and returns once it stopped (every
    /// success recorded).
    async fn drain(&self, n: u64) {
        let before = self.ran.load(Ordering::Relaxed);
        self.target.store(before + n, Ordering::Relaxed);
        let all_ran = self.all_ran.clone();
        let stats = self
            .worker
            .run(async move { all_ran.notified().await })
            .await;
        assert_eq!(stats.succeeded, n, "{stats:?}");
    }
}

/// Both benchmarks on one backend, each on a table of its own (`open(bench name)`), so one
/// benchmark's churn does not slow the other's scans.
fn bench_store<S: Fill>(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    name: &str,
    open: impl Fn(&str) -> S,
) {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    let mut config = WorkerConfig::new().with_worker_id("bench-worker");
    if let Some(n) = env("DURABLE_BENCH_BATCH") {
        config = config.with_batch_size(n);
    }
    if let Some(n) = env("DURABLE_BENCH_CONCURRENCY") {
        config = config.with_concurrency(n as usize);
    }
    let (each, drained) = (open("each"), open("run"));
    let run = counted(drained.clone(), config);
    let mut group = c.benchmark_group(format!("durable_claim/{name}"));
    group
        .throughput(Throughput::Elements(1))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    group.bench_function("claim_complete_each", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                each.clear().await;
                each.fill(iters).await;
                let start = Instant::now();
                assert_eq!(drain_each(&each).await, iters);
                start.elapsed()
            })
        })
    });
    group.bench_function("worker_run", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                drained.clear().await;
                drained.fill(iters).await;
                let start = Instant::now();
                run.drain(iters).await;
                start.elapsed()
            })
        })
    });
    group.finish();
}

/// Hands off `rate` tasks per second for `secs` through `enqueuer` to an idle default worker on
/// `store`; prints the enqueue-to-start latency percentiles.
async fn latency<S: DurableStore, E: DurableStore>(name: &str, rate: u64, store: S, enqueuer: E) {
    const SECS: u64 = 5;
    let epoch = Instant::now();
    let latencies = Arc::new(std::sync::Mutex::new(Vec::with_capacity(
        (rate * SECS) as usize,
    )));
    let all_ran = Arc::new(Notify::new());
    let (l, a) = (latencies.clone(), all_ran.clone());
    let worker = Worker::builder(store)
        .handler(OP, move |t: TaskContext| {
            let sent = u64::from_le_bytes(t.payload[..8].try_into().unwrap());
            let waited = epoch.elapsed().as_nanos() as u64 - sent;
            let mut l = l.lock().unwrap();
            l.push(waited);
            if l.len() as u64 == rate * SECS {
                a.notify_one();
            }
            async { Ok(()) }
        })
        .config(WorkerConfig::new().with_worker_id("latency-worker"))
        .build()
        .unwrap();
    let stop = all_ran.clone();
    let run = tokio::spawn(async move { worker.run(async move { stop.notified().await }).await });
    tokio::time::sleep(Duration::from_millis(200)).await; // the worker is idle
    let q = DurableQueue::new(enqueuer);
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    let first = keys(rate * SECS);
    let mut sends = tokio::task::JoinSet::new();
    for i in 0..rate * SECS {
        tick.tick().await;
        let q = q.clone();
        sends.spawn(async move {
            let start = epoch.elapsed().as_nanos() as u64;
            let key = format!("lat{}", first + i);
            q.enqueue(OP, &key, &start.to_le_bytes(), EnqueueOptions::new())
                .await
                .unwrap();
            epoch.elapsed().as_nanos() as u64 - start
        });
    }
    let mut enqueue = Vec::with_capacity((rate * SECS) as usize);
    while let Some(took) = sends.join_next().await {
        enqueue.push(took.unwrap());
    }
    let stats = run.await.unwrap();
    assert_eq!(stats.succeeded, rate * SECS);
    let started = latencies.lock().unwrap().clone();
    let (s, e) = (percentiles(started), percentiles(enqueue));
    println!(
        "durable_claim/{name}/latency: {rate} hand-offs/s for {SECS} s, enqueue to start: \
         p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (the enqueue call alone: p50 {:.2} ms, \
         p99 {:.2} ms)",
        s[0], s[1], s[2], e[0], e[1]
    );
}

/// p50, p99 and max of nanosecond samples, in milliseconds.
fn percentiles(mut ns: Vec<u64>) -> [f64; 3] {
    ns.sort_unstable();
    let at = |p: f64| ns[((ns.len() as f64 * p) as usize).min(ns.len() - 1)] as f64 / 1e6;
    [at(0.50), at(0.99), at(1.0)]
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let want = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    let dir = std::env::temp_dir().join(format!("retry-durable-bench-{}", std::process::id()));
    let sqlite = |name: &str| {
        let path = dir.join(format!("{name}.sqlite"));
        rt.block_on(SqliteStore::open(&path)).unwrap()
    };
    bench_store(&mut c, &rt, "sqlite", sqlite);
    if want("durable_claim/sqlite/latency") {
        let store = sqlite("latency");
        rt.block_on(latency("sqlite", 250, store.clone(), store));
    }
    let _ = std::fs::remove_dir_all(&dir);

    match std::env::var("TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => {
            let schemas = std::sync::Mutex::new(Vec::new());
            let options = |name: &str| {
                let schema = format!("bench_{}_{name}", std::process::id());
                schemas.lock().unwrap().push(schema.clone());
                PgStoreOptions::new(&url).with_schema(schema)
            };
            let pg = |name: &str| rt.block_on(PgStore::connect_with(options(name))).unwrap();
            bench_store(&mut c, &rt, "postgres", pg);
            if want("durable_claim/postgres/latency") {
                let store = pg("latency");
                let other = rt
                    .block_on(PgStore::connect_with(options("latency")))
                    .unwrap();
                rt.block_on(latency("postgres", 1_000, store, other));
            }
            let admin = pg("admin");
            for schema in schemas.into_inner().unwrap() {
                let drop = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
                rt.block_on(sqlx::query(AssertSqlSafe(drop)).execute(admin.pool()))
                    .unwrap();
            }
        }
        _ => eprintln!("durable_claim/postgres skipped: TEST_DATABASE_URL is not set"),
    }
    c.final_summary();
}
