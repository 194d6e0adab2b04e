//! The Idempotency-Key layer on PostgreSQL: the shared suite. `#[ignore]`d because they need a
//! database; `.ci/run` runs them:
//!
//! ```text
//! source .ci/postgres.sh    # a private PostgreSQL on loopback; sets TEST_DATABASE_URL
//! cargo test -p retry-tests --all-features --test idempotency_postgres -- --include-ignored
//! ```

mod idempotency_support;

use idempotency_support::PgDb;

idempotency_suite!(ignore = "needs PostgreSQL: source .ci/postgres.sh, then pass --include-ignored"; PgDb::new());
