//! Each database's SQL, written out in full: the statements differ only in their parameter
//! syntax and in the sweep (PostgreSQL skips rows another replica's sweep locked).

/// One database's SQL. Parameters are numbered (`?1` on SQLite, `$1` on PostgreSQL).
#[derive(Debug)]
pub struct Statements {
    /// 1 scope, 2 key, 3 fingerprint, 4 token, 5 lease until, 6 expires at, 7 now.
    pub(super) insert: &'static str,
    /// 1 scope, 2 key: fingerprint, token, state, lease until, expires at, status, headers,
    /// body, not stored.
    pub(super) get: &'static str,
    /// 1 scope, 2 key, 3 previous token, 4 fingerprint, 5 token, 6 lease until, 7 expires
    /// at, 8 now, 9 previous state.
    pub(super) take_over: &'static str,
    /// 1 scope, 2 key, 3 token, 4 status, 5 headers, 6 body, 7 not stored (`''`: stored),
    /// 8 now.
    pub(super) complete: &'static str,
    /// 1 scope, 2 key, 3 token.
    pub(super) release: &'static str,
    /// 1 now, 2 batch.
    pub(super) sweep: &'static str,
    /// Creates the tracking table.
    pub(super) migrations_table: &'static str,
    /// The versions applied, with their checksums.
    pub(super) applied: &'static str,
    /// Records migration 1 (name 2, checksum 3) applied at 4.
    pub(super) record_migration: &'static str,
    /// Run first in the migration transaction (PostgreSQL: an advisory lock).
    pub(super) migration_lock: Option<&'static str>,
    /// How the migration transaction begins (SQLite: `BEGIN IMMEDIATE`).
    pub(super) begin_write: Option<&'static str>,
    /// The migrations, in order: (version, name, script).
    pub(super) migrations: &'static [(i64, &'static str, &'static str)],
}

#[cfg(feature = "sqlite")]
pub(super) static SQLITE: Statements = Statements {
    insert: "INSERT INTO retry_idempotency_key (scope, idempotency_key, fingerprint, token, \
             state, lease_until, expires_at, created_at) \
             VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6, ?7) \
             ON CONFLICT (scope, idempotency_key) DO NOTHING",
    get: "SELECT fingerprint, token, state, lease_until, expires_at, status, headers, body, \
          not_stored FROM retry_idempotency_key WHERE scope = ?1 AND idempotency_key = ?2",
    take_over: "UPDATE retry_idempotency_key SET fingerprint = ?4, token = ?5, \
                state = 'running', lease_until = ?6, expires_at = ?7, created_at = ?8, \
                status = NULL, headers = NULL, body = NULL, not_stored = NULL, \
                completed_at = NULL \
                WHERE scope = ?1 AND idempotency_key = ?2 AND token = ?3 AND state = ?9",
    complete: "UPDATE retry_idempotency_key SET state = 'done', status = ?4, headers = ?5, \
               body = ?6, not_stored = NULLIF(?7, ''), completed_at = ?8 \
               WHERE scope = ?1 AND idempotency_key = ?2 AND token = ?3 AND state = 'running'",
    release: "DELETE FROM retry_idempotency_key \
              WHERE scope = ?1 AND idempotency_key = ?2 AND token = ?3 AND state = 'running'",
    sweep: "DELETE FROM retry_idempotency_key WHERE rowid IN (\
                SELECT rowid FROM retry_idempotency_key \
                WHERE expires_at <= ?1 AND (state = 'done' OR lease_until <= ?1) \
                ORDER BY expires_at LIMIT ?2)",
    migrations_table: "CREATE TABLE IF NOT EXISTS retry_idempotency_migrations (\
                       version INTEGER PRIMARY KEY, name TEXT NOT NULL, \
                       checksum TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT",
    applied: "SELECT version, checksum FROM retry_idempotency_migrations ORDER BY version",
    record_migration: "INSERT INTO retry_idempotency_migrations \
                       (version, name, checksum, applied_at) VALUES (?1, ?2, ?3, ?4)",
    migration_lock: None,
    begin_write: Some("BEGIN IMMEDIATE"),
    migrations: &[(
        1,
        "key_table",
        include_str!("../../migrations/sqlite/0001_key_table.sql"),
    )],
};

#[cfg(feature = "postgres")]
pub(super) static POSTGRES: Statements = Statements {
    insert: "INSERT INTO retry_idempotency_key (scope, idempotency_key, fingerprint, token, \
             state, lease_until, expires_at, created_at) \
             VALUES ($1, $2, $3, $4, 'running', $5, $6, $7) \
             ON CONFLICT (scope, idempotency_key) DO NOTHING",
    get: "SELECT fingerprint, token, state, lease_until, expires_at, status, headers, body, \
          not_stored FROM retry_idempotency_key WHERE scope = $1 AND idempotency_key = $2",
    take_over: "UPDATE retry_idempotency_key SET fingerprint = $4, token = $5, \
                state = 'running', lease_until = $6, expires_at = $7, created_at = $8, \
                status = NULL, headers = NULL, body = NULL, not_stored = NULL, \
                completed_at = NULL \
                WHERE scope = $1 AND idempotency_key = $2 AND token = $3 AND state = $9",
    complete: "UPDATE retry_idempotency_key SET state = 'done', status = $4, headers = $5, \
               body = $6, not_stored = NULLIF($7, ''), completed_at = $8 \
               WHERE scope = $1 AND idempotency_key = $2 AND token = $3 AND state = 'running'",
    release: "DELETE FROM retry_idempotency_key \
              WHERE scope = $1 AND idempotency_key = $2 AND token = $3 AND state = 'running'",
    sweep: "DELETE FROM retry_idempotency_key WHERE (scope, idempotency_key) IN (\
                SELECT scope, idempotency_key FROM retry_idempotency_key \
                WHERE expires_at <= $1 AND (state = 'done' OR lease_until <= $1) \
                ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
    migrations_table: "CREATE TABLE IF NOT EXISTS retry_idempotency_migrations (\
                       version BIGINT PRIMARY KEY, name TEXT NOT NULL, \
                       checksum TEXT NOT NULL, applied_at BIGINT NOT NULL)",
    applied: "SELECT version, checksum FROM retry_idempotency_migrations ORDER BY version",
    record_migration: "INSERT INTO retry_idempotency_migrations \
                       (version, name, checksum, applied_at) VALUES ($1, $2, $3, $4)",
    // An arbitrary key, not the queue's: "retry_id" in ASCII.
    migration_lock: Some("SELECT pg_advisory_xact_lock(8243122727982950756)"),
    begin_write: None,
    migrations: &[(
        1,
        "key_table",
        include_str!("../../migrations/postgres/0001_key_table.sql"),
    )],
};
