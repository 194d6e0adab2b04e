//! Embedded schema migrations, tracked in our own `retry_durable_migrations` table.
//!
//! The SQL files are compiled into the library (`include_str!`), so an application needs no
//! migration files at run time and no database at build time. We do not use sqlx's migrator:
//! its default `_sqlx_migrations` table would collide with the host application's own sqlx
//! migrations, and it needs the `migrate` feature and proc-macros. Each backend applies the
//! missing migrations in one locked transaction (PostgreSQL advisory lock, SQLite
//! `BEGIN IMMEDIATE`) so instances starting together do not race.

/// One schema step.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Its number, in order of application.
    pub version: i64,
    /// A short name, recorded with the version.
    pub name: &'static str,
    /// The script.
    pub sql: &'static str,
}

impl Migration {
    /// A stable checksum of the SQL (FNV-1a 64), so an edited, already-applied migration is
    /// detected instead of silently diverging.
    pub fn checksum(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.sql.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}")
    }
}

/// The tracking table's name, shared by both backends.
pub(crate) const MIGRATIONS_TABLE: &str = "retry_durable_migrations";

/// SQLite migrations, in order.
#[cfg(feature = "durable-sqlite")]
pub(crate) const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        name: "task_table",
        sql: include_str!("migrations/sqlite/0001_task_table.sql"),
    },
    Migration {
        version: 2,
        name: "task_output",
        sql: include_str!("migrations/sqlite/0002_task_output.sql"),
    },
];

/// PostgreSQL migrations, in order.
#[cfg(feature = "durable-postgres")]
pub(crate) const POSTGRES: &[Migration] = &[
    Migration {
        version: 1,
        name: "task_table",
        sql: include_str!("migrations/postgres/0001_task_table.sql"),
    },
    Migration {
        version: 2,
        name: "task_output",
        sql: include_str!("migrations/postgres/0002_task_output.sql"),
    },
    Migration {
        version: 3,
        name: "notify",
        sql: include_str!("migrations/postgres/0003_notify.sql"),
    },
    Migration {
        version: 4,
        name: "key_table",
        sql: include_str!("migrations/postgres/0004_key_table.sql"),
    },
];

/// Compares what the database says was applied with what this version knows, and returns the
/// migrations still to apply, or why the database cannot be used.
pub(crate) fn plan<'m>(
    known: &'m [Migration],
    applied: &[(i64, String)],
) -> Result<Vec<&'m Migration>, String> {
    for (version, checksum) in applied {
        match known.iter().find(|m| m.version == *version) {
            None => {
                return Err(format!(
                    "the database has durable-queue migration {version}, which this version of \
                     retry-runtime does not know: upgrade the library (the schema is newer)"
                ));
            }
            Some(m) if m.checksum() != *checksum => {
                return Err(format!(
                    "durable-queue migration {version} ({}) was applied with checksum {checksum} \
                     but this version has {}: the schema and the library disagree",
                    m.name,
                    m.checksum()
                ));
            }
            Some(_) => {}
        }
    }
    Ok(known
        .iter()
        .filter(|m| !applied.iter().any(|(v, _)| *v == m.version))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: &[Migration] = &[
        Migration {
            version: 1,
            name: "a",
            sql: "CREATE TABLE a (x INT);",
        },
        Migration {
            version: 2,
            name: "b",
            sql: "CREATE TABLE b (x INT);",
        },
    ];

    #[test]
    fn plans_missing_and_rejects_unknown_or_edited() {
        let todo = plan(M, &[(1, M[0].checksum())]).unwrap();
        assert_eq!(todo.len(), 1);
        assert_eq!(todo[0].version, 2);
        assert!(plan(M, &[(3, "x".into())]).unwrap_err().contains("upgrade"));
        assert!(
            plan(M, &[(1, "0".into())])
                .unwrap_err()
                .contains("checksum")
        );
    }
}
