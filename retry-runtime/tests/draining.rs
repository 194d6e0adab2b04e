//! Shutdown starts no new attempt: a retry whose way to its next attempt passes no backoff (a
//! credentials refresh), or waits somewhere after its backoff (a bulkhead slot), still finds
//! the drain switch flipped and ends without sending. Tokio's paused clock; the moments that
//! matter are ordered by notifications.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_fixtures::AdapterError;
use retry_runtime::backoff::{Backoff, Jitter};
use retry_runtime::{Error, Method, Registry, Retry, UpstreamConfig};
use tokio::sync::Notify;

/// The throttle is tested on its own: these tests script failures to reach a retry, which it
/// would refuse at random.
fn registry(config: UpstreamConfig) -> Registry {
    Registry::builder()
        .upstream("up", config.with_breaker(None).with_throttle(None))
        .seed(42)
        .build()
        .unwrap()
}

/// A 401 is retried at once after the refresh hook: there is no backoff to wake. Shutdown
/// starting while the hook runs must still stop the replay.
#[tokio::test(start_paused = true)]
async fn draining_during_a_credentials_refresh_sends_no_retry() {
    let reg = registry(UpstreamConfig::new());
    let refreshing = Arc::new(Notify::new());
    let proceed = Arc::new(Notify::new());
    let (hook_started, hook_proceed) = (refreshing.clone(), proceed.clone());
    reg.on_unauthorized("up", move || {
        let (started, proceed) = (hook_started.clone(), hook_proceed.clone());
        async move {
            started.notify_one();
            proceed.notified().await;
            Ok(())
        }
    });
    let attempts = AtomicU32::new(0);
    let call = Retry::in_registry(&reg, "up").method(Method::GET).run(|_| {
        attempts.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>(AdapterError::Status(401)) }
    });
    let drain_during_refresh = async {
        refreshing.notified().await;
        reg.drain().start();
        proceed.notify_one();
    };
    let (result, ()) = tokio::join!(call, drain_during_refresh);
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        1,
        "no replay after shutdown started"
    );
    let error = result.unwrap_err();
    assert!(
        matches!(&error, AdapterError::Runtime(Error::Draining { attempts: 1, last_error, .. }) if last_error.contains("401")),
        "{error:?}"
    );
}

/// A retry whose backoff is over but which waits for a bulkhead slot: shutdown starts during
/// that wait, then the slot frees. The retry passed the backoff's check of the drain switch
/// before shutdown started; it must not begin after.
#[tokio::test(start_paused = true)]
async fn draining_while_a_retry_waits_for_a_bulkhead_slot_sends_no_retry() {
    retry_queued_for_a_slot_while_draining_starts(false).await;
}

/// The same for a call that may be hedged: its retry's first copy is held to the same check.
#[tokio::test(start_paused = true)]
async fn draining_while_a_hedged_retry_waits_for_a_bulkhead_slot_sends_no_retry() {
    retry_queued_for_a_slot_while_draining_starts(true).await;
}

async fn retry_queued_for_a_slot_while_draining_starts(hedged: bool) {
    // Exactly 100 ms between attempts: decorrelated jitter between equal bounds.
    let backoff = Backoff::new()
        .with_initial(Duration::from_millis(100))
        .with_max_backoff(Duration::from_millis(100))
        .with_jitter(Jitter::Decorrelated);
    let hedge = retry_runtime::hedge::HedgeConfig::after(Duration::from_millis(500));
    let reg = registry(
        UpstreamConfig::new()
            .with_bulkhead(Some(1))
            .with_backoff(backoff)
            .with_hedge(Some(hedge)),
    );
    let first_failed = Notify::new();
    let holder_in = Notify::new();
    let holder_release = Notify::new();
    let starts = Mutex::new(Vec::new());

    // The call under test: a 503, then a retry that must wait for the one slot.
    let body = |a: retry_runtime::Attempt| {
        starts.lock().unwrap().push(a.number());
        if a.number() == 1 {
            first_failed.notify_one();
        }
        async { Err::<(), _>(AdapterError::Status(503)) }
    };
    let call = async {
        let call = Retry::in_registry(&reg, "up").method(Method::GET);
        match hedged {
            true => call.hedged().run(body).await,
            false => call.run(body).await,
        }
    };
    // Another call takes the slot while the first backs off, and holds it until released.
    let holder = async {
        first_failed.notified().await;
        Retry::in_registry(&reg, "up")
            .method(Method::GET)
            .run(|_| async {
                holder_in.notify_one();
                holder_release.notified().await;
                Ok::<(), AdapterError>(())
            })
            .await
    };
    let drain_while_queued = async {
        holder_in.notified().await;
        // Past the 100 ms backoff on the paused clock: the retry has checked the drain switch
        // and waits for the slot.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(*starts.lock().unwrap(), [1], "the retry is still queued");
        reg.drain().start();
        holder_release.notify_one();
    };
    let (result, held, ()) = tokio::join!(call, holder, drain_while_queued);
    held.unwrap();
    assert_eq!(
        *starts.lock().unwrap(),
        [1],
        "no attempt begins after shutdown started"
    );
    let error = result.unwrap_err();
    assert!(
        matches!(
            &error,
            AdapterError::Runtime(Error::Draining { attempts: 1, .. })
        ),
        "{error:?}"
    );
}
