//! The start-up check and `#[retry(durable = ...)]` functions: `verify` names a durable
//! function that has no queue to defer to (a gap that would otherwise show only mid-outage);
//! a binary that links such functions without calling them checks with
//! `verify_without_durable`, which still checks every upstream.

use retry_runtime::durable::Durable;
use retry_runtime::{Error, Registry, UpstreamConfig, retry};

struct Adapter;

// Linked, never called: what `verify` sees is the registration, not a use.
#[allow(dead_code)]
impl Adapter {
    #[retry(upstream = "payments", method = POST, idempotency = format!("charge-{id}"),
            durable = "payments.charge")]
    async fn charge(&self, id: u64) -> Result<Durable<u64>, Error> {
        Ok(id)
    }
}

fn registry(upstream: &str) -> Registry {
    Registry::builder()
        .upstream(upstream, UpstreamConfig::new())
        .build()
        .unwrap()
}

#[test]
fn verify_names_a_durable_function_without_a_queue() {
    let missing = registry("payments").verify().unwrap_err();
    assert_eq!(missing.no_durable_queue.len(), 1);
    assert_eq!(
        missing.no_durable_queue[0].durable(),
        Some("payments.charge")
    );
    let shown = missing.to_string();
    assert!(
        shown.contains("verify_without_durable") && shown.contains("set_durable_queue"),
        "both fixes are named: {shown}"
    );
    assert_eq!(
        format!("{missing:?}"),
        shown,
        "`?` in main prints the message"
    );
}

#[test]
fn verify_without_durable_skips_the_queue_and_still_checks_every_upstream() {
    registry("payments").verify_without_durable().unwrap();
    let missing = registry("paymnts").verify_without_durable().unwrap_err();
    assert!(missing.no_durable_queue.is_empty());
    assert_eq!(missing.missing[0].upstream, "payments");
    assert_eq!(
        format!("{missing:?}"),
        format!(
            "1 upstream(s) named by #[retry] functions are missing from the retry registry \
             (configured: paymnts); add them to the configuration, or fix the name in the \
             attribute:\n  - `payments` (did you mean `paymnts`?), used by {}",
            missing.missing[0].functions[0]
        )
    );
}
