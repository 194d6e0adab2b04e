use super::marks::Own;
use super::*;

use proptest::prelude::*;

/// Offers `rate` first attempts per second for `seconds` to a throttle whose upstream accepts
/// an admitted attempt with probability `accept(t)` (answers come back at once), and returns
/// per 100 ms bin (offered, admitted, accepted).
fn simulate(
    config: ThrottleConfig,
    rate: u32,
    seconds: u32,
    seed: u64,
    accept: impl Fn(Duration) -> f64,
) -> Vec<(u64, u64, u64)> {
    let origin = Instant::now();
    let throttle = Throttle::counting_from(config, origin);
    let mut rng = fastrand::Rng::with_seed(seed);
    let step = Duration::from_secs(1) / rate;
    let mut bins = vec![(0, 0, 0); seconds as usize * 10];
    for i in 0..rate * seconds {
        let t = step * i;
        let tick = Tick::at(origin, origin + t);
        let bin = &mut bins[(t.as_millis() / 100) as usize];
        bin.0 += 1;
        if let Some(sent) = throttle.admit(Work::First, tick, || rng.f64()) {
            bin.1 += 1;
            let ok = rng.f64() < accept(t);
            bin.2 += u64::from(ok);
            throttle.record(sent, verdict(ok), tick);
        }
    }
    bins
}

/// An answer that was accepted, or failed at once.
fn verdict(accepted: bool) -> Verdict {
    match accepted {
        true => Verdict::Accepted,
        false => Verdict::Failed,
    }
}

fn totals(bins: &[(u64, u64, u64)]) -> (u64, u64, u64) {
    bins.iter()
        .fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2))
}

/// A throttle counting from now, and the tick of now.
fn fresh() -> (Throttle, Tick) {
    let origin = Instant::now();
    let throttle = Throttle::counting_from(ThrottleConfig::new(), origin);
    (throttle, Tick::at(origin, origin))
}

/// `n` first attempts admitted at `tick` and ended `accepted` or not.
fn answer(throttle: &Throttle, tick: Tick, n: usize, accepted: bool) {
    for _ in 0..n {
        throttle.record(throttle.granted(), verdict(accepted), tick);
    }
}

/// The tick `ms` milliseconds after `throttle`'s origin.
fn after_ms(throttle: &Throttle, ms: u64) -> Tick {
    let origin = throttle.clock.origin();
    Tick::at(origin, origin + Duration::from_millis(ms))
}

/// The instants, in milliseconds after `throttle`'s origin, at which a waiting call asking
/// every millisecond from `start` to `end` is let go (within one window of answers counted at
/// the origin).
fn let_go_between(throttle: &Throttle, start: u64, end: u64) -> Vec<u64> {
    (start..end)
        .filter(|&ms| throttle.lets_go_at(after_ms(throttle, ms)))
        .collect()
}

#[test]
fn a_healthy_upstream_gets_every_attempt() {
    let bins = simulate(ThrottleConfig::new(), 200, 10, 1, |_| 1.0);
    let (offered, admitted, _) = totals(&bins);
    assert_eq!(admitted, offered);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// At steady load, an upstream that accepts a fraction `a` of what it gets (up to 15 %,
    /// 10 % in the middle) receives at most `K` times what it accepted, plus a small floor per
    /// window, whatever is offered: at the fixed point a window sends `S = K x a x S + 1`, so
    /// `1 / (1 - K x a)` (1.8 at 15 %) beyond `K x accepted`, and the draws add noise.
    #[test]
    fn an_upstream_accepting_little_gets_at_most_k_times_what_it_accepted_plus_a_floor(
        seed in any::<u64>(),
        rate in 20u32..2_000,
        accepts in 0.0f64..0.15,
    ) {
        let config = ThrottleConfig::new();
        let bins = simulate(config, rate, 30, seed, |_| accepts);
        // Steady state: skip the first window (the throttle starts with an empty window).
        let (offered, admitted, accepted) = totals(&bins[20..]);
        let windows = 28.0 / config.window.as_secs_f64();
        let floor = 4.0 * windows;
        prop_assert!(
            admitted as f64 <= config.multiplier * accepted as f64 + floor,
            "admitted {admitted} of {offered}, accepted {accepted}, floor {floor:.0}"
        );
    }

    /// The same at exactly 10 %, at 50 calls a second and at 2,000: forty times the load adds
    /// at most the floor, not forty times the attempts.
    #[test]
    fn an_upstream_accepting_a_tenth_gets_k_times_what_it_accepted_at_any_load(seed in any::<u64>()) {
        let config = ThrottleConfig::new();
        let floor = 4.0 * 28.0 / config.window.as_secs_f64();
        for rate in [50, 2_000] {
            let bins = simulate(config, rate, 30, seed, |_| 0.1);
            let (offered, admitted, accepted) = totals(&bins[20..]);
            prop_assert!(
                admitted as f64 <= config.multiplier * accepted as f64 + floor,
                "{admitted} of {offered} at {rate} calls/s, {accepted} accepted"
            );
        }
    }

    /// Once a dead upstream accepts again, admission returns to at least 95 % of what is
    /// offered within half a second, at any rate from 20 calls per second.
    #[test]
    fn after_recovery_admission_returns_to_95_percent_within_half_a_second(
        seed in any::<u64>(),
        rate in 20u32..2_000,
    ) {
        let recovered = Duration::from_secs(10);
        let bins = simulate(ThrottleConfig::new(), rate, 13, seed, |t| {
            if t < recovered { 0.0 } else { 1.0 }
        });
        // The bins from 500 ms after recovery on.
        let (offered, admitted, _) = totals(&bins[105..]);
        prop_assert!(
            admitted as f64 >= 0.95 * offered as f64,
            "admitted {admitted} of {offered} from 0.5 s after recovery"
        );
        // And it had been refusing while the upstream was dead (at 20 calls per second a
        // window holds 10, and about 3 of them keep probing).
        let (dead_offered, dead_admitted, _) = totals(&bins[50..100]);
        prop_assert!(dead_admitted * 2 < dead_offered, "{dead_admitted} of {dead_offered}");
    }
}

#[test]
fn extra_attempts_pass_in_the_proportion_the_upstream_accepts() {
    let origin = Instant::now();
    let throttle = Throttle::counting_from(ThrottleConfig::new(), origin);
    let tick = Tick::at(origin, origin + Duration::from_millis(500));
    // 100 sent, 30 accepted: first attempts are refused a tenth of the time (3 x 30 falls 10
    // short of 100), extra attempts pass about 30 % of the time.
    for i in 0..100 {
        let sent = throttle.admit(Work::First, tick, || 1.0).unwrap();
        throttle.record(sent, verdict(i < 30), tick);
    }
    assert!((throttle.refusal_probability() - 10.0 / 101.0).abs() < 1e-9);
    let mut rng = fastrand::Rng::with_seed(7);
    // Hedges, admitted and never ended: not counted, and never refused so far as to count.
    // Their calls' own first copies are still in flight (not in the window): p = 70 / 100.
    let extra = (0..10_000)
        .filter(|_| {
            throttle
                .admit(Work::Extra { own: 0 }, tick, || rng.f64())
                .is_some()
        })
        .count();
    assert!((2_800..3_200).contains(&extra), "{extra}");
    // A hedge of a call one of whose attempts the window counts is judged on the other 99.
    let extra = (0..10_000)
        .filter(|_| {
            throttle
                .admit(Work::Extra { own: 1 }, tick, || rng.f64())
                .is_some()
        })
        .count();
    assert!((2_850..3_250).contains(&extra), "{extra}");
}

/// Refused first attempts count as requests, as in the SRE book: an upstream that accepts
/// nothing is probed about once per window, and one that recovers outweighs them at once.
#[test]
fn refusals_count_as_requests_until_the_upstream_accepts_its_share() {
    let (throttle, tick) = fresh();
    answer(&throttle, tick, 10, false);
    // 10 sent, none accepted: 10 / 11.
    assert!((throttle.refusal_probability() - 10.0 / 11.0).abs() < 1e-9);
    // The floor's turn of the window goes (never answered here: never counted).
    let _floor = throttle
        .admit(Work::First, tick, || 0.0)
        .expect("the floor");
    for _ in 0..100 {
        assert!(throttle.admit(Work::First, tick, || 0.0).is_none());
    }
    // 110 requests: 110 / 111.
    assert!((throttle.refusal_probability() - 110.0 / 111.0).abs() < 1e-9);
    // Three accepted answers: 113 requests, 3 accepted: (113 - 9) / 114.
    answer(&throttle, tick, 3, true);
    assert!((throttle.refusal_probability() - 104.0 / 114.0).abs() < 1e-9);
    // Two more, and what is sent is accepted in proportion again (15 <= 3 x 5): nothing is
    // refused, whatever was refused before.
    answer(&throttle, tick, 2, true);
    assert_eq!(throttle.refusal_probability(), 0.0);
}

/// A burst of concurrent first attempts against a healthy upstream all go: attempts in flight
/// are not counted until they end, so none reads as a failure before it could answer.
#[test]
fn a_burst_of_attempts_in_flight_is_never_refused() {
    let origin = Instant::now();
    let throttle = Throttle::counting_from(ThrottleConfig::new(), origin);
    let tick = Tick::at(origin, origin + Duration::from_millis(10));
    let in_flight: Vec<Sent> = (0..200)
        .map(|_| throttle.admit(Work::First, tick, || 0.0).expect("admitted"))
        .collect();
    for sent in in_flight {
        throttle.record(sent, verdict(true), tick);
    }
    let epoch = throttle.clock.epoch_of(tick);
    assert_eq!(throttle.sent.sum(epoch), 200);
    assert_eq!(throttle.counts(epoch).1, 200);
}

#[test]
fn concurrent_admissions_and_answers_lose_no_count() {
    let origin = Instant::now();
    let throttle = Arc::new(Throttle::counting_from(ThrottleConfig::new(), origin));
    let tick = Tick::at(origin, origin + Duration::from_millis(10));
    // The window accepts before the threads start and half of what they send after, and the
    // draw is 1.0: an attempt is refused only when its reads of the counts are torn (a thread
    // preempted between them reads a window that accepted nothing, for a moment).
    answer(&throttle, tick, 100, true);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let throttle = throttle.clone();
            std::thread::spawn(move || {
                // (admitted, accepted)
                let mut counted = (0u64, 0u64);
                for i in 0..10_000u32 {
                    let Some(sent) = throttle.admit(Work::First, tick, || 1.0) else {
                        continue;
                    };
                    let accepted = (i + t) % 2 == 0;
                    throttle.record(sent, verdict(accepted), tick);
                    counted.0 += 1;
                    counted.1 += u64::from(accepted);
                }
                counted
            })
        })
        .collect();
    let (mut admitted, mut accepted) = (0, 0);
    for t in threads {
        let (a, b) = t.join().unwrap();
        admitted += a;
        accepted += b;
    }
    assert!(admitted > 79_000, "{admitted}");
    let epoch = throttle.clock.epoch_of(tick);
    assert_eq!(throttle.sent.sum(epoch), 100 + admitted);
    assert_eq!(throttle.counts(epoch).1, 100 + accepted);
}

#[test]
fn settings_outside_their_range_are_refused_with_the_fix() {
    let bad = ThrottleConfig::new()
        .with_multiplier(0.5)
        .with_window(Duration::from_millis(10));
    let v = bad.violations();
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v[0].1.contains("use 3"), "{}", v[0].1);
    assert_eq!(v[1].0, "throttle.window");
    assert!(ThrottleConfig::new().violations().is_empty());
    assert!(
        !ThrottleConfig::new()
            .with_multiplier(f64::NAN)
            .violations()
            .is_empty()
    );
}

/// A lone call's retries pass the odds (the hold stops them once the upstream has failed
/// everything for it: the loop asks that first); another call's retry after its failures is
/// extra work on a failing upstream.
#[test]
fn a_lone_calls_retries_pass_the_odds() {
    let origin = Instant::now();
    let throttle = Throttle::counting_from(ThrottleConfig::new(), origin);
    let tick = Tick::at(origin, origin + Duration::from_millis(10));
    let first = throttle.admit(Work::First, tick, || 0.0).unwrap();
    throttle.record(first, verdict(false), tick);
    for own in 1..=2 {
        assert!(throttle.admits_extra(tick, 0.0, own));
        let retry = throttle.admit(Work::Extra { own }, tick, || 1.0).unwrap();
        throttle.record(retry, verdict(false), tick);
    }
    assert!(!throttle.admits_extra(tick, 0.0, 1));
}

/// A call's own attempts are those the throttle counted in its window: not those it never
/// counted, not those it has forgotten.
#[test]
fn a_calls_own_attempts_are_those_in_the_window() {
    let origin = Instant::now();
    let throttle = Throttle::counting_from(ThrottleConfig::new(), origin);
    let at = |millis: u64| Tick::at(origin, origin + Duration::from_millis(millis));
    let mut own = Own::default();
    assert_eq!(own.in_window(&throttle, at(0)), 0);
    own.counted(at(0));
    own.counted(at(100));
    assert_eq!(own.in_window(&throttle, at(200)), 2);
    // 50 ms slots: the count at 0 ms leaves the window at 500 ms, the one at 100 at 600.
    assert_eq!(own.in_window(&throttle, at(520)), 1);
    assert_eq!(own.in_window(&throttle, at(700)), 0);
    // It keeps the latest four.
    for millis in [1000, 1010, 1020, 1030, 1040] {
        own.counted(at(millis));
    }
    assert_eq!(own.in_window(&throttle, at(1050)), 4);
}

/// An upstream that accepts nothing gets no extra work: first attempts keep probing it.
#[test]
fn an_upstream_that_accepts_nothing_gets_no_retry_but_first_attempts_probe_it() {
    let (throttle, tick) = fresh();
    answer(&throttle, tick, 10, false);
    // Even the luckiest draw: no retry of a call that sent 1 of the 10 goes.
    assert!(!throttle.admits_extra(tick, 0.999, 1));
    // A first attempt goes with probability 1 / 11.
    assert!(throttle.admit(Work::First, tick, || 0.95).is_some());
    assert!(throttle.admit(Work::First, tick, || 0.9).is_none());
}

/// The backlog is let go at the pace of the upstream's answers: once it accepts again, the
/// calls let go in a window stay within `release_ratio` x the answers it accepted from the
/// others, and each further accepted answer lets more go.
#[test]
fn the_backlog_goes_at_the_pace_of_the_upstreams_answers() {
    let origin = Instant::now();
    let throttle = Throttle::counting_from(ThrottleConfig::new().with_release_ratio(1.0), origin);
    let tick = Tick::at(origin, origin);
    answer(&throttle, tick, 4, false);
    assert!(!throttle.lets_go_at(tick), "nothing accepted: nothing goes");
    answer(&throttle, tick, 6, true);
    let let_go = let_go_between(&throttle, 0, 250);
    assert_eq!(
        let_go.len(),
        3,
        "released <= 1 x (6 - released): {let_go:?}"
    );
    // The calls let go are answered (accepted), as are two new calls: three more go, counted
    // against the 11 accepted less the 6 let go, so the backlog never sends more than the
    // others' accepted answers (6 let go, 8 others accepted).
    answer(&throttle, tick, 3 + 2, true);
    let more = let_go_between(&throttle, 250, 480);
    assert_eq!(more.len(), 3, "6 released <= 1 x (11 - 5)");
    // A window later, the count starts again from what the upstream accepts then.
    assert!(
        !throttle.lets_go_at(after_ms(&throttle, 2_000)),
        "an empty window is no evidence"
    );

    // At the default 0.25, a quarter of the others' accepted answers.
    let (throttle, tick) = fresh();
    answer(&throttle, tick, 12, true);
    let let_go = let_go_between(&throttle, 0, 450);
    assert_eq!(let_go.len(), 2, "released + 1 <= 0.25 x (12 - released)");
    // At 2, twice.
    let origin = Instant::now();
    let throttle = Throttle::counting_from(ThrottleConfig::new().with_release_ratio(2.0), origin);
    let tick = Tick::at(origin, origin);
    answer(&throttle, tick, 6, true);
    let let_go = let_go_between(&throttle, 0, 450);
    assert_eq!(let_go.len(), 4, "released + 1 <= 2 x (6 - released)");
}

/// The pace lets its calls go one at a time, spread over the window as the answers that
/// allow them were, never the window's allowance at one instant: let go together, they would
/// reach the upstream together, on top of the live calls whose answers made the allowance.
#[test]
fn the_backlog_goes_one_call_at_a_time_spread_over_the_window() {
    let (throttle, tick) = fresh();
    answer(&throttle, tick, 40, true);
    let asked_at_once = (0..100).filter(|_| throttle.lets_go_at(tick)).count();
    assert_eq!(
        asked_at_once, 1,
        "a hundred calls asking at one instant: one goes"
    );
    // released + 1 <= 0.25 x (40 - released): 8 a window, each at least the window over the
    // allowance left (9.75, 9.5, ...) after the one before: 50 ms apart or more.
    let let_go = let_go_between(&throttle, 1, 450);
    assert_eq!(let_go.len(), 7, "{let_go:?}");
    let mut previous = 0;
    for (n, &at) in let_go.iter().enumerate() {
        let allowance = 0.25 * (40.0 - (n as f64 + 1.0));
        let gap = (500.0 / allowance).ceil() as u64;
        assert!(
            at - previous >= gap - 1,
            "{let_go:?}: {at} after {previous}"
        );
        previous = at;
    }
}

/// Timeouts shrink the pace: each attempt of the window that timed out holds back one call.
#[test]
fn timeouts_shrink_the_backlogs_pace() {
    let (throttle, tick) = fresh();
    answer(&throttle, tick, 20, true);
    for _ in 0..3 {
        throttle.record(Sent, Verdict::TimedOut, tick);
    }
    // 20 accepted, 23 sent: released + 1 <= 0.25 x (20 - released) - 3, and the first goes
    // on the backlog's own answers (none in flight).
    let let_go = (0..100).filter(|_| throttle.lets_go_at(tick)).count();
    assert_eq!(let_go, 1);
    let (throttle, tick) = fresh();
    answer(&throttle, tick, 20, true);
    assert_eq!(let_go_between(&throttle, 0, 450).len(), 4);
}

/// A refused call waits only until the upstream has failed every attempt for the hold, and
/// only as many calls wait as `max_waiting` allows; a place is given back when dropped.
#[test]
fn calls_wait_only_within_the_hold_and_the_places() {
    let origin = Instant::now();
    let config = ThrottleConfig::new()
        .with_hold(Duration::from_secs(1))
        .with_max_waiting(2);
    let throttle = Throttle::counting_from(config, origin);
    let at = |millis: u64| Tick::at(origin, origin + Duration::from_millis(millis));
    // A quiet spell is not an outage.
    assert!(throttle.holds_at(at(60_000)));
    throttle.record(Sent, Verdict::Accepted, at(100));
    assert!(throttle.holds_at(at(60_000)));
    // Failing since 200 ms: the hold ends at 1.2 s, whatever else fails meanwhile.
    throttle.record(Sent, Verdict::TimedOut, at(150));
    assert!(
        throttle.holds_at(at(60_000)),
        "a slow upstream is not failing"
    );
    throttle.record(Sent, Verdict::Failed, at(200));
    throttle.record(Sent, Verdict::Failed, at(900));
    assert_eq!(
        throttle.hold_ends_after(at(700)),
        Some(Duration::from_millis(500))
    );
    assert_eq!(
        Throttle::counting_from(config, origin).hold_ends_after(at(700)),
        Some(Duration::MAX),
        "not failing: no end"
    );
    assert!(throttle.holds_at(at(1199)));
    assert!(
        !throttle.holds_at(at(1200)),
        "failed everything for a second"
    );
    // One accepted answer ends the failing spell.
    throttle.record(Sent, Verdict::Accepted, at(1300));
    assert!(throttle.holds_at(at(5000)));
    let first = throttle.enter_waiting().expect("a place");
    let second = throttle.enter_waiting().expect("a place");
    assert!(throttle.enter_waiting().is_none(), "two places");
    assert_eq!(throttle.waiting(), 2);
    drop(first);
    let third = throttle.enter_waiting().expect("a place given back");
    drop((second, third));
    assert_eq!(throttle.waiting(), 0);
}

/// With no other call left, a slow upstream's backlog goes one call at a time: each call let
/// go, once the upstream accepts its attempt, lets the next go.
#[test]
fn a_backlog_with_no_other_call_goes_one_at_a_time_on_its_own_answers() {
    let (throttle, start) = fresh();
    let tick = Tick::at(
        throttle.clock.origin(),
        throttle.clock.origin() + Duration::from_millis(50),
    );
    let mark = throttle.asked(None, start);
    assert!(
        throttle.probes_since(mark, tick),
        "nobody asked for 50 ms: a waiting call probes"
    );
    assert!(!throttle.probes_since(mark, tick), "the probe asked");
    let mark = throttle.asked(None, start);
    assert!(!throttle.probes_since(mark, tick), "the probe is in flight");
    assert!(!throttle.lets_go_at(tick), "the probe is not answered yet");
    // The probe is accepted: the next waiting call goes, and only one.
    answer(&throttle, tick, 1, true);
    throttle.accepted_let_go(tick);
    assert_eq!((0..100).filter(|_| throttle.lets_go_at(tick)).count(), 1);
    throttle.record(throttle.granted(), Verdict::Accepted, tick);
    throttle.accepted_let_go(tick);
    assert_eq!((0..100).filter(|_| throttle.lets_go_at(tick)).count(), 1);
    // A call let go that is not accepted (it timed out) lets none go until the window forgets it.
    throttle.record(throttle.granted(), Verdict::TimedOut, tick);
    assert!(!throttle.lets_go_at(tick));
}

/// What became of `n` waiting calls with nobody else to ask (see [`drain_alone`]).
#[derive(Debug)]
struct Drained {
    /// When the last of them went, if they all did.
    last: Option<Duration>,
    /// The most calls let go with no answer yet.
    in_flight: usize,
    /// Calls let go in all.
    let_go: usize,
}

/// `n` calls waiting in a slow upstream's backlog, and no other call: the window starts with
/// `hung` timeouts. Each call asks every `ask` (call `i` first at `i` ms), as a waiting call
/// asks at each backoff step; a call let go (from the backlog or as the probe) is answered
/// after `latency`, `accepted` or failed; a failed one waits again. Simulated for `run` in
/// 1 ms steps.
fn drain_alone(
    n: usize,
    hung: usize,
    ask: Duration,
    latency: Duration,
    accepted: bool,
    run: Duration,
) -> Drained {
    let (throttle, start) = fresh();
    for _ in 0..hung {
        throttle.record(throttle.granted(), Verdict::TimedOut, start);
    }
    let origin = throttle.clock.origin();
    let ask = ask.as_millis() as usize;
    let mut waiting: Vec<bool> = vec![true; n];
    let mut marks = vec![throttle.asked(None, start); n];
    // When each call let go is answered, and when it was let go.
    let mut answers: Vec<(Duration, usize, Tick)> = Vec::new();
    let (mut in_flight, mut let_go, mut last) = (0, 0, None);
    for ms in 0..run.as_millis() as usize {
        let now = Duration::from_millis(ms as u64);
        let tick = Tick::at(origin, origin + now);
        answers.retain(|&(at, call, let_go)| {
            if at > now {
                return true;
            }
            let verdict = if accepted {
                Verdict::Accepted
            } else {
                Verdict::Failed
            };
            throttle.record(throttle.granted(), verdict, tick);
            if accepted {
                throttle.accepted_let_go(let_go);
            } else {
                throttle.failed_let_go(let_go);
                waiting[call] = true;
            }
            false
        });
        for (call, waits) in waiting.iter_mut().enumerate() {
            if !*waits || !(ms + ask - call % ask).is_multiple_of(ask) {
                continue;
            }
            if throttle.lets_go_at(tick) || throttle.probes_since(marks[call], tick) {
                *waits = false;
                let_go += 1;
                answers.push((now + latency, call, tick));
            } else {
                marks[call] = throttle.asked(Some(marks[call]), tick);
            }
        }
        in_flight = in_flight.max(answers.len());
        if last.is_none() && waiting.iter().all(|w| !w) {
            last = Some(now);
        }
    }
    Drained {
        last,
        in_flight,
        let_go,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// A backlog with nobody else to ask never waits for nothing: once the window forgets the
    /// timeouts, one call probes, and the rest go one at a time, each on the answer to the one
    /// before.
    #[test]
    fn a_backlog_alone_drains_one_call_at_a_time(
        n in 1usize..100,
        hung in 1usize..20,
        ask in 5u64..50,
        latency in 1u64..200,
    ) {
        let (ask, latency) = (Duration::from_millis(ask), Duration::from_millis(latency));
        let bound = Duration::from_millis(600) + (latency + ask) * n as u32;
        let drained = drain_alone(n, hung, ask, latency, true, bound + ask);
        prop_assert!(drained.last.is_some_and(|at| at <= bound), "{drained:?} (bound {bound:?})");
        prop_assert_eq!(drained.in_flight, 1, "{:?}", drained);
    }

    /// A dead upstream with nobody else to ask gets one probe at a time from its waiting
    /// calls, however many wait: the next goes a step after the last one's answer.
    #[test]
    fn a_dead_upstream_alone_gets_one_probe_at_a_time(
        n in 1usize..200,
        ask in 5u64..50,
        latency in 1u64..200,
    ) {
        let run = Duration::from_secs(2);
        let drained = drain_alone(n, 5, Duration::from_millis(ask), Duration::from_millis(latency), false, run);
        prop_assert!(drained.in_flight <= 1, "{drained:?}");
        prop_assert!(drained.let_go as u64 <= 2_000 / (latency + ask) + 1, "{drained:?}");
    }
}

/// A waiting call probes only when nobody asked the upstream anything for a tenth of the
/// window (50 ms): no attempt answered, no waiting call let go (a refused one asks nothing).
#[test]
fn a_waiting_call_probes_only_when_nobody_asked_for_a_while() {
    let (throttle, _) = fresh();
    let at = |millis: u64| {
        Tick::at(
            throttle.clock.origin(),
            throttle.clock.origin() + Duration::from_millis(millis),
        )
    };
    let mark = throttle.asked(None, at(0));
    answer(&throttle, at(10), 1, false);
    assert!(
        !throttle.probes_since(mark, at(60)),
        "an attempt was answered"
    );
    let mark = throttle.asked(Some(mark), at(80));
    let _floor = throttle
        .admit(Work::First, at(85), || 0.0)
        .expect("the floor");
    assert!(throttle.admit(Work::First, at(90), || 0.0).is_none());
    assert!(
        !throttle.probes_since(mark, at(120)),
        "nobody asked for 40 ms"
    );
    let kept = throttle.asked(Some(mark), at(120));
    assert!(kept == mark, "a current mark is kept");
    assert!(
        throttle.probes_since(kept, at(130)),
        "nobody asked for 50 ms, a refusal aside"
    );
}

/// A waiting call goes when the upstream accepts again: accepted attempts in the window, and
/// no first attempt refused. An empty window is no evidence.
#[test]
fn the_upstream_accepts_again_on_evidence_only() {
    let (throttle, tick) = fresh();
    assert!(!throttle.accepts_again_at(tick), "an empty window");
    answer(&throttle, tick, 10, false);
    assert!(!throttle.accepts_again_at(tick), "nothing accepted");
    answer(&throttle, tick, 3, true);
    assert!(!throttle.accepts_again_at(tick), "13 sent > 3 x 3 accepted");
    answer(&throttle, tick, 2, true);
    assert!(throttle.accepts_again_at(tick), "15 sent <= 3 x 5 accepted");
    assert_eq!(throttle.refusal_probability(), 0.0);
}

/// What the upstream did since a mark, whatever the window holds: failing every call (more
/// failures than the asking call's own, none accepted), and accepting again.
#[test]
fn a_mark_tells_what_the_upstream_answered_since() {
    let (throttle, tick) = fresh();
    answer(&throttle, tick, 20, true);
    let mark = throttle.answers();
    assert!(!throttle.failing_all_since(mark, 1), "nothing since");
    answer(&throttle, tick, 1, false);
    assert!(
        !throttle.failing_all_since(mark, 1),
        "only the call's own failure: a lone call's retry goes"
    );
    answer(&throttle, tick, 1, false);
    assert!(
        throttle.failing_all_since(mark, 1),
        "another call failed too, and none was accepted, though the window holds 20 accepted"
    );
    assert!(
        throttle.accepts_again_at(tick),
        "the window alone would let it go"
    );
    assert!(!throttle.accepted_since(mark));
    answer(&throttle, tick, 1, true);
    assert!(throttle.accepted_since(mark));
    assert!(!throttle.failing_all_since(mark, 1), "one accepted since");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A call's own attempts in the window are exactly those the throttle counted whose count
    /// the window still holds: attempts it never counted (failed to connect, rotated,
    /// cancelled) and attempts older than the window are not its own any more, so a busy
    /// upstream's other calls are never undercounted.
    #[test]
    fn a_calls_own_attempts_are_exactly_its_counted_attempts_in_the_window(
        attempts in proptest::collection::vec((0u64..3_000, any::<bool>()), 0..4),
        asked in 0u64..4_000,
    ) {
        let origin = Instant::now();
        let throttle = Throttle::counting_from(ThrottleConfig::new(), origin);
        let at = |ms: u64| Tick::at(origin, origin + Duration::from_millis(ms));
        let mut ended: Vec<(u64, bool)> = attempts.clone();
        ended.sort();
        let mut own = Own::default();
        for (ms, counted) in &ended {
            if *counted {
                own.counted(at(*ms));
            }
        }
        // 50 ms slots: a count made in slot e is in the window of slot n while n - e < 10.
        let slot = |ms: u64| ms / 50;
        let expected = ended
            .iter()
            .filter(|(ms, counted)| {
                *counted && slot(*ms) <= slot(asked) && slot(asked) - slot(*ms) < 10
            })
            .count() as u32;
        prop_assert_eq!(own.in_window(&throttle, at(asked)), expected);
    }
}

/// Held work (nobody waits for its answer) goes only into capacity no caller needs: never
/// while a caller waits, never while an attempt of the window timed out, and one at a time
/// (never while a call let go is in flight); otherwise at the pace a waiting call would.
#[test]
fn held_work_goes_only_into_capacity_no_caller_needs() {
    let (throttle, tick) = fresh();
    answer(&throttle, tick, 12, true);
    // A caller waits: it goes first.
    let place = throttle.enter_waiting().expect("a place");
    assert!(!throttle.lets_held_go_at(tick), "a caller waits");
    assert!(throttle.lets_go_at(tick), "the caller goes");
    drop(place);
    // The caller's attempt is in flight: held work waits for its answer.
    assert!(
        !throttle.lets_held_go_at(tick),
        "a call let go is in flight"
    );
    throttle.record(throttle.granted(), Verdict::Accepted, tick);
    throttle.accepted_let_go(tick);
    // The pace's next turn: a window over the allowance (0.25 x (13 - 1)) after the caller.
    let next = after_ms(&throttle, 170);
    assert!(
        !throttle.lets_held_go_at(tick),
        "the pace's next turn has not come"
    );
    assert!(
        throttle.lets_held_go_at(next),
        "nothing in flight, nobody waits"
    );
    assert!(!throttle.lets_held_go_at(next), "one at a time");
    throttle.record(throttle.granted(), Verdict::Accepted, tick);
    throttle.accepted_let_go(tick);
    // An attempt times out: the upstream queues, and held work stops until the window
    // forgets it.
    throttle.record(
        throttle.admit(Work::First, tick, || 1.0).unwrap(),
        Verdict::TimedOut,
        tick,
    );
    assert!(!throttle.lets_held_go_at(tick), "an attempt timed out");
    let later = Tick::at(
        throttle.clock.origin(),
        throttle.clock.origin() + Duration::from_millis(700),
    );
    answer(&throttle, later, 12, true);
    assert!(
        throttle.lets_held_go_at(later),
        "the window forgot the timeout"
    );
}

/// Held work waits while the upstream queues: its recent answers take more than twice what
/// they take when nothing queues, though none timed out; it goes again once they are fast.
#[test]
fn held_work_waits_while_the_upstream_queues() {
    let (throttle, tick) = fresh();
    let after = |ms| {
        Tick::at(
            throttle.clock.origin(),
            throttle.clock.origin() + Duration::from_millis(ms),
        )
    };
    let answered = |tick, took_ms, n| {
        for _ in 0..n {
            throttle.record(throttle.granted(), Verdict::Accepted, tick);
            throttle.answered_in(Duration::from_millis(took_ms), tick);
        }
    };
    answered(tick, 35, 12);
    assert!(throttle.lets_held_go_at(tick), "answers at the base");
    throttle.accepted_let_go(tick);
    answered(after(100), 150, 4);
    assert!(
        !throttle.lets_held_go_at(after(100)),
        "answers 115 ms late: a queue"
    );
    answered(after(200), 40, 1);
    assert!(
        throttle.lets_held_go_at(after(200)),
        "an answer near the base: the queue drained"
    );
}

/// An upstream that accepts nothing gets the floor: one first attempt a window, evenly spaced
/// (the first to ask a window after the last), so that it is found again within a window of
/// coming back, never after a random gap of several.
#[test]
fn a_dead_upstreams_floor_is_one_first_attempt_a_window_evenly_spaced() {
    let (throttle, _) = fresh();
    let origin = throttle.clock.origin();
    let window = throttle.config().window;
    let step = Duration::from_millis(10);
    let mut rng = fastrand::Rng::with_seed(7);
    let mut admitted = Vec::new();
    for i in 0..400u32 {
        let t = step * i;
        let tick = Tick::at(origin, origin + t);
        if let Some(sent) = throttle.admit(Work::First, tick, || rng.f64()) {
            throttle.record(sent, Verdict::Failed, tick);
            admitted.push(t);
        }
    }
    // The first attempts go until the window holds a failure; from then on, the floor.
    let floor: Vec<Duration> = admitted.into_iter().skip(1).collect();
    let gaps: Vec<Duration> = floor.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(floor.len() >= 7, "about one a window over 4 s: {floor:?}");
    assert!(
        gaps.iter()
            .all(|gap| *gap >= window - window / 10 && *gap < window + step),
        "one a window, evenly spaced: {gaps:?}"
    );
}
