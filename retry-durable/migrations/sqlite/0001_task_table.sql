-- The durable task table (SQLite). Times are Unix milliseconds chosen by the caller's clock.
CREATE TABLE retry_durable_task (
    task_id           INTEGER PRIMARY KEY AUTOINCREMENT,
    operation         TEXT    NOT NULL CHECK (operation <> ''),
    idempotency_key   TEXT    NOT NULL CHECK (idempotency_key <> ''),
    payload           BLOB    NOT NULL,
    status            TEXT    NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
    retry_count       INTEGER NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    max_attempts      INTEGER NOT NULL CHECK (max_attempts >= 1),
    next_attempt_at   INTEGER NOT NULL,
    locked_by         TEXT,
    locked_until      INTEGER,
    last_error        TEXT,
    alerted_at        INTEGER,
    alert_lease_until INTEGER,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    CONSTRAINT retry_durable_task_idem UNIQUE (operation, idempotency_key)
) STRICT;

CREATE INDEX retry_durable_task_due ON retry_durable_task (next_attempt_at, task_id)
    WHERE status = 'pending';
CREATE INDEX retry_durable_task_lease ON retry_durable_task (locked_until)
    WHERE status = 'running';
CREATE INDEX retry_durable_task_alert ON retry_durable_task (updated_at, task_id)
    WHERE status = 'failed' AND alerted_at IS NULL;
