//! The durable queue on PostgreSQL: the shared conformance suite plus PostgreSQL-specific
//! checks. They need a database, so they are `#[ignore]`d with that reason: `cargo test` lists
//! them as ignored instead of reporting a pass that checked nothing. To run them:
//!
//! ```text
//! source .ci/postgres.sh    # a private PostgreSQL on loopback; sets TEST_DATABASE_URL
//! cargo test -p retry-tests --all-features --test durable_postgres -- --include-ignored
//! ```
//!
//! `.ci/run` does exactly that. Run without `TEST_DATABASE_URL`, they fail under `CI=true` and
//! say they skipped otherwise.

mod durable_support;

use durable_support::PgDb;
use retry_durable::sqlx;
use retry_durable::{
    DurableError, DurableQueue, DurableStore, EnqueueOptions, PgStore, PgStoreOptions, TaskContext,
    Worker,
};

conformance_suite!(ignore = "needs PostgreSQL: source .ci/postgres.sh, then pass --include-ignored"; PgDb::new());

#[tokio::test]
#[ignore = "needs PostgreSQL: source .ci/postgres.sh, then pass --include-ignored"]
async fn migrations_apply_once_in_our_own_table() {
    let Some(db) = PgDb::new().await else { return };
    let again = PgDb::connect(&db.url, &db.schema).await;
    let rows: Vec<(i64, String)> =
        sqlx::query_as("SELECT version, name FROM retry_durable_migrations ORDER BY version")
            .fetch_all(again.pool())
            .await
            .unwrap();
    assert_eq!(
        rows,
        vec![
            (1, "task_table".to_owned()),
            (2, "task_output".to_owned()),
            (3, "notify".to_owned()),
            (4, "key_table".to_owned())
        ]
    );
    again.close().await;
    db.cleanup().await;
}

/// The checksum the store records for a migration (FNV-1a 64 of its SQL).
fn checksum(sql: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in sql.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[tokio::test]
#[ignore = "needs PostgreSQL: source .ci/postgres.sh, then pass --include-ignored"]
async fn a_queue_from_before_the_key_table_keeps_its_keys() {
    use sqlx::Connection as _;
    const BEFORE: [(i64, &str, &str); 3] = [
        (
            1,
            "task_table",
            include_str!("../../retry-durable/migrations/postgres/0001_task_table.sql"),
        ),
        (
            2,
            "task_output",
            include_str!("../../retry-durable/migrations/postgres/0002_task_output.sql"),
        ),
        (
            3,
            "notify",
            include_str!("../../retry-durable/migrations/postgres/0003_notify.sql"),
        ),
    ];
    let Some(db) = PgDb::new().await else { return };
    let schema = format!("{}_v3", db.schema);
    // A queue as the previous release left it: migrations 1-3 and one task.
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let setup = format!(
        "CREATE SCHEMA \"{schema}\"; SET search_path TO \"{schema}\";
         CREATE TABLE retry_durable_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL,
             checksum TEXT NOT NULL, applied_at BIGINT NOT NULL);"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(setup))
        .execute(&mut conn)
        .await
        .unwrap();
    for (version, name, sql) in BEFORE {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("INSERT INTO retry_durable_migrations VALUES ($1, $2, $3, 0)")
            .bind(version)
            .bind(name)
            .bind(checksum(sql))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let old: i64 = sqlx::query_scalar(
        "INSERT INTO retry_durable_task (operation, idempotency_key, payload, max_attempts,
             next_attempt_at, created_at, updated_at)
         VALUES ('op', 'old-key', '\\x00', 5, 0, 0, 0) RETURNING task_id",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    // This release opens it: migration 4 moves the keys, and the old key still deduplicates.
    let store = PgStore::connect_with(PgStoreOptions::new(&db.url).with_schema(&schema))
        .await
        .unwrap();
    let q = DurableQueue::new(store.clone());
    let again = q
        .enqueue("op", "old-key", b"x", EnqueueOptions::new())
        .await
        .unwrap();
    assert_eq!((again.task_id.0, again.created), (old, false));
    let new = q
        .enqueue("op", "new-key", b"x", EnqueueOptions::new())
        .await
        .unwrap();
    assert!(new.created && new.task_id.0 > old, "{new:?}");
    let dup = q
        .enqueue("op", "new-key", b"y", EnqueueOptions::new())
        .await
        .unwrap();
    assert_eq!((dup.task_id, dup.created), (new.task_id, false));
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM retry_durable_task")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(count, 2, "no task row for a repeated key");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(store.pool())
    .await
    .unwrap();
    store.close().await;
    db.cleanup().await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: source .ci/postgres.sh, then pass --include-ignored"]
async fn concurrent_startups_migrate_once() {
    let Some(db) = PgDb::new().await else { return };
    let schema = format!("{}_m", db.schema);
    let opts = PgStoreOptions::new(&db.url).with_schema(&schema);
    let (a, b, c) = tokio::join!(
        PgStore::connect_with(opts.clone()),
        PgStore::connect_with(opts.clone()),
        PgStore::connect_with(opts)
    );
    let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM retry_durable_migrations")
        .fetch_one(a.pool())
        .await
        .unwrap();
    assert_eq!(n, 4, "each of the four migrations applied once");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(a.pool())
    .await
    .unwrap();
    for s in [a, b, c] {
        s.close().await;
    }
    db.cleanup().await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: source .ci/postgres.sh, then pass --include-ignored"]
async fn tasks_enqueued_before_a_restart_are_worked_after_it() {
    let Some(db) = PgDb::new().await else { return };
    let q = DurableQueue::new(db.store.clone());
    for i in 0..5 {
        q.enqueue("op", &format!("k{i}"), b"", EnqueueOptions::new())
            .await
            .unwrap();
    }
    db.store.close().await;
    let reopened = PgDb::connect(&db.url, &db.schema).await;
    let worker = Worker::builder(reopened.clone())
        .handler("op", |_t: TaskContext| async { Ok(()) })
        .build()
        .unwrap();
    assert_eq!(worker.tick().await.unwrap().succeeded, 5);
    let cleanup = PgDb {
        store: reopened,
        ..db
    };
    cleanup.cleanup().await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: source .ci/postgres.sh, then pass --include-ignored"]
async fn a_bad_row_is_a_located_error_not_a_panic() {
    let Some(db) = PgDb::new().await else { return };
    let q = DurableQueue::new(db.store.clone());
    let id = q
        .enqueue("op", "k", b"", EnqueueOptions::new())
        .await
        .unwrap()
        .task_id;
    // The schema is private to this test: drop the CHECK to write what a newer version might.
    sqlx::query("ALTER TABLE retry_durable_task DROP CONSTRAINT retry_durable_task_status_check")
        .execute(db.store.pool())
        .await
        .unwrap();
    sqlx::query("UPDATE retry_durable_task SET status = 'paused' WHERE task_id = $1")
        .bind(id.0)
        .execute(db.store.pool())
        .await
        .unwrap();
    let err = db.store.get(id).await.unwrap_err();
    assert!(
        matches!(
            err,
            DurableError::BadRow {
                column: "status",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains(&format!("`status` of task {id}")),
        "{err}"
    );
    db.cleanup().await;
}

/// Another process's hand-off wakes an idle worker through `LISTEN`/`NOTIFY`: the hand-off
/// goes through a second store (its own pool, as another instance would), whose in-process
/// wake-up the worker does not share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: source .ci/postgres.sh, then pass --include-ignored"]
async fn a_hand_off_from_another_process_wakes_the_worker() {
    let Some(db) = PgDb::new().await else { return };
    let other = PgDb::connect(&db.url, &db.schema).await;
    durable_support::suite::a_hand_off_wakes_an_idle_worker_with(db.store.clone(), other.clone())
        .await;
    other.close().await;
    db.cleanup().await;
}
