//! What the store needs from a sqlx driver, said once: bind values, run a statement, read a
//! task row with its bad values located.

use std::future::Future;

use sqlx::query::Query;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type};

use super::statements::COLUMNS;
use crate::error::DurableError;
use crate::store::StoreResult;
use crate::task::{RawTask, Task};

/// A value bound to a statement parameter.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// An integer (`BIGINT`).
    Int(i64),
    /// Text.
    Text(&'a str),
    /// Bytes (`BLOB`/`BYTEA`).
    Bytes(&'a [u8]),
}

/// How many rows a statement changed (sqlx's drivers each have their own result type).
pub trait RowsAffected {
    /// The count.
    fn rows(&self) -> u64;
}

/// What the store needs from a sqlx driver, said once: run a statement on a connection, read
/// a task row. Implemented for every driver whose types fit, so a [`Dialect`] only adds SQL.
pub trait Driver: Database {
    /// Runs `sql` with `args`; the number of rows changed.
    fn execute<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c;

    /// Runs a script of several statements, without parameters (a migration).
    fn script<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c;

    /// Runs `sql` with `args`; the rows.
    fn fetch<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + 'c;

    /// Column `i` as an integer.
    fn int(row: &Self::Row, i: usize) -> Result<i64, sqlx::Error>;

    /// Column `i` as text.
    fn text(row: &Self::Row, i: usize) -> Result<String, sqlx::Error>;

    /// A task row ([`COLUMNS`]), its bad values located.
    fn task(backend: &'static str, row: &Self::Row) -> StoreResult<Task>;
}

impl<DB> Driver for DB
where
    DB: Database,
    DB::QueryResult: RowsAffected,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'e> i64: Type<DB> + Encode<'e, DB> + Decode<'e, DB>,
    for<'e> String: Type<DB> + Decode<'e, DB>,
    for<'e> &'e str: Type<DB> + Encode<'e, DB>,
    for<'e> &'e [u8]: Type<DB> + Encode<'e, DB>,
    for<'e> Vec<u8>: Type<DB> + Decode<'e, DB>,
    usize: ColumnIndex<DB::Row>,
{
    fn execute<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c {
        let query = bind::<DB>(sql, args);
        async move { Ok(query.execute(conn).await?.rows()) }
    }

    async fn script(conn: &mut Self::Connection, sql: &'static str) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(sql).execute(conn).await.map(drop)
    }

    fn fetch<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + 'c {
        let query = bind::<DB>(sql, args);
        async move { query.fetch_all(conn).await }
    }

    fn int(row: &Self::Row, i: usize) -> Result<i64, sqlx::Error> {
        row.try_get(i)
    }

    fn text(row: &Self::Row, i: usize) -> Result<String, sqlx::Error> {
        row.try_get(i)
    }

    fn task(backend: &'static str, row: &Self::Row) -> StoreResult<Task> {
        fn get<'r, DB, T>(
            backend: &'static str,
            row: &'r DB::Row,
            i: usize,
            task_id: Option<i64>,
        ) -> StoreResult<T>
        where
            DB: Database,
            T: Decode<'r, DB> + Type<DB>,
            usize: ColumnIndex<DB::Row>,
        {
            row.try_get(i).map_err(|e| DurableError::BadRow {
                backend,
                task_id,
                column: COLUMNS[i],
                detail: e.to_string(),
            })
        }
        let id: i64 = get::<DB, _>(backend, row, 0, None)?;
        let at = Some(id);
        let raw = RawTask {
            id,
            operation: get::<DB, _>(backend, row, 1, at)?,
            idempotency_key: get::<DB, _>(backend, row, 2, at)?,
            payload: get::<DB, _>(backend, row, 3, at)?,
            status: get::<DB, _>(backend, row, 4, at)?,
            retry_count: get::<DB, _>(backend, row, 5, at)?,
            max_attempts: get::<DB, _>(backend, row, 6, at)?,
            next_attempt_at: get::<DB, _>(backend, row, 7, at)?,
            locked_by: get::<DB, _>(backend, row, 8, at)?,
            locked_until: get::<DB, _>(backend, row, 9, at)?,
            last_error: get::<DB, _>(backend, row, 10, at)?,
            output: get::<DB, _>(backend, row, 11, at)?,
            alerted_at: get::<DB, _>(backend, row, 12, at)?,
            created_at: get::<DB, _>(backend, row, 13, at)?,
            updated_at: get::<DB, _>(backend, row, 14, at)?,
        };
        Task::try_from_raw(backend, raw)
    }
}

pub(super) fn bind<DB>(sql: &'static str, args: &[Arg<'_>]) -> Query<'static, DB, DB::Arguments>
where
    DB: Database,
    for<'e> i64: Type<DB> + Encode<'e, DB>,
    for<'e> &'e str: Type<DB> + Encode<'e, DB>,
    for<'e> &'e [u8]: Type<DB> + Encode<'e, DB>,
{
    args.iter().fold(sqlx::query(sql), |q, arg| match *arg {
        Arg::Int(n) => q.bind(n),
        Arg::Text(t) => q.bind(t),
        Arg::Bytes(b) => q.bind(b),
    })
}
