//! The test kit on the service's real configuration: `examples/lab.toml`, the file the outage
//! lab loads, with its backoff shrunk so the retries take milliseconds, every other setting as
//! deployed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use retry_examples::adapters::{CatalogAdapter, OrderId, RegisterCommand, Registered};
use retry_runtime::Registry;
use retry_testkit::{Kit, Reply, Step, Upstream};

fn lab_toml() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("lab.toml")
}

fn registration(number: u64) -> Step {
    Reply::ok(format!(r#"{{"registration":{number}}}"#)).into()
}

#[tokio::test]
async fn register_retries_two_503s_on_the_lab_configuration_with_its_backoff_shrunk() {
    let kit = Kit::builder()
        .file(lab_toml())
        .shrink_backoff(100)
        .build()
        .expect("lab.toml is valid");
    // 100 ms doubling to 400 ms, as deployed, is 1 ms doubling to 4 ms here; the rest is the
    // file's.
    let config = kit.registry().upstream("catalog").unwrap().config().clone();
    assert_eq!(config.backoff.initial, Duration::from_millis(1));
    assert_eq!(config.backoff.max_backoff, Duration::from_millis(4));
    assert_eq!(config.attempt_timeout, Some(Duration::from_millis(300)));
    assert_eq!(config.bulkhead, Some(32));

    let catalog = Upstream::http1([503.into(), 503.into(), registration(7)]).await;
    let adapter = CatalogAdapter::new(catalog.base_url(), Arc::clone(kit.registry()));
    let cmd = RegisterCommand::new(OrderId(42));

    let run = kit.run(&catalog, adapter.register(&cmd)).await;

    assert_eq!(
        run.output.as_ref().ok(),
        Some(&Registered {
            order: OrderId(42),
            registration: 7
        }),
        "{run}"
    );
    run.assert_attempts(3).assert_delays_within_backoff();
    // On the wire, the key is a structured-field string (RFC 8941): quoted.
    assert_eq!(
        run.assert_one_key(),
        format!("\"{}\"", cmd.idempotency_key())
    );
}

#[tokio::test]
async fn a_registry_loaded_elsewhere_is_shrunk_in_place() {
    let registry = Arc::new(Registry::from_file(lab_toml()).expect("lab.toml is valid"));
    let kit = Kit::builder()
        .registry(Arc::clone(&registry))
        .shrink_backoff(100)
        .build()
        .expect("the lab's configuration, shrunk, is valid");
    assert!(Arc::ptr_eq(kit.registry(), &registry));
    let backoff = registry.upstream("middle").unwrap().config().backoff;
    assert_eq!(backoff.initial, Duration::from_millis(1));
    assert_eq!(backoff.max_backoff, Duration::from_millis(4));
}

#[test]
fn a_missing_file_and_a_registry_beside_upstreams_are_located_errors() {
    let missing = Kit::from_file("no-such-dir/upstreams.toml").unwrap_err();
    let shown = missing.to_string();
    assert!(
        shown.contains("no-such-dir/upstreams.toml: cannot read the configuration file"),
        "{shown}"
    );
    assert!(shown.contains("CARGO_MANIFEST_DIR"), "{shown}");

    let both = Kit::builder()
        .registry(Arc::new(Registry::new()))
        .file(lab_toml())
        .build()
        .unwrap_err();
    assert!(
        both.to_string()
            .contains("a kit takes a registry or upstreams"),
        "{both}"
    );

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let broken = dir.join("kit-broken.toml");
    std::fs::write(&broken, "[upstreams.catalog]\nmax_attempts = 9\n").unwrap();
    let invalid = Kit::from_file(&broken).unwrap_err();
    assert!(
        invalid
            .to_string()
            .contains("kit-broken.toml:2:16: upstream `catalog`: max_attempts = 9"),
        "{invalid}"
    );
}
