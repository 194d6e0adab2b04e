//! What a database adds to the shared key store: its SQL, whether its writes go through one
//! writer, and its name in errors.

use retry_durable::sqlx;

use super::driver::Driver;
#[cfg(feature = "postgres")]
use super::statements::POSTGRES;
#[cfg(feature = "sqlite")]
use super::statements::SQLITE;
use super::statements::Statements;
use crate::store::StoreError;

/// A database the key store runs on. Implemented for `sqlx::Sqlite` and `sqlx::Postgres`
/// (behind the `sqlite` and `postgres` features).
pub trait KeyDialect: Driver {
    /// `"sqlite"` or `"postgres"`.
    const BACKEND: &'static str;
    /// Its SQL.
    const STATEMENTS: &'static Statements;
    /// Whether this process's writes are committed in groups by one writer task (SQLite has
    /// one writer and pays a sync per commit: see [`SqlKeys`](super::SqlKeys)).
    const SINGLE_WRITER: bool;
}

#[cfg(feature = "sqlite")]
impl KeyDialect for sqlx::Sqlite {
    const BACKEND: &'static str = "sqlite";
    const STATEMENTS: &'static Statements = &SQLITE;
    const SINGLE_WRITER: bool = true;
}

#[cfg(feature = "postgres")]
impl KeyDialect for sqlx::Postgres {
    const BACKEND: &'static str = "postgres";
    const STATEMENTS: &'static Statements = &POSTGRES;
    const SINGLE_WRITER: bool = false;
}

/// The error of a failed `action` (a phrase: "read a key") on `DB`'s database.
pub(super) fn db_error<DB: KeyDialect>(
    action: &'static str,
) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Database {
        backend: DB::BACKEND,
        action,
        source,
    }
}
