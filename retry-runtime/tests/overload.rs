//! Overload through the attempt loop on tokio's paused clock, against an upstream with a
//! capacity, as real upstreams have: one worker serving a request in 10 ms (100 a second),
//! first come first served, serving every request it gets whether its caller still waits or
//! not. A fault that fails fast (503 at once) must end without the calls held through it
//! going all at once into the recovered upstream; a client calling one call at a time, and a
//! fleet of small replicas, must not send more than no retry would.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_fixtures::AdapterError;
use retry_runtime::{Method, Registry, Retry, UpstreamConfig, throttle::ThrottleConfig};
use tokio::time::Instant;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// An upstream with one worker (10 ms a request), answering 503 at once while `down` says so.
#[derive(Clone)]
struct Upstream {
    worker: Arc<tokio::sync::Semaphore>,
    start: Instant,
    down: Arc<dyn Fn(Duration) -> bool + Send + Sync>,
    /// When each request arrived, since the start.
    received: Arc<Mutex<Vec<Duration>>>,
}

impl Upstream {
    fn new(down: impl Fn(Duration) -> bool + Send + Sync + 'static) -> Self {
        Upstream {
            worker: Arc::new(tokio::sync::Semaphore::new(1)),
            start: Instant::now(),
            down: Arc::new(down),
            received: Arc::default(),
        }
    }

    /// One request: the future the attempt awaits.
    fn request(&self) -> impl Future<Output = Result<(), AdapterError>> + Send + 'static {
        let at = self.start.elapsed();
        self.received.lock().unwrap().push(at);
        let down = (self.down)(at);
        let worker = self.worker.clone();
        let (done, answer) = tokio::sync::oneshot::channel();
        if !down {
            // Served in a task of its own: an attempt cut by its timeout leaves it queued.
            tokio::spawn(async move {
                let _serving = worker.acquire_owned().await.unwrap();
                tokio::time::sleep(ms(10)).await;
                let _ = done.send(());
            });
        }
        async move {
            match down {
                true => Err(AdapterError::Status(503)),
                false => answer.await.map_err(|_| AdapterError::Status(500)),
            }
        }
    }

    /// The most requests that arrived in one 250 ms, among those from `from` to `to`.
    fn busiest(&self, from: Duration, to: Duration) -> usize {
        let received = self.received.lock().unwrap();
        let mut bins = std::collections::BTreeMap::<u128, usize>::new();
        for at in received.iter().filter(|at| (from..to).contains(*at)) {
            *bins.entry(at.as_millis() / 250).or_default() += 1;
        }
        bins.values().copied().max().unwrap_or(0)
    }
}

/// One call's fate: when it started and ended, since the upstream's start, and whether it
/// succeeded.
#[derive(Debug, Clone, Copy)]
struct Ended {
    started: Duration,
    ended: Duration,
    ok: bool,
}

/// The upstream `up`: a 300 ms attempt timeout, a 3 s deadline, and `throttle`.
fn registry(throttle: ThrottleConfig, seed: u64) -> Arc<Registry> {
    let config = UpstreamConfig::new()
        .with_attempt_timeout(ms(300))
        .with_deadline(Duration::from_secs(3))
        .with_throttle(Some(throttle));
    Arc::new(
        Registry::builder()
            .upstream("up", config)
            .seed(seed)
            .build()
            .unwrap(),
    )
}

/// A call every `every` for `run`, each from the next of `registries` in turn.
async fn load(
    registries: &[Arc<Registry>],
    upstream: &Upstream,
    every: Duration,
    run: Duration,
) -> Vec<Ended> {
    calls_every(upstream, every, run, |n| {
        let reg = registries[n % registries.len()].clone();
        let upstream = upstream.clone();
        async move {
            Retry::in_registry(&reg, "up")
                .method(Method::GET)
                .run(|_| upstream.request())
                .await
                .is_ok()
        }
    })
    .await
}

/// Starts the `n`th call, `call(n)` (whether it succeeded), every `every` until `run` has
/// passed on `upstream`'s clock; what each got.
async fn calls_every<F, C>(
    upstream: &Upstream,
    every: Duration,
    run: Duration,
    call: F,
) -> Vec<Ended>
where
    F: Fn(usize) -> C,
    C: Future<Output = bool> + Send + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    let mut n = 0;
    while upstream.start.elapsed() < run {
        let (call, clock) = (call(n), upstream.clone());
        n += 1;
        tasks.spawn(async move {
            let started = clock.start.elapsed();
            let ok = call.await;
            Ended {
                started,
                ended: clock.start.elapsed(),
                ok,
            }
        });
        tokio::time::sleep(every).await;
    }
    tasks.join_all().await
}

/// What a fast-failing fault of `fault` after a healthy second did, with `throttle`: the
/// busiest 250 ms at the upstream before it and after it, and the calls.
async fn fast_fault(throttle: ThrottleConfig, fault: Duration) -> (usize, usize, Vec<Ended>) {
    let clears = Duration::from_secs(1) + fault;
    let upstream = Upstream::new(move |at| (Duration::from_secs(1)..clears).contains(&at));
    let reg = registry(throttle, 3);
    // 66 calls a second: the capacity is 1.5 times the load.
    let ended = load(&[reg], &upstream, ms(15), Duration::from_secs(5)).await;
    let healthy = upstream.busiest(Duration::ZERO, Duration::from_secs(1));
    let after = upstream.busiest(clears, Duration::from_secs(10));
    (healthy, after, ended)
}

/// A fault that fails fast: the calls it refused wait, and once the upstream accepts again
/// they go at the pace of its answers, a little above the load, never a burst: the upstream
/// gets at most twice its healthy busiest 250 ms, its queue stays short, and every call started
/// half a second after the fault succeeds. Through a fault shorter than the hold (600 ms) the
/// calls it met mostly succeed after it; through a longer one they fail once it has failed
/// everything for the hold, not at their deadlines.
#[tokio::test(start_paused = true)]
async fn calls_held_through_a_fast_fault_go_at_the_pace_of_the_answers() {
    for fault in [ms(300), ms(450), ms(1500)] {
        let (healthy, after, ended) = fast_fault(ThrottleConfig::new(), fault).await;
        let report = format!("{fault:?}: healthy busiest {healthy}, after {after}");
        assert!(after <= 2 * healthy, "{report}");
        let recovered = Duration::from_secs(1) + fault + ms(500);
        let late: Vec<&Ended> = ended.iter().filter(|e| e.started >= recovered).collect();
        assert!(
            late.iter().all(|e| e.ok),
            "{report}: a call after the recovery failed"
        );
        let during: Vec<&Ended> = ended
            .iter()
            .filter(|e| {
                (Duration::from_secs(1)..Duration::from_secs(1) + fault).contains(&e.started)
            })
            .collect();
        let ok = during.iter().filter(|e| e.ok).count();
        if fault < ms(600) {
            assert!(
                ok * 10 >= during.len() * 8,
                "{report}: {ok} of {} in the fault",
                during.len()
            );
        } else {
            // Held at most about the hold (600 ms from the upstream's first failure, a step
            // more for the last ones refused): within a second.
            let held = during
                .iter()
                .filter(|e| !e.ok)
                .map(|e| e.ended - e.started)
                .max()
                .unwrap();
            assert!(held <= Duration::from_secs(1), "{report}: held {held:?}");
        }
    }
    // At ten times the pace the calls still go one at a time, but the upstream gets half as
    // much again as its busiest: the pace, not only the spacing, keeps it near the load.
    let (healthy, after, _) =
        fast_fault(ThrottleConfig::new().with_release_ratio(10.0), ms(550)).await;
    assert!(
        2 * after > 3 * healthy,
        "released at ten times the pace: {after} against {healthy}"
    );
}

/// One call at a time (the next 100 ms after the last ends) to `upstream` through `reg`, `n`
/// calls; what each got.
async fn one_at_a_time(reg: &Registry, upstream: &Upstream, n: usize) -> Vec<Ended> {
    let mut ended = Vec::new();
    for _ in 0..n {
        let started = upstream.start.elapsed();
        let ok = Retry::in_registry(reg, "up")
            .method(Method::GET)
            .run(|_| upstream.request())
            .await
            .is_ok();
        ended.push(Ended {
            started,
            ended: upstream.start.elapsed(),
            ok,
        });
        tokio::time::sleep(ms(100)).await;
    }
    ended
}

/// A client calling one call at a time sends a dead upstream about one request per call, as
/// no retry would: its retries go only while the upstream has failed for less than the hold.
/// With the hold switched off (60 s), each call sends its three attempts.
#[tokio::test(start_paused = true)]
async fn one_call_at_a_time_sends_a_dead_upstream_about_one_request_a_call() {
    for (hold, most) in [
        (Duration::from_secs(1), 40 + 4),
        (Duration::from_secs(60), 100),
    ] {
        let upstream = Upstream::new(|_| true);
        let reg = registry(ThrottleConfig::new().with_hold(hold), 5);
        let ended = one_at_a_time(&reg, &upstream, 40).await;
        let sent = upstream.received.lock().unwrap().len();
        assert!(ended.iter().all(|e| !e.ok));
        match hold.as_secs() {
            1 => assert!(sent <= most, "{sent} requests for 40 calls"),
            _ => assert!(sent >= most, "hold off: {sent} requests for 40 calls"),
        }
    }
}

/// Against an upstream that fails for a moment and recovers, a lone call's retry goes after
/// its configured backoff (at least a tenth of the throttle's window after the failure, the
/// quiet a waiting call's probe needs), not after the window has forgotten the failure.
#[tokio::test(start_paused = true)]
async fn a_lone_calls_retry_goes_after_its_configured_backoff() {
    let backoff = retry_runtime::backoff::Backoff::new()
        .with_initial(ms(100))
        .with_max_backoff(ms(200));
    for seed in 0..20 {
        let upstream = Upstream::new(|at| at < ms(30));
        let config = UpstreamConfig::new()
            .with_attempt_timeout(ms(300))
            .with_backoff(backoff);
        let reg = Registry::builder()
            .upstream("up", config)
            .seed(seed)
            .build()
            .unwrap();
        let ended = one_at_a_time(&reg, &upstream, 1).await;
        assert!(ended[0].ok, "seed {seed}");
        let received = upstream.received.lock().unwrap().clone();
        let gaps: Vec<Duration> = received.windows(2).map(|w| w[1] - w[0]).collect();
        // Full jitter up to 100 ms, then up to 200 ms: never past 100 + 200 ms.
        assert!(
            gaps.iter().all(|g| *g <= ms(300)),
            "seed {seed}: {received:?}"
        );
    }
}

/// Twenty replicas at 3 calls a second each, against an upstream that fails everything: each
/// replica's throttle sees a few calls a window, yet the fleet sends no more than the calls it
/// gets (no retry, probe or floor adds requests per replica once the hold is over), and its
/// callers learn it within the hold.
#[tokio::test(start_paused = true)]
async fn a_fleet_of_small_replicas_sends_a_dead_upstream_no_more_than_its_calls() {
    let upstream = Upstream::new(|_| true);
    let fleet: Vec<Arc<Registry>> = (0..20)
        .map(|seed| registry(ThrottleConfig::new(), seed))
        .collect();
    // 60 calls a second over the 20 replicas, for 4 s.
    let ended = load(
        &fleet,
        &upstream,
        Duration::from_micros(16_667),
        Duration::from_secs(4),
    )
    .await;
    let received = upstream.received.lock().unwrap().clone();
    let after_hold = |at: &Duration| *at >= Duration::from_millis(1100);
    let calls = ended.iter().filter(|e| after_hold(&e.started)).count();
    let sent = received.iter().filter(|at| after_hold(at)).count();
    assert!(
        sent <= calls,
        "{sent} requests for {calls} calls after the hold"
    );
    let longest = ended.iter().map(|e| e.ended - e.started).max().unwrap();
    assert!(longest <= Duration::from_millis(1100), "{longest:?}");
}

/// What a 429 phase for one tenant did: each call's tenant and fate, and the requests each
/// tenant sent during the phase.
async fn one_tenant_over_quota(partitioned: bool) -> (Vec<(bool, Ended)>, usize, usize) {
    let reg = registry(ThrottleConfig::new(), 9);
    let start = Instant::now();
    let sent = Arc::new(Mutex::new((0usize, 0usize)));
    let mut tasks = tokio::task::JoinSet::new();
    let mut n = 0u32;
    while start.elapsed() < Duration::from_secs(3) {
        // Three calls in four are tenant A's; A is over its quota for the first 2 s.
        let noisy = n % 4 != 3;
        n += 1;
        let (reg, sent) = (reg.clone(), sent.clone());
        tasks.spawn(async move {
            let started = start.elapsed();
            let call = Retry::in_registry(&reg, "up").method(Method::GET);
            let call = match partitioned {
                true => call.partition(if noisy { "tenant-a" } else { "tenant-b" }),
                false => call,
            };
            let ok = call
                .run(|_| {
                    let at = start.elapsed();
                    let over = noisy && at < Duration::from_secs(2);
                    if at < Duration::from_secs(2) {
                        let mut sent = sent.lock().unwrap();
                        match noisy {
                            true => sent.0 += 1,
                            false => sent.1 += 1,
                        }
                    }
                    async move {
                        tokio::time::sleep(ms(10)).await;
                        match over {
                            true => {
                                Err(AdapterError::Status(429)
                                    .with_retry_after(Duration::from_secs(1)))
                            }
                            false => Ok(()),
                        }
                    }
                })
                .await
                .is_ok();
            let ended = start.elapsed();
            (noisy, Ended { started, ended, ok })
        });
        tokio::time::sleep(ms(10)).await;
    }
    let ended = tasks.join_all().await;
    let (a, b) = *sent.lock().unwrap();
    (ended, a, b)
}

/// A 429 is one tenant's quota, not the upstream's overload: the other tenant's calls are all
/// served at once while the first is over its quota, with or without partitions. With the
/// tenant named as the partition, its calls send their first attempts and no retry while the
/// pushback lasts; without it, each call honours its own `Retry-After` and retries after it.
#[tokio::test(start_paused = true)]
async fn one_tenants_429s_never_refuse_another_tenants_calls() {
    let (ended, a_partitioned, b_sent) = one_tenant_over_quota(true).await;
    for (noisy, e) in &ended {
        if !noisy {
            assert!(
                e.ok && e.ended - e.started == ms(10),
                "tenant B waited: {e:?}"
            );
        }
    }
    assert!(b_sent > 40);
    let a_calls = ended
        .iter()
        .filter(|(noisy, e)| *noisy && e.started < Duration::from_secs(2))
        .count();
    assert_eq!(
        a_partitioned, a_calls,
        "with its partition, tenant A sent one request a call in the phase: no retry"
    );
    let (ended, a_alone, _) = one_tenant_over_quota(false).await;
    assert!(ended.iter().filter(|(noisy, _)| !noisy).all(|(_, e)| e.ok));
    assert!(
        a_alone > a_calls,
        "without a partition each call retries after its own Retry-After: {a_alone} requests \
         for {a_calls} calls"
    );
}

/// A partition's first attempts go while its pushback lasts (what a client without retries
/// sends), and its retries wait; an accepted answer ends the pushback early (the quota serves
/// the partition again), and the retries it held then go, no faster than their calls came.
#[tokio::test(start_paused = true)]
async fn a_partitions_retries_wait_until_an_accepted_answer_ends_its_pushback() {
    let reg = registry(ThrottleConfig::new(), 3);
    let start = Instant::now();
    let received = Arc::new(Mutex::new(Vec::new()));
    let call =
        |n: u32| {
            let (reg, received) = (reg.clone(), received.clone());
            async move {
                Retry::in_registry(&reg, "up")
                    .method(Method::GET)
                    .partition("tenant")
                    .run(|attempt| {
                        let at = start.elapsed();
                        received.lock().unwrap().push((at, n, attempt.number()));
                        async move {
                            // Call 0 is in flight for 250 ms and accepted; the others meet the
                            // quota until then, call 1 with a `Retry-After` that holds the
                            // partition for a second, the others without one (each alone would
                            // retry after its backoff).
                            tokio::time::sleep(if n == 0 { ms(250) } else { ms(10) }).await;
                            match (n, at < ms(240)) {
                                (0, _) | (_, false) => Ok(()),
                                (1, true) => Err(AdapterError::Status(429)
                                    .with_retry_after(Duration::from_secs(1))),
                                _ => Err(AdapterError::Status(429)),
                            }
                        }
                    })
                    .await
                    .is_ok()
            }
        };
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(call(0));
    tokio::time::sleep(ms(10)).await;
    // Twenty calls of the partition while it is pushed back, one every 10 ms.
    for n in 1..21 {
        tasks.spawn(call(n));
        tokio::time::sleep(ms(10)).await;
    }
    let ok = tasks.join_all().await;
    assert!(ok.iter().all(|ok| *ok), "every call is served in the end");
    let received = received.lock().unwrap().clone();
    let firsts: Vec<_> = received.iter().filter(|(_, _, a)| *a == 1).collect();
    assert_eq!(firsts.len(), 21);
    assert!(
        firsts.iter().all(|(at, n, _)| *at == ms(10) * *n),
        "first attempts go at once: {received:?}"
    );
    // Call 1's own retry honours its own `Retry-After`; the others' wait for the partition.
    let retries: Vec<Duration> = received
        .iter()
        .filter(|(_, n, a)| *a > 1 && *n > 1)
        .map(|(at, _, _)| *at)
        .collect();
    assert_eq!(retries.len(), 19);
    assert!(
        retries
            .iter()
            .all(|at| *at >= ms(250) && *at < Duration::from_secs(1)),
        "retries held until the accepted answer ended the pushback, not until its Retry-After: \
         {received:?}"
    );
    let busiest = retries
        .iter()
        .map(|from| {
            retries
                .iter()
                .filter(|at| (*from..*from + ms(100)).contains(*at))
                .count()
        })
        .max()
        .unwrap();
    assert!(
        busiest <= 10,
        "{busiest} retries in one 100 ms, where the calls came 10 in 100 ms: {received:?}"
    );
}

/// The retries a partition's quota held go at the pace of the upstream's answers when the
/// quota lifts, also those each call's own `Retry-After` held (every call that met the quota
/// retries a `Retry-After` later, about as the calls came, on top of the calls that keep
/// coming): the backlog the quota built is a burst to an upstream with a capacity.
#[tokio::test(start_paused = true)]
async fn the_retries_a_quota_held_go_at_the_upstreams_pace_when_it_lifts() {
    quota_lifts(true).await;
}

/// The same without a partition: each call's own `Retry-After` held its retry, and the calls
/// that met a spell of 429s come back together all the same.
#[tokio::test(start_paused = true)]
async fn the_retries_an_upstreams_429s_held_go_at_its_pace_when_they_end() {
    quota_lifts(false).await;
}

/// A second of 429s in the middle of 66 calls a second (the capacity 1.5 times that), each
/// 429 asking for a second's wait; the calls name a partition when `partitioned`.
async fn quota_lifts(partitioned: bool) {
    let upstream = Upstream::new(|_| false);
    let reg = registry(ThrottleConfig::new(), 5);
    let over = |at: Duration| (ms(1000)..ms(2000)).contains(&at);
    let ended = calls_every(&upstream, ms(15), Duration::from_secs(4), |_| {
        let (reg, upstream) = (reg.clone(), upstream.clone());
        async move {
            let call = Retry::in_registry(&reg, "up").method(Method::GET);
            let call = match partitioned {
                true => call.partition("tenant"),
                false => call,
            };
            call.run(|_| {
                let at = upstream.start.elapsed();
                let request = (!over(at)).then(|| upstream.request());
                async move {
                    match request {
                        Some(request) => request.await,
                        None => {
                            Err(AdapterError::Status(429).with_retry_after(Duration::from_secs(1)))
                        }
                    }
                }
            })
            .await
            .is_ok()
        }
    })
    .await;
    let healthy = upstream.busiest(Duration::ZERO, ms(1000));
    let after = upstream.busiest(ms(2000), Duration::from_secs(10));
    assert!(
        after <= healthy * 3 / 2,
        "{after} requests in one 250 ms after the quota lifted, against a healthy busiest of \
         {healthy}"
    );
    let late = ended
        .iter()
        .filter(|e| e.started >= ms(2000) && !e.ok)
        .count();
    assert_eq!(late, 0, "calls started after the quota lifted failed");
}
