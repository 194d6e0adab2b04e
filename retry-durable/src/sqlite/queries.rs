//! Every statement of the SQLite store, in SQLite's SQL (parameters `?1`, `?2`, …). The
//! claim takes rows in one `UPDATE … WHERE task_id IN (SELECT … LIMIT n) RETURNING`: SQLite
//! has no row locks, but runs every write under its one writer lock, so two claimers never
//! take the same row. Lists (the operations a worker handles, a batch of completions) are one
//! JSON parameter read with `json_each`, so each statement is prepared once.

use crate::migrate;
use crate::sql::{Statements, task_columns};

pub(super) static STATEMENTS: Statements = Statements {
    enqueue: concat!(
        r#"
        INSERT INTO retry_durable_task (operation, idempotency_key, payload, status,
                retry_count, max_attempts, next_attempt_at, created_at, updated_at)
        VALUES (?1, ?2, ?3, 'pending', 0, ?4, ?5, ?6, ?6)
        ON CONFLICT (operation, idempotency_key) DO NOTHING
        RETURNING "#,
        task_columns!()
    ),
    claim: concat!(
        r#"
        WITH due AS MATERIALIZED (
            SELECT task_id AS due_id FROM retry_durable_task
            WHERE status = 'pending' AND next_attempt_at <= ?3
              AND operation IN (SELECT value FROM json_each(?4))
            ORDER BY next_attempt_at, task_id
            LIMIT ?5)
        UPDATE retry_durable_task
        SET status = 'running', locked_by = ?1, locked_until = ?2,
            retry_count = retry_count + 1, updated_at = ?3
        WHERE task_id IN (SELECT due_id FROM due)
        RETURNING "#,
        task_columns!()
    ),
    complete: r#"
        UPDATE retry_durable_task
        SET status = 'succeeded', locked_by = NULL, locked_until = NULL,
            last_error = NULL, output = done.done_output, updated_at = ?1
        FROM (SELECT CAST(value ->> 0 AS BIGINT) AS done_id,
                value ->> 1 AS done_owner,
                CAST(value ->> 2 AS BIGINT) AS done_attempt,
                unhex(value ->> 3) AS done_output
            FROM json_each(?2)) AS done
        WHERE task_id = done.done_id AND status = 'running'
          AND locked_by = done.done_owner AND retry_count = done.done_attempt
        RETURNING task_id
    "#,
    retry_later: r#"
        UPDATE retry_durable_task
        SET status = 'pending', locked_by = NULL, locked_until = NULL,
            last_error = ?4, next_attempt_at = ?5, updated_at = ?6
        WHERE task_id = ?1 AND status = 'running' AND locked_by = ?2 AND retry_count = ?3
    "#,
    mark_failed: r#"
        UPDATE retry_durable_task
        SET status = 'failed', locked_by = NULL, locked_until = NULL, last_error = ?4,
            alerted_at = NULL, alert_lease_until = NULL, updated_at = ?5
        WHERE task_id = ?1 AND status = 'running' AND locked_by = ?2 AND retry_count = ?3
    "#,
    release: r#"
        UPDATE retry_durable_task
        SET status = 'pending', locked_by = NULL, locked_until = NULL,
            retry_count = retry_count - 1, next_attempt_at = ?4, updated_at = ?4
        WHERE task_id = ?1 AND status = 'running' AND locked_by = ?2 AND retry_count = ?3
    "#,
    expired: concat!(
        r#"
        SELECT "#,
        task_columns!(),
        r#" FROM retry_durable_task
        WHERE status = 'running' AND locked_until < ?1
        ORDER BY locked_until, task_id LIMIT ?2
    "#
    ),
    rescue: r#"
        UPDATE retry_durable_task
        SET status = ?4, next_attempt_at = ?5, last_error = ?6,
            locked_by = NULL, locked_until = NULL,
            alerted_at = NULL, alert_lease_until = NULL, updated_at = ?7
        WHERE task_id = ?1 AND status = 'running' AND locked_by = ?2 AND retry_count = ?3
          AND locked_until < ?7
    "#,
    claim_alerts: concat!(
        r#"
        WITH owed AS MATERIALIZED (
            SELECT task_id AS owed_id FROM retry_durable_task
            WHERE status = 'failed' AND alerted_at IS NULL
              AND (alert_lease_until IS NULL OR alert_lease_until <= ?2)
            ORDER BY updated_at, task_id LIMIT ?3)
        UPDATE retry_durable_task SET alert_lease_until = ?1
        WHERE task_id IN (SELECT owed_id FROM owed)
        RETURNING "#,
        task_columns!()
    ),
    ack_alert: r#"
        UPDATE retry_durable_task SET alerted_at = ?2, alert_lease_until = NULL
        WHERE task_id = ?1 AND status = 'failed' AND alerted_at IS NULL
    "#,
    get: concat!(
        r#"
        SELECT "#,
        task_columns!(),
        r#" FROM retry_durable_task WHERE task_id = ?1
    "#
    ),
    find: concat!(
        r#"
        SELECT "#,
        task_columns!(),
        r#" FROM retry_durable_task
        WHERE operation = ?1 AND idempotency_key = ?2
    "#
    ),
    counts: r#"
        SELECT status, COUNT(*) FROM retry_durable_task GROUP BY status
    "#,
    failed: concat!(
        r#"
        SELECT "#,
        task_columns!(),
        r#" FROM retry_durable_task WHERE status = 'failed'
        ORDER BY updated_at DESC, task_id DESC LIMIT ?1
    "#
    ),
    requeue: concat!(
        r#"
        UPDATE retry_durable_task
        SET status = 'pending', retry_count = 0, next_attempt_at = ?2,
            alerted_at = NULL, alert_lease_until = NULL, updated_at = ?2
        WHERE task_id = ?1 AND status IN ('failed', 'cancelled')
        RETURNING "#,
        task_columns!()
    ),
    cancel: concat!(
        r#"
        UPDATE retry_durable_task
        SET status = 'cancelled', alert_lease_until = NULL, updated_at = ?2
        WHERE task_id = ?1 AND status IN ('pending', 'failed')
        RETURNING "#,
        task_columns!()
    ),
    applied: r#"
        SELECT version, checksum FROM retry_durable_migrations ORDER BY version
    "#,
    record_migration: r#"
        INSERT INTO retry_durable_migrations (version, name, checksum, applied_at)
        VALUES (?1, ?2, ?3, ?4)
    "#,
    migrations_table: r#"
        CREATE TABLE IF NOT EXISTS retry_durable_migrations (
            version INTEGER PRIMARY KEY, name TEXT NOT NULL,
            checksum TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT
    "#,
    migration_lock: None,
    // Takes the write lock up front: a deferred transaction that upgrades to writing can fail
    // with `SQLITE_BUSY` instead of waiting.
    begin_write: Some("BEGIN IMMEDIATE"),
    migrations: migrate::SQLITE,
};
