use super::*;
use crate::suggest::closest;

#[test]
fn typos_find_their_key() {
    let names = UPSTREAM_KEYS.iter().map(|k| k.name);
    assert_eq!(closest("max_attempt", names.clone()), Some("max_attempts"));
    assert_eq!(closest("MAX_ATTEMPTS", names.clone()), Some("max_attempts"));
    assert_eq!(closest("jiter", names.clone()), Some("jitter"));
    assert_eq!(closest("timeout", names.clone()), None);
    assert_eq!(closest("retries", names), None);
}

#[test]
fn every_key_sets_its_default_from_its_example() {
    // The examples are the documented defaults: applying them to a default config changes
    // nothing, which keeps the key table, the docs and `UpstreamConfig::new` consistent.
    for key in all().filter(|k| {
        k.path != "bulkhead" && !k.path.starts_with("hedge.") && !k.path.starts_with("breaker.")
    }) {
        let mut settings = Settings::new();
        key.apply(&mut settings, Value::Env(key.example))
            .unwrap_or_else(|e| panic!("{}: {e}", key.path));
        let mut config = settings.config();
        // A timeout written out is kept as set; it equals the default in force.
        assert_eq!(
            config.attempt_timeout(),
            UpstreamConfig::new().attempt_timeout()
        );
        config.attempt_timeout = None;
        assert_eq!(config, UpstreamConfig::new(), "{}", key.path);
    }
    // The bulkhead has no default: unlimited.
    assert_eq!(UpstreamConfig::new().bulkhead, None);
    let mut settings = Settings::new();
    let bulkhead = by_path("bulkhead").unwrap();
    bulkhead.apply(&mut settings, Value::Env("100")).unwrap();
    assert_eq!(settings.config().bulkhead, Some(100));
    // The throttle is on by default, and `enabled = false` turns it off.
    assert_eq!(UpstreamConfig::new().throttle, Some(ThrottleConfig::new()));
    let mut settings = Settings::new();
    by_path("throttle.enabled")
        .unwrap()
        .apply(&mut settings, Value::Env("false"))
        .unwrap();
    assert_eq!(settings.config().throttle, None);
    // The breaker is off until a breaker key is written, with the documented defaults,
    // and `enabled = false` keeps it off.
    assert_eq!(UpstreamConfig::new().breaker, None);
    for key in all().filter(|k| k.path.starts_with("breaker.") && k.path != "breaker.enabled") {
        let mut settings = Settings::new();
        key.apply(&mut settings, Value::Env(key.example)).unwrap();
        assert_eq!(
            settings.config().breaker,
            Some(BreakerConfig::new()),
            "{}",
            key.path
        );
        by_path("breaker.enabled")
            .unwrap()
            .apply(&mut settings, Value::Env("false"))
            .unwrap();
        assert_eq!(settings.config().breaker, None, "{}", key.path);
    }
    // Hedging is off until a hedge key is written, and `enabled = false` keeps it off.
    assert_eq!(UpstreamConfig::new().hedge, None);
    let mut settings = Settings::new();
    by_path("hedge.percentile")
        .unwrap()
        .apply(&mut settings, Value::Env("95"))
        .unwrap();
    assert_eq!(
        settings.config().hedge,
        Some(HedgeConfig::at_percentile(95.0))
    );
    by_path("hedge.enabled")
        .unwrap()
        .apply(&mut settings, Value::Env("false"))
        .unwrap();
    assert_eq!(settings.config().hedge, None);
}

#[test]
fn the_breaker_keeps_its_settings_while_disabled() {
    let key = |p| by_path(p).unwrap();
    let mut settings = Settings::new();
    key("breaker.enabled")
        .apply(&mut settings, Value::Env("false"))
        .unwrap();
    key("breaker.min_attempts")
        .apply(&mut settings, Value::Env("7"))
        .unwrap();
    assert_eq!(settings.config().breaker, None);
    key("breaker.enabled")
        .apply(&mut settings, Value::Env("true"))
        .unwrap();
    assert_eq!(settings.config().breaker.unwrap().min_attempts, 7);
}
