//! Embedded schema migrations, tracked in our own `retry_durable_migrations` table.
//!
//! The SQL files are compiled into the library (`include_str!`), so an application needs no
//! migration files at run time and no database at build time. We do not use sqlx's migrator:
//! its default `_sqlx_migrations` table would collide with the host application's own sqlx
//! migrations, and it needs the `migrate` feature and proc-macros. Each backend applies the
//! missing migrations in one locked transaction (PostgreSQL advisory lock, SQLite
//! `BEGIN IMMEDIATE`) so instances starting together do not race.

use std::hash::Hasher as _;

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
    /// A stable checksum of the SQL (FNV-1a 64 as 16 hex digits), so an edited,
    /// already-applied migration is detected instead of silently diverging. It is stored with
    /// each applied migration: the function must never change.
    pub fn checksum(&self) -> String {
        let mut h = fnv::FnvHasher::default();
        h.write(self.sql.as_bytes());
        format!("{:016x}", h.finish())
    }
}

/// The tracking table's name, shared by both backends.
pub(crate) const MIGRATIONS_TABLE: &str = "retry_durable_migrations";

/// SQLite migrations, in order.
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        name: "task_table",
        sql: include_str!("../migrations/sqlite/0001_task_table.sql"),
    },
    Migration {
        version: 2,
        name: "task_output",
        sql: include_str!("../migrations/sqlite/0002_task_output.sql"),
    },
];

/// PostgreSQL migrations, in order.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES: &[Migration] = &[
    Migration {
        version: 1,
        name: "task_table",
        sql: include_str!("../migrations/postgres/0001_task_table.sql"),
    },
    Migration {
        version: 2,
        name: "task_output",
        sql: include_str!("../migrations/postgres/0002_task_output.sql"),
    },
    Migration {
        version: 3,
        name: "notify",
        sql: include_str!("../migrations/postgres/0003_notify.sql"),
    },
    Migration {
        version: 4,
        name: "key_table",
        sql: include_str!("../migrations/postgres/0004_key_table.sql"),
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
                     retry-durable does not know: upgrade the library (the schema is newer)"
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
    fn checksums_match_what_databases_already_record() {
        // Every database migrated so far recorded these: a checksum that changed (an edited
        // file or another hash) would refuse to open them.
        assert_eq!(M[0].checksum(), "5f791065e725c41b");
        #[cfg(feature = "sqlite")]
        assert_eq!(
            SQLITE.iter().map(Migration::checksum).collect::<Vec<_>>(),
            ["29e07a0003f8c930", "89219f31fde04f64"]
        );
        #[cfg(feature = "postgres")]
        assert_eq!(
            POSTGRES.iter().map(Migration::checksum).collect::<Vec<_>>(),
            [
                "50f9e4eaca2cf35f",
                "025541d8b31501be",
                "58f5559f366562cc",
                "5be7bd8a6b662489"
            ]
        );
    }

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
