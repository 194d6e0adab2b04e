//! The Idempotency-Key layer on SQLite: the shared suite.

mod idempotency_support;

use idempotency_support::SqliteDb;

idempotency_suite!(async { Some(SqliteDb::new().await) });
