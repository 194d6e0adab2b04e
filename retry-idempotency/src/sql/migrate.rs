//! The key table's migrations, tracked in their own table (`retry_idempotency_migrations`),
//! away from the queue's and the application's.

use std::hash::Hasher;

use retry_durable::Timestamp;
use retry_durable::sqlx::Pool;

use super::dialect::{KeyDialect, db_error};
use super::driver::Arg;
use crate::store::{StoreError, StoreResult};

/// Applies the key table's migrations not yet applied, in one transaction, after checking that
/// every applied one is known and unchanged.
pub(super) async fn migrate<DB: KeyDialect>(pool: &Pool<DB>) -> StoreResult<()> {
    let sql = DB::STATEMENTS;
    let begin = db_error::<DB>("begin the migration transaction");
    let mut tx = match sql.begin_write {
        Some(b) => pool.begin_with(b).await,
        None => pool.begin().await,
    }
    .map_err(begin)?;
    if let Some(lock) = sql.migration_lock {
        DB::run(&mut tx, lock, &[])
            .await
            .map_err(db_error::<DB>("take the migration lock"))?;
    }
    DB::run(&mut tx, sql.migrations_table, &[])
        .await
        .map_err(db_error::<DB>("create the migrations table"))?;
    let applied = DB::rows(&mut tx, sql.applied, &[])
        .await
        .map_err(db_error::<DB>("read applied migrations"))?
        .iter()
        .map(DB::applied)
        .collect::<Result<Vec<_>, _>>()
        .map_err(db_error::<DB>("read applied migrations"))?;
    for (version, sum) in &applied {
        match sql.migrations.iter().find(|m| m.0 == *version) {
            None => {
                return Err(StoreError::Migration {
                    backend: DB::BACKEND,
                    reason: format!(
                        "the database has idempotency-key migration {version}, which this \
                         version of retry-idempotency does not know: upgrade the library"
                    ),
                });
            }
            Some(m) if checksum(m.2) != *sum => {
                return Err(StoreError::Migration {
                    backend: DB::BACKEND,
                    reason: format!(
                        "idempotency-key migration {version} ({}) was applied with checksum \
                         {sum}, this version has {}: the schema and the library disagree",
                        m.1,
                        checksum(m.2)
                    ),
                });
            }
            Some(_) => {}
        }
    }
    for (version, name, script) in sql.migrations {
        if applied.iter().any(|(v, _)| v == version) {
            continue;
        }
        DB::script(&mut tx, script)
            .await
            .map_err(|e| StoreError::Migration {
                backend: DB::BACKEND,
                reason: format!("migration {version} ({name}) failed: {e}"),
            })?;
        let sum = checksum(script);
        let args = [
            Arg::Int(*version),
            Arg::Text(name),
            Arg::Text(&sum),
            Arg::Int(Timestamp::now().as_unix_millis()),
        ];
        DB::run(&mut tx, sql.record_migration, &args)
            .await
            .map_err(db_error::<DB>("record an applied migration"))?;
    }
    tx.commit()
        .await
        .map_err(db_error::<DB>("commit migrations"))
}

/// FNV-1a 64 of a migration's SQL, as 16 hex digits: stored with each applied migration, so
/// an edited migration is detected. Must never change.
fn checksum(sql: &str) -> String {
    let mut h = FnvHasher(0xcbf2_9ce4_8422_2325);
    h.write(sql.as_bytes());
    format!("{:016x}", h.finish())
}

struct FnvHasher(u64);

impl Hasher for FnvHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_are_fixed() {
        // A database records these when it migrates: a change would refuse to open it.
        assert_eq!(checksum("CREATE TABLE a (x INT);"), "5f791065e725c41b");
    }
}
