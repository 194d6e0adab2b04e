//! The decision order, one step at a time, and properties over arbitrary inputs.

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::category::{PermanentCategory, Pushback};

const MS: u64 = 1;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n * MS)
}

static BACKOFF: Backoff = Backoff::new();

/// A context in which every gate is open: a retry of a safe operation is allowed.
fn open() -> Context<'static> {
    Context {
        attempt: 1,
        max_attempts: 3,
        operation_retries_left: 2,
        budget_has_token: true,
        replay: Replayability::Replayable,
        draining: false,
        remaining: Duration::from_secs(5),
        min_attempt_budget: ms(50),
        safety: Safety::Read,
        transient_500: false,
        can_refresh_auth: true,
        backoff: &BACKOFF,
        previous_delay: Duration::ZERO,
    }
}

fn decide(ctx: &Context<'_>, f: &Failure) -> Decision {
    DefaultEngine.decide(ctx, f, &mut fastrand::Rng::with_seed(1))
}

fn denied(d: Decision) -> Option<DenyReason> {
    match d {
        Decision::Denied(r) => Some(r),
        _ => None,
    }
}

/// Every gate closed at once: the failure that trips all nine steps.
fn everything_wrong() -> (Context<'static>, Failure) {
    let ctx = Context {
        attempt: 3,
        operation_retries_left: 0,
        budget_has_token: false,
        replay: Replayability::OneShot,
        draining: true,
        remaining: ms(10),
        safety: Safety::UnsafeWrite,
        ..open()
    };
    let mut f = Failure::new(Evidence::SentNoResponse).with_permanent(PermanentCategory::Contract);
    f.response_delivered = true;
    (ctx, f)
}

#[test]
fn each_step_is_the_first_denial_in_order() {
    // Open the gates one by one, from the first step: each time the next step must answer.
    let (mut ctx, mut f) = everything_wrong();
    assert_eq!(denied(decide(&ctx, &f)), Some(DenyReason::MaxAttempts));
    ctx.attempt = 1;
    assert_eq!(
        denied(decide(&ctx, &f)),
        Some(DenyReason::MaxAttempts),
        "shared allowance"
    );
    ctx.operation_retries_left = 2;
    assert_eq!(denied(decide(&ctx, &f)), Some(DenyReason::BudgetExhausted));
    ctx.budget_has_token = true;
    assert_eq!(
        denied(decide(&ctx, &f)),
        Some(DenyReason::BodyNotReplayable)
    );
    ctx.replay = Replayability::Reopenable;
    assert_eq!(
        denied(decide(&ctx, &f)),
        Some(DenyReason::ResponseAlreadyDelivered)
    );
    f.response_delivered = false;
    assert_eq!(denied(decide(&ctx, &f)), Some(DenyReason::RuntimeDraining));
    ctx.draining = false;
    assert_eq!(denied(decide(&ctx, &f)), Some(DenyReason::Deadline));
    ctx.remaining = Duration::from_secs(5);
    assert_eq!(
        denied(decide(&ctx, &f)),
        Some(DenyReason::PermanentFailure(PermanentCategory::Contract))
    );
    f.permanent = None;
    assert_eq!(
        decide(&ctx, &f),
        Decision::Ambiguous(AmbiguityReason::SentNoResponse)
    );
    ctx.safety = Safety::KeyedWrite;
    assert!(matches!(decide(&ctx, &f), Decision::Retry { .. }));
}

#[test]
fn already_retried_and_pushback_deny_after_permanent_and_before_ambiguity() {
    let ctx = Context {
        safety: Safety::UnsafeWrite,
        ..open()
    };
    let mut f = Failure::new(Evidence::SentNoResponse);
    f.already_retried = true;
    f.pushback = Some(Pushback::Overloaded);
    assert_eq!(denied(decide(&ctx, &f)), Some(DenyReason::AlreadyRetried));
    f.already_retried = false;
    assert_eq!(
        denied(decide(&ctx, &f)),
        Some(DenyReason::Pushback(Pushback::Overloaded))
    );
    f = f.with_permanent(PermanentCategory::Decode);
    assert_eq!(
        denied(decide(&ctx, &f)),
        Some(DenyReason::PermanentFailure(PermanentCategory::Decode))
    );
}

#[test]
fn not_sent_is_retried_even_for_an_unkeyed_write() {
    let ctx = Context {
        safety: Safety::UnsafeWrite,
        ..open()
    };
    assert!(matches!(
        decide(&ctx, &Failure::new(Evidence::NotSent)),
        Decision::Retry {
            reason: RetryReason::NotSent,
            ..
        }
    ));
}

#[test]
fn sent_no_response_is_ambiguous_for_unsafe_and_retried_for_safe() {
    let f = Failure::new(Evidence::SentNoResponse);
    let unsafe_ctx = Context {
        safety: Safety::UnsafeWrite,
        ..open()
    };
    assert_eq!(
        decide(&unsafe_ctx, &f),
        Decision::Ambiguous(AmbiguityReason::SentNoResponse)
    );
    for safety in [Safety::Read, Safety::KeyedWrite] {
        assert!(matches!(
            decide(&Context { safety, ..open() }, &f),
            Decision::Retry { .. }
        ));
    }
}

#[test]
fn partial_response_is_ambiguous_for_unsafe_writes() {
    let f = Failure::new(Evidence::PartialResponse);
    assert!(matches!(decide(&open(), &f), Decision::Retry { .. }));
    let ctx = Context {
        safety: Safety::UnsafeWrite,
        ..open()
    };
    assert_eq!(
        decide(&ctx, &f),
        Decision::Ambiguous(AmbiguityReason::PartialResponse)
    );
}

fn status(ctx: &Context<'_>, s: u16) -> Decision {
    decide(ctx, &Failure::status(s))
}

#[test]
fn status_408_and_429_retry_for_any_safety() {
    for safety in [Safety::Read, Safety::KeyedWrite, Safety::UnsafeWrite] {
        let ctx = Context { safety, ..open() };
        assert!(matches!(
            status(&ctx, 408),
            Decision::Retry {
                reason: RetryReason::Status(408),
                ..
            }
        ));
        assert!(matches!(
            status(&ctx, 429),
            Decision::Retry {
                reason: RetryReason::Status(429),
                ..
            }
        ));
    }
}

#[test]
fn status_425_retries_once_after_the_first_attempt_only() {
    assert!(matches!(status(&open(), 425), Decision::Retry { .. }));
    let second = Context {
        attempt: 2,
        ..open()
    };
    assert_eq!(denied(status(&second, 425)), Some(DenyReason::Status(425)));
}

#[test]
fn status_401_refreshes_once_for_safe_replayable_operations() {
    assert!(
        matches!(status(&open(), 401), Decision::Retry { reason: RetryReason::RefreshAuth, delay } if delay.is_zero())
    );
    let used = Context {
        can_refresh_auth: false,
        ..open()
    };
    assert_eq!(denied(status(&used, 401)), Some(DenyReason::Status(401)));
    let unsafe_write = Context {
        safety: Safety::UnsafeWrite,
        ..open()
    };
    assert_eq!(
        denied(status(&unsafe_write, 401)),
        Some(DenyReason::Status(401))
    );
}

#[test]
fn status_500_needs_registration_and_safety() {
    assert_eq!(denied(status(&open(), 500)), Some(DenyReason::Status(500)));
    let transient = Context {
        transient_500: true,
        ..open()
    };
    assert!(matches!(status(&transient, 500), Decision::Retry { .. }));
    let unsafe_write = Context {
        transient_500: true,
        safety: Safety::UnsafeWrite,
        ..open()
    };
    assert_eq!(
        denied(status(&unsafe_write, 500)),
        Some(DenyReason::Status(500))
    );
}

#[test]
fn gateway_errors_retry_when_safe_and_are_ambiguous_otherwise() {
    for s in [502, 503, 504] {
        assert!(matches!(status(&open(), s), Decision::Retry { .. }));
        let keyed = Context {
            safety: Safety::KeyedWrite,
            ..open()
        };
        assert!(matches!(status(&keyed, s), Decision::Retry { .. }));
        let unsafe_write = Context {
            safety: Safety::UnsafeWrite,
            ..open()
        };
        assert_eq!(
            status(&unsafe_write, s),
            Decision::Ambiguous(AmbiguityReason::Status(s))
        );
    }
}

#[test]
fn a_keyed_write_retries_409_and_422_is_a_contract_failure() {
    let keyed = Context {
        safety: Safety::KeyedWrite,
        ..open()
    };
    assert!(matches!(
        status(&keyed, 409),
        Decision::Retry {
            reason: RetryReason::Status(409),
            ..
        }
    ));
    // Without a key the 409 is the application's own conflict: not retried.
    for safety in [Safety::Read, Safety::UnsafeWrite] {
        let ctx = Context { safety, ..open() };
        assert_eq!(denied(status(&ctx, 409)), Some(DenyReason::Status(409)));
    }
    for safety in [Safety::Read, Safety::KeyedWrite, Safety::UnsafeWrite] {
        let ctx = Context { safety, ..open() };
        assert_eq!(
            denied(status(&ctx, 422)),
            Some(DenyReason::PermanentFailure(PermanentCategory::Contract))
        );
    }
}

#[test]
fn other_statuses_are_denied() {
    for s in [400, 403, 404, 409, 410, 451, 501, 505, 200, 302] {
        assert_eq!(
            denied(status(&open(), s)),
            Some(DenyReason::Status(s)),
            "status {s}"
        );
    }
}

#[test]
fn retry_after_is_the_delay_and_past_the_deadline_denies() {
    let f = Failure::status(429).with_retry_after(Duration::from_secs(1));
    assert_eq!(
        decide(&open(), &f),
        Decision::Retry {
            delay: Duration::from_secs(1),
            reason: RetryReason::Status(429)
        }
    );
    let short = Context {
        remaining: ms(900),
        ..open()
    };
    assert_eq!(denied(decide(&short, &f)), Some(DenyReason::Deadline));
    // The hint must leave the minimum attempt budget.
    let tight = Context {
        remaining: ms(1040),
        ..open()
    };
    assert_eq!(denied(decide(&tight, &f)), Some(DenyReason::Deadline));
}

/// `Retry-After` is a floor under the jittered backoff (RFC 9110 §10.2.3: how long the client
/// ought to wait at least): the larger of the two is the delay.
#[test]
fn retry_after_is_a_floor_under_the_backoff() {
    // Decorrelated jitter between equal bounds: a backoff of exactly 400 ms.
    let fixed = Backoff::new()
        .with_initial(ms(400))
        .with_max_backoff(ms(400))
        .with_jitter(crate::backoff::Jitter::Decorrelated);
    let ctx = Context {
        backoff: Box::leak(Box::new(fixed)),
        ..open()
    };
    for (hint, delay) in [(0, 400), (100, 400), (400, 400), (1000, 1000)] {
        let f = Failure::status(429).with_retry_after(ms(hint));
        assert_eq!(
            decide(&ctx, &f),
            Decision::Retry {
                delay: ms(delay),
                reason: RetryReason::Status(429)
            },
            "Retry-After {hint} ms"
        );
    }
    // A backoff clamped to the room left still waits at least the hint.
    let clamped = Context {
        remaining: ms(350),
        ..ctx
    };
    let f = Failure::status(503).with_retry_after(ms(200));
    assert_eq!(
        decide(&clamped, &f),
        Decision::Retry {
            delay: ms(300),
            reason: RetryReason::Status(503)
        }
    );
}

#[test]
fn backoff_is_clamped_to_the_remaining_deadline() {
    let b = Backoff::new()
        .with_initial(Duration::from_secs(10))
        .with_max_backoff(Duration::from_secs(10));
    let ctx = Context {
        backoff: Box::leak(Box::new(b)),
        remaining: ms(300),
        ..open()
    };
    for seed in 0..50 {
        if let Decision::Retry { delay, .. } = DefaultEngine.decide(
            &ctx,
            &Failure::status(503),
            &mut fastrand::Rng::with_seed(seed),
        ) {
            assert!(delay <= ms(250), "{delay:?}");
        } else {
            panic!("expected a retry");
        }
    }
}

fn arb_safety() -> impl Strategy<Value = Safety> {
    prop_oneof![
        Just(Safety::Read),
        Just(Safety::KeyedWrite),
        Just(Safety::UnsafeWrite)
    ]
}
fn arb_replay() -> impl Strategy<Value = Replayability> {
    prop_oneof![
        Just(Replayability::OneShot),
        Just(Replayability::Reopenable),
        Just(Replayability::Replayable)
    ]
}
fn arb_evidence() -> impl Strategy<Value = Evidence> {
    prop_oneof![
        Just(Evidence::NotSent),
        Just(Evidence::SentNoResponse),
        Just(Evidence::ResponseReceived),
        Just(Evidence::PartialResponse)
    ]
}

prop_compose! {
    fn arb_failure()(
        evidence in arb_evidence(),
        status in proptest::option::of(100u16..600),
        retry_after in proptest::option::of(0u64..20_000),
        permanent in proptest::option::of(Just(PermanentCategory::Contract)),
        response_delivered: bool,
        already_retried: bool,
    ) -> Failure {
        Failure {
            evidence, status, retry_after: retry_after.map(Duration::from_millis), permanent,
            response_delivered, already_retried, pushback: None, rejection: None,
            connection_rotated: false,
        }
    }
}

proptest! {
    #[test]
    fn retries_respect_every_gate(
        attempt in 1u32..8, max_attempts in 1u32..6, left in 0u32..5, token: bool,
        replay in arb_replay(), draining: bool, remaining_ms in 0u64..10_000,
        safety in arb_safety(), transient_500: bool, refresh: bool, seed: u64,
        f in arb_failure(),
    ) {
        let backoff = Backoff::new();
        let ctx = Context {
            attempt, max_attempts, operation_retries_left: left, budget_has_token: token, replay,
            draining, remaining: Duration::from_millis(remaining_ms), min_attempt_budget: ms(50),
            safety, transient_500, can_refresh_auth: refresh, backoff: &backoff, previous_delay: Duration::ZERO,
        };
        let d = DefaultEngine.decide(&ctx, &f, &mut fastrand::Rng::with_seed(seed));
        if let Decision::Retry { delay, .. } = d {
            // attempts never above the limit
            prop_assert!(attempt < max_attempts && left > 0);
            prop_assert!(token && replay.can_replay() && !draining && !f.response_delivered);
            prop_assert!(f.permanent.is_none() && !f.already_retried);
            // the next attempt starts before the deadline with its minimum budget left
            prop_assert!(delay + ctx.min_attempt_budget <= ctx.remaining);
            // a write whose request may have been processed is never retried without a key
            if safety == Safety::UnsafeWrite {
                prop_assert!(f.evidence == Evidence::NotSent || matches!(f.status, Some(408 | 425 | 429)));
            }
        }
        if f.evidence == Evidence::SentNoResponse && safety == Safety::UnsafeWrite {
            let retried = matches!(d, Decision::Retry { .. });
            prop_assert!(!retried);
        }
    }

    #[test]
    fn a_denial_is_never_reenabled_by_a_later_rule(
        f in arb_failure(), safety in arb_safety(), seed: u64,
    ) {
        // With an early gate closed, no status or evidence can produce a retry.
        for ctx in [
            Context { attempt: 3, ..open() },
            Context { budget_has_token: false, ..open() },
            Context { replay: Replayability::OneShot, ..open() },
            Context { draining: true, ..open() },
            Context { remaining: ms(10), ..open() },
        ] {
            let ctx = Context { safety, ..ctx };
            let d = DefaultEngine.decide(&ctx, &f, &mut fastrand::Rng::with_seed(seed));
            prop_assert!(matches!(d, Decision::Denied(_)), "{:?}", d);
        }
    }
}

#[test]
fn retry_after_beyond_the_in_memory_window_denies_even_when_the_deadline_allows_it() {
    // A scope deadline of an hour, and a server asking for half of it.
    let long = Context {
        remaining: Duration::from_secs(3600),
        ..open()
    };
    let f = Failure::status(429).with_retry_after(Duration::from_secs(1800));
    assert_eq!(
        denied(decide(&long, &f)),
        Some(DenyReason::RetryAfterBeyondWindow)
    );
    assert_eq!(
        DenyReason::RetryAfterBeyondWindow.as_str(),
        "retry_after_beyond_window"
    );
    let at_the_window = Failure::status(429).with_retry_after(UpstreamConfig::MAX_IN_MEMORY_WINDOW);
    assert!(matches!(
        decide(&long, &at_the_window),
        Decision::Retry { delay, .. } if delay == UpstreamConfig::MAX_IN_MEMORY_WINDOW
    ));
    // Past the remaining deadline too: the deadline is named, as before.
    assert_eq!(denied(decide(&open(), &f)), Some(DenyReason::Deadline));
}

proptest! {
    /// Whatever the deadline and the server say, no planned wait exceeds the in-memory window.
    #[test]
    fn no_delay_exceeds_the_in_memory_window(
        remaining_s in 0u64..7_200, retry_after_s in proptest::option::of(0u64..7_200),
        attempt in 1u32..3, seed: u64,
    ) {
        let backoff = Backoff::new().with_initial(Duration::from_secs(60)).with_max_backoff(Duration::from_secs(3600));
        let ctx = Context {
            attempt, remaining: Duration::from_secs(remaining_s), backoff: &backoff, ..open()
        };
        let mut f = Failure::status(503);
        f.retry_after = retry_after_s.map(Duration::from_secs);
        if let Decision::Retry { delay, .. } = DefaultEngine.decide(&ctx, &f, &mut fastrand::Rng::with_seed(seed)) {
            prop_assert!(delay <= UpstreamConfig::MAX_IN_MEMORY_WINDOW);
        }
    }
}

#[test]
fn a_response_without_a_status_is_never_read_as_some_status() {
    // An error that says "a response arrived" but not which (a hand-written `Classify` that
    // forgot `status`): a read or keyed write is not retried blind (the loop reports the keyed
    // write ambiguous, with its key), an unkeyed write may have executed.
    let f = Failure::new(Evidence::ResponseReceived);
    assert_eq!(denied(decide(&open(), &f)), Some(DenyReason::StatusUnknown));
    let keyed = Context {
        safety: Safety::KeyedWrite,
        ..open()
    };
    assert_eq!(denied(decide(&keyed, &f)), Some(DenyReason::StatusUnknown));
    let unkeyed = Context {
        safety: Safety::UnsafeWrite,
        ..open()
    };
    assert_eq!(
        decide(&unkeyed, &f),
        Decision::Ambiguous(AmbiguityReason::StatusUnknown)
    );
}

/// RFC 9110 calls PUT and DELETE idempotent; a repeat after a lost response still overwrites
/// or deletes what another client did in between, so without a key they are unsafe writes,
/// and one that may have been sent ends ambiguous (the rules page says so).
#[test]
fn put_and_delete_without_a_key_are_unsafe_writes() {
    for method in [http::Method::PUT, http::Method::DELETE] {
        assert_eq!(
            Safety::of(&method, false, true),
            Safety::UnsafeWrite,
            "{method}"
        );
        assert_eq!(
            Safety::of(&method, true, true),
            Safety::KeyedWrite,
            "{method}"
        );
        let ctx = Context {
            safety: Safety::of(&method, false, true),
            ..open()
        };
        assert_eq!(
            decide(&ctx, &Failure::new(Evidence::SentNoResponse)),
            Decision::Ambiguous(AmbiguityReason::SentNoResponse),
            "{method}"
        );
    }
}
