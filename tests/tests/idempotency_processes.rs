//! A handler process killed with SIGKILL mid-request, on SQLite and PostgreSQL.
//!
//! The child is this test binary re-executed with `IDEM_CHILD` set: `child_server` is a no-op in
//! a normal run and, in the child, a service behind the layer that takes a key, prints a line
//! once its handler runs and then hangs there until it is killed.

mod idempotency_support;

use std::process::Stdio;
use std::time::Duration;

use http::StatusCode;
use idempotency_support::suite::LEASE;
use idempotency_support::{Cleanup, Db, Handler, PgDb, SqliteDb, post, send};
use retry_idempotency::{IdempotencyLayer, KeyStore, ManualClock, SqliteKeys, Timestamp};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tower_layer::Layer;

const CHILD: &str = "IDEM_CHILD";
const RUNNING: &str = "IDEM-CHILD-HANDLER-RUNNING";
const KEY: &str = "order-7-capture";

#[test]
fn child_server() {
    if std::env::var(CHILD).is_err() {
        return; // a normal test run: nothing to do
    }
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("child needs {k}"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        match env("IDEM_BACKEND").as_str() {
            "sqlite" => child_main(SqliteKeys::open(env("IDEM_LOCATION")).await.unwrap()).await,
            "postgres" => {
                let db = PgDb {
                    url: env("IDEM_LOCATION"),
                    schema: env("IDEM_SCHEMA"),
                };
                child_main(db.open().await).await
            }
            other => panic!("unknown backend {other}"),
        }
    });
}

async fn child_main<K: KeyStore>(keys: K) {
    // The system clock: the parent's clock starts from the same wall time.
    let (handler, _gate) = Handler::held();
    let svc = IdempotencyLayer::builder(keys)
        .with_lease(LEASE)
        .build()
        .unwrap()
        .layer(handler.clone());
    let request = tokio::spawn(async move { send(&svc, post(KEY, r#"{"amount":5}"#)).await });
    handler.started(1).await;
    // Mid-request: the key is taken, the handler runs. The parent kills this process now.
    println!("{RUNNING}");
    let _ = request.await;
    unreachable!("the handler is held until the process is killed");
}

async fn killed_mid_request<D: Db>(db: &D) {
    // Before the child can take the key: its lease ends after `before + LEASE`.
    let before = Timestamp::now();
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "child_server", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .envs(db.env())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the server process");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        match lines.next_line().await.unwrap() {
            // libtest prints "test child_server ... " before it, on the same line.
            Some(line) if line.ends_with(RUNNING) => break,
            Some(_) => {}
            None => panic!("the server process ended before its handler ran"),
        }
    }
    // The child took the key before it printed: its lease ends before `after + LEASE`.
    let after = Timestamp::now();
    child.kill().await.expect("SIGKILL the server process");

    // Another process (a restart, or a replica), whose clock starts where the child's was.
    let clock = ManualClock::new(before);
    let handler = Handler::default();
    let svc = IdempotencyLayer::builder(db.open().await)
        .with_lease(LEASE)
        .with_clock(clock.clone())
        .build()
        .unwrap()
        .layer(handler.clone());
    // The dead process's lease still holds: the key is not run twice at once.
    let a = send(&svc, post(KEY, r#"{"amount":5}"#)).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.text());
    assert_eq!(handler.runs(), 0);
    // Once it lapsed, a retry runs the handler, once.
    clock.set(after.saturating_add(LEASE + Duration::from_millis(1)));
    let a = send(&svc, post(KEY, r#"{"amount":5}"#)).await;
    assert_eq!((a.status, a.text()), (StatusCode::CREATED, "run #1"));
    let a = send(&svc, post(KEY, r#"{"amount":5}"#)).await;
    assert_eq!(a.header("idempotent-replayed"), Some("true"));
    assert_eq!(handler.runs(), 1);
    // And the key is still the first request's: another body is refused.
    let a = send(&svc, post(KEY, r#"{"amount":6}"#)).await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_handler_process_runs_once_after_its_lease_sqlite() {
    let db = SqliteDb::new().await;
    killed_mid_request(&db).await;
    db.cleanup_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: source .ci/postgres.sh, then pass --include-ignored"]
async fn a_killed_handler_process_runs_once_after_its_lease_postgres() {
    let Some(db) = PgDb::new().await else { return };
    killed_mid_request(&db).await;
    db.cleanup_db().await;
}
