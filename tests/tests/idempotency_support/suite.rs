//! The Idempotency-Key layer's suite: the same assertions on every key store.
//!
//! Time is a [`ManualClock`]; a request is held mid-handler by a semaphore the test opens, and
//! "the handler has started" is a permit it hands back, so nothing here sleeps to synchronise
//! or asserts on elapsed time.

use std::time::Duration;

use http::{Request, StatusCode};
use http_body_util::Full;
use retry_idempotency::{IdempotencyLayer, KeyStore, ManualClock, Sweeper, Timestamp};
use tower_layer::Layer;

use super::{Db, Handler, post, send};

pub const LEASE: Duration = Duration::from_secs(60);
pub const TTL: Duration = Duration::from_secs(3600);

pub fn clock() -> ManualClock {
    ManualClock::new(Timestamp::from_unix_millis(1_800_000_000_000))
}

pub fn layer<K: KeyStore>(keys: K, clock: &ManualClock) -> IdempotencyLayer<K> {
    IdempotencyLayer::builder(keys)
        .with_lease(LEASE)
        .with_ttl(TTL)
        .with_clock(clock.clone())
        .build()
        .unwrap()
}

pub async fn concurrent_requests_with_one_key_run_the_handler_once<D: Db>(db: &D) {
    let (handler, gate) = Handler::held();
    let svc = layer(db.open().await, &clock()).layer(handler.clone());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..100 {
        let (svc, tx) = (svc.clone(), tx.clone());
        tokio::spawn(async move {
            let _ = tx.send(send(&svc, post("order-7", r#"{"amount":5}"#)).await);
        });
    }
    // The one run is held mid-request: every other request is answered 409.
    for _ in 0..99 {
        let a = rx.recv().await.unwrap();
        assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.text());
        assert_eq!(a.problem_type(), "idempotency-key-in-progress");
    }
    assert_eq!(handler.runs(), 1);
    gate.add_permits(1);
    let first = rx.recv().await.unwrap();
    assert_eq!(
        (first.status, first.text()),
        (StatusCode::CREATED, "run #1")
    );
    assert_eq!(first.header("idempotent-replayed"), None);
    // Once it completed, 100 concurrent requests all get its response again.
    for _ in 0..100 {
        let (svc, tx) = (svc.clone(), tx.clone());
        tokio::spawn(async move {
            let _ = tx.send(send(&svc, post("order-7", r#"{"amount":5}"#)).await);
        });
    }
    for _ in 0..100 {
        let a = rx.recv().await.unwrap();
        assert_eq!((a.status, a.text()), (StatusCode::CREATED, "run #1"));
        assert_eq!(a.header("idempotent-replayed"), Some("true"));
    }
    assert_eq!(handler.runs(), 1, "the handler ran exactly once");
}

pub async fn a_used_key_with_another_request_is_422<D: Db>(db: &D) {
    let (handler, gate) = Handler::held();
    let svc = layer(db.open().await, &clock()).layer(handler.clone());
    let first = tokio::spawn({
        let svc = svc.clone();
        async move { send(&svc, post("k", r#"{"amount":5}"#)).await }
    });
    handler.started(1).await;
    // While the first runs, and after it completed: another body with the key is refused.
    let reused = send(&svc, post("k", r#"{"amount":6}"#)).await;
    assert_eq!(reused.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(reused.problem_type(), "idempotency-key-reused");
    gate.add_permits(1);
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    let reused = send(&svc, post("k", r#"{"amount":6}"#)).await;
    assert_eq!(reused.status, StatusCode::UNPROCESSABLE_ENTITY);
    // Another path with the key is another request too.
    let other_path = Request::post("/refunds")
        .header("idempotency-key", "\"k\"")
        .body(Full::new(bytes::Bytes::from_static(br#"{"amount":5}"#)))
        .unwrap();
    assert_eq!(
        send(&svc, other_path).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(handler.runs(), 1);
}

pub async fn a_completed_key_replays_status_chosen_headers_and_body<D: Db>(db: &D) {
    let handler = Handler::default();
    let svc = layer(db.open().await, &clock()).layer(handler.clone());
    let first = send(&svc, post("k", "{}")).await;
    assert_eq!(first.header("x-not-kept"), Some("1"));
    let again = send(&svc, post("k", "{}")).await;
    assert_eq!(
        (again.status, again.text()),
        (StatusCode::CREATED, "run #1")
    );
    assert_eq!(again.header("location"), Some("/orders/1"));
    assert_eq!(again.header("content-type"), Some("text/plain"));
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.header("x-not-kept"), None, "only the chosen headers");
    assert_eq!(again.header("idempotency-not-stored"), None);
    assert_eq!(handler.runs(), 1);
}

pub async fn keys_are_refused_unless_one_bounded_sf_string<D: Db>(db: &D) {
    let handler = Handler::default();
    let svc = layer(db.open().await, &clock()).layer(handler.clone());
    let missing = Request::post("/orders")
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    let a = send(&svc, missing).await;
    assert_eq!(
        (a.status, a.problem_type().as_str()),
        (StatusCode::BAD_REQUEST, "idempotency-key-missing")
    );
    let long = format!("\"{}\"", "a".repeat(256));
    let huge = format!("\"{}\"", "a".repeat(5000));
    let bad: Vec<Vec<u8>> = vec![
        b"order-7".to_vec(),            // a token, not an sf-string
        b"8e03978e-40d5-43e8".to_vec(), // bare
        b"\"\"".to_vec(),               // empty
        b"\"a\\x\"".to_vec(),           // a bad escape
        b"\"a\" extra".to_vec(),        // trailing bytes
        "\"ключ\"".as_bytes().to_vec(), // not ASCII
        long.into_bytes(),              // 256 characters
        huge.into_bytes(),              // a 5 KB field
    ];
    for value in bad {
        let req = Request::post("/orders")
            .header(
                "idempotency-key",
                http::HeaderValue::from_bytes(&value).unwrap(),
            )
            .body(Full::new(bytes::Bytes::new()))
            .unwrap();
        let a = send(&svc, req).await;
        assert_eq!(
            a.status,
            StatusCode::BAD_REQUEST,
            "{:?}",
            String::from_utf8_lossy(&value)
        );
        assert_eq!(a.problem_type(), "idempotency-key-invalid");
    }
    let twice = Request::post("/orders")
        .header("idempotency-key", "\"a\"")
        .header("idempotency-key", "\"a\"")
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    assert_eq!(send(&svc, twice).await.status, StatusCode::BAD_REQUEST);
    // A body above the fingerprint limit.
    let svc_small = IdempotencyLayer::builder(db.open().await)
        .with_max_request_body(16)
        .build()
        .unwrap()
        .layer(handler.clone());
    let a = send(&svc_small, post("k", &"x".repeat(17))).await;
    assert_eq!(
        (a.status, a.problem_type().as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, "idempotency-body-too-large")
    );
    assert_eq!(handler.runs(), 0, "no refused request reached the handler");
}

pub async fn other_methods_pass_through<D: Db>(db: &D) {
    let handler = Handler::default();
    let svc = layer(db.open().await, &clock()).layer(handler.clone());
    for _ in 0..2 {
        let get = Request::get("/orders/7")
            .header("idempotency-key", "\"k\"")
            .body(Full::new(bytes::Bytes::new()))
            .unwrap();
        let a = send(&svc, get).await;
        assert_eq!(a.header("idempotent-replayed"), None);
    }
    assert_eq!(handler.runs(), 2, "a read is not deduplicated");
    let lenient = IdempotencyLayer::builder(db.open().await)
        .with_key_required(false)
        .build()
        .unwrap()
        .layer(handler.clone());
    let unkeyed = Request::post("/orders")
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    assert_eq!(send(&lenient, unkeyed).await.status, StatusCode::CREATED);
    assert_eq!(handler.runs(), 3);
}

pub async fn keys_of_different_scopes_never_meet<D: Db>(db: &D) {
    let handler = Handler::default();
    let svc = IdempotencyLayer::builder(db.open().await)
        .with_scope(|req| {
            req.headers
                .get("x-tenant")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        })
        .build()
        .unwrap()
        .layer(handler.clone());
    let as_tenant = |tenant: &str| {
        let mut req = post("shared-key", "{}");
        req.headers_mut()
            .insert("x-tenant", tenant.parse().unwrap());
        req
    };
    assert_eq!(send(&svc, as_tenant("a")).await.text(), "run #1");
    assert_eq!(send(&svc, as_tenant("b")).await.text(), "run #2");
    let again = send(&svc, as_tenant("a")).await;
    assert_eq!(
        (again.text(), again.header("idempotent-replayed")),
        ("run #1", Some("true"))
    );
    assert_eq!(handler.runs(), 2);
}

pub async fn an_expired_key_is_new_again_and_swept_in_batches<D: Db>(db: &D) {
    let clock = clock();
    let keys = db.open().await;
    let handler = Handler::default();
    let svc = layer(keys.clone(), &clock).layer(handler.clone());
    assert_eq!(send(&svc, post("k", "a")).await.text(), "run #1");
    clock.advance(TTL - Duration::from_millis(1));
    assert_eq!(
        send(&svc, post("k", "b")).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    clock.advance(Duration::from_millis(1));
    // Expired: the key is new again, for any request.
    let again = send(&svc, post("k", "b")).await;
    assert_eq!(
        (again.text(), again.header("idempotent-replayed")),
        ("run #2", None)
    );

    // 25 keys that expire, 3 that do not, then a sweep in batches of 10.
    for i in 0..25 {
        send(&svc, post(&format!("old-{i}"), "x")).await;
    }
    clock.advance(TTL);
    for i in 0..3 {
        send(&svc, post(&format!("new-{i}"), "x")).await;
    }
    let runs = handler.runs();
    let sweeper = Sweeper::new(keys).with_batch(10).with_clock(clock.clone());
    // "k" (taken over at TTL) expired too: 26.
    assert_eq!(sweeper.sweep().await.unwrap(), 26);
    assert_eq!(sweeper.sweep().await.unwrap(), 0);
    let kept = send(&svc, post("new-0", "x")).await;
    assert_eq!(kept.header("idempotent-replayed"), Some("true"));
    let swept = send(&svc, post("old-0", "other body")).await;
    assert_eq!(swept.header("idempotent-replayed"), None);
    assert_eq!(handler.runs(), runs + 1);
}

pub async fn a_lapsed_lease_is_taken_over_and_the_late_run_is_not_stored<D: Db>(db: &D) {
    let clock = clock();
    let (mut handler, gate) = Handler::held();
    handler.hold_only = Some(1);
    let svc = layer(db.open().await, &clock).layer(handler.clone());
    let late = tokio::spawn({
        let svc = svc.clone();
        async move { send(&svc, post("k", "{}")).await }
    });
    handler.started(1).await;
    assert_eq!(
        send(&svc, post("k", "{}")).await.status,
        StatusCode::CONFLICT
    );
    // The first run stalls past its lease: the next request takes the key over.
    clock.advance(LEASE);
    let second = send(&svc, post("k", "{}")).await;
    assert_eq!(
        (second.status, second.text()),
        (StatusCode::CREATED, "run #2")
    );
    // The stalled run finishes: its client gets its answer, marked, and it is not stored.
    gate.add_permits(1);
    let late = late.await.unwrap();
    assert_eq!((late.status, late.text()), (StatusCode::CREATED, "run #1"));
    assert_eq!(late.header("idempotency-not-stored"), Some("lease-lost"));
    let replay = send(&svc, post("k", "{}")).await;
    assert_eq!(
        (replay.text(), replay.header("idempotent-replayed")),
        ("run #2", Some("true"))
    );
    assert_eq!(handler.runs(), 2);
    // The stalled run could see it had lost its key before answering.
    let leases = handler.leases.lock().unwrap().clone();
    assert_eq!(
        leases,
        vec![Some(("k".to_owned(), true)), Some(("k".to_owned(), false))],
        "in completion order: run #2 (held), then run #1 (lapsed)"
    );
}

pub async fn a_restart_loses_no_completed_key<D: Db>(db: &D) {
    let clock = clock();
    let keys = db.open().await;
    let handler = Handler::default();
    let svc = layer(keys.clone(), &clock).layer(handler.clone());
    for i in 0..5 {
        assert_eq!(
            send(&svc, post(&format!("k{i}"), "{}")).await.status,
            StatusCode::CREATED
        );
    }
    drop(svc);
    drop(keys);
    // A new process: a new pool on the same database, a new handler that must not run.
    let restarted = Handler::default();
    let svc = layer(db.open().await, &clock).layer(restarted.clone());
    for i in 0..5 {
        let a = send(&svc, post(&format!("k{i}"), "{}")).await;
        assert_eq!(a.header("idempotent-replayed"), Some("true"));
        assert_eq!(a.text(), format!("run #{}", i + 1));
    }
    assert_eq!(restarted.runs(), 0);
}

pub async fn a_response_too_large_to_store_is_answered_not_replayed<D: Db>(db: &D) {
    let handler = Handler {
        body_len: Some(4096),
        ..Handler::default()
    };
    let svc = IdempotencyLayer::builder(db.open().await)
        .with_max_stored_body(1024)
        .build()
        .unwrap()
        .layer(handler.clone());
    let first = send(&svc, post("k", "{}")).await;
    assert_eq!(
        (first.status, first.body.len()),
        (StatusCode::CREATED, 4096)
    );
    assert_eq!(first.header("idempotency-not-stored"), Some("too-large"));
    let again = send(&svc, post("k", "{}")).await;
    assert_eq!((again.status, again.body.len()), (StatusCode::CREATED, 0));
    assert_eq!(again.header("idempotency-not-stored"), Some("too-large"));
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.header("location"), Some("/orders/1"));
    assert_eq!(handler.runs(), 1, "not stored, and still not run twice");
}

pub async fn a_server_error_gives_the_key_back<D: Db>(db: &D) {
    let handler = Handler::default();
    handler.statuses.lock().unwrap().extend([
        StatusCode::SERVICE_UNAVAILABLE,
        StatusCode::TOO_MANY_REQUESTS,
    ]);
    let svc = layer(db.open().await, &clock()).layer(handler.clone());
    assert_eq!(
        send(&svc, post("k", "{}")).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        send(&svc, post("k", "{}")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(send(&svc, post("k", "{}")).await.text(), "run #3");
    assert_eq!(send(&svc, post("k", "{}")).await.text(), "run #3");
    assert_eq!(handler.runs(), 3);
}

/// Sends `POST k {}` again while it is answered 409 (yielding between tries, so another task's
/// store write can land), and returns the first other answer; `never` if none comes in 10,000
/// tries.
async fn past_conflicts<S>(svc: &S, never: &str) -> super::Answer
where
    S: tower_service::Service<
            Request<Full<bytes::Bytes>>,
            Response = http::Response<retry_idempotency::IdempotentBody<Full<bytes::Bytes>>>,
            Error = std::convert::Infallible,
        > + Clone,
{
    for _ in 0..10_000 {
        let a = send(svc, post("k", "{}")).await;
        if a.status != StatusCode::CONFLICT {
            return a;
        }
        tokio::task::yield_now().await;
    }
    panic!("{never}");
}

pub async fn a_cancelled_request_still_completes_its_key<D: Db>(db: &D) {
    let (mut handler, gate) = Handler::held();
    handler.hold_only = Some(1);
    let svc = layer(db.open().await, &clock()).layer(handler.clone());
    let cancelled = tokio::spawn({
        let svc = svc.clone();
        async move { send(&svc, post("k", "{}")).await }
    });
    handler.started(1).await;
    // The client goes away mid-request (the server drops the request's future).
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    assert_eq!(
        send(&svc, post("k", "{}")).await.status,
        StatusCode::CONFLICT
    );
    // The handler was not stopped: it finishes, and its response is stored. The retry gets
    // 409 until the store has it (the lease is 60 s on a stopped clock: only completion ends
    // it), then the replay, never a second run.
    gate.add_permits(1);
    let answer = past_conflicts(&svc, "the cancelled request's run never completed").await;
    assert_eq!(
        (
            answer.status,
            answer.text(),
            answer.header("idempotent-replayed")
        ),
        (StatusCode::CREATED, "run #1", Some("true"))
    );
    assert_eq!(handler.runs(), 1);
}

pub async fn a_request_cancelled_while_taking_its_key_gives_it_back<D: Db>(db: &D) {
    let handler = Handler::default();
    let keys = super::StallsAfterInsert::new(db.open().await);
    let svc = layer(keys.clone(), &clock()).layer(handler.clone());
    let cancelled = tokio::spawn({
        let svc = svc.clone();
        async move { send(&svc, post("k", "{}")).await }
    });
    // The key is written; the client goes away before the layer hears back from the store.
    keys.inserted.acquire().await.expect("open").forget();
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    // The key is given back (the lease is 60 s on a stopped clock: without it, every retry
    // would be answered 409 until the lease lapsed): the retry gets 409 until the release is
    // written, then runs the handler, once.
    assert_eq!(handler.runs(), 0);
    let retry = past_conflicts(&svc, "the cancelled request's key was never given back").await;
    // It was the guard's release that gave it back (its report may come after the database
    // applied it, which is what the retry saw).
    keys.released.acquire().await.expect("open").forget();
    assert_eq!(
        (
            retry.status,
            retry.text(),
            retry.header("idempotent-replayed")
        ),
        (StatusCode::CREATED, "run #1", None)
    );
    assert_eq!(handler.runs(), 1);
}

pub async fn the_handler_sees_its_lease<D: Db>(db: &D) {
    let handler = Handler::default();
    let svc = layer(db.open().await, &clock()).layer(handler.clone());
    send(&svc, post("order-9", "{}")).await;
    let get = Request::get("/orders/9")
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    send(&svc, get).await;
    assert_eq!(
        handler.leases.lock().unwrap().clone(),
        vec![Some(("order-9".to_owned(), true)), None]
    );
}

pub async fn the_driver_fences_every_write_on_the_run<D: Db>(db: &D) {
    use retry_idempotency::store::{Completed, Held, NewRun, RecordState};
    let keys = db.open().await;
    let at = Timestamp::from_unix_millis;
    let run = |token, now: i64| {
        let held = Held::new(&[7; 32], "k", token);
        NewRun::new(
            held,
            &[1; 32],
            at(now),
            at(now + 60_000),
            at(now + 3_600_000),
        )
    };
    let done = Completed::new(201, &[], b"first");
    let first = run(1, 0);
    assert!(keys.insert(&first).await.unwrap());
    assert!(
        !keys.insert(&run(2, 0)).await.unwrap(),
        "one record per key"
    );
    // The first run completes after another request read its (lapsed) running record: the
    // take-over of the record it read must fail, or the key would run twice.
    assert!(
        keys.complete(&first.held(), &done, at(70_000))
            .await
            .unwrap()
    );
    let second = run(2, 70_000);
    assert!(!keys.take_over(1, "running", &second).await.unwrap());
    let record = keys.get(&[7; 32], "k").await.unwrap().unwrap();
    assert_eq!(record.token, 1);
    assert!(matches!(&record.state, RecordState::Done(r) if r.body == b"first"));
    // An expired completed record is taken over as read; then the first run's token is void.
    assert!(keys.take_over(1, "done", &second).await.unwrap());
    assert!(
        !keys
            .complete(&first.held(), &done, at(70_001))
            .await
            .unwrap()
    );
    assert!(!keys.release(&first.held()).await.unwrap());
    assert!(keys.release(&second.held()).await.unwrap());
    assert_eq!(keys.get(&[7; 32], "k").await.unwrap(), None);
}
