//! The catalog adapters, tested as a user tests theirs: the production code unchanged, a fresh
//! registry and a scripted catalog from `retry-testkit`, assertions on what was sent and what
//! the runtime decided.

use std::sync::Arc;
use std::time::Duration;

use retry_examples::adapters::{CatalogAdapter, OrderId, OrderStatus, RegisterCommand, Registered};
use retry_runtime::backoff::Backoff;
use retry_runtime::{DenyReason, PermanentCategory, UpstreamConfig};
use retry_testkit::{Kit, Reply, Step, Upstream};

/// The catalog's entry, with a backoff in milliseconds so the tests stay fast.
fn kit() -> Kit {
    let config = UpstreamConfig::new().with_backoff(
        Backoff::new()
            .with_initial(Duration::from_millis(2))
            .with_max_backoff(Duration::from_millis(10)),
    );
    Kit::new("catalog", config).expect("a valid catalog entry")
}

fn adapter(kit: &Kit, catalog: &Upstream) -> CatalogAdapter {
    CatalogAdapter::new(catalog.base_url(), Arc::clone(kit.registry()))
}

fn registration(number: u64) -> Step {
    Reply::ok(format!(r#"{{"registration":{number}}}"#)).into()
}

#[tokio::test]
async fn register_retries_two_503s_with_the_orders_key_on_every_attempt() {
    let catalog = Upstream::http1([503.into(), 503.into(), registration(7)]).await;
    let kit = kit();
    let cmd = RegisterCommand::new(OrderId(42));

    let run = kit
        .run(&catalog, adapter(&kit, &catalog).register(&cmd))
        .await;

    let registered = run.output.as_ref().expect("the third attempt registers");
    assert_eq!(
        *registered,
        Registered {
            order: OrderId(42),
            registration: 7
        }
    );
    run.assert_attempts(3).assert_delays_within_backoff();
    // On the wire, the key is the draft's structured-field string.
    assert_eq!(
        run.assert_one_key(),
        format!("\"{}\"", cmd.idempotency_key())
    );
    assert!(run.requests.iter().all(|r| r.path == "/orders/42/register"));
}

#[tokio::test]
async fn register_once_is_sent_once_and_ambiguous_when_the_connection_resets_after_it() {
    let catalog = Upstream::http1([Step::ResetAfterRead]).await;
    let kit = kit();
    let cmd = RegisterCommand::new(OrderId(21));

    let run = kit
        .run(&catalog, adapter(&kit, &catalog).register_once(&cmd))
        .await;

    run.assert_requests(1)
        .assert_ambiguous()
        .assert_no_unkeyed_write_twice();
    let error = run.output.as_ref().expect_err("the outcome is unknown");
    assert!(error.as_ambiguous().is_some(), "{error}\n{run}");
}

#[tokio::test]
async fn register_checked_asks_the_catalog_instead_of_sending_the_write_again() {
    // The POST is read, then the connection resets; the reconcile GET finds the registration.
    let found = Reply::ok(r#"{"status":"registered","registration":5}"#);
    let catalog = Upstream::http1([Step::ResetAfterRead, found.into()]).await;
    let kit = kit();
    let cmd = RegisterCommand::new(OrderId(11));

    let run = kit
        .run(&catalog, adapter(&kit, &catalog).register_checked(&cmd))
        .await;

    let registered = run
        .output
        .as_ref()
        .expect("the check found the registration");
    assert_eq!(registered.registration, 5);
    run.assert_no_unkeyed_write_twice().assert_attempts(1);
    let sent: Vec<_> = run.requests.iter().map(|r| r.method.as_str()).collect();
    assert_eq!(sent, ["POST", "GET"], "{run}");
    assert!(
        run.trace.decisions().any(|d| d.decision == "reconciled"),
        "{run}"
    );
}

#[tokio::test]
async fn order_status_is_retried_after_the_catalog_closes_the_connection() {
    let status = Reply::ok(r#"{"status":"new"}"#);
    let catalog = Upstream::http1([Step::CloseAfterRead, status.into()]).await;
    let kit = kit();

    let run = kit
        .run(&catalog, adapter(&kit, &catalog).order_status(&OrderId(3)))
        .await;

    assert_eq!(run.output.as_ref().ok(), Some(&OrderStatus::New), "{run}");
    run.assert_attempts(2)
        .assert_requests(2)
        .assert_delays_within_backoff();
    let first = run.trace.attempts().next().expect("an attempt");
    assert_eq!(first.evidence.as_deref(), Some("sent_no_response"), "{run}");
}

#[tokio::test]
async fn a_decode_failure_is_permanent_and_not_retried() {
    let catalog = Upstream::http1([Reply::ok("not json").into()]).await;
    let kit = kit();

    let run = kit
        .run(&catalog, adapter(&kit, &catalog).order_status(&OrderId(3)))
        .await;

    assert!(run.output.is_err(), "{run}");
    run.assert_requests(1)
        .assert_denied(DenyReason::PermanentFailure(PermanentCategory::Decode));
}
