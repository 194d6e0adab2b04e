//! What every backend's SQL says alike: which statements there are, the parameters each
//! takes, and the columns of a task row.

use crate::migrate::Migration;

/// Every statement the store runs, in one database's SQL. Parameters are numbered (`?1` on
/// SQLite, `$1` on PostgreSQL). Statements returning task rows return [`task_columns!`]
/// (the columns [`COLUMNS`] names, in that order, the counts widened to `BIGINT`). A fenced statement
/// matches a task only while it is `running` under the claim `(task, owner, attempt)` bound
/// to parameters 1-3.
#[derive(Debug)]
pub struct Statements {
    /// Inserts a task unless its `(operation, idempotency_key)` exists: 1 operation, 2 key,
    /// 3 payload, 4 max attempts, 5 due at, 6 now. No row returned: the key exists.
    pub(crate) enqueue: &'static str,
    /// Claims up to 5 due tasks of the operations in the JSON array of strings 4 for owner 1,
    /// leased until 2; 3 now. The attempt is counted here. Two claimers never take one row:
    /// PostgreSQL skips rows another claim locked, SQLite runs every write under its one lock.
    pub(crate) claim: &'static str,
    /// Completes the tasks of the JSON array 2 (`[[task_id, owner, attempt, output as hex or
    /// null], ...]`), each fenced on its claim; 1 now. Returns the ids completed.
    pub(crate) complete: &'static str,
    /// Fenced: back to `pending` after a transient failure; 4 error, 5 due at, 6 now.
    pub(crate) retry_later: &'static str,
    /// Fenced: fails the task, the alert owed in the same write; 4 error, 5 now.
    pub(crate) mark_failed: &'static str,
    /// Fenced: gives the task back unfinished, its attempt not counted; 4 now.
    pub(crate) release: &'static str,
    /// Tasks whose lease expired before 1, at most 2, the oldest leases first.
    pub(crate) expired: &'static str,
    /// Fenced, and only while the lease is expired at 7: takes back one expired lease;
    /// 4 new status, 5 due at, 6 error, 7 now.
    pub(crate) rescue: &'static str,
    /// Reserves up to 3 owed alerts until 1; 2 now.
    pub(crate) claim_alerts: &'static str,
    /// Records the delivered alert of task 1 at 2.
    pub(crate) ack_alert: &'static str,
    /// One task by id 1.
    pub(crate) get: &'static str,
    /// One task by operation 1 and key 2.
    pub(crate) find: &'static str,
    /// Tasks per status.
    pub(crate) counts: &'static str,
    /// Up to 1 failed tasks, most recently failed first.
    pub(crate) failed: &'static str,
    /// Puts failed or cancelled task 1 back to `pending` with a fresh attempt count; 2 now.
    pub(crate) requeue: &'static str,
    /// Cancels pending or failed task 1; 2 now.
    pub(crate) cancel: &'static str,
    /// `CREATE TABLE IF NOT EXISTS retry_durable_migrations (...)`.
    pub(crate) migrations_table: &'static str,
    /// The migrations applied, with their checksums.
    pub(crate) applied: &'static str,
    /// Records migration 1 (name 2, checksum 3) applied at 4.
    pub(crate) record_migration: &'static str,
    /// Run first in the migration transaction, to serialise instances starting together.
    pub(crate) migration_lock: Option<&'static str>,
    /// How a transaction that writes begins (`None`: the driver's plain `BEGIN`).
    pub(crate) begin_write: Option<&'static str>,
    /// The schema migrations, in order.
    pub(crate) migrations: &'static [Migration],
}

/// The columns of a task row as every statement that returns tasks lists them: those
/// [`COLUMNS`] names, in that order, with the counts widened to `BIGINT` so both databases
/// hand them over as 64-bit integers. A macro, so each backend's statements can be
/// `concat!`-ed into whole `&'static str`s.
macro_rules! task_columns {
    () => {
        "task_id, operation, idempotency_key, payload, status, \
         CAST(retry_count AS BIGINT) AS retry_count, \
         CAST(max_attempts AS BIGINT) AS max_attempts, \
         next_attempt_at, locked_by, locked_until, last_error, output, alerted_at, \
         created_at, updated_at"
    };
}
pub(crate) use task_columns;

/// The columns of a task row, by position: [`task_columns!`] by name, for locating a bad value.
pub(crate) const COLUMNS: [&str; 15] = [
    "task_id",
    "operation",
    "idempotency_key",
    "payload",
    "status",
    "retry_count",
    "max_attempts",
    "next_attempt_at",
    "locked_by",
    "locked_until",
    "last_error",
    "output",
    "alerted_at",
    "created_at",
    "updated_at",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_column_list_names_the_columns_in_order() {
        let listed: Vec<&str> = task_columns!()
            .split(',')
            .map(|c| c.split_whitespace().last().unwrap_or_default())
            .collect();
        assert_eq!(listed, COLUMNS);
    }
}
