//! The one error type of the durable queue.
//!
//! Every variant says *where* it happened (which backend, which action, which task and column)
//! so an operator can find the row or the setting without reading the source. Bad data read back
//! from the database is an error, never a panic: a row written by a newer version of this library
//! (an unknown status) or edited by hand must not take a worker down.

use std::error::Error as StdError;
use std::fmt;

/// What went wrong in the durable queue.
#[derive(Debug)]
#[non_exhaustive]
pub enum DurableError {
    /// A task was handed off without an idempotency key. Durable retries re-send the request
    /// after an unknown outcome, so a write without a key could be applied twice: generate the key once, before the first in-memory attempt, and pass it here.
    MissingIdempotencyKey {
        /// The operation whose hand-off was refused.
        operation: String,
    },
    /// An operation name was empty; handlers and tasks are matched by this name.
    EmptyOperation,
    /// A configuration value cannot work; nothing was started.
    InvalidConfig {
        /// The setting at fault, e.g. `"lease"`.
        field: &'static str,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The database refused or failed a statement.
    Database {
        /// `"sqlite"` or `"postgres"`.
        backend: &'static str,
        /// What the store was doing, e.g. `"claim due tasks"`.
        action: &'static str,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// A row read from the task table holds a value this version cannot interpret.
    BadRow {
        /// `"sqlite"` or `"postgres"`.
        backend: &'static str,
        /// The task id, when it could be read.
        task_id: Option<i64>,
        /// The offending column.
        column: &'static str,
        /// The value and why it is invalid.
        detail: String,
    },
    /// The schema migrations could not be applied or do not match this version.
    Migration {
        /// `"sqlite"` or `"postgres"`.
        backend: &'static str,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// No task has this id.
    NotFound {
        /// The id that was looked up.
        task_id: i64,
    },
    /// The task is in a status that does not allow the requested change.
    InvalidTransition {
        /// The task.
        task_id: i64,
        /// The requested change, e.g. `"requeue"`.
        action: &'static str,
        /// The status the task is in.
        status: String,
    },
}

impl DurableError {
    pub(crate) fn db(
        backend: &'static str,
        action: &'static str,
    ) -> impl FnOnce(sqlx::Error) -> Self {
        move |source| DurableError::Database {
            backend,
            action,
            source,
        }
    }
}

impl fmt::Display for DurableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurableError::MissingIdempotencyKey { operation } => write!(
                f,
                "refusing to enqueue operation `{operation}` without an idempotency key: a durable \
                 retry re-sends the request, so generate one key before the first attempt and pass it"
            ),
            DurableError::EmptyOperation => {
                f.write_str("the operation name is empty: name the upstream operation, e.g. \"payments.capture\"")
            }
            DurableError::InvalidConfig { field, reason } => {
                write!(f, "invalid durable queue setting `{field}`: {reason}")
            }
            DurableError::Database {
                backend,
                action,
                source,
            } => write!(f, "{backend} durable store failed to {action}: {source}"),
            DurableError::BadRow {
                backend,
                task_id,
                column,
                detail,
            } => {
                write!(f, "{backend} durable store: bad value in column `{column}`")?;
                match task_id {
                    Some(id) => write!(f, " of task {id}")?,
                    None => f.write_str(" of a task row")?,
                }
                write!(
                    f,
                    ": {detail}; the row was written by another version or edited by hand, fix or \
                     cancel it"
                )
            }
            DurableError::Migration { backend, reason } => {
                write!(f, "{backend} durable store migration failed: {reason}")
            }
            DurableError::NotFound { task_id } => write!(f, "durable task {task_id} does not exist"),
            DurableError::InvalidTransition {
                task_id,
                action,
                status,
            } => write!(
                f,
                "cannot {action} durable task {task_id}: it is `{status}`"
            ),
        }
    }
}

impl StdError for DurableError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            DurableError::Database { source, .. } => Some(source),
            _ => None,
        }
    }
}
