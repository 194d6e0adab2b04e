//! Claim-and-complete throughput of the durable queue on SQLite and PostgreSQL.
//!
//! `cargo bench -p retry-tests --bench durable_claim` (PostgreSQL only with `TEST_DATABASE_URL`,
//! e.g. after `source .ci/postgres.sh`). Enqueueing is not timed: each measured batch first
//! enqueues `iters` fresh tasks, then times draining them.
//!
//! - `store_claim_complete`: one caller claims batches of 32 and completes each task with its
//!   own fenced `UPDATE`: the raw cost of the two statements per task.
//! - `worker_tick`: a [`Worker`] with a no-op handler drains the queue with `tick()` (batch 32,
//!   attempts and completions concurrent): what a worker with instant upstream calls achieves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use retry_runtime::durable::{
    DurableQueue, DurableStore, EnqueueOptions, PgStore, PgStoreOptions, SqliteStore, TaskContext,
    Timestamp, Worker, WorkerConfig,
};

const OP: &str = "bench.op";
const BATCH: u32 = 32;
static KEY: AtomicU64 = AtomicU64::new(0);

async fn fill<S: DurableStore>(q: &DurableQueue<S>, n: u64) {
    for _ in 0..n {
        let k = KEY.fetch_add(1, Ordering::Relaxed);
        q.enqueue(
            OP,
            &format!("k{k}"),
            b"{\"amount\":500}",
            EnqueueOptions::new(),
        )
        .await
        .unwrap();
    }
}

async fn drain_store<S: DurableStore>(store: &S) -> u64 {
    let ops = vec![OP.to_owned()];
    let mut done = 0;
    loop {
        let now = Timestamp::now();
        let tasks = store
            .claim(
                "bench",
                &ops,
                BATCH,
                now.saturating_add(Duration::from_secs(60)),
                now,
            )
            .await
            .unwrap();
        if tasks.is_empty() {
            return done;
        }
        for t in tasks {
            assert!(
                store
                    .complete(&t.fence().unwrap(), None, Timestamp::now())
                    .await
                    .unwrap()
            );
            done += 1;
        }
    }
}

async fn drain_worker<S: DurableStore>(worker: &Worker<S>) -> u64 {
    let mut done = 0;
    loop {
        let stats = worker.tick().await.unwrap();
        if stats.claimed == 0 {
            return done;
        }
        done += stats.succeeded;
    }
}

fn bench_store<S: DurableStore>(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    name: &str,
    store: S,
) {
    let q = DurableQueue::new(store.clone());
    let worker = Worker::builder(store.clone())
        .handler(OP, |_t: TaskContext| async { Ok(()) })
        .config(
            WorkerConfig::new()
                .with_batch_size(BATCH)
                .with_worker_id("bench-worker"),
        )
        .build()
        .unwrap();
    let mut group = c.benchmark_group(format!("durable_claim/{name}"));
    group
        .throughput(Throughput::Elements(1))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    group.bench_function("store_claim_complete", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                fill(&q, iters).await;
                let start = Instant::now();
                assert_eq!(drain_store(&store).await, iters);
                start.elapsed()
            })
        })
    });
    group.bench_function("worker_tick", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                fill(&q, iters).await;
                let start = Instant::now();
                assert_eq!(drain_worker(&worker).await, iters);
                start.elapsed()
            })
        })
    });
    group.finish();
}

fn durable_claim(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    let dir = std::env::temp_dir().join(format!("retry-durable-bench-{}", std::process::id()));
    let sqlite = rt
        .block_on(SqliteStore::open(dir.join("bench.sqlite")))
        .unwrap();
    bench_store(c, &rt, "sqlite", sqlite.clone());
    rt.block_on(sqlite.close());
    let _ = std::fs::remove_dir_all(&dir);

    match std::env::var("TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => {
            let schema = format!("bench_{}", std::process::id());
            let pg = rt
                .block_on(PgStore::connect_with(
                    PgStoreOptions::new(url).with_schema(&schema),
                ))
                .unwrap();
            bench_store(c, &rt, "postgres", pg.clone());
            let drop = format!("DROP SCHEMA \"{schema}\" CASCADE");
            rt.block_on(
                retry_runtime::durable::sqlx::query(retry_runtime::durable::sqlx::AssertSqlSafe(
                    drop,
                ))
                .execute(pg.pool()),
            )
            .unwrap();
        }
        _ => eprintln!("durable_claim/postgres skipped: TEST_DATABASE_URL is not set"),
    }
}

criterion_group!(benches, durable_claim);
criterion_main!(benches);
