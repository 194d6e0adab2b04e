-- Idempotency keys move to a table of their own, written once per task and never updated.
-- PostgreSQL writes a new version of a row on every update, and unless the update is "HOT"
-- (impossible here: the claim and the completion change `status`, which the partial indexes
-- name), every index of the table gets an entry for the new version. The unique index on
-- (operation, idempotency_key) was the widest of them, paid twice per task (claim and
-- completion) for a value that never changes; in its own table it is paid once, at enqueue.
-- No foreign key: the enqueue writes both rows in one statement, and tasks are never deleted
-- by the store.
CREATE TABLE retry_durable_key (
    operation       TEXT   NOT NULL,
    idempotency_key TEXT   NOT NULL,
    task_id         BIGINT NOT NULL,
    PRIMARY KEY (operation, idempotency_key)
);

INSERT INTO retry_durable_key (operation, idempotency_key, task_id)
    SELECT operation, idempotency_key, task_id FROM retry_durable_task;

ALTER TABLE retry_durable_task DROP CONSTRAINT retry_durable_task_idem;
