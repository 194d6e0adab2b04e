//! Shared helpers for the Idempotency-Key layer's tests: per-test databases (SQLite files and
//! PostgreSQL schemas, reopened to stand for a restart), a handler that counts its runs and can
//! be held mid-request, and the suite both databases run.
#![allow(dead_code)]

pub mod suite;

use std::convert::Infallible;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use retry_durable::sqlx;
use retry_durable::{PgStore, PgStoreOptions};
use retry_idempotency::{IdempotentBody, KeyStore, PgKeys, SqliteKeys};
use tokio::sync::Semaphore;

static COUNTER: AtomicU32 = AtomicU32::new(0);

pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{}_{nanos:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A database the suite runs on, which it can close and open again (a restart).
pub trait Db: Send + Sync + 'static {
    /// The store type.
    type Keys: KeyStore;
    /// A store on this database (a new pool each call: a restarted process).
    fn open(&self) -> impl Future<Output = Self::Keys> + Send;
    /// The environment a child process needs to open the same database.
    fn env(&self) -> Vec<(&'static str, String)>;
}

/// A SQLite file in the temp directory, deleted with its directory on drop.
pub struct SqliteDb {
    pub path: PathBuf,
}

impl SqliteDb {
    pub async fn new() -> SqliteDb {
        let dir = std::env::temp_dir().join(unique("retry-idempotency"));
        SqliteDb {
            path: dir.join("keys.sqlite"),
        }
    }
}

impl Drop for SqliteDb {
    fn drop(&mut self) {
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Db for SqliteDb {
    type Keys = SqliteKeys;
    async fn open(&self) -> SqliteKeys {
        SqliteKeys::open(&self.path)
            .await
            .expect("open the key store")
    }
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("IDEM_BACKEND", "sqlite".to_owned()),
            ("IDEM_LOCATION", self.path.display().to_string()),
        ]
    }
}

/// A private schema in the test database (dropped on cleanup), reached through the queue's
/// store so the keys share its pool settings and `search_path`.
pub struct PgDb {
    pub url: String,
    pub schema: String,
}

impl PgDb {
    /// `None` (after saying why) when `TEST_DATABASE_URL` is not set outside CI.
    pub async fn new() -> Option<PgDb> {
        let url = match std::env::var("TEST_DATABASE_URL") {
            Ok(url) if !url.trim().is_empty() => url,
            _ if std::env::var("CI").as_deref() == Ok("true") => {
                panic!("CI=true but TEST_DATABASE_URL is not set: `source .ci/postgres.sh` first")
            }
            _ => {
                eprintln!(
                    "SKIPPED: PostgreSQL idempotency test skipped because TEST_DATABASE_URL is \
                     not set. Run `source .ci/postgres.sh` to start a private PostgreSQL."
                );
                return None;
            }
        };
        Some(PgDb {
            url,
            schema: unique("idem"),
        })
    }

    pub async fn queue_store(&self) -> PgStore {
        PgStore::connect_with(PgStoreOptions::new(&self.url).with_schema(&self.schema))
            .await
            .expect("connect to TEST_DATABASE_URL")
    }

    pub async fn cleanup(self) {
        let store = self.queue_store().await;
        let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema);
        let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(store.pool())
            .await;
        store.close().await;
    }
}

impl Db for PgDb {
    type Keys = PgKeys;
    async fn open(&self) -> PgKeys {
        let store = self.queue_store().await;
        PgKeys::from_pool(store.pool().clone())
            .await
            .expect("open the key store")
    }
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("IDEM_BACKEND", "postgres".to_owned()),
            ("IDEM_LOCATION", self.url.clone()),
            ("IDEM_SCHEMA", self.schema.clone()),
        ]
    }
}

/// What a run saw of its lease: (key, still held), or no lease.
pub type Seen = Option<(String, bool)>;

/// The handler behind the layer: counts its runs, answers `201` with `run #n`, and, while
/// `hold` has no permits, waits mid-request (after counting) for one.
#[derive(Clone)]
pub struct Handler {
    pub runs: Arc<AtomicU32>,
    pub hold: Option<Arc<Semaphore>>,
    /// The status of each run in turn (then 201).
    pub statuses: Arc<Mutex<Vec<StatusCode>>>,
    /// The size of the body answered (then `run #n`).
    pub body_len: Option<usize>,
    /// Only this run waits for `hold` (every run, when `None`).
    pub hold_only: Option<u32>,
    /// A permit per run started.
    pub started: Arc<Semaphore>,
    /// What each run saw of its lease when it answered: (key, still held).
    pub leases: Arc<Mutex<Vec<Seen>>>,
}

impl Default for Handler {
    fn default() -> Self {
        Handler {
            runs: Arc::new(AtomicU32::new(0)),
            hold: None,
            statuses: Arc::new(Mutex::new(Vec::new())),
            body_len: None,
            hold_only: None,
            started: Arc::new(Semaphore::new(0)),
            leases: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

impl Handler {
    pub fn held() -> (Handler, Arc<Semaphore>) {
        let gate = Arc::new(Semaphore::new(0));
        (
            Handler {
                hold: Some(Arc::clone(&gate)),
                ..Handler::default()
            },
            gate,
        )
    }

    pub fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }

    /// Waits until `n` more runs have started.
    pub async fn started(&self, n: u32) {
        self.started.acquire_many(n).await.expect("open").forget();
    }
}

impl tower_service::Service<Request<Full<Bytes>>> for Handler {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        let this = self.clone();
        let in_extensions = req
            .extensions()
            .get::<retry_idempotency::KeyLease>()
            .is_some();
        Box::pin(async move {
            let n = this.runs.fetch_add(1, Ordering::SeqCst) + 1;
            this.started.add_permits(1);
            if let Some(gate) = &this.hold
                && this.hold_only.is_none_or(|only| only == n)
            {
                gate.acquire().await.expect("gate open").forget();
            }
            let lease = retry_idempotency::KeyLease::current();
            assert_eq!(
                lease.is_some(),
                in_extensions,
                "task-local and extension agree"
            );
            this.leases
                .lock()
                .unwrap()
                .push(lease.map(|l| (l.key().to_owned(), l.holds())));
            let status = {
                let mut s = this.statuses.lock().unwrap();
                if s.is_empty() {
                    StatusCode::CREATED
                } else {
                    s.remove(0)
                }
            };
            let body = match this.body_len {
                Some(n) => Bytes::from(vec![b'x'; n]),
                None => Bytes::from(format!("run #{n}")),
            };
            Ok(Response::builder()
                .status(status)
                .header("content-type", "text/plain")
                .header("location", format!("/orders/{n}"))
                .header("x-not-kept", "1")
                .body(Full::new(body))
                .unwrap())
        })
    }
}

/// A keyed `POST /orders` with `body` (the key as the sf-string the client sends).
pub fn post(key: &str, body: &str) -> Request<Full<Bytes>> {
    Request::post("/orders")
        .header("idempotency-key", format!("\"{key}\""))
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

/// An answer, read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap_or("<binary>")
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    pub fn problem_type(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let v: serde_json::Value = serde_json::from_slice(&self.body).expect("problem JSON");
        assert_eq!(v["status"], self.status.as_u16());
        let t = v["type"].as_str().expect("type").to_owned();
        t.rsplit('#').next().unwrap().to_owned()
    }
}

/// Sends `req` through `svc` and reads the answer whole.
pub async fn send<S>(svc: &S, req: Request<Full<Bytes>>) -> Answer
where
    S: tower_service::Service<
            Request<Full<Bytes>>,
            Response = Response<IdempotentBody<Full<Bytes>>>,
            Error = Infallible,
        > + Clone,
{
    let mut svc = svc.clone();
    std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
    let response = svc.call(req).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// Runs every suite test against one database; `ignore = "why";` marks each `#[ignore]`.
#[macro_export]
macro_rules! idempotency_suite {
    (ignore = $why:literal; $make:expr) => {
        $crate::idempotency_suite!(@all [#[ignore = $why]] $make);
    };
    ($make:expr) => {
        $crate::idempotency_suite!(@all [] $make);
    };
    (@all $attrs:tt $make:expr) => {
        $crate::idempotency_suite!(@each $attrs $make;
            concurrent_requests_with_one_key_run_the_handler_once,
            a_used_key_with_another_request_is_422,
            a_completed_key_replays_status_chosen_headers_and_body,
            keys_are_refused_unless_one_bounded_sf_string,
            other_methods_pass_through,
            keys_of_different_scopes_never_meet,
            an_expired_key_is_new_again_and_swept_in_batches,
            a_lapsed_lease_is_taken_over_and_the_late_run_is_not_stored,
            a_restart_loses_no_completed_key,
            a_response_too_large_to_store_is_answered_not_replayed,
            a_server_error_gives_the_key_back,
            a_cancelled_request_still_completes_its_key,
            a_request_cancelled_while_taking_its_key_gives_it_back,
            the_handler_sees_its_lease,
            the_driver_fences_every_write_on_the_run,
        );
    };
    (@each $attrs:tt $make:expr; $($name:ident),* $(,)?) => {
        $( $crate::idempotency_suite!(@one $attrs $name $make); )*
    };
    (@one [$($attr:tt)*] $name:ident $make:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $($attr)*
        async fn $name() {
            let Some(db) = $make.await else { return };
            idempotency_support::suite::$name(&db).await;
            idempotency_support::cleanup(db).await;
        }
    };
}

/// Drops a database after a test.
pub async fn cleanup<D: Cleanup>(db: D) {
    db.cleanup_db().await;
}

/// How a database is removed.
pub trait Cleanup {
    fn cleanup_db(self) -> impl Future<Output = ()> + Send;
}

impl Cleanup for SqliteDb {
    async fn cleanup_db(self) {}
}

impl Cleanup for PgDb {
    async fn cleanup_db(self) {
        self.cleanup().await;
    }
}

/// A key store whose next insert stalls once it has written: the request taking the key is
/// then cancelled (its client went away) with the key taken, as a server drops a request's
/// future at any await. Reports each release it makes.
#[derive(Clone)]
pub struct StallsAfterInsert<K> {
    pub inner: K,
    /// Set: the next insert stalls after writing (and clears it).
    pub stall: Arc<std::sync::atomic::AtomicBool>,
    /// A permit when a stalled insert has written.
    pub inserted: Arc<Semaphore>,
    /// A permit per release that gave a key back.
    pub released: Arc<Semaphore>,
}

impl<K: KeyStore> StallsAfterInsert<K> {
    pub fn new(inner: K) -> Self {
        StallsAfterInsert {
            inner,
            stall: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            inserted: Arc::new(Semaphore::new(0)),
            released: Arc::new(Semaphore::new(0)),
        }
    }
}

impl<K: KeyStore> KeyStore for StallsAfterInsert<K> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn insert(
        &self,
        run: &retry_idempotency::store::NewRun<'_>,
    ) -> retry_idempotency::store::StoreResult<bool> {
        let inserted = self.inner.insert(run).await?;
        if self.stall.swap(false, Ordering::SeqCst) {
            self.inserted.add_permits(1);
            std::future::pending::<()>().await;
        }
        Ok(inserted)
    }

    async fn get(
        &self,
        scope: &[u8],
        key: &str,
    ) -> retry_idempotency::store::StoreResult<Option<retry_idempotency::store::Record>> {
        self.inner.get(scope, key).await
    }

    async fn take_over(
        &self,
        previous_token: i64,
        previous_state: &str,
        run: &retry_idempotency::store::NewRun<'_>,
    ) -> retry_idempotency::store::StoreResult<bool> {
        self.inner
            .take_over(previous_token, previous_state, run)
            .await
    }

    async fn complete(
        &self,
        held: &retry_idempotency::store::Held<'_>,
        response: &retry_idempotency::store::Completed<'_>,
        now: retry_idempotency::Timestamp,
    ) -> retry_idempotency::store::StoreResult<bool> {
        self.inner.complete(held, response, now).await
    }

    async fn release(
        &self,
        held: &retry_idempotency::store::Held<'_>,
    ) -> retry_idempotency::store::StoreResult<bool> {
        let released = self.inner.release(held).await?;
        if released {
            self.released.add_permits(1);
        }
        Ok(released)
    }

    async fn sweep(
        &self,
        now: retry_idempotency::Timestamp,
        batch: u32,
    ) -> retry_idempotency::store::StoreResult<u64> {
        self.inner.sweep(now, batch).await
    }
}
