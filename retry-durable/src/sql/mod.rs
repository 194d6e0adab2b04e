//! One store, two dialects: [`SqlStore`] implements [`DurableStore`] once, over any sqlx
//! database that has a [`Dialect`].
//!
//! Each backend writes its statements out in full, in its own SQL (`sqlite/queries.rs`,
//! `postgres/queries.rs`), so a reader sees every statement as the database runs it; what
//! they share is said once here: the columns of a task row ([`task_columns!`]) and the
//! parameters each statement takes ([`Statements`]). This file runs them: it binds the
//! finished values the worker and the queue hand down, reads task rows, and runs migrations.
//!
//! A claim is one `UPDATE … WHERE task_id IN (due rows) RETURNING` statement on both: on
//! PostgreSQL the due rows are picked `FOR UPDATE SKIP LOCKED`, so concurrent claimers skip
//! each other's rows; SQLite has no row locks but runs every write under its single writer
//! lock, so two claimers can never take the same row. Completions are batched: one fenced
//! `UPDATE … FROM (rows of a JSON array)` completes many tasks.

mod dialect;
mod driver;
mod durable;
mod statements;
mod store;

pub use dialect::Dialect;
pub(crate) use dialect::pool_options;
pub use driver::RowsAffected;
pub use statements::Statements;
pub(crate) use statements::task_columns;
pub use store::SqlStore;
