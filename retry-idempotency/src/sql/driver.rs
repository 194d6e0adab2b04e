//! What the store needs of a sqlx driver: binding values, running statements, reading a key's
//! row; implemented once for every database whose types fit.

use std::future::Future;

use retry_durable::Timestamp;
use retry_durable::sqlx::{
    self, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type,
};

use crate::store::{Record, RecordState, StoredResponse};

/// A value bound to a parameter.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// `BIGINT`/`INTEGER`.
    Int(i64),
    /// Text.
    Text(&'a str),
    /// `BYTEA`/`BLOB`.
    Bytes(&'a [u8]),
}

/// What the store needs of a sqlx driver; implemented for every database whose types fit.
#[doc(hidden)]
pub trait Driver: Database {
    /// Runs `sql`: the number of rows changed.
    #[doc(hidden)]
    fn run<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c;

    /// Runs `sql`: the rows.
    #[doc(hidden)]
    fn rows<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + 'c;

    /// Runs a script without parameters.
    #[doc(hidden)]
    fn script<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c;

    /// A row of `get` as a record.
    #[doc(hidden)]
    fn record(row: &Self::Row) -> Result<Record, String>;

    /// A `(version, checksum)` row.
    #[doc(hidden)]
    fn applied(row: &Self::Row) -> Result<(i64, String), sqlx::Error>;
}

/// How many rows a statement changed.
#[doc(hidden)]
pub trait RowsAffected {
    /// The count.
    fn rows(&self) -> u64;
}

#[cfg(feature = "sqlite")]
impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

#[cfg(feature = "postgres")]
impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

fn bind<DB>(sql: &'static str, args: &[Arg<'_>]) -> sqlx::query::Query<'static, DB, DB::Arguments>
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
    fn run<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c {
        let query = bind::<DB>(sql, args);
        async move { Ok(query.execute(conn).await?.rows()) }
    }

    fn rows<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + 'c {
        let query = bind::<DB>(sql, args);
        async move { query.fetch_all(conn).await }
    }

    async fn script(conn: &mut Self::Connection, sql: &'static str) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(sql).execute(conn).await.map(drop)
    }

    fn record(row: &Self::Row) -> Result<Record, String> {
        fn e(column: &'static str) -> impl FnOnce(sqlx::Error) -> String {
            move |err| format!("column {column}: {err}")
        }
        let fingerprint: Vec<u8> = row.try_get(0).map_err(e("fingerprint"))?;
        let token: i64 = row.try_get(1).map_err(e("token"))?;
        let state: String = row.try_get(2).map_err(e("state"))?;
        let lease_until: i64 = row.try_get(3).map_err(e("lease_until"))?;
        let expires_at: i64 = row.try_get(4).map_err(e("expires_at"))?;
        let state = match state.as_str() {
            "running" => RecordState::Running {
                lease_until: Timestamp::from_unix_millis(lease_until),
            },
            "done" => {
                let status: Option<i64> = row.try_get(5).map_err(e("status"))?;
                let headers: Option<Vec<u8>> = row.try_get(6).map_err(e("headers"))?;
                let body: Option<Vec<u8>> = row.try_get(7).map_err(e("body"))?;
                let not_stored: Option<String> = row.try_get(8).map_err(e("not_stored"))?;
                let status = status
                    .and_then(|s| u16::try_from(s).ok())
                    .filter(|s| (100..1000).contains(s))
                    .ok_or("column status: not an HTTP status")?;
                RecordState::Done(StoredResponse {
                    status,
                    headers: headers.unwrap_or_default(),
                    body: body.unwrap_or_default(),
                    not_stored,
                })
            }
            other => return Err(format!("column state: unknown state {other:?}")),
        };
        Ok(Record {
            fingerprint,
            token,
            expires_at: Timestamp::from_unix_millis(expires_at),
            state,
        })
    }

    fn applied(row: &Self::Row) -> Result<(i64, String), sqlx::Error> {
        Ok((row.try_get(0)?, row.try_get(1)?))
    }
}
