//! Shared helpers for the durable-queue tests: per-test databases, the conformance suite that
//! both backends run, and a fake upstream that deduplicates by idempotency key.
#![allow(dead_code)]

pub mod suite;
pub mod upstream;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use retry_durable::sqlx;
use retry_durable::{PgStore, PgStoreOptions, SqliteStore};

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{}_{:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        fastrand_u32()
    )
}

fn fastrand_u32() -> u32 {
    // No RNG dependency needed: the clock's nanoseconds are unique enough for names.
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
}

/// A SQLite database file in the temp directory, deleted (with its WAL files) on drop.
pub struct SqliteDb {
    pub path: PathBuf,
    pub store: SqliteStore,
}

impl SqliteDb {
    pub async fn new() -> SqliteDb {
        let dir = std::env::temp_dir().join(unique("retry-durable"));
        let path = dir.join("queue.sqlite");
        let store = SqliteStore::open(&path).await.expect("open sqlite store");
        SqliteDb { path, store }
    }

    pub async fn cleanup(self) {
        self.store.close().await;
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The PostgreSQL URL for tests, or `None` (after saying why) when they should be skipped.
/// Under `CI=true` a missing URL is a failure: CI must not silently skip the PostgreSQL suite.
pub fn pg_url() -> Option<String> {
    match std::env::var("TEST_DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var("CI").as_deref() == Ok("true") => panic!(
            "CI=true but TEST_DATABASE_URL is not set: `source .ci/postgres.sh` before running \
             the tests so the PostgreSQL conformance suite runs"
        ),
        _ => {
            eprintln!(
                "SKIPPED: PostgreSQL durable-queue test skipped because TEST_DATABASE_URL is not \
                 set (and CI is not `true`). Run `source .ci/postgres.sh` to start a private \
                 PostgreSQL and set it."
            );
            None
        }
    }
}

/// A private schema in the test database, dropped by `cleanup`.
pub struct PgDb {
    pub url: String,
    pub schema: String,
    pub store: PgStore,
}

impl PgDb {
    pub async fn new() -> Option<PgDb> {
        let url = pg_url()?;
        let schema = unique("t");
        let store = Self::connect(&url, &schema).await;
        Some(PgDb { url, schema, store })
    }

    pub async fn connect(url: &str, schema: &str) -> PgStore {
        PgStore::connect_with(PgStoreOptions::new(url).with_schema(schema))
            .await
            .expect("connect to TEST_DATABASE_URL")
    }

    pub async fn cleanup(self) {
        let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema);
        let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(self.store.pool())
            .await;
        self.store.close().await;
    }
}

/// Runs every conformance test against one backend; `ignore = "why";` before the backend marks
/// every test `#[ignore = "why"]`. `$db` is a type with
/// `async fn new() -> Option<Self>` (or `Self`), a `store` field and `async fn cleanup(self)`.
#[macro_export]
macro_rules! conformance_suite {
    // `ignore = "why"; make`: every test is `#[ignore = "why"]` (a backend that needs a server).
    (ignore = $why:literal; $make:expr) => {
        $crate::conformance_suite!(@all [#[ignore = $why]] $make);
    };
    ($make:expr) => {
        $crate::conformance_suite!(@all [] $make);
    };
    (@all $attrs:tt $make:expr) => {
        $crate::conformance_suite!(@each $attrs $make;
            enqueue_is_idempotent_and_refuses_missing_keys,
            claim_takes_due_tasks_once_and_counts_the_attempt,
            claim_only_takes_registered_operations,
            fenced_writes_from_a_rescued_worker_are_ignored,
            backoff_schedule_doubles_and_caps,
            jittered_retries_spread_within_the_upper_half_of_the_step,
            max_attempts_fail_and_alert_exactly_once,
            permanent_failure_fails_at_once,
            alert_owed_after_crash_between_fail_and_alert,
            failing_alert_hook_is_retried_until_delivered,
            expired_lease_is_rescued_and_completed,
            rescue_of_last_attempt_fails_and_alerts,
            rescue_timing_is_deterministic_under_a_seed,
            operator_requeue_and_cancel,
            counts_by_status,
            attempt_timeout_is_a_transient_failure,
            handler_panic_is_a_failed_attempt,
            graceful_shutdown_releases_unfinished_leases,
            concurrent_workers_claim_each_attempt_once,
            retry_after_is_honoured,
            every_attempt_gets_the_task_key,
            a_task_claimed_too_long_ago_is_not_run,
            a_handler_resumed_past_its_lease_sees_it_before_its_side_effect,
            results_are_looked_up_by_task_id,
            batched_completions_keep_the_fence,
            a_hand_off_wakes_an_idle_worker,
        );
    };
    (@each $attrs:tt $make:expr; $($name:ident),* $(,)?) => {
        $( $crate::conformance_suite!(@one $attrs $name $make); )*
    };
    (@one [$($attr:tt)*] $name:ident $make:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $($attr)*
        async fn $name() {
            let Some(db) = $make.await else { return };
            durable_support::suite::$name(db.store.clone()).await;
            db.cleanup().await;
        }
    };
}
