//! The durable queue on SQLite: the shared conformance suite plus SQLite-specific checks
//! (file creation, WAL + synchronous=FULL, restart, migrations, bad rows).

mod durable_support;

use durable_support::SqliteDb;
use retry_durable::sqlx;
use retry_durable::{
    DurableError, DurableQueue, DurableStore, EnqueueOptions, SqliteStore, TaskContext, TaskStatus,
    Worker,
};

conformance_suite!(async { Some(SqliteDb::new().await) });

#[tokio::test]
async fn creates_the_file_with_wal_and_full_sync() {
    let db = SqliteDb::new().await;
    assert!(
        db.path.exists(),
        "the database file and its directory are created"
    );
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(db.store.pool())
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(db.store.pool())
        .await
        .unwrap();
    assert_eq!(sync, 2, "synchronous = FULL");
    db.cleanup().await;
}

#[tokio::test]
async fn migrations_apply_once_in_our_own_table() {
    let db = SqliteDb::new().await;
    let again = SqliteStore::open(&db.path).await.unwrap();
    let rows: Vec<(i64, String)> =
        sqlx::query_as("SELECT version, name FROM retry_durable_migrations ORDER BY version")
            .fetch_all(again.pool())
            .await
            .unwrap();
    assert_eq!(
        rows,
        vec![(1, "task_table".to_owned()), (2, "task_output".to_owned())]
    );
    let sqlx_table: Option<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE name = '_sqlx_migrations'")
            .fetch_optional(again.pool())
            .await
            .unwrap();
    assert_eq!(
        sqlx_table, None,
        "the application's sqlx migrations table is left alone"
    );

    // A schema from a newer library version is refused with a clear message.
    sqlx::query("INSERT INTO retry_durable_migrations VALUES (99, 'future', 'x', 0)")
        .execute(again.pool())
        .await
        .unwrap();
    again.close().await;
    let err = SqliteStore::open(&db.path).await.unwrap_err();
    assert!(err.to_string().contains("upgrade the library"), "{err}");
    db.cleanup().await;
}

#[tokio::test]
async fn tasks_enqueued_before_a_restart_are_worked_after_it() {
    let db = SqliteDb::new().await;
    let q = DurableQueue::new(db.store.clone());
    for i in 0..5 {
        q.enqueue("op", &format!("k{i}"), b"", EnqueueOptions::new())
            .await
            .unwrap();
    }
    db.store.close().await; // the process "stops"

    let reopened = SqliteStore::open(&db.path).await.unwrap();
    let worker = Worker::builder(reopened.clone())
        .handler("op", |_t: TaskContext| async { Ok(()) })
        .build()
        .unwrap();
    assert_eq!(worker.tick().await.unwrap().succeeded, 5);
    assert_eq!(reopened.counts().await.unwrap().succeeded, 5);
    reopened.close().await;
    db.cleanup().await;
}

#[tokio::test]
async fn a_bad_row_is_a_located_error_not_a_panic() {
    let db = SqliteDb::new().await;
    let q = DurableQueue::new(db.store.clone());
    let id = q
        .enqueue("op", "k", b"", EnqueueOptions::new())
        .await
        .unwrap()
        .task_id;
    // Simulate a row written by a newer version (or by hand): bypass the CHECK constraint.
    let mut conn = db.store.pool().acquire().await.unwrap();
    sqlx::query("PRAGMA ignore_check_constraints = ON")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("UPDATE retry_durable_task SET status = 'paused' WHERE task_id = ?1")
        .bind(id.0)
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("PRAGMA ignore_check_constraints = OFF")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);

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
    let msg = err.to_string();
    assert!(msg.contains(&format!("`status` of task {id}")), "{msg}");
    assert!(msg.contains("\"paused\""), "{msg}");
    let err = db.store.counts().await.unwrap_err();
    assert!(err.to_string().contains("paused"), "{err}");

    // A wrongly typed column is located too.
    sqlx::query("UPDATE retry_durable_task SET status = 'pending' WHERE task_id = ?1")
        .bind(id.0)
        .execute(db.store.pool())
        .await
        .unwrap();
    assert_eq!(
        db.store.get(id).await.unwrap().unwrap().status,
        TaskStatus::Pending
    );
    db.cleanup().await;
}
