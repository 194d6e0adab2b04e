//! Waiting for admission, through the attempt loop on tokio's paused clock: a call the throttle
//! refuses waits, sending nothing, and goes at the pace of the upstream's answers once it
//! accepts again; it never waits past its deadline, nor once the upstream has failed every
//! attempt for the throttle's hold.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use retry_fixtures::AdapterError;
use retry_runtime::{Error, Method, Registry, Retry, UpstreamConfig, throttle::ThrottleConfig};
use tokio::time::Instant;

/// How the scripted upstream behaves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Up,
    /// Answers 503 at once.
    Down,
    /// Answers 503 after 20 ms, as a remote upstream does: other calls' attempts end while
    /// one is in flight.
    DownAfter20ms,
}

/// One call's fate.
struct Ended {
    started: Instant,
    ended: Instant,
    result: Result<(), AdapterError>,
}

/// The upstream `up` with the library's defaults but `max_attempts` and the throttle's `wait`.
fn registry(max_attempts: u32, wait: bool) -> Arc<Registry> {
    let config = UpstreamConfig::new()
        .with_max_attempts(max_attempts)
        .with_throttle(Some(ThrottleConfig::new().with_wait(wait)));
    Arc::new(
        Registry::builder()
            .upstream("up", config)
            .seed(11)
            .build()
            .unwrap(),
    )
}

/// Starts a call every 10 ms for `run` against an upstream that behaves as `mode` says (set by
/// `script` from the time since the start); returns every call's fate and the requests the
/// upstream received, by when.
async fn traffic(
    reg: Arc<Registry>,
    run: Duration,
    script: impl Fn(Duration) -> Mode + Send + Sync + 'static,
) -> (Vec<Ended>, Vec<(Duration, Mode)>) {
    let start = Instant::now();
    let script = Arc::new(script);
    let received = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    while start.elapsed() < run {
        let (reg, script, received) = (reg.clone(), script.clone(), received.clone());
        tasks.spawn(async move {
            let started = Instant::now();
            let result = Retry::in_registry(&reg, "up")
                .method(Method::GET)
                .run(|_| {
                    let mode = script(start.elapsed());
                    received.lock().unwrap().push((start.elapsed(), mode));
                    async move {
                        match mode {
                            Mode::Up => Ok(()),
                            Mode::Down => Err(AdapterError::Status(503)),
                            Mode::DownAfter20ms => {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                Err(AdapterError::Status(503))
                            }
                        }
                    }
                })
                .await;
            Ended {
                started,
                ended: Instant::now(),
                result,
            }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut ended = Vec::new();
    while let Some(call) = tasks.join_next().await {
        ended.push(call.unwrap());
    }
    let received = received.lock().unwrap().clone();
    (ended, received)
}

fn throttled(result: &Result<(), AdapterError>) -> bool {
    matches!(result, Err(AdapterError::Runtime(Error::Throttled { .. })))
}

/// Asserts that many calls were refused, each at the instant it started.
fn assert_refused_at_once(ended: &[Ended]) {
    let refused: Vec<&Ended> = ended.iter().filter(|e| throttled(&e.result)).collect();
    assert!(refused.len() > 20, "{} refused", refused.len());
    assert!(refused.iter().all(|e| e.ended == e.started), "at once");
}

/// The end of [`outage`]: shorter than the throttle's hold (600 ms), so refused calls wait it
/// out and the attempts that probe it find it back in time.
const OUTAGE: Duration = Duration::from_millis(400);

/// Down for the first 400 ms, then up.
fn outage(at: Duration) -> Mode {
    match at < OUTAGE {
        true => Mode::Down,
        false => Mode::Up,
    }
}

#[tokio::test(start_paused = true)]
async fn calls_refused_during_a_fast_failing_outage_wait_and_complete_after_it() {
    for max_attempts in [1, 3] {
        let reg = registry(max_attempts, true);
        let (ended, received) = traffic(reg, Duration::from_secs(2), outage).await;
        let start = ended.iter().map(|e| e.started).min().unwrap();
        let during: Vec<&Ended> = ended
            .iter()
            .filter(|e| e.started - start < Duration::from_millis(300))
            .collect();
        let failed: Vec<&&Ended> = during.iter().filter(|e| e.result.is_err()).collect();
        // No call that started during the outage failed as refused: each waited (the deadline,
        // 5 s, outlasts the outage). The ones that failed are those whose attempts all reached
        // the failing upstream: the throttle's probes.
        assert!(
            failed.iter().all(|e| !throttled(&e.result)),
            "{max_attempts} attempts: a refused call failed"
        );
        let in_outage = received.iter().filter(|(_, m)| *m == Mode::Down).count();
        assert!(failed.len() <= in_outage);
        for e in during.iter().filter(|e| e.result.is_ok()) {
            assert!(e.ended - start >= OUTAGE, "only after the outage");
            assert!(
                e.ended - e.started <= Duration::from_secs(5),
                "within the deadline"
            );
        }
        // While they waited they sent nothing: the outage got a few probes, far fewer
        // requests than calls.
        assert!(
            in_outage * 3 < during.len(),
            "{max_attempts} attempts: {in_outage} requests for {} calls during the outage",
            during.len()
        );
    }
}

/// An upstream that dies after a healthy second: the window still holds a second of accepted
/// answers, yet a call whose attempt failed while every other call's failed too does not
/// retry into it; it waits for the upstream to accept again, which it never does, and once the
/// upstream has failed everything for the hold, the waiting calls give up.
#[tokio::test(start_paused = true)]
async fn retries_wait_from_the_first_failures_of_an_upstream_met_warm() {
    let reg = registry(3, true);
    let dies = |at: Duration| match at < Duration::from_secs(1) {
        true => Mode::Up,
        false => Mode::DownAfter20ms,
    };
    let (ended, received) = traffic(reg, Duration::from_secs(2), dies).await;
    let start = ended.iter().map(|e| e.started).min().unwrap();
    let after = ended
        .iter()
        .filter(|e| e.started - start >= Duration::from_secs(1))
        .count();
    let sent_dead = received
        .iter()
        .filter(|(at, m)| *m == Mode::DownAfter20ms && *at < Duration::from_secs(2))
        .count();
    let probes = received
        .iter()
        .filter(|(at, _)| *at >= Duration::from_secs(2))
        .count();
    // While calls come, those of the first half-second send their first attempts (the window
    // admits them on the healthy second's evidence), and few retries: 41 requests for 100
    // calls here; judged on the window alone, 58 (49 with only the retry's mark, 55 with only
    // the wait's).
    assert!(
        sent_dead * 100 <= after * 45,
        "{sent_dead} requests to the dead upstream for {after} calls while calls came"
    );
    // A second after its first failures, no call waits for it any more: nothing is sent
    // once the calls stop, and every call ends within the hold of its start.
    assert!(probes <= 1, "{probes} probes after the calls stopped");
    for e in &ended {
        assert!(e.ended - e.started <= Duration::from_millis(1100));
    }
}

#[tokio::test(start_paused = true)]
async fn without_waiting_the_same_calls_fail_at_once() {
    let reg = registry(1, false);
    let (ended, _) = traffic(reg, Duration::from_secs(2), outage).await;
    assert_refused_at_once(&ended);
}

/// The most calls in flight at once, and the longest a call took, of `ended`.
fn in_flight_and_longest(ended: &[Ended]) -> (usize, Duration) {
    let mut edges: Vec<(Instant, i32)> = ended
        .iter()
        .flat_map(|e| [(e.started, 1), (e.ended, -1)])
        .collect();
    edges.sort();
    let (mut now, mut peak) = (0, 0);
    for (_, step) in edges {
        now += step;
        peak = peak.max(now);
    }
    let longest = ended.iter().map(|e| e.ended - e.started).max().unwrap();
    (peak as usize, longest)
}

/// An upstream that fails everything for longer than any hold: refused calls wait only until
/// it has failed every attempt for the hold (1 s), then fail at once, so its callers learn it
/// fast and do not pile up. With a hold as long as the deadline (the rule switched off),
/// every refused call waits out its deadline and ten times as many calls are in flight.
#[tokio::test(start_paused = true)]
async fn a_dead_upstream_holds_its_callers_only_for_the_hold() {
    let reg = registry(3, true);
    let (ended, received) = traffic(reg, Duration::from_secs(3), |_| Mode::Down).await;
    assert!(ended.iter().all(|e| e.result.is_err()));
    let (in_flight, longest) = in_flight_and_longest(&ended);
    assert!(longest <= Duration::from_millis(1000), "{longest:?}");
    // 100 calls a second, each held at most a second from the first failure.
    assert!(in_flight <= 101, "{in_flight} in flight");
    // Not one request per call: the throttle refuses most first attempts.
    assert!(
        received.len() * 3 < ended.len(),
        "{} requests for {} calls",
        received.len(),
        ended.len()
    );
    let after = ended
        .iter()
        .filter(|e| e.started >= ended[0].started + Duration::from_millis(1100));
    assert!(after.clone().all(|e| e.ended == e.started), "fail at once");

    let config = UpstreamConfig::new().with_throttle(Some(
        ThrottleConfig::new().with_hold(Duration::from_secs(60)),
    ));
    let unbounded = Arc::new(
        Registry::builder()
            .upstream("up", config)
            .seed(11)
            .build()
            .unwrap(),
    );
    let (ended, _) = traffic(unbounded, Duration::from_secs(3), |_| Mode::Down).await;
    let (held, longest) = in_flight_and_longest(&ended);
    assert!(longest >= Duration::from_secs(4), "{longest:?}");
    assert!(
        held >= 2 * in_flight,
        "{held} in flight against {in_flight}"
    );
}

/// At most `max_waiting` calls wait for one upstream: a further refused call fails at once.
#[tokio::test(start_paused = true)]
async fn no_more_calls_wait_than_the_throttle_holds_places_for() {
    let config =
        UpstreamConfig::new().with_throttle(Some(ThrottleConfig::new().with_max_waiting(5)));
    let reg = Arc::new(
        Registry::builder()
            .upstream("up", config)
            .seed(11)
            .build()
            .unwrap(),
    );
    let (ended, _) = traffic(reg.clone(), OUTAGE, outage).await;
    let waited = ended
        .iter()
        .filter(|e| e.ended - e.started >= Duration::from_millis(50))
        .count();
    let at_once = ended
        .iter()
        .filter(|e| throttled(&e.result) && e.ended == e.started);
    assert!(waited <= 5 + 5, "{waited} waited");
    assert!(at_once.count() > 20);
    assert_eq!(reg.upstream("up").unwrap().throttle().unwrap().waiting(), 0);
}

/// What a capacity-limited upstream that ignores deadlines did: the calls that succeeded, of
/// those started, and the most requests it held at once (queued or served) after it sped up.
struct Queued {
    calls: usize,
    succeeded: usize,
    peak_after: usize,
}

/// Calls every 25 ms for 4 s, three attempts of 300 ms each, to an upstream with one worker
/// that serves a request in 10 ms (2.5 times the load), or in 500 ms from 1 s to 1.8 s, and
/// serves every request it was sent, whether its caller still waits or not.
async fn slowdown_of_a_queue(throttle: ThrottleConfig) -> Queued {
    let config = UpstreamConfig::new()
        .with_attempt_timeout(Duration::from_millis(300))
        .with_throttle(Some(throttle));
    let reg = Arc::new(
        Registry::builder()
            .upstream("up", config)
            .seed(5)
            .build()
            .unwrap(),
    );
    let worker = Arc::new(tokio::sync::Semaphore::new(1));
    let held = Arc::new(AtomicU32::new(0));
    let peak_after = Arc::new(AtomicU32::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    while start.elapsed() < Duration::from_secs(4) {
        let (reg, worker, held, peak_after) = (
            reg.clone(),
            worker.clone(),
            held.clone(),
            peak_after.clone(),
        );
        tasks.spawn(async move {
            Retry::in_registry(&reg, "up")
                .method(Method::GET)
                .run(|_| {
                    let (worker, held, peak_after) =
                        (worker.clone(), held.clone(), peak_after.clone());
                    let (done, answer) = tokio::sync::oneshot::channel();
                    // Held at once of the requests sent once it sped up: what the backlog let
                    // go adds, not the queue the slowdown left.
                    let after = start.elapsed() >= Duration::from_millis(1800);
                    if after {
                        let now_held = held.fetch_add(1, Ordering::SeqCst) + 1;
                        peak_after.fetch_max(now_held, Ordering::SeqCst);
                    }
                    // Served in a task of its own: an attempt cut by its timeout leaves it queued.
                    tokio::spawn(async move {
                        let _serving = worker.acquire_owned().await.unwrap();
                        let slow = (Duration::from_secs(1)..Duration::from_millis(1800))
                            .contains(&start.elapsed());
                        let busy = if slow { 500 } else { 10 };
                        tokio::time::sleep(Duration::from_millis(busy)).await;
                        if after {
                            held.fetch_sub(1, Ordering::SeqCst);
                        }
                        let _ = done.send(());
                    });
                    async move { answer.await.map_err(|_| AdapterError::Status(500)) }
                })
                .await
                .is_ok()
        });
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let results = tasks.join_all().await;
    Queued {
        calls: results.len(),
        succeeded: results.iter().filter(|ok| **ok).count(),
        peak_after: peak_after.load(Ordering::SeqCst) as usize,
    }
}

/// A slowed upstream's attempts time out, so the throttle refuses calls; they wait, and once
/// it speeds up they are let go at the pace of its answers, not together: a backlog let go
/// together would queue behind itself and slow it down again.
#[tokio::test(start_paused = true)]
async fn a_slow_upstreams_backlog_goes_at_the_pace_of_its_answers() {
    let waited = slowdown_of_a_queue(ThrottleConfig::new()).await;
    // The controls: refused calls fail at once; or wait, and are let go ten per answer.
    let shed = slowdown_of_a_queue(ThrottleConfig::new().with_wait(false)).await;
    let together = slowdown_of_a_queue(ThrottleConfig::new().with_release_ratio(10.0)).await;
    let report = format!(
        "waited: {} of {} succeeded, peak {} after; failed at once: {} of {}, peak {}",
        waited.succeeded,
        waited.calls,
        waited.peak_after,
        shed.succeeded,
        shed.calls,
        shed.peak_after
    );
    // Waiting carries the calls through the slowdown...
    assert!(waited.succeeded * 100 >= waited.calls * 95, "{report}");
    assert!(shed.succeeded * 100 < shed.calls * 85, "{report}");
    // ...and once the upstream speeds up, the calls let go queue a few deep at most: they go
    // at the pace of its answers. Let go ten per answer, they queue behind each other.
    assert!(waited.peak_after <= 5, "{report}");
    assert!(
        together.peak_after > 2 * waited.peak_after,
        "{report}; together: peak {}",
        together.peak_after
    );
}

/// A burst: 100 calls started at once, and no call after them, to an upstream that answers
/// its `n`th request, received at `at` since the start, with `answer(n, at)`. Returns how each
/// call ended and when, and when each request came (since the start).
async fn burst<A>(
    reg: Arc<Registry>,
    answer: impl Fn(u32, Duration) -> A + Send + Sync + 'static,
) -> (Vec<(Result<(), AdapterError>, Duration)>, Vec<Duration>)
where
    A: Future<Output = Result<(), AdapterError>> + Send + 'static,
{
    let start = Instant::now();
    let answer = Arc::new(answer);
    let received = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..100 {
        let (reg, answer, received) = (reg.clone(), answer.clone(), received.clone());
        tasks.spawn(async move {
            let result = Retry::in_registry(&reg, "up")
                .method(Method::GET)
                .run(|_| {
                    let mut received = received.lock().unwrap();
                    received.push(start.elapsed());
                    answer(received.len() as u32 - 1, start.elapsed())
                })
                .await;
            (result, start.elapsed())
        });
    }
    let ended = tasks.join_all().await;
    let received = received.lock().unwrap().clone();
    (ended, received)
}

/// A burst of calls and nothing else, where the first few attempts hang until their timeout
/// cuts them (as a request handed to a connection that is closing does): when they time out,
/// the window holds only their timeouts, so their retries are refused and wait, and no other
/// call is left to send anything the upstream could accept. One of them probes; the rest go on
/// its answer and on each other's.
#[tokio::test(start_paused = true)]
async fn a_burst_whose_first_attempts_hang_completes_with_no_other_traffic() {
    for hung in [1, 5, 40] {
        let (ended, received) = burst(registry(3, true), move |n, _| async move {
            if n < hung {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            Ok(())
        })
        .await;
        let failed = ended.iter().filter(|(r, _)| r.is_err()).count();
        assert_eq!(failed, 0, "{hung} hung: {failed} of 100 failed");
        // Each hung attempt is retried once; nothing else is sent twice.
        assert_eq!(received.len(), 100 + hung as usize, "{hung} hung");
    }
}

/// A burst of calls and nothing else, met by a fast-failing outage shorter than the hold: the
/// first attempts that go fail at once, the calls wait, and no new call comes to send a first
/// attempt. A waiting call probes the upstream when nobody else asked it anything for a step
/// of its backoff; once it accepts the probe, the rest go at the pace of its answers.
#[tokio::test(start_paused = true)]
async fn a_burst_met_by_an_outage_completes_after_it_with_no_other_traffic() {
    let (ended, received) = burst(registry(3, true), |_, at| async move {
        match outage(at) {
            Mode::Up => Ok(()),
            _ => Err(AdapterError::Status(503)),
        }
    })
    .await;
    let failed = ended.iter().filter(|(r, _)| r.is_err()).count();
    let in_outage: Vec<&Duration> = received.iter().filter(|at| **at < OUTAGE).collect();
    // The only calls that fail are those whose three attempts all reached the outage. Without
    // the probes, none of the waiting calls ever goes, and all 100 fail.
    assert!(
        failed * 3 <= in_outage.len(),
        "{failed} of 100 failed; requests at {received:?}"
    );
    // The outage gets the first attempts the throttle admitted and a few probes, not a retry
    // per call.
    assert!(in_outage.len() <= 12, "requests at {in_outage:?}");
}

/// A burst of calls and nothing else, against an upstream that is down and answers in 20 ms:
/// the first attempts the throttle admits go, the calls wait, one probe at a time goes when
/// nobody else asked, and a probe that fails waits again behind the others; once the upstream
/// has failed everything for the hold, every call ends.
#[tokio::test(start_paused = true)]
async fn a_burst_against_a_dead_upstream_probes_it_one_at_a_time_until_the_hold_ends() {
    let (ended, received) = burst(registry(3, true), |_, _| async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Err(AdapterError::Status(503))
    })
    .await;
    assert!(ended.iter().all(|(r, _)| r.is_err()));
    // Failing since its first answers, at 20 ms: the hold ends at 1.02 s.
    assert!(
        ended
            .iter()
            .all(|(_, at)| *at <= Duration::from_millis(1020)),
        "{:?}",
        ended.iter().map(|(_, at)| at).max()
    );
    let probes = received
        .iter()
        .filter(|at| **at >= Duration::from_millis(100))
        .count();
    let late = &received[received.len() - probes..];
    assert!(probes <= 11, "{probes} probes: {late:?}");
}

#[tokio::test(start_paused = true)]
async fn a_wait_ends_when_shutdown_starts() {
    let reg = registry(1, true);
    let sent = Arc::new(AtomicU32::new(0));
    let down = Arc::new(AtomicBool::new(true));
    // Fill the window with fast failures until a call is refused and waits.
    let mut waiting = None;
    for _ in 0..200 {
        let (reg2, sent2, down2) = (reg.clone(), sent.clone(), down.clone());
        let call = tokio::spawn(async move {
            let started = Instant::now();
            let result: Result<(), AdapterError> = Retry::in_registry(&reg2, "up")
                .method(Method::GET)
                .run(|_| {
                    sent2.fetch_add(1, Ordering::SeqCst);
                    let down = down2.load(Ordering::SeqCst);
                    async move {
                        if down {
                            Err(AdapterError::Status(503))
                        } else {
                            Ok(())
                        }
                    }
                })
                .await;
            (started, Instant::now(), result)
        });
        let before = sent.load(Ordering::SeqCst);
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        if sent.load(Ordering::SeqCst) == before && !call.is_finished() {
            waiting = Some(call);
            break;
        }
        let _ = call.await;
    }
    let waiting = waiting.expect("a call was refused and waits");
    reg.drain().start();
    let (started, ended, result) = waiting.await.unwrap();
    assert!(matches!(
        result,
        Err(AdapterError::Runtime(Error::Throttled { .. }))
    ));
    assert!(
        ended - started < Duration::from_secs(1),
        "it stopped waiting"
    );
}
