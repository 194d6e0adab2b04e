//! Hedged attempts on tokio's paused clock, against a test upstream whose latency and answer
//! are chosen per attempt: when a hedge starts, which answer wins, what happens to the copy
//! that loses, and the limits a hedge shares with retries.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_fixtures::AdapterError;
use retry_runtime::breaker::{BreakerConfig, BreakerState};
use retry_runtime::budget::BudgetConfig;
use retry_runtime::hedge::HedgeConfig;
use retry_runtime::{Attempt, Classify, Error, Method, Registry, Retry, UpstreamConfig, operation};
use tokio::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What the test upstream does with one attempt: answers `status` after `latency`.
#[derive(Debug, Clone, Copy)]
struct Plan {
    latency: Duration,
    status: u16,
}

const fn ok(latency_ms: u64) -> Plan {
    Plan {
        latency: Duration::from_millis(latency_ms),
        status: 200,
    }
}

const fn status(latency_ms: u64, status: u16) -> Plan {
    Plan {
        latency: Duration::from_millis(latency_ms),
        status,
    }
}

/// What the upstream saw of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    number: u32,
    started: Duration,
    key: Option<String>,
    /// When it answered, or when it was dropped unanswered.
    ended: Option<Duration>,
    cancelled: bool,
}

/// A test upstream: each attempt (by its number) follows its plan; a missing plan is
/// `ok(10)`.
#[derive(Clone)]
struct Upstream {
    start: Instant,
    plans: Arc<Vec<Plan>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// Marks an attempt cancelled if its future is dropped before it answers.
struct Guard {
    upstream: Upstream,
    index: usize,
    answered: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut seen = self.upstream.seen.lock().unwrap();
        let at = self.upstream.start.elapsed();
        let s = &mut seen[self.index];
        s.ended = Some(at);
        s.cancelled = !self.answered;
    }
}

impl Upstream {
    fn new(plans: Vec<Plan>) -> Self {
        Upstream {
            start: Instant::now(),
            plans: Arc::new(plans),
            seen: Arc::default(),
        }
    }

    /// One attempt's body: reads the attempt installed around it, waits, answers.
    async fn serve(self) -> Result<u32, AdapterError> {
        let attempt = Attempt::current().expect("each copy runs inside its own attempt");
        let number = attempt.number();
        let plan = self
            .plans
            .get(number as usize - 1)
            .copied()
            .unwrap_or(ok(10));
        let index = {
            let mut seen = self.seen.lock().unwrap();
            seen.push(Seen {
                number,
                started: self.start.elapsed(),
                key: attempt.idempotency_key().map(|k| k.as_str().to_owned()),
                ended: None,
                cancelled: false,
            });
            seen.len() - 1
        };
        let mut guard = Guard {
            upstream: self.clone(),
            index,
            answered: false,
        };
        tokio::time::sleep(plan.latency).await;
        // After the wait, the attempt installed is still this copy's.
        assert_eq!(Attempt::current().map(|a| a.number()), Some(number));
        guard.answered = true;
        match plan.status {
            200 => Ok(number),
            s => Err(AdapterError::Status(s)),
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn starts(&self) -> Vec<Duration> {
        self.seen().iter().map(|s| s.started).collect()
    }
}

fn config() -> UpstreamConfig {
    UpstreamConfig::new()
        .with_attempt_timeout(ms(1100))
        .with_breaker(None)
        .with_throttle(None)
        .with_hedge(Some(HedgeConfig::after(ms(50))))
}

fn registry(config: UpstreamConfig) -> Registry {
    Registry::builder()
        .upstream("up", config)
        .seed(7)
        .build()
        .unwrap()
}

async fn get(reg: &Registry, up: &Upstream) -> Result<u32, AdapterError> {
    Retry::in_registry(reg, "up")
        .method(Method::GET)
        .hedged()
        .call(|| up.clone().serve())
        .await
}

#[tokio::test(start_paused = true)]
async fn a_hedge_starts_after_the_delay_and_the_first_answer_wins() {
    let reg = registry(config().with_bulkhead(Some(4)));
    let up = Upstream::new(vec![ok(1000), ok(10)]);
    let start = Instant::now();
    assert_eq!(get(&reg, &up).await.unwrap(), 2, "the hedge answered first");
    assert_eq!(start.elapsed(), ms(60));
    let seen = up.seen();
    assert_eq!(up.starts(), [ms(0), ms(50)]);
    // The first copy was cancelled the moment the hedge answered, and its slot freed.
    assert_eq!((seen[0].ended, seen[0].cancelled), (Some(ms(60)), true));
    assert_eq!((seen[1].ended, seen[1].cancelled), (Some(ms(60)), false));
    assert_eq!(reg.upstream("up").unwrap().in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_fast_answer_sends_no_hedge() {
    let reg = registry(config());
    let up = Upstream::new(vec![ok(49)]);
    assert_eq!(get(&reg, &up).await.unwrap(), 1);
    assert_eq!(up.starts(), [ms(0)]);
}

#[tokio::test(start_paused = true)]
async fn the_first_copy_can_still_win() {
    let reg = registry(config());
    let up = Upstream::new(vec![ok(70), ok(1000)]);
    let start = Instant::now();
    assert_eq!(get(&reg, &up).await.unwrap(), 1);
    assert_eq!(start.elapsed(), ms(70));
    let hedge = &up.seen()[1];
    assert_eq!((hedge.ended, hedge.cancelled), (Some(ms(70)), true));
}

#[tokio::test(start_paused = true)]
async fn three_copies_at_most_one_delay_apart() {
    let hedge = HedgeConfig::after(ms(50)).with_max_copies(3);
    let reg = registry(config().with_hedge(Some(hedge)));
    let up = Upstream::new(vec![ok(1000), ok(1000), ok(1000), ok(10)]);
    assert_eq!(get(&reg, &up).await.unwrap(), 1, "no fourth copy");
    assert_eq!(up.starts(), [ms(0), ms(50), ms(100)]);
}

#[tokio::test(start_paused = true)]
async fn a_bulkhead_slot_in_use_by_a_loser_is_free_when_the_call_returns() {
    // Two slots: the first copy and the hedge. Another call starting after the winner
    // answered gets a slot at once, and may hedge too.
    let reg = registry(config().with_bulkhead(Some(2)));
    let up = Upstream::new(vec![ok(1000), ok(10)]);
    get(&reg, &up).await.unwrap();
    assert_eq!(reg.upstream("up").unwrap().in_flight(), 0);
    let next = Upstream::new(vec![ok(1000), ok(10)]);
    let start = Instant::now();
    assert_eq!(get(&reg, &next).await.unwrap(), 2);
    assert_eq!(start.elapsed(), ms(60));
}

#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_sends_no_hedge() {
    let reg = registry(config().with_bulkhead(Some(1)));
    let up = Upstream::new(vec![ok(1000)]);
    let start = Instant::now();
    assert_eq!(get(&reg, &up).await.unwrap(), 1);
    assert_eq!(
        start.elapsed(),
        ms(1000),
        "the hedge never waits for a slot"
    );
    assert_eq!(up.starts(), [ms(0)]);
}

#[tokio::test(start_paused = true)]
async fn an_empty_budget_sends_no_hedge() {
    let budget = BudgetConfig::new().with_ratio(0.0).with_min_per_second(0);
    let reg = registry(config().with_budget(budget));
    let up = Upstream::new(vec![ok(1000)]);
    let start = Instant::now();
    assert_eq!(get(&reg, &up).await.unwrap(), 1);
    assert_eq!(start.elapsed(), ms(1000));
    assert_eq!(up.starts(), [ms(0)]);

    // One token (one call at ratio 1): the hedge spends it; the next call has none.
    let budget = BudgetConfig::new().with_ratio(1.0).with_min_per_second(0);
    let reg = registry(config().with_budget(budget));
    let up = Upstream::new(vec![ok(1000), ok(10)]);
    assert_eq!(get(&reg, &up).await.unwrap(), 2);
    assert_eq!(reg.upstream("up").unwrap().budget().available(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_hedge_counts_in_the_operations_allowance() {
    // The enclosing operation allows no retry: no hedge either.
    let reg = registry(config());
    let up = Upstream::new(vec![ok(1000)]);
    let result = operation("checkout")
        .max_retries(0)
        .run(get(&reg, &up))
        .await;
    assert_eq!(result.unwrap(), 1);
    assert_eq!(up.starts(), [ms(0)]);

    // Two attempts in all: the hedge is the second; when both fail, nothing is retried.
    let reg = registry(config().with_max_attempts(2));
    let up = Upstream::new(vec![status(100, 503), status(100, 503), ok(10)]);
    let err = get(&reg, &up).await.unwrap_err();
    assert_eq!(err.status(), Some(503));
    assert_eq!(up.starts(), [ms(0), ms(50)]);
}

#[tokio::test(start_paused = true)]
async fn a_retryable_failure_waits_for_the_copy_in_flight() {
    let reg = registry(config());
    let up = Upstream::new(vec![status(100, 503), ok(200)]);
    let start = Instant::now();
    assert_eq!(get(&reg, &up).await.unwrap(), 2);
    assert_eq!(start.elapsed(), ms(250), "the 503 did not end the call");
    assert!(!up.seen()[1].cancelled);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_is_the_answer() {
    let reg = registry(config());
    let up = Upstream::new(vec![ok(1000), status(10, 404)]);
    let start = Instant::now();
    let err = get(&reg, &up).await.unwrap_err();
    assert_eq!(err.status(), Some(404));
    assert_eq!(start.elapsed(), ms(60));
    assert!(up.seen()[0].cancelled);
}

#[tokio::test(start_paused = true)]
async fn every_copy_failing_goes_to_the_retry_decision() {
    let reg = registry(config().with_max_attempts(3));
    // Two copies fail (503), then the retry after the backoff succeeds.
    let up = Upstream::new(vec![status(100, 503), status(100, 503), ok(10)]);
    assert_eq!(get(&reg, &up).await.unwrap(), 3);
    assert_eq!(up.seen().len(), 3);
    assert!(up.starts()[2] > ms(150), "retried after both copies failed");
}

#[tokio::test(start_paused = true)]
async fn the_breaker_never_counts_a_cancelled_loser() {
    // Opens at 50 % of 2 attempts: one loser counted as a failure beside its winner would open
    // it.
    let breaker = BreakerConfig::new()
        .with_failure_rate(0.5)
        .with_min_attempts(2);
    let reg = registry(config().with_breaker(Some(breaker)));
    for _ in 0..5 {
        let up = Upstream::new(vec![ok(1000), ok(10)]);
        assert_eq!(get(&reg, &up).await.unwrap(), 2);
        assert!(up.seen()[0].cancelled);
    }
    let breaker = reg.upstream("up").unwrap();
    assert_eq!(breaker.breaker().unwrap().state(), BreakerState::Closed);

    // A copy that failed on its own is counted: two 503s open it.
    let up = Upstream::new(vec![status(100, 503), status(60, 503), status(10, 503)]);
    let reg = registry(
        config()
            .with_max_attempts(2)
            .with_breaker(Some(breaker.breaker().unwrap().config().to_owned())),
    );
    get(&reg, &up).await.unwrap_err();
    let state = reg.upstream("up").unwrap().breaker().unwrap().state();
    assert_eq!(state, BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn an_unkeyed_write_is_never_hedged() {
    let reg =
        registry(config().with_hedge(Some(HedgeConfig::after(ms(50)).with_dedups_in_flight(true))));
    let up = Upstream::new(vec![ok(1000), ok(10)]);
    let result: Result<u32, AdapterError> = Retry::in_registry(&reg, "up")
        .method(Method::POST)
        .hedged()
        .call(|| up.clone().serve())
        .await;
    assert_eq!(result.unwrap(), 1);
    assert_eq!(up.starts(), [ms(0)]);
}

async fn keyed_write(reg: &Registry, up: &Upstream) -> Result<u32, AdapterError> {
    Retry::in_registry(reg, "up")
        .method(Method::POST)
        .idempotency("order-42")
        .hedged()
        .call(|| up.clone().serve())
        .await
}

#[tokio::test(start_paused = true)]
async fn a_keyed_write_is_hedged_only_with_the_promise_to_dedup_copies_in_flight() {
    // Deduplicating keyed retries is not enough.
    let reg = registry(config());
    let up = Upstream::new(vec![ok(1000), ok(10)]);
    assert_eq!(keyed_write(&reg, &up).await.unwrap(), 1);
    assert_eq!(up.starts(), [ms(0)]);

    let hedge = HedgeConfig::after(ms(50)).with_dedups_in_flight(true);
    let reg = registry(config().with_hedge(Some(hedge)));
    let up = Upstream::new(vec![ok(1000), ok(10)]);
    assert_eq!(keyed_write(&reg, &up).await.unwrap(), 2);
    let keys: Vec<_> = up.seen().into_iter().map(|s| s.key).collect();
    assert_eq!(keys, [Some("order-42".into()), Some("order-42".into())]);
}

#[tokio::test(start_paused = true)]
async fn no_hedge_without_time_left_and_the_deadline_cuts_every_copy() {
    // Deadline 100 ms, minimum attempt budget 60 ms: at 50 ms only 50 ms are left.
    let reg = registry(
        config()
            .with_deadline(ms(100))
            .with_min_attempt_budget(ms(60)),
    );
    let up = Upstream::new(vec![ok(1000), ok(10)]);
    let start = Instant::now();
    let err = get(&reg, &up).await.unwrap_err();
    assert!(
        matches!(err, AdapterError::Runtime(Error::AttemptTimeout { .. })),
        "{err:?}"
    );
    assert_eq!(start.elapsed(), ms(100));
    assert_eq!(up.starts(), [ms(0)]);
}

#[tokio::test(start_paused = true)]
async fn a_call_not_marked_hedged_is_never_hedged() {
    let reg = registry(config());
    let up = Upstream::new(vec![ok(1000), ok(10)]);
    let result: Result<u32, AdapterError> = Retry::in_registry(&reg, "up")
        .method(Method::GET)
        .call(|| up.clone().serve())
        .await;
    assert_eq!(result.unwrap(), 1);
    assert_eq!(up.starts(), [ms(0)]);
}

#[tokio::test(start_paused = true)]
async fn the_percentile_delay_follows_recorded_latencies() {
    let reg = registry(config().with_hedge(Some(HedgeConfig::at_percentile(90.0))));
    // Too few latencies known: no hedge.
    let slow = Upstream::new(vec![ok(1000), ok(10)]);
    assert_eq!(get(&reg, &slow).await.unwrap(), 1);
    // 1 s + 19 x 10 ms: the 90th percentile is 10 ms (the upper edge of its bucket, 10.24 ms;
    // tokio's timers fire on whole milliseconds, so 11 ms).
    for _ in 0..19 {
        get(&reg, &Upstream::new(vec![ok(10)])).await.unwrap();
    }
    let slow = Upstream::new(vec![ok(1000), ok(10)]);
    let start = Instant::now();
    assert_eq!(get(&reg, &slow).await.unwrap(), 2);
    assert_eq!(slow.starts()[1], ms(11));
    assert_eq!(start.elapsed(), ms(21));
    // Slower answers move it: 40 x 40 ms more, and the 90th percentile is 40 ms (40.96 ms,
    // so 41 ms).
    for _ in 0..40 {
        get(&reg, &Upstream::new(vec![ok(40)])).await.unwrap();
    }
    let slow = Upstream::new(vec![ok(1000), ok(10)]);
    assert_eq!(get(&reg, &slow).await.unwrap(), 2);
    assert_eq!(slow.starts()[1], ms(41));
}

#[test]
fn hedge_settings_are_read_from_the_file_and_their_errors_located() {
    let toml = "[upstreams.catalog]\nattempt_timeout = \"300ms\"\n\n[upstreams.catalog.hedge]\npercentile = 95\nmax_copies = 3\ndedups_in_flight = true\n";
    let configs = retry_runtime::registry::parse_toml(toml, "up.toml", []).unwrap();
    let hedge = configs[0].1.hedge.unwrap();
    assert_eq!(
        hedge,
        HedgeConfig::at_percentile(95.0)
            .with_max_copies(3)
            .with_dedups_in_flight(true)
    );

    let toml = "[upstreams.catalog]\nmax_attempts = 2\nattempt_timeout = \"300ms\"\n\n[upstreams.catalog.hedge]\ndelay = \"300ms\"\nmax_copies = 3\n\n[upstreams.sber.hedge]\nmax_copies = 4\npercentile = 100\n";
    let errors = retry_runtime::registry::parse_toml(toml, "up.toml", []).unwrap_err();
    let shown: Vec<String> = errors.errors().iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "up.toml:6:9: upstream `catalog`: hedge.delay (300ms) must be below attempt_timeout (300ms): the attempt is cut before a hedge would start; lower hedge.delay",
            "up.toml:7:14: upstream `catalog`: hedge.max_copies = 3 is above max_attempts = 2: every copy is an attempt; lower hedge.max_copies or raise max_attempts",
            "up.toml:10:14: upstream `sber`: hedge.max_copies = 4 is outside 2..=3: 2 sends one hedge; more copies multiply the upstream's load for little gain",
            "up.toml:11:14: upstream `sber`: hedge.percentile = 100 must be above 0 and below 100: use 95 (hedge the slowest 5 %)",
        ]
    );
    // A hedge table without a delay says what to add, at the table.
    let toml = "[upstreams.catalog.hedge]\nmax_copies = 2\n";
    let errors = retry_runtime::registry::parse_toml(toml, "up.toml", []).unwrap_err();
    assert!(
        errors
            .to_string()
            .contains("up.toml:1:1: upstream `catalog`: hedging needs a delay"),
        "{errors}"
    );
    // And the environment turns it off.
    let toml = "[upstreams.catalog.hedge]\npercentile = 95\n";
    let env = [(
        "RETRY__CATALOG__HEDGE__ENABLED".to_owned(),
        "false".to_owned(),
    )];
    let configs = retry_runtime::registry::parse_toml(toml, "up.toml", env).unwrap();
    assert_eq!(configs[0].1.hedge, None);
}
