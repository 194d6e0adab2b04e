-- One row per (client scope, idempotency key): the run that holds the key, then its response.
-- Times are unix milliseconds from the layer's clock. `scope` is the SHA-256 of the client
-- scope (an API key or tenant never lands in the table in clear).
CREATE TABLE retry_idempotency_key (
    scope           BYTEA  NOT NULL,
    idempotency_key TEXT   NOT NULL,
    fingerprint     BYTEA  NOT NULL,
    token           BIGINT NOT NULL,
    state           TEXT   NOT NULL CHECK (state IN ('running', 'done')),
    lease_until     BIGINT NOT NULL,
    expires_at      BIGINT NOT NULL,
    status          BIGINT,
    headers         BYTEA,
    body            BYTEA,
    not_stored      TEXT,
    created_at      BIGINT NOT NULL,
    completed_at    BIGINT,
    PRIMARY KEY (scope, idempotency_key)
);

-- The sweeper deletes expired keys oldest first, a small batch at a time.
CREATE INDEX retry_idempotency_key_expiry ON retry_idempotency_key (expires_at);
