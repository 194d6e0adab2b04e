//! [`KeyStore`](crate::store::KeyStore) on SQLite and PostgreSQL: one implementation over
//! sqlx, each database's SQL written out in full in [`statements`].
//!
//! The statements differ only in their parameter syntax and in the sweep: PostgreSQL deletes
//! rows it locked with `FOR UPDATE SKIP LOCKED`, so replicas sweeping at once skip each other's
//! batches; SQLite runs every write under its one writer lock. The schema is migrated in its own
//! tracking table, `retry_idempotency_migrations`, away from the queue's and the application's.

mod dialect;
mod driver;
mod keys;
mod migrate;
mod statements;
mod writer;

pub use dialect::KeyDialect;
#[cfg(feature = "postgres")]
pub use keys::PgKeys;
pub use keys::SqlKeys;
#[cfg(feature = "sqlite")]
pub use keys::SqliteKeys;
