//! The conformance suite: the same assertions on every [`DurableStore`].
//!
//! Time is a [`ManualClock`]; nothing here sleeps to let time pass or asserts on elapsed time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_durable::{
    AlertError, AttemptError, Clock, Completion, DEFAULT_BACKOFF, DurableError, DurableQueue,
    DurableStore, EnqueueOptions, Fence, Jitter, Lease, ManualClock, Rescue, Task, TaskContext,
    TaskId, TaskStatus, Timestamp, Worker, WorkerConfig,
};
use tokio::sync::Notify;

const OP: &str = "payments.capture";
const LEASE: Duration = Duration::from_secs(60);

pub fn clock() -> ManualClock {
    ManualClock::new(Timestamp::from_unix_millis(1_800_000_000_000))
}

pub fn ops() -> Vec<String> {
    vec![OP.to_owned()]
}

pub fn config(id: &str) -> WorkerConfig {
    WorkerConfig::new()
        .with_worker_id(id)
        .with_attempt_timeout(Duration::from_secs(30))
        .with_lease(LEASE)
        .with_poll_interval(Duration::from_millis(10))
}

/// An alert hook that counts deliveries and keeps the alerted tasks.
#[derive(Clone, Default)]
pub struct Alerts {
    pub calls: Arc<AtomicU32>,
    pub tasks: Arc<Mutex<Vec<Task>>>,
    /// Fail this many calls before succeeding.
    pub fail_first: Arc<AtomicU32>,
}

impl Alerts {
    pub fn hook(
        &self,
    ) -> impl Fn(Task) -> std::future::Ready<Result<(), AlertError>> + Send + Sync + 'static {
        let me = self.clone();
        move |task: Task| {
            me.calls.fetch_add(1, Ordering::SeqCst);
            let fail = me
                .fail_first
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if fail {
                return std::future::ready(Err("pager unreachable".into()));
            }
            me.tasks.lock().unwrap().push(task);
            std::future::ready(Ok(()))
        }
    }

    pub fn delivered(&self) -> usize {
        self.tasks.lock().unwrap().len()
    }
}

async fn enqueue<S: DurableStore>(
    q: &DurableQueue<S>,
    key: &str,
    options: EnqueueOptions,
) -> TaskId {
    q.enqueue(OP, key, key.as_bytes(), options)
        .await
        .expect("enqueue")
        .task_id
}

async fn get<S: DurableStore>(store: &S, id: TaskId) -> Task {
    store.get(id).await.expect("get").expect("task exists")
}

fn ok_worker<S: DurableStore>(store: S, clock: &ManualClock, id: &str) -> Worker<S> {
    Worker::builder(store)
        .handler(OP, |_t: TaskContext| async { Ok(()) })
        .clock(clock.clone())
        .config(config(id))
        .build()
        .expect("worker")
}

pub async fn enqueue_is_idempotent_and_refuses_missing_keys<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let a = q
        .enqueue(OP, "k1", b"first", EnqueueOptions::new())
        .await
        .unwrap();
    assert!(a.created);
    assert_eq!(a.status, TaskStatus::Pending);
    let b = q
        .enqueue(OP, "k1", b"second", EnqueueOptions::new())
        .await
        .unwrap();
    assert!(!b.created, "a repeated hand-off must not create a task");
    assert_eq!(b.task_id, a.task_id);

    let t = get(&store, a.task_id).await;
    assert_eq!(
        t.payload, b"first",
        "the duplicate must not overwrite the payload"
    );
    assert_eq!(t.idempotency_key, "k1");
    assert_eq!(t.retry_count, 0);
    assert_eq!(t.max_attempts, 10, "10 attempts by default");
    assert_eq!(t.next_attempt_at, clock.now());
    assert_eq!(t.created_at, clock.now());
    assert_eq!(t.locked_by, None);

    let other_op = q
        .enqueue("payments.refund", "k1", b"x", EnqueueOptions::new())
        .await
        .unwrap();
    assert!(other_op.created, "the key is unique per operation");
    assert_ne!(other_op.task_id, a.task_id);

    let err = q
        .enqueue(OP, "", b"x", EnqueueOptions::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, DurableError::MissingIdempotencyKey { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("without an idempotency key"),
        "{err}"
    );
    let err = q
        .enqueue("", "k", b"x", EnqueueOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(err, DurableError::EmptyOperation), "{err}");
    let err = q
        .enqueue(OP, "k9", b"x", EnqueueOptions::new().with_max_attempts(0))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            DurableError::InvalidConfig {
                field: "max_attempts",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(q.counts().await.unwrap().total(), 2);
}

pub async fn claim_takes_due_tasks_once_and_counts_the_attempt<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let k1 = enqueue(&q, "k1", EnqueueOptions::new()).await;
    let k2 = enqueue(&q, "k2", EnqueueOptions::new()).await;
    let k3 = enqueue(
        &q,
        "k3",
        EnqueueOptions::new().with_delay(Duration::from_secs(10)),
    )
    .await;
    let now = clock.now();
    let lease_until = now.saturating_add(LEASE);

    let got = store
        .claim("w1", &ops(), 10, lease_until, now)
        .await
        .unwrap();
    let ids: Vec<TaskId> = got.iter().map(|t| t.id).collect();
    assert_eq!(ids, vec![k1, k2], "only due tasks, in due order");
    for t in &got {
        assert_eq!(t.status, TaskStatus::Running);
        assert_eq!(t.retry_count, 1, "the attempt is counted at claim");
        assert_eq!(t.locked_by.as_deref(), Some("w1"));
        assert_eq!(t.locked_until, Some(lease_until));
    }
    let again = store
        .claim("w2", &ops(), 10, lease_until, now)
        .await
        .unwrap();
    assert!(again.is_empty(), "a running task is not claimed twice");

    clock.advance(Duration::from_millis(9_999));
    let now = clock.now();
    assert!(
        store
            .claim("w2", &ops(), 10, now.saturating_add(LEASE), now)
            .await
            .unwrap()
            .is_empty()
    );
    clock.advance(Duration::from_millis(1));
    let now = clock.now();
    let late = store
        .claim("w2", &ops(), 10, now.saturating_add(LEASE), now)
        .await
        .unwrap();
    assert_eq!(late.iter().map(|t| t.id).collect::<Vec<_>>(), vec![k3]);

    // Batches are respected.
    for i in 0..5 {
        enqueue(&q, &format!("b{i}"), EnqueueOptions::new()).await;
    }
    let two = store
        .claim("w3", &ops(), 2, now.saturating_add(LEASE), now)
        .await
        .unwrap();
    assert_eq!(two.len(), 2);
}

pub async fn claim_only_takes_registered_operations<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let weird = "we\"ird\\op";
    q.enqueue("other.op", "k", b"", EnqueueOptions::new())
        .await
        .unwrap();
    let mine = q
        .enqueue(weird, "k", b"", EnqueueOptions::new())
        .await
        .unwrap()
        .task_id;
    let now = clock.now();
    let got = store
        .claim(
            "w",
            &[weird.to_owned(), "nothing".to_owned()],
            10,
            now.saturating_add(LEASE),
            now,
        )
        .await
        .unwrap();
    assert_eq!(got.iter().map(|t| t.id).collect::<Vec<_>>(), vec![mine]);
    assert!(
        store
            .claim("w", &[], 10, now, now)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn fenced_writes_from_a_rescued_worker_are_ignored<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let id = enqueue(&q, "k", EnqueueOptions::new()).await;
    let now = clock.now();
    let stale = store
        .claim("slow", &ops(), 1, now.saturating_add(LEASE), now)
        .await
        .unwrap();
    let stale_fence = stale[0].fence().unwrap();

    clock.advance(LEASE + Duration::from_millis(1));
    let expired = store.expired(10, clock.now()).await.unwrap();
    assert_eq!(expired.iter().map(|t| t.id).collect::<Vec<_>>(), vec![id]);
    assert_eq!(expired[0].locked_by.as_deref(), Some("slow"));
    // Two instances rescue the same expired lease at once: it is taken back once.
    let decided = [Rescue::retry(
        stale_fence.clone(),
        clock.now().saturating_add(Duration::from_secs(2)),
        "presumed dead",
    )];
    assert_eq!(store.rescue(&decided, clock.now()).await.unwrap(), vec![id]);
    assert!(
        store
            .rescue(&decided, clock.now())
            .await
            .unwrap()
            .is_empty(),
        "rescued once"
    );
    let t = get(&store, id).await;
    assert_eq!(t.status, TaskStatus::Pending);
    assert_eq!(t.last_error.as_deref(), Some("presumed dead"));
    assert!(store.expired(10, clock.now()).await.unwrap().is_empty());

    clock.advance(Duration::from_secs(2));
    let now = clock.now();
    let fresh = store
        .claim("fast", &ops(), 1, now.saturating_add(LEASE), now)
        .await
        .unwrap();
    assert_eq!(fresh[0].retry_count, 2);
    let fresh_fence = fresh[0].fence().unwrap();
    assert!(
        store
            .rescue(&[Rescue::retry(fresh_fence.clone(), now, "early")], now)
            .await
            .unwrap()
            .is_empty(),
        "a lease that has not expired is not rescued"
    );

    assert!(
        !store.complete(&stale_fence, None, now).await.unwrap(),
        "stale complete must not apply"
    );
    assert!(
        !store
            .retry_later(&stale_fence, "late", now, now)
            .await
            .unwrap()
    );
    assert!(!store.mark_failed(&stale_fence, "late", now).await.unwrap());
    assert!(!store.release(&stale_fence, now).await.unwrap());
    let t = get(&store, id).await;
    assert_eq!(
        (t.status, t.locked_by.as_deref()),
        (TaskStatus::Running, Some("fast"))
    );

    assert!(store.complete(&fresh_fence, None, now).await.unwrap());
    let t = get(&store, id).await;
    assert_eq!(t.status, TaskStatus::Succeeded);
    assert_eq!(t.retry_count, 2);
    assert_eq!(t.locked_by, None);
    assert!(
        !store.complete(&fresh_fence, None, now).await.unwrap(),
        "completing twice is a no-op"
    );
}

pub async fn backoff_schedule_doubles_and_caps<S: DurableStore>(store: S) {
    let clock = clock();
    let alerts = Alerts::default();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let id = enqueue(&q, "k", EnqueueOptions::new().with_max_attempts(6)).await;
    let backoff = DEFAULT_BACKOFF
        .with_initial(Duration::from_secs(2))
        .with_max_backoff(Duration::from_secs(10))
        .with_jitter(Jitter::None);
    let worker = Worker::builder(store.clone())
        .handler(OP, |_t: TaskContext| async {
            Err::<(), _>(AttemptError::retry("503 from upstream"))
        })
        .alert_hook(alerts.hook())
        .clock(clock.clone())
        .config(config("w").with_backoff(backoff))
        .build()
        .unwrap();

    let expected_secs = [2u64, 4, 8, 10, 10];
    for (i, secs) in expected_secs.iter().enumerate() {
        let stats = worker.tick().await.unwrap();
        assert_eq!((stats.claimed, stats.retried), (1, 1), "attempt {}", i + 1);
        let t = get(&store, id).await;
        assert_eq!(t.status, TaskStatus::Pending);
        assert_eq!(t.retry_count as usize, i + 1);
        assert_eq!(
            t.next_attempt_at.since(clock.now()),
            Duration::from_secs(*secs)
        );
        assert_eq!(t.last_error.as_deref(), Some("503 from upstream"));
        // Not due a millisecond early.
        clock.advance(Duration::from_secs(*secs) - Duration::from_millis(1));
        assert_eq!(worker.tick().await.unwrap().claimed, 0);
        clock.advance(Duration::from_millis(1));
    }
    let stats = worker.tick().await.unwrap();
    assert_eq!((stats.claimed, stats.failed, stats.alerted), (1, 1, 1));
    let t = get(&store, id).await;
    assert_eq!(t.status, TaskStatus::Failed);
    assert_eq!(t.retry_count, 6);
    assert!(
        t.last_error.as_deref().unwrap().contains("attempt 6 of 6"),
        "{:?}",
        t.last_error
    );
    assert_eq!(alerts.delivered(), 1);
}

pub async fn jittered_retries_spread_within_the_upper_half_of_the_step<S: DurableStore>(store: S) {
    // One outage fails many tasks at once: their retries must not all come due together.
    const N: usize = 40;
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let mut ids = Vec::with_capacity(N);
    for i in 0..N {
        ids.push(enqueue(&q, &format!("k{i}"), EnqueueOptions::new()).await);
    }
    let worker = Worker::builder(store.clone())
        .handler(OP, |_t: TaskContext| async {
            Err::<(), _>(AttemptError::retry("503 from upstream"))
        })
        .clock(clock.clone())
        .config(
            config("w")
                .with_batch_size(N as u32)
                .with_jitter_seed(18)
                .with_backoff(DEFAULT_BACKOFF.with_initial(Duration::from_secs(8))),
        )
        .build()
        .unwrap();
    let stats = worker.tick().await.unwrap();
    assert_eq!((stats.claimed, stats.retried), (N as u64, N as u64));
    // The step after attempt 1 is 4 s * 2 = 8 s: every wait is in [4 s, 8 s).
    let mut waits = Vec::with_capacity(N);
    for id in ids {
        let t = get(&store, id).await;
        assert_eq!(t.status, TaskStatus::Pending);
        let wait = t.next_attempt_at.since(clock.now());
        assert!(
            wait >= Duration::from_secs(4) && wait < Duration::from_secs(8),
            "{wait:?}"
        );
        waits.push(wait);
    }
    waits.sort();
    waits.dedup();
    assert!(waits.len() > N / 2, "waits bunched: {waits:?}");
    assert!(
        waits[waits.len() - 1] - waits[0] > Duration::from_secs(2),
        "{waits:?}"
    );
}

pub async fn max_attempts_fail_and_alert_exactly_once<S: DurableStore>(store: S) {
    let clock = clock();
    let alerts = Alerts::default();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let id = enqueue(&q, "k", EnqueueOptions::new()).await;
    let worker = Worker::builder(store.clone())
        .handler(OP, |_t: TaskContext| async {
            Err::<(), _>(AttemptError::retry("connection reset"))
        })
        .alert_hook(alerts.hook())
        .clock(clock.clone())
        .config(config("w"))
        .build()
        .unwrap();
    let mut claims = 0;
    for _ in 0..15 {
        claims += worker.tick().await.unwrap().claimed;
        clock.advance(Duration::from_secs(3600));
    }
    assert_eq!(claims, 10, "10 attempts by default, then no more");
    let t = get(&store, id).await;
    assert_eq!(t.status, TaskStatus::Failed);
    assert_eq!(t.retry_count, 10);
    assert!(t.alerted_at.is_some());
    assert_eq!(alerts.calls.load(Ordering::SeqCst), 1, "exactly one alert");
    assert_eq!(alerts.tasks.lock().unwrap()[0].id, id);
    let failed = q.failed(10).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0]
            .last_error
            .as_deref()
            .unwrap()
            .contains("connection reset")
    );
}

pub async fn permanent_failure_fails_at_once<S: DurableStore>(store: S) {
    let clock = clock();
    let alerts = Alerts::default();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let id = enqueue(&q, "k", EnqueueOptions::new()).await;
    let worker = Worker::builder(store.clone())
        .handler(OP, |_t: TaskContext| async {
            Err::<(), _>(AttemptError::permanent(
                "422 Unprocessable Entity: card number invalid",
            ))
        })
        .alert_hook(alerts.hook())
        .clock(clock.clone())
        .config(config("w"))
        .build()
        .unwrap();
    let stats = worker.tick().await.unwrap();
    assert_eq!(
        (stats.claimed, stats.failed, stats.retried, stats.alerted),
        (1, 1, 0, 1)
    );
    let t = get(&store, id).await;
    assert_eq!(t.status, TaskStatus::Failed);
    assert_eq!(t.retry_count, 1);
    assert!(t.last_error.unwrap().contains("422"));
    clock.advance(Duration::from_secs(86_400));
    assert_eq!(
        worker.tick().await.unwrap(),
        Default::default(),
        "nothing more happens"
    );
    assert_eq!(alerts.delivered(), 1);
}

pub async fn alert_owed_after_crash_between_fail_and_alert<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let id = enqueue(&q, "k", EnqueueOptions::new()).await;
    // A worker fails the task and crashes before its alert dispatch runs.
    let now = clock.now();
    let claimed = store
        .claim("crashed", &ops(), 1, now.saturating_add(LEASE), now)
        .await
        .unwrap();
    assert!(
        store
            .mark_failed(&claimed[0].fence().unwrap(), "boom", now)
            .await
            .unwrap()
    );

    let alerts = Alerts::default();
    let worker = Worker::builder(store.clone())
        .handler(OP, |_t: TaskContext| async { Ok(()) })
        .alert_hook(alerts.hook())
        .clock(clock.clone())
        .config(config("survivor"))
        .build()
        .unwrap();
    assert_eq!(worker.tick().await.unwrap().alerted, 1);
    assert_eq!(worker.tick().await.unwrap().alerted, 0);
    assert_eq!(alerts.delivered(), 1);
    let alerted = alerts.tasks.lock().unwrap()[0].clone();
    assert_eq!(
        (alerted.id, alerted.last_error.as_deref()),
        (id, Some("boom"))
    );
    assert!(get(&store, id).await.alerted_at.is_some());
}

pub async fn failing_alert_hook_is_retried_until_delivered<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    enqueue(&q, "k", EnqueueOptions::new()).await;
    let alerts = Alerts::default();
    alerts.fail_first.store(1, Ordering::SeqCst);
    let alert_lease = Duration::from_secs(60);
    let worker = Worker::builder(store.clone())
        .handler(OP, |_t: TaskContext| async {
            Err::<(), _>(AttemptError::permanent("400"))
        })
        .alert_hook(alerts.hook())
        .clock(clock.clone())
        .config(config("w").with_alert_lease(alert_lease))
        .build()
        .unwrap();
    let stats = worker.tick().await.unwrap();
    assert_eq!((stats.failed, stats.alerted), (1, 0));
    assert_eq!(alerts.calls.load(Ordering::SeqCst), 1);
    // Reserved by the failed delivery until its alert lease ends.
    assert_eq!(worker.dispatch_alerts().await.unwrap(), 0);
    assert_eq!(alerts.calls.load(Ordering::SeqCst), 1);
    clock.advance(alert_lease);
    assert_eq!(worker.dispatch_alerts().await.unwrap(), 1);
    assert_eq!(worker.dispatch_alerts().await.unwrap(), 0);
    assert_eq!(alerts.calls.load(Ordering::SeqCst), 2);
    assert_eq!(alerts.delivered(), 1);
}

pub async fn expired_lease_is_rescued_and_completed<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let id = enqueue(&q, "k", EnqueueOptions::new()).await;
    let now = clock.now();
    store
        .claim("dead", &ops(), 1, now.saturating_add(LEASE), now)
        .await
        .unwrap();

    let worker = ok_worker(store.clone(), &clock, "rescuer");
    // Lease not yet expired: nothing to rescue, nothing due.
    clock.advance(LEASE);
    assert_eq!(worker.tick().await.unwrap(), Default::default());
    clock.advance(Duration::from_millis(1));
    let stats = worker.tick().await.unwrap();
    assert_eq!(
        (stats.rescued, stats.claimed),
        (1, 0),
        "rescued, then waits its backoff"
    );
    let t = get(&store, id).await;
    assert_eq!(t.status, TaskStatus::Pending);
    assert!(
        t.last_error.as_deref().unwrap().contains("`dead`"),
        "{:?}",
        t.last_error
    );
    // The step after attempt 1 is 2 s; the jittered wait is in its upper half.
    let wait = t.next_attempt_at.since(clock.now());
    assert!(
        wait >= Duration::from_secs(1) && wait < Duration::from_secs(2),
        "{wait:?}"
    );
    clock.advance(Duration::from_secs(2));
    let stats = worker.tick().await.unwrap();
    assert_eq!((stats.claimed, stats.succeeded), (1, 1));
    let t = get(&store, id).await;
    assert_eq!((t.status, t.retry_count), (TaskStatus::Succeeded, 2));
}

/// The rescuer draws its jitter from the worker's randomness, so a seeded worker rescues at the
/// same times on every run: two rounds, each three abandoned first attempts rescued by a fresh
/// worker with the same seed, come due again after the same waits.
pub async fn rescue_timing_is_deterministic_under_a_seed<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let mut rounds = Vec::new();
    for round in 0..2 {
        let mut ids = Vec::new();
        for i in 0..3 {
            ids.push(enqueue(&q, &format!("r{round}-{i}"), EnqueueOptions::new()).await);
        }
        let now = clock.now();
        let claimed = store
            .claim("dead", &ops(), 3, now.saturating_add(LEASE), now)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 3);
        clock.advance(LEASE + Duration::from_millis(1));
        // No handler for the operation: the worker rescues and claims nothing.
        let rescuer = Worker::builder(store.clone())
            .handler("elsewhere", |_t: TaskContext| async { Ok(()) })
            .clock(clock.clone())
            .config(config("rescuer").with_jitter_seed(42))
            .build()
            .unwrap();
        let stats = rescuer.tick().await.unwrap();
        assert_eq!((stats.rescued, stats.claimed), (3, 0), "{stats:?}");
        let mut waits = Vec::new();
        for id in ids {
            let t = get(&store, id).await;
            assert_eq!(t.status, TaskStatus::Pending);
            waits.push(t.next_attempt_at.since(clock.now()));
        }
        // The clock stays: the first round's tasks are not due yet, so the second round's
        // claim takes only its own.
        rounds.push(waits);
    }
    assert_eq!(rounds[0], rounds[1], "same seed, same rescue times");
    // Still the schedule's jitter: the step after attempt 1 is 2 s, each wait in its upper half.
    for wait in &rounds[0] {
        assert!(
            *wait >= Duration::from_secs(1) && *wait < Duration::from_secs(2),
            "{wait:?}"
        );
    }
}

pub async fn rescue_of_last_attempt_fails_and_alerts<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let id = enqueue(&q, "k", EnqueueOptions::new().with_max_attempts(1)).await;
    let now = clock.now();
    store
        .claim("dead", &ops(), 1, now.saturating_add(LEASE), now)
        .await
        .unwrap();
    let alerts = Alerts::default();
    let worker = Worker::builder(store.clone())
        .handler(OP, |_t: TaskContext| async { Ok(()) })
        .alert_hook(alerts.hook())
        .clock(clock.clone())
        .config(config("rescuer"))
        .build()
        .unwrap();
    clock.advance(LEASE + Duration::from_millis(1));
    let stats = worker.tick().await.unwrap();
    assert_eq!((stats.rescued, stats.alerted), (1, 1));
    let t = get(&store, id).await;
    assert_eq!(t.status, TaskStatus::Failed);
    assert!(t.last_error.unwrap().contains("presumed dead"));
}

pub async fn operator_requeue_and_cancel<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let fail = Arc::new(AtomicBool::new(true));
    let f = Arc::clone(&fail);
    let worker = Worker::builder(store.clone())
        .handler(OP, move |_t: TaskContext| {
            let fail = f.load(Ordering::SeqCst);
            async move {
                if fail {
                    Err(AttemptError::permanent("404 account not found"))
                } else {
                    Ok(())
                }
            }
        })
        .clock(clock.clone())
        .config(config("w"))
        .build()
        .unwrap();
    let id = enqueue(&q, "k", EnqueueOptions::new()).await;
    worker.tick().await.unwrap();
    let failed = q.failed(10).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].id, id);
    assert_eq!(
        failed[0].last_error.as_deref(),
        Some("404 account not found")
    );

    fail.store(false, Ordering::SeqCst);
    let t = q.requeue(id).await.unwrap();
    assert_eq!(
        (t.status, t.retry_count, t.alerted_at),
        (TaskStatus::Pending, 0, None)
    );
    assert_eq!(worker.tick().await.unwrap().succeeded, 1);
    let err = q.requeue(id).await.unwrap_err();
    assert!(
        matches!(
            err,
            DurableError::InvalidTransition {
                action: "requeue",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("`succeeded`"), "{err}");
    let err = q.requeue(TaskId(987_654_321)).await.unwrap_err();
    assert!(
        matches!(
            err,
            DurableError::NotFound {
                task_id: 987_654_321
            }
        ),
        "{err}"
    );

    let pending = enqueue(&q, "k2", EnqueueOptions::new()).await;
    assert_eq!(
        q.cancel(pending).await.unwrap().status,
        TaskStatus::Cancelled
    );
    assert_eq!(
        worker.tick().await.unwrap().claimed,
        0,
        "a cancelled task is not attempted"
    );
    assert_eq!(
        q.requeue(pending).await.unwrap().status,
        TaskStatus::Pending
    );

    let running = enqueue(&q, "k3", EnqueueOptions::new()).await;
    let now = clock.now();
    // Claims `pending` (k2, requeued) and k3.
    store
        .claim("other", &ops(), 10, now.saturating_add(LEASE), now)
        .await
        .unwrap();
    let err = q.cancel(running).await.unwrap_err();
    assert!(err.to_string().contains("`running`"), "{err}");
}

pub async fn counts_by_status<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let now = clock.now();
    let lease = now.saturating_add(LEASE);
    let c = |k: &'static str| {
        let q = q.clone();
        async move { enqueue(&q, k, EnqueueOptions::new()).await }
    };
    let succeeded = c("s").await;
    let failed = c("f").await;
    let claimed = store.claim("w", &ops(), 10, lease, now).await.unwrap();
    let fence = |id: TaskId| {
        claimed
            .iter()
            .find(|t| t.id == id)
            .unwrap()
            .fence()
            .unwrap()
    };
    assert!(store.complete(&fence(succeeded), None, now).await.unwrap());
    assert!(store.mark_failed(&fence(failed), "x", now).await.unwrap());
    let cancelled = c("c").await;
    q.cancel(cancelled).await.unwrap();
    c("r").await;
    store.claim("w", &ops(), 1, lease, now).await.unwrap();
    c("p").await;
    let counts = q.counts().await.unwrap();
    for st in TaskStatus::ALL {
        assert_eq!(counts.get(st), 1, "{st}");
    }
    assert_eq!((counts.total(), counts.outstanding()), (5, 2));
}

pub async fn attempt_timeout_is_a_transient_failure<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let id = enqueue(&q, "k", EnqueueOptions::new()).await;
    let worker = Worker::builder(store.clone())
        .handler(OP, |_t: TaskContext| {
            std::future::pending::<Result<(), AttemptError>>()
        })
        .clock(clock.clone())
        .config(config("w").with_attempt_timeout(Duration::from_millis(20)))
        .build()
        .unwrap();
    assert_eq!(worker.tick().await.unwrap().retried, 1);
    let t = get(&store, id).await;
    assert_eq!(t.status, TaskStatus::Pending);
    assert!(t.last_error.unwrap().contains("timed out"));
}

pub async fn handler_panic_is_a_failed_attempt<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let id = enqueue(&q, "k", EnqueueOptions::new()).await;
    let worker = Worker::builder(store.clone())
        .handler(OP, |_t: TaskContext| async {
            if true {
                panic!("handler bug (expected by this test)");
            }
            Ok(())
        })
        .clock(clock.clone())
        .config(config("w"))
        .build()
        .unwrap();
    assert_eq!(worker.tick().await.unwrap().retried, 1);
    let t = get(&store, id).await;
    assert_eq!(
        (t.status, t.last_error.as_deref()),
        (TaskStatus::Pending, Some("handler panicked"))
    );
}

pub async fn graceful_shutdown_releases_unfinished_leases<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let first = enqueue(&q, "k1", EnqueueOptions::new()).await;
    let second = enqueue(&q, "k2", EnqueueOptions::new()).await;
    let started = Arc::new(Notify::new());
    let s = Arc::clone(&started);
    let worker = Worker::builder(store.clone())
        .handler(OP, move |_t: TaskContext| {
            let s = Arc::clone(&s);
            async move {
                s.notify_one();
                std::future::pending::<()>().await;
                Ok(())
            }
        })
        .clock(clock.clone())
        .config(
            config("w")
                .with_concurrency(1)
                .with_batch_size(1)
                .with_shutdown_grace(Duration::from_millis(20)),
        )
        .build()
        .unwrap();
    let stats = worker.run(async move { started.notified().await }).await;
    assert_eq!((stats.claimed, stats.released), (1, 1));
    let t = get(&store, first).await;
    assert_eq!(t.status, TaskStatus::Pending);
    assert_eq!(t.retry_count, 0, "a released attempt is not counted");
    assert_eq!((t.locked_by, t.next_attempt_at), (None, clock.now()));
    assert_eq!(
        get(&store, second).await.retry_count,
        0,
        "nothing claimed after shutdown"
    );
}

pub async fn concurrent_workers_claim_each_attempt_once<S: DurableStore>(store: S) {
    const TASKS: usize = 200;
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    for i in 0..TASKS {
        enqueue(&q, &format!("k{i}"), EnqueueOptions::new()).await;
    }
    let seen: Arc<Mutex<HashMap<(String, u32), u32>>> = Arc::default();
    let mut workers = Vec::new();
    for w in 0..4 {
        let seen = Arc::clone(&seen);
        let worker = Worker::builder(store.clone())
            .handler(OP, move |t: TaskContext| {
                let seen = Arc::clone(&seen);
                async move {
                    *seen
                        .lock()
                        .unwrap()
                        .entry((t.idempotency_key.clone(), t.attempt))
                        .or_insert(0) += 1;
                    tokio::task::yield_now().await;
                    let n: usize = t.idempotency_key[1..].parse().unwrap();
                    if n.is_multiple_of(4) && t.attempt == 1 {
                        Err(AttemptError::retry(
                            "first attempt of every fourth task fails",
                        ))
                    } else {
                        Ok(())
                    }
                }
            })
            .clock(clock.clone())
            .config(
                config(&format!("w{w}"))
                    .with_batch_size(5)
                    .with_backoff(DEFAULT_BACKOFF.with_initial(Duration::ZERO)),
            )
            .build()
            .unwrap();
        workers.push(tokio::spawn(async move {
            let mut claimed = 0;
            loop {
                let stats = worker.tick().await.unwrap();
                claimed += stats.claimed;
                assert_eq!(stats.lost_leases, 0);
                if stats.claimed == 0 {
                    if worker.store().counts().await.unwrap().outstanding() == 0 {
                        return claimed;
                    }
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    let mut total = 0;
    for w in workers {
        total += w.await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(total as usize, TASKS + TASKS / 4);
    assert_eq!(seen.len(), TASKS + TASKS / 4, "every (task, attempt) ran");
    assert!(seen.values().all(|&n| n == 1), "an attempt ran twice");
    let counts = q.counts().await.unwrap();
    assert_eq!(counts.succeeded as usize, TASKS, "none lost");
}

pub async fn retry_after_is_honoured<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let id = enqueue(&q, "k", EnqueueOptions::new()).await;
    let worker = Worker::builder(store.clone())
        .handler(OP, |_t: TaskContext| async {
            Err::<(), _>(AttemptError::retry_after(
                "429 Too Many Requests",
                Duration::from_secs(30),
            ))
        })
        .clock(clock.clone())
        .config(config("w"))
        .build()
        .unwrap();
    worker.tick().await.unwrap();
    let t = get(&store, id).await;
    assert_eq!(
        t.next_attempt_at.since(clock.now()),
        Duration::from_secs(30)
    );
}

/// (idempotency key, attempt, payload) as a handler saw them.
type Seen = (String, u32, Vec<u8>);

pub async fn every_attempt_gets_the_task_key<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    q.enqueue(
        OP,
        "order-42-capture",
        b"{\"amount\":500}",
        EnqueueOptions::new(),
    )
    .await
    .unwrap();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let s = Arc::clone(&seen);
    let worker = Worker::builder(store.clone())
        .handler(OP, move |t: TaskContext| {
            s.lock()
                .unwrap()
                .push((t.idempotency_key.clone(), t.attempt, t.payload.clone()));
            let attempt = t.attempt;
            async move {
                if attempt < 3 {
                    Err(AttemptError::retry("503"))
                } else {
                    Ok(())
                }
            }
        })
        .clock(clock.clone())
        .config(config("w"))
        .build()
        .unwrap();
    for _ in 0..3 {
        worker.tick().await.unwrap();
        clock.advance(Duration::from_secs(60));
    }
    let seen = seen.lock().unwrap();
    let expected: Vec<Seen> = (1..=3)
        .map(|n| {
            (
                "order-42-capture".to_owned(),
                n,
                b"{\"amount\":500}".to_vec(),
            )
        })
        .collect();
    assert_eq!(*seen, expected);
}

/// A clock that reads `clock` until it has been read `reads` times, then runs `jump` ahead of
/// it: a process stopped (SIGSTOP) and resumed (SIGCONT) between two steps of a worker.
struct StoppedAfter {
    clock: ManualClock,
    reads: AtomicU32,
    jump: Duration,
}

impl Clock for StoppedAfter {
    fn now(&self) -> Timestamp {
        let left = self
            .reads
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        match left {
            Ok(_) => self.clock.now(),
            Err(_) => self.clock.now().saturating_add(self.jump),
        }
    }
}

/// A worker that claimed a task and was then stopped past its lease must not run the task when
/// it resumes: another worker may have taken it over, and the fence would only refuse the
/// result after the side effect happened twice. The task is given back and run once, by a
/// worker whose lease is current.
pub async fn a_task_claimed_too_long_ago_is_not_run<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let id = enqueue(&q, "k", EnqueueOptions::new()).await;
    let runs = Arc::new(AtomicU32::new(0));
    let counting = |runs: &Arc<AtomicU32>| {
        let runs = runs.clone();
        move |_t: TaskContext| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        }
    };
    // `tick` reads the clock to rescue, then to claim; every later read is two leases on.
    let stopped = Worker::builder(store.clone())
        .handler(OP, counting(&runs))
        .clock(StoppedAfter {
            clock: clock.clone(),
            reads: AtomicU32::new(2),
            jump: LEASE * 2,
        })
        .config(config("stopped"))
        .build()
        .expect("worker");
    let stats = stopped.tick().await.unwrap();
    assert_eq!(stats.claimed, 1);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "a stale claim must not run");
    assert_eq!((stats.released, stats.succeeded), (1, 0), "{stats:?}");
    let t = get(&store, id).await;
    assert_eq!(t.status, TaskStatus::Pending);
    assert_eq!(t.retry_count, 0, "a released attempt is not counted");

    clock.advance(LEASE * 2);
    let current = Worker::builder(store.clone())
        .handler(OP, counting(&runs))
        .clock(clock.clone())
        .config(config("current"))
        .build()
        .expect("worker");
    assert_eq!(current.tick().await.unwrap().succeeded, 1);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "run exactly once");
    assert_eq!(get(&store, id).await.status, TaskStatus::Succeeded);
}

/// A worker stopped mid-attempt for longer than its lease: another worker rescues the task and
/// runs it again with a new attempt number; when the stopped handler resumes it carries on
/// (nothing stops it at once), and the fence discards its result but not what it did. Asking
/// `Lease::current()` before the side effect lets it stand down, so the effect happens once.
pub async fn a_handler_resumed_past_its_lease_sees_it_before_its_side_effect<S: DurableStore>(
    store: S,
) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let id = enqueue(&q, "k", EnqueueOptions::new()).await;
    // The attempts that did the side effect, and whether a handler ran on past its lease.
    let effects = Arc::new(Mutex::new(Vec::new()));
    let ran_past_lease = Arc::new(AtomicBool::new(false));
    let (started, resume) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let handler = {
        let (effects, ran_past_lease) = (effects.clone(), ran_past_lease.clone());
        let (started, resume) = (started.clone(), resume.clone());
        move |task: TaskContext| {
            let (effects, ran_past_lease) = (effects.clone(), ran_past_lease.clone());
            let (started, resume) = (started.clone(), resume.clone());
            async move {
                let lease = Lease::current().expect("the worker lends the lease to its handler");
                assert_eq!(
                    (lease.task_id(), lease.attempt()),
                    (task.task_id, task.attempt)
                );
                if task.attempt == 1 {
                    // Stopped here, for longer than the lease.
                    started.notify_one();
                    resume.notified().await;
                }
                if !lease.holds() {
                    ran_past_lease.store(true, Ordering::SeqCst);
                    assert_eq!(lease.remaining(), Duration::ZERO);
                    return Err(AttemptError::retry("lease lost before the capture"));
                }
                effects.lock().unwrap().push(task.attempt);
                Ok(())
            }
        }
    };
    let worker = |name: &str| {
        Worker::builder(store.clone())
            .handler(OP, handler.clone())
            .clock(clock.clone())
            // A rescued task is due again at once.
            .config(config(name).with_backoff(DEFAULT_BACKOFF.with_initial(Duration::ZERO)))
            .build()
            .expect("worker")
    };
    let stopped = worker("stopped");
    let first = tokio::spawn(async move { stopped.tick().await });
    started.notified().await;

    clock.advance(LEASE + Duration::from_millis(1));
    let rescuer = worker("rescuer").tick().await.unwrap();
    assert_eq!((rescuer.rescued, rescuer.succeeded), (1, 1), "{rescuer:?}");

    resume.notify_one();
    let resumed = first.await.unwrap().unwrap();
    assert_eq!(
        resumed.lost_leases, 1,
        "its result is discarded: {resumed:?}"
    );
    assert!(
        ran_past_lease.load(Ordering::SeqCst),
        "the stopped handler ran on after its lease expired"
    );
    assert_eq!(
        *effects.lock().unwrap(),
        vec![2],
        "the side effect happened once, by the second attempt"
    );
    let t = get(&store, id).await;
    assert_eq!((t.status, t.retry_count), (TaskStatus::Succeeded, 2));
}

/// A deferred call's outcome is looked up by task id: completed with the handler's output,
/// failed with its last error, or still pending; a handler returning `()` stores no output.
pub async fn results_are_looked_up_by_task_id<S: DurableStore>(store: S) {
    const QUIET: &str = "payments.notify";
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let done = enqueue(&q, "done", EnqueueOptions::new()).await;
    let bad = enqueue(&q, "bad", EnqueueOptions::new()).await;
    let later = enqueue(
        &q,
        "later",
        EnqueueOptions::new().with_delay(Duration::from_secs(60)),
    )
    .await;
    let quiet = q
        .enqueue(QUIET, "quiet", b"", EnqueueOptions::new())
        .await
        .unwrap()
        .task_id;
    let worker = Worker::builder(store.clone())
        .handler(OP, |t: TaskContext| async move {
            if t.idempotency_key == "bad" {
                return Err(AttemptError::permanent(
                    "402 Payment Required: card declined",
                ));
            }
            Ok(format!("receipt for {}", t.idempotency_key).into_bytes())
        })
        .handler(QUIET, |_t: TaskContext| async { Ok(()) })
        .clock(clock.clone())
        .config(config("w"))
        .build()
        .unwrap();
    let stats = worker.tick().await.unwrap();
    assert_eq!((stats.succeeded, stats.failed), (2, 1), "{stats:?}");

    let t = q.get(done).await.unwrap().unwrap();
    assert_eq!(t.status, TaskStatus::Succeeded);
    assert_eq!(t.output.as_deref(), Some(&b"receipt for done"[..]));
    assert_eq!(t.last_error, None);

    let t = q.get(bad).await.unwrap().unwrap();
    assert_eq!(t.status, TaskStatus::Failed);
    assert_eq!(t.output, None);
    assert!(t.last_error.unwrap().contains("card declined"));

    let t = q.get(later).await.unwrap().unwrap();
    assert_eq!((t.status, t.output), (TaskStatus::Pending, None));

    let t = q.get(quiet).await.unwrap().unwrap();
    assert_eq!((t.status, t.output), (TaskStatus::Succeeded, None));

    assert_eq!(q.get(TaskId(i64::MAX)).await.unwrap(), None);
}

/// One batched completion write keeps every task's fence: in a batch from a worker whose lease
/// on one task was rescued (and the task re-claimed, once by another worker and once by the
/// same worker for a newer attempt), the stale completions change nothing and the current
/// ones complete, each with its own output.
pub async fn batched_completions_keep_the_fence<S: DurableStore>(store: S) {
    let clock = clock();
    let q = DurableQueue::new(store.clone()).with_clock(clock.clone());
    let ids = [
        enqueue(&q, "a", EnqueueOptions::new()).await,
        enqueue(&q, "b", EnqueueOptions::new()).await,
        enqueue(&q, "c", EnqueueOptions::new()).await,
        enqueue(&q, "d", EnqueueOptions::new()).await,
    ];
    let now = clock.now();
    let first = store
        .claim("slow", &ops(), 4, now.saturating_add(LEASE), now)
        .await
        .unwrap();
    assert_eq!(first.len(), 4);
    let fences: Vec<Fence> = first.iter().map(|t| t.fence().unwrap()).collect();

    // The leases on all four expire; a and b go back to the queue. a is re-claimed by
    // another worker, b by the same worker again (a newer attempt under the same owner).
    // Both due again at once, so they are claimed in their order.
    clock.advance(LEASE + Duration::from_millis(1));
    let now = clock.now();
    let decided: Vec<Rescue> = store
        .expired(2, now)
        .await
        .unwrap()
        .iter()
        .map(|t| Rescue::retry(t.fence().unwrap(), now, "presumed dead"))
        .collect();
    let rescued = store.rescue(&decided, now).await.unwrap();
    assert_eq!(rescued, vec![ids[0], ids[1]], "the two oldest leases");
    clock.advance(Duration::from_secs(3_600));
    let now = clock.now();
    let lease = now.saturating_add(LEASE);
    let ops_ = ops();
    let other = store.claim("fast", &ops_, 1, lease, now).await.unwrap();
    let again = store.claim("slow", &ops_, 1, lease, now).await.unwrap();
    assert_eq!((other[0].id, other[0].retry_count), (ids[0], 2));
    assert_eq!((again[0].id, again[0].retry_count), (ids[1], 2));

    let batch: Vec<Completion> = fences
        .iter()
        .map(|f| Completion::new(f.clone(), Some(f.task_id.to_string().into_bytes())))
        .collect();
    let mut written = store.complete_many(&batch, now).await.unwrap();
    written.sort();
    assert_eq!(
        written,
        vec![ids[2], ids[3]],
        "only the completions whose claim still holds"
    );
    for (id, owner) in [(ids[0], "fast"), (ids[1], "slow")] {
        let t = get(&store, id).await;
        assert_eq!(
            (t.status, t.locked_by.as_deref(), t.retry_count, t.output),
            (TaskStatus::Running, Some(owner), 2, None),
            "the newer attempt of task {id} is untouched"
        );
    }
    for id in [ids[2], ids[3]] {
        let t = get(&store, id).await;
        assert_eq!(t.status, TaskStatus::Succeeded);
        assert_eq!(t.output, Some(id.to_string().into_bytes()));
    }

    // The current claims complete in one batch too; repeating the batch changes nothing.
    let current = [
        Completion::new(other[0].fence().unwrap(), None),
        Completion::new(again[0].fence().unwrap(), Some(vec![0, 255])),
    ];
    assert_eq!(store.complete_many(&current, now).await.unwrap().len(), 2);
    assert!(store.complete_many(&current, now).await.unwrap().is_empty());
    assert_eq!(get(&store, ids[1]).await.output, Some(vec![0, 255]));
    assert_eq!(store.counts().await.unwrap().succeeded, 4);
}

/// A hand-off wakes an idle worker at once instead of at its next poll: the second task is
/// handed off after the worker's last claim, and the poll interval is an hour. `enqueuer` is
/// the store the hand-offs go through (this store, or another process's connection to the
/// same database).
pub async fn a_hand_off_wakes_an_idle_worker_with<S: DurableStore, E: DurableStore>(
    store: S,
    enqueuer: E,
) {
    let q = DurableQueue::new(enqueuer);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    q.enqueue(OP, "first", b"", EnqueueOptions::new())
        .await
        .unwrap();
    let worker = Worker::builder(store)
        .handler(OP, move |t: TaskContext| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(t.idempotency_key);
                Ok(())
            }
        })
        .config(
            config("w")
                .with_poll_interval(Duration::from_secs(3_600))
                .with_rescue_interval(Duration::from_secs(3_600)),
        )
        .build()
        .unwrap();
    let stop = Arc::new(Notify::new());
    let run = tokio::spawn({
        let (worker, stop) = (worker.clone(), stop.clone());
        async move { worker.run(async move { stop.notified().await }).await }
    });
    assert_eq!(rx.recv().await.as_deref(), Some("first"));
    q.enqueue(OP, "second", b"", EnqueueOptions::new())
        .await
        .unwrap();
    // A guard against hanging, far below the hour-long poll: only a wake-up can meet it.
    let second = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await;
    assert_eq!(
        second.ok().flatten().as_deref(),
        Some("second"),
        "the worker was not woken by the hand-off"
    );
    stop.notify_one();
    let stats = run.await.unwrap();
    assert_eq!(stats.succeeded, 2, "{stats:?}");
}

pub async fn a_hand_off_wakes_an_idle_worker<S: DurableStore>(store: S) {
    a_hand_off_wakes_an_idle_worker_with(store.clone(), store).await;
}
