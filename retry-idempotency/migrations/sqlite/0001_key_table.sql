-- One row per (client scope, idempotency key): the run that holds the key, then its response.
-- Times are unix milliseconds from the layer's clock. `scope` is the SHA-256 of the client
-- scope (an API key or tenant never lands in the table in clear).
CREATE TABLE retry_idempotency_key (
    scope           BLOB    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    fingerprint     BLOB    NOT NULL,
    token           INTEGER NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('running', 'done')),
    lease_until     INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    status          INTEGER,
    headers         BLOB,
    body            BLOB,
    not_stored      TEXT,
    created_at      INTEGER NOT NULL,
    completed_at    INTEGER,
    PRIMARY KEY (scope, idempotency_key)
) STRICT;

-- The sweeper deletes expired keys oldest first, a small batch at a time.
CREATE INDEX retry_idempotency_key_expiry ON retry_idempotency_key (expires_at);
