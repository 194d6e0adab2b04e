-- The durable task table (PostgreSQL). Times are Unix milliseconds chosen by the caller's clock,
-- so tests can move time; keep instance clocks NTP-synchronised.
CREATE TABLE retry_durable_task (
    task_id           BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation         TEXT    NOT NULL CHECK (operation <> ''),
    idempotency_key   TEXT    NOT NULL CHECK (idempotency_key <> ''),
    payload           BYTEA   NOT NULL,
    status            TEXT    NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
    retry_count       INTEGER NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    max_attempts      INTEGER NOT NULL CHECK (max_attempts >= 1),
    next_attempt_at   BIGINT  NOT NULL,
    locked_by         TEXT,
    locked_until      BIGINT,
    last_error        TEXT,
    alerted_at        BIGINT,
    alert_lease_until BIGINT,
    created_at        BIGINT  NOT NULL,
    updated_at        BIGINT  NOT NULL,
    CONSTRAINT retry_durable_task_idem UNIQUE (operation, idempotency_key)
);

CREATE INDEX retry_durable_task_due ON retry_durable_task (next_attempt_at, task_id)
    WHERE status = 'pending';
CREATE INDEX retry_durable_task_lease ON retry_durable_task (locked_until)
    WHERE status = 'running';
CREATE INDEX retry_durable_task_alert ON retry_durable_task (updated_at, task_id)
    WHERE status = 'failed' AND alerted_at IS NULL;
