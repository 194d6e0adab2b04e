use super::*;
use crate::config::UpstreamConfig;
use crate::error::Error;
use std::path::PathBuf;
use std::time::Duration;

const EXAMPLE: &str = include_str!("../../examples/upstreams.toml");

/// A file under the system's temp directory, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("retry-runtime-{}-{name}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn loads_the_example_file_from_disk() {
    let file = TempFile::new("example", EXAMPLE);
    let registry = Registry::from_file(&file.0).unwrap();
    assert_eq!(registry.names(), ["catalog", "sber", "sms-gateway"]);
    assert_eq!(
        registry
            .upstream("catalog")
            .unwrap()
            .config()
            .attempt_timeout(),
        Duration::from_millis(800)
    );
    assert!(registry.upstream("unknown").is_err());
}

#[test]
fn a_missing_file_is_a_clear_error_naming_the_path() {
    let path = std::env::temp_dir().join("retry-runtime-does-not-exist.toml");
    let errors = Registry::from_file(&path).unwrap_err();
    assert_eq!(errors.errors().len(), 1);
    let shown = errors.errors()[0].to_string();
    assert!(
        shown.starts_with(&format!(
            "{}: cannot read the configuration file: ",
            path.display()
        )),
        "{shown}"
    );
    assert!(
        shown.ends_with("check the path and its permissions"),
        "{shown}"
    );
}

#[test]
fn errors_in_a_file_on_disk_name_the_file() {
    let file = TempFile::new("broken", "[upstreams.a]\nmax_attempts = 6\n");
    let errors = Registry::new().load_file(&file.0).unwrap_err();
    let at = errors.errors()[0].location.clone().unwrap();
    assert_eq!(at, Location::file(&file.0, 2, 16));
}

#[test]
fn a_failed_reload_keeps_the_old_config() {
    let file = TempFile::new("reload", "[upstreams.a]\nmax_attempts = 2\n");
    let registry = Registry::from_file(&file.0).unwrap();
    std::fs::write(&file.0, "[upstreams.a]\nmax_attempts = 9\n[upstreams.b]\n").unwrap();
    assert!(registry.load_file(&file.0).is_err());
    assert_eq!(registry.names(), ["a"]);
    assert_eq!(registry.upstream("a").unwrap().config().max_attempts, 2);
    // An unreadable file or a syntax error changes nothing either.
    std::fs::write(&file.0, "[upstreams.a\n").unwrap();
    assert!(registry.load_file(&file.0).is_err());
    assert!(registry.load_file(file.0.with_extension("gone")).is_err());
    assert_eq!(registry.upstream("a").unwrap().config().max_attempts, 2);
    // And a good reload applies.
    std::fs::write(&file.0, "[upstreams.a]\nmax_attempts = 3\n[upstreams.b]\n").unwrap();
    registry.load_file(&file.0).unwrap();
    assert_eq!(registry.names(), ["a", "b"]);
    assert_eq!(registry.upstream("a").unwrap().config().max_attempts, 3);
}

#[test]
fn a_call_in_flight_keeps_the_config_it_started_with() {
    let registry = Registry::new();
    registry
        .load_str("[upstreams.a]\nmax_attempts = 2\n", "v1.toml", [])
        .unwrap();
    let in_flight = registry.upstream("a").unwrap();
    registry
        .load_str(
            "[upstreams.a]\nmax_attempts = 3\n",
            "v2.toml",
            [("RETRY__A__DEADLINE".to_owned(), "3s".to_owned())],
        )
        .unwrap();
    assert_eq!(in_flight.config().max_attempts, 2);
    assert_eq!(in_flight.config().deadline, Duration::from_secs(5));
    let now = registry.upstream("a").unwrap();
    assert_eq!(now.config().max_attempts, 3);
    assert_eq!(now.config().deadline, Duration::from_secs(3));
    // The budget settings did not change, so the budget carried over.
    assert!(std::ptr::eq(in_flight.budget(), now.budget()));
}

#[tokio::test(start_paused = true)]
async fn an_upstreams_budget_and_breaker_count_from_one_origin_across_reloads() {
    let registry = Registry::new();
    registry
        .replace([(
            "a".to_owned(),
            UpstreamConfig::new().with_breaker(Some(crate::breaker::BreakerConfig::new())),
        )])
        .unwrap();
    let before = registry.upstream("a").unwrap();
    tokio::time::advance(Duration::from_secs(3)).await;
    // The breaker's settings change, the budget's do not: a new breaker beside the old
    // budget, made seconds later, still counts from the same origin.
    let breaker = crate::breaker::BreakerConfig {
        min_attempts: 7,
        ..crate::breaker::BreakerConfig::new()
    };
    registry
        .replace([(
            "a".to_owned(),
            UpstreamConfig::new().with_breaker(Some(breaker)),
        )])
        .unwrap();
    let after = registry.upstream("a").unwrap();
    assert!(std::ptr::eq(before.budget(), after.budget()));
    let breaker = after.breaker().expect("a breaker");
    assert!(!std::ptr::eq(before.breaker().unwrap(), breaker));
    // One reading serves both: a tick from another origin fails a debug assertion, so
    // this fails if either counts from its own creation.
    let tick = after.tick(tokio::time::Instant::now());
    after.budget().deposit_on(tick);
    breaker.record_on(breaker.admit().expect("closed"), false, tick);
}

#[test]
fn a_misspelt_upstream_name_is_answered_with_the_close_one() {
    let registry = Registry::builder()
        .upstream("sber", UpstreamConfig::new())
        .upstream("catalog", UpstreamConfig::new())
        .build()
        .unwrap();
    let message = registry.upstream("sbr").unwrap_err().to_string();
    assert!(message.contains("did you mean `sber`?"), "{message}");
    let message = registry.upstream("payments").unwrap_err().to_string();
    assert!(!message.contains("did you mean"), "{message}");
}

#[test]
fn an_unknown_name_lists_a_bounded_set_of_the_closest_names() {
    let small = Registry::builder()
        .upstream("b", UpstreamConfig::new())
        .upstream("a", UpstreamConfig::new())
        .build()
        .unwrap();
    let Err(Error::UnknownUpstream { known, .. }) = small.upstream("c") else {
        panic!("a miss is an error")
    };
    assert_eq!(
        known,
        ["a", "b"],
        "a small registry lists every name, sorted"
    );

    let many = Registry::builder()
        .upstreams((0..10_000).map(|i| (format!("svc-{i:05}"), UpstreamConfig::new())))
        .build()
        .unwrap();
    let Err(Error::UnknownUpstream { name, known }) = many.upstream("svc-0420x") else {
        panic!("a miss is an error")
    };
    assert_eq!(name, "svc-0420x");
    assert_eq!(known.len(), KNOWN_IN_ERRORS);
    // The ten sharing "svc-0420", then the first six sharing "svc-042".
    let expected: Vec<String> = (4200..4216).map(|i| format!("svc-{i:05}")).collect();
    assert_eq!(known, expected);
}

#[test]
fn the_builder_takes_parsed_upstreams() {
    let registry = Registry::builder()
        .seed(7)
        .upstreams(parse_toml(EXAMPLE, "upstreams.toml", []).unwrap())
        .build()
        .unwrap();
    assert_eq!(registry.names().len(), 3);
}
