//! Every statement of the PostgreSQL store, in PostgreSQL's SQL (parameters `$1`, `$2`, …).
//! Claims and alert reservations pick their rows with `FOR UPDATE SKIP LOCKED` inside the
//! statement that changes them, so concurrent claimers skip each other's rows and the locks
//! commit with the change. A rescue reads expired leases plainly; its fenced update applies
//! once, whichever instance gets there first. Idempotency keys live in `retry_durable_key` (migration
//! 4 says why). Lists are one JSONB parameter, so each statement is prepared once; a batch's
//! ids are matched with `= ANY(ARRAY(…))`, which uses the primary key where a join could
//! make the planner hash the whole table.

use crate::migrate;
use crate::sql::{Statements, task_columns};

/// Serialises migrations across instances (an arbitrary key: "retry_du" in ASCII).
pub(super) const MIGRATION_LOCK: &str = "SELECT pg_advisory_xact_lock(8243122727982949493)";

pub(super) static STATEMENTS: Statements = Statements {
    enqueue: concat!(
        r#"
        WITH k AS (
            INSERT INTO retry_durable_key (operation, idempotency_key, task_id)
            VALUES ($1, $2,
                    nextval(pg_get_serial_sequence('retry_durable_task', 'task_id')))
            ON CONFLICT (operation, idempotency_key) DO NOTHING
            RETURNING task_id)
        INSERT INTO retry_durable_task (task_id, operation, idempotency_key,
                payload, status, retry_count, max_attempts, next_attempt_at,
                created_at, updated_at)
        OVERRIDING SYSTEM VALUE
        SELECT k.task_id, $1, $2, $3, 'pending', 0, $4, $5, $6, $6 FROM k
        RETURNING "#,
        task_columns!()
    ),
    claim: concat!(
        r#"
        WITH due AS MATERIALIZED (
            SELECT task_id AS due_id FROM retry_durable_task
            WHERE status = 'pending' AND next_attempt_at <= $3
              AND operation IN (SELECT jsonb_array_elements_text(CAST($4 AS JSONB)))
            ORDER BY next_attempt_at, task_id
            LIMIT $5 FOR UPDATE SKIP LOCKED)
        UPDATE retry_durable_task
        SET status = 'running', locked_by = $1, locked_until = $2,
            retry_count = retry_count + 1, updated_at = $3
        WHERE task_id = ANY(ARRAY(SELECT due_id FROM due))
        RETURNING "#,
        task_columns!()
    ),
    complete: r#"
        UPDATE retry_durable_task
        SET status = 'succeeded', locked_by = NULL, locked_until = NULL,
            last_error = NULL, output = done.done_output, updated_at = $1
        FROM (SELECT CAST(value ->> 0 AS BIGINT) AS done_id,
                value ->> 1 AS done_owner,
                CAST(value ->> 2 AS BIGINT) AS done_attempt,
                decode(value ->> 3, 'hex') AS done_output
            FROM jsonb_array_elements(CAST($2 AS JSONB)) AS j(value)) AS done
        WHERE task_id = done.done_id AND status = 'running'
          AND locked_by = done.done_owner AND retry_count = done.done_attempt
        RETURNING task_id
    "#,
    retry_later: r#"
        UPDATE retry_durable_task
        SET status = 'pending', locked_by = NULL, locked_until = NULL,
            last_error = $4, next_attempt_at = $5, updated_at = $6
        WHERE task_id = $1 AND status = 'running' AND locked_by = $2 AND retry_count = $3
    "#,
    mark_failed: r#"
        UPDATE retry_durable_task
        SET status = 'failed', locked_by = NULL, locked_until = NULL, last_error = $4,
            alerted_at = NULL, alert_lease_until = NULL, updated_at = $5
        WHERE task_id = $1 AND status = 'running' AND locked_by = $2 AND retry_count = $3
    "#,
    release: r#"
        UPDATE retry_durable_task
        SET status = 'pending', locked_by = NULL, locked_until = NULL,
            retry_count = retry_count - 1, next_attempt_at = $4, updated_at = $4
        WHERE task_id = $1 AND status = 'running' AND locked_by = $2 AND retry_count = $3
    "#,
    expired: concat!(
        r#"
        SELECT "#,
        task_columns!(),
        r#" FROM retry_durable_task
        WHERE status = 'running' AND locked_until < $1
        ORDER BY locked_until, task_id LIMIT $2
    "#
    ),
    rescue: r#"
        UPDATE retry_durable_task
        SET status = $4, next_attempt_at = $5, last_error = $6,
            locked_by = NULL, locked_until = NULL,
            alerted_at = NULL, alert_lease_until = NULL, updated_at = $7
        WHERE task_id = $1 AND status = 'running' AND locked_by = $2 AND retry_count = $3
          AND locked_until < $7
    "#,
    claim_alerts: concat!(
        r#"
        WITH owed AS MATERIALIZED (
            SELECT task_id AS owed_id FROM retry_durable_task
            WHERE status = 'failed' AND alerted_at IS NULL
              AND (alert_lease_until IS NULL OR alert_lease_until <= $2)
            ORDER BY updated_at, task_id LIMIT $3 FOR UPDATE SKIP LOCKED)
        UPDATE retry_durable_task SET alert_lease_until = $1
        WHERE task_id = ANY(ARRAY(SELECT owed_id FROM owed))
        RETURNING "#,
        task_columns!()
    ),
    ack_alert: r#"
        UPDATE retry_durable_task SET alerted_at = $2, alert_lease_until = NULL
        WHERE task_id = $1 AND status = 'failed' AND alerted_at IS NULL
    "#,
    get: concat!(
        r#"
        SELECT "#,
        task_columns!(),
        r#" FROM retry_durable_task WHERE task_id = $1
    "#
    ),
    find: concat!(
        r#"
        SELECT "#,
        task_columns!(),
        r#" FROM retry_durable_task
        WHERE task_id = (SELECT task_id FROM retry_durable_key
            WHERE operation = $1 AND idempotency_key = $2)
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
        ORDER BY updated_at DESC, task_id DESC LIMIT $1
    "#
    ),
    requeue: concat!(
        r#"
        UPDATE retry_durable_task
        SET status = 'pending', retry_count = 0, next_attempt_at = $2,
            alerted_at = NULL, alert_lease_until = NULL, updated_at = $2
        WHERE task_id = $1 AND status IN ('failed', 'cancelled')
        RETURNING "#,
        task_columns!()
    ),
    cancel: concat!(
        r#"
        UPDATE retry_durable_task
        SET status = 'cancelled', alert_lease_until = NULL, updated_at = $2
        WHERE task_id = $1 AND status IN ('pending', 'failed')
        RETURNING "#,
        task_columns!()
    ),
    applied: r#"
        SELECT version, checksum FROM retry_durable_migrations ORDER BY version
    "#,
    record_migration: r#"
        INSERT INTO retry_durable_migrations (version, name, checksum, applied_at)
        VALUES ($1, $2, $3, $4)
    "#,
    migrations_table: r#"
        CREATE TABLE IF NOT EXISTS retry_durable_migrations (
            version BIGINT PRIMARY KEY, name TEXT NOT NULL,
            checksum TEXT NOT NULL, applied_at BIGINT NOT NULL)
    "#,
    migration_lock: Some(MIGRATION_LOCK),
    begin_write: None,
    migrations: migrate::POSTGRES,
};
