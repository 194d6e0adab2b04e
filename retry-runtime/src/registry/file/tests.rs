use super::*;
use proptest::prelude::*;
use std::time::Duration;

use crate::backoff::Jitter;

const EXAMPLE: &str = include_str!("../../../examples/upstreams.toml");

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// `line:column field` of every error, in order.
fn positions(errors: &ConfigErrors) -> Vec<String> {
    errors
        .errors()
        .iter()
        .map(|e| {
            let at = e.location.as_ref().map_or("-".to_owned(), |l| {
                if l.has_position() {
                    format!("{}:{}", l.line, l.column)
                } else {
                    l.source.display().to_string()
                }
            });
            format!("{at} {}/{}", e.upstream, e.field)
        })
        .collect()
}

#[test]
fn the_example_file_loads_with_its_documented_values() {
    let configs = parse_toml(EXAMPLE, "upstreams.toml", []).unwrap();
    let names: Vec<&str> = configs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["catalog", "sber", "sms-gateway"]);
    let sber = &configs[1].1;
    // Every key written out at its default; a timeout written out is kept as set (with
    // `propagate`, the default would be half the deadline instead).
    assert_eq!(
        sber,
        &UpstreamConfig::new().with_attempt_timeout(UpstreamConfig::DEFAULT_ATTEMPT_TIMEOUT)
    );
    let catalog = &configs[0].1;
    assert_eq!(catalog.max_attempts, 2);
    assert_eq!(catalog.backoff.initial, Duration::from_millis(200));
    assert_eq!(catalog.backoff.jitter, Jitter::Decorrelated);
    assert!(catalog.transient_500);
    assert_eq!(catalog.budget.ratio, 0.1);
    assert_eq!(
        catalog.hedge,
        Some(crate::hedge::HedgeConfig::at_percentile(95.0))
    );
    let sms = &configs[2].1;
    assert!(!sms.dedups_idempotency_key);
    assert_eq!(sms.idempotency_header, "X-Request-Id");
    assert_eq!(sms.bulkhead, Some(20));
    assert!(!sms.propagate, "off by default");
    assert!(catalog.propagate, "turned on for our own service");
    assert_eq!(sms.breaker.unwrap().failure_rate, 0.3);
}

#[test]
fn the_breaker_can_be_disabled_in_the_file_or_the_environment() {
    let text = "[upstreams.a.breaker]\nenabled = false\n[upstreams.b]\n";
    let configs = parse_toml(
        text,
        "f.toml",
        env(&[("RETRY__B__BREAKER__ENABLED", "false")]),
    )
    .unwrap();
    assert_eq!(configs[0].1.breaker, None);
    assert_eq!(configs[1].1.breaker, None);
    // A rule broken by a default is located at the sub-table's header, else the upstream's.
    let text = "[upstreams.a]\n[upstreams.a.breaker]\nenabled = true\n";
    let errors = parse_toml(text, "f.toml", env(&[("RETRY__A__BULKHEAD", "0")])).unwrap_err();
    assert_eq!(
        positions(&errors),
        ["environment: RETRY__A__BULKHEAD a/bulkhead"]
    );
}

#[test]
fn waiting_for_admission_can_be_turned_off_in_the_file_or_the_environment() {
    let text = "[upstreams.a.throttle]\nwait = false\n[upstreams.b]\n[upstreams.c]\n";
    let configs = parse_toml(
        text,
        "f.toml",
        env(&[("RETRY__B__THROTTLE__WAIT", "false")]),
    )
    .unwrap();
    let wait = |i: usize| configs[i].1.throttle.map(|t| t.wait);
    assert_eq!(
        (wait(0), wait(1), wait(2)),
        (Some(false), Some(false), Some(true))
    );
    // Not a boolean: located at its value, with the fix.
    let errors = parse_toml("[upstreams.a.throttle]\nwait = \"no\"\n", "f.toml", []).unwrap_err();
    assert_eq!(positions(&errors), ["2:8 a/throttle.wait"]);
}

#[test]
fn toml_number_forms_are_accepted() {
    let text = "[upstreams.a]\nmax_attempts = 0b10\nmultiplier = 3\n\
                    budget = { ratio = 1e-1, min_per_second = 1_000 }\n";
    let configs = parse_toml(text, "f.toml", []).unwrap();
    let a = &configs[0].1;
    assert_eq!(a.max_attempts, 2);
    assert_eq!(a.backoff.multiplier, 3.0);
    assert_eq!(a.budget.ratio, 0.1);
    assert_eq!(a.budget.min_per_second, 1000);
    let errors = parse_toml("[upstreams.a]\nmax_attempts = -1\n", "f.toml", []).unwrap_err();
    assert_eq!(
        errors.errors()[0].message,
        "`max_attempts` = -1 is out of range: write `max_attempts = 3`"
    );
}

#[test]
fn missing_keys_take_the_defaults() {
    let configs = parse_toml("[upstreams.bare]\n", "f.toml", []).unwrap();
    assert_eq!(configs, [("bare".to_owned(), UpstreamConfig::new())]);
}

/// Mistakes of nine kinds across two upstreams, every one reported with its position.
const BROKEN: &str = r#"# two upstreams, many mistakes
[upstreams.sber]
max_attempts = 7
initial_backoff = "500"
multiplier = 1.0
jiter = "full"
backoff = "linear"
transient_500 = "no"

[upstreams.sber.budget]
ratio = 0.2
window = "5sec"

[upstreams.catalog]
attempt_timeout = "2s"
deadline = 5
bulkhead = 0
[upstreams.catalog.budget]
widnow = "10s"
[upstreams.catalog.breaker]
failure_rate = 1.5
"#;

#[test]
fn every_mistake_is_reported_with_its_position() {
    let errors = parse_toml(BROKEN, "upstreams.toml", []).unwrap_err();
    assert_eq!(
        positions(&errors),
        [
            "3:16 sber/max_attempts",
            "4:19 sber/initial_backoff",
            "5:14 sber/multiplier",
            "6:1 sber/jiter",
            "7:11 sber/backoff",
            "8:17 sber/transient_500",
            "12:10 sber/budget.window",
            // The window rule points at the upstream's header: max_attempts is unset.
            "14:1 catalog/max_attempts",
            "16:12 catalog/deadline",
            "17:12 catalog/bulkhead",
            "19:1 catalog/budget.widnow",
            "21:16 catalog/breaker.failure_rate",
        ]
    );
}

#[test]
fn the_report_reads_well() {
    let errors = parse_toml(BROKEN, "upstreams.toml", []).unwrap_err();
    let expected = r#"12 configuration error(s):
  - upstreams.toml:3:16: upstream `sber`: max_attempts = 7 is outside 1..=5: 3 is typical; beyond 5, hand off to the durable queue
  - upstreams.toml:4:19: upstream `sber`: `initial_backoff` = "500" is not a valid duration: it has no unit: write "500ms" or "500s"
  - upstreams.toml:5:14: upstream `sber`: multiplier = 1 must be above 1: linear or fixed backoff hammers a failing upstream; use 2.0
  - upstreams.toml:6:1: upstream `sber`: unknown key `jiter` in [upstreams.sber]: did you mean `jitter`? valid keys: max_attempts, initial_backoff, multiplier, max_backoff, jitter, backoff, attempt_timeout, deadline, min_attempt_budget, transient_500, idempotency_header, dedups_idempotency_key, propagate, bulkhead, budget, throttle, breaker, hedge
  - upstreams.toml:7:11: upstream `sber`: backoff = "linear" is refused: linear retry piles load onto a failing upstream; use "exponential" with a multiplier such as 2.0
  - upstreams.toml:8:17: upstream `sber`: `transient_500` must be true or false, found a string: write `transient_500 = false`
  - upstreams.toml:12:10: upstream `sber`: `budget.window` = "5sec" is not a valid duration: unknown unit `sec`: use one of ns, us, ms, s, m, h
  - upstreams.toml:14:1: upstream `catalog`: the in-memory retry window is 7.5s (backoffs + max_attempts x attempt_timeout), above 5s: lower max_attempts, the backoffs or attempt_timeout, or hand longer outages to the durable queue
  - upstreams.toml:16:12: upstream `catalog`: `deadline` needs a unit: write `deadline = "5s"`
  - upstreams.toml:17:12: upstream `catalog`: bulkhead = 0 would refuse every attempt: use the upstream's capacity, or remove the key for no limit
  - upstreams.toml:19:1: upstream `catalog`: unknown key `widnow` in [upstreams.catalog.budget]: did you mean `window`? valid keys: ratio, min_per_second, window
  - upstreams.toml:21:16: upstream `catalog`: breaker failure_rate 1.5 is outside (0, 1]: use 0.8"#;
    assert_eq!(errors.to_string(), expected);
    // `?` in `main` prints `Debug`: the same list, not the struct.
    assert_eq!(format!("{errors:?}"), expected);
}

#[test]
fn syntax_errors_are_all_reported_and_stop_the_walk() {
    let text = "[upstreams.sber]\nmax_attempts = \ndeadline = \"5s\n[upstreams.x\n";
    let errors = parse_toml(text, "f.toml", []).unwrap_err();
    let shown: Vec<String> = errors.errors().iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "f.toml:2:16: invalid TOML: string values must be quoted, expected literal string",
            "f.toml:3:15: invalid TOML: invalid basic string, expected `\"`",
            "f.toml:4:13: invalid TOML: unclosed table, expected `]`",
        ]
    );
}

#[test]
fn structure_mistakes_are_located() {
    let text = "title = \"x\"\n[upstreams]\na = 1\nb.budget = 3\n[[upstreams.c]]\n";
    let errors = parse_toml(text, "f.toml", []).unwrap_err();
    assert_eq!(
        positions(&errors),
        ["1:1 /title", "3:5 a/", "4:12 b/budget", "5:1 c/"]
    );
    let errors = parse_toml("", "f.toml", []).unwrap_err();
    assert_eq!(positions(&errors), ["1:1 /upstreams"]);
    let errors = parse_toml("upstreams = []", "f.toml", []).unwrap_err();
    assert_eq!(positions(&errors), ["1:13 /upstreams"]);
    let errors = parse_toml("[upstreams.\" \"]", "f.toml", []).unwrap_err();
    assert_eq!(positions(&errors), ["1:12  /name"]);
}

#[test]
fn columns_count_characters_not_bytes() {
    let text = "[upstreams.\"сбер\"]\nidempotency_header = \"Ключ\" # кириллица\n";
    let errors = parse_toml(text, "f.toml", []).unwrap_err();
    assert_eq!(positions(&errors), ["2:22 сбер/idempotency_header"]);
    let text = "# ключ\r\n[upstreams.a]\r\nmax_attempts = 0\r\n";
    let errors = parse_toml(text, "f.toml", []).unwrap_err();
    assert_eq!(positions(&errors), ["3:16 a/max_attempts"]);
}

#[test]
fn env_overrides_apply_on_top_of_the_file() {
    let configs = parse_toml(
        EXAMPLE,
        "upstreams.toml",
        env(&[
            ("RETRY__SBER__MAX_ATTEMPTS", "4"),
            ("RETRY__SBER__ATTEMPT_TIMEOUT", "300ms"),
            ("RETRY__SBER__BUDGET__RATIO", "0.1"),
            ("retry__sms_gateway__idempotency_header", "X-Dedup-Key"),
            ("RETRY__CATALOG__TRANSIENT_500", "false"),
            ("HOME", "/root"),
        ]),
    )
    .unwrap();
    let sber = &configs[1].1;
    assert_eq!(sber.max_attempts, 4);
    assert_eq!(sber.attempt_timeout(), Duration::from_millis(300));
    assert_eq!(sber.budget.ratio, 0.1);
    assert_eq!(configs[2].1.idempotency_header, "X-Dedup-Key");
    assert!(!configs[0].1.transient_500);
}

#[test]
fn env_overrides_are_validated_and_located() {
    let errors = parse_toml(
        EXAMPLE,
        "upstreams.toml",
        env(&[
            ("RETRY__SBER__MAX_ATTEMPTS", "8"),
            ("RETRY__SBER__DEADLINE", "soon"),
            ("RETRY__SBER__BUDGET__WINDOW", "2m"),
            ("RETRY__SBER__BACKOFF", "fixed"),
            ("RETRY__NOPE__MAX_ATTEMPTS", "3"),
        ]),
    )
    .unwrap_err();
    assert_eq!(
        errors.to_string(),
        "5 configuration error(s):
  - environment: RETRY__NOPE__MAX_ATTEMPTS: no upstream of the file is spelled `NOPE`: an override only adjusts an upstream the file defines (known: CATALOG, SBER, SMS_GATEWAY); fix the name or add the upstream to the file
  - environment: RETRY__SBER__BACKOFF: upstream `sber`: backoff = \"fixed\" is refused: fixed retry piles load onto a failing upstream; use \"exponential\" with a multiplier such as 2.0
  - environment: RETRY__SBER__BUDGET__WINDOW: upstream `sber`: budget window 120s is outside 1s..=60s: use 10s
  - environment: RETRY__SBER__DEADLINE: upstream `sber`: `deadline` = \"soon\" is not a valid duration: expected one number and one unit, such as \"500ms\" or \"1.5s\" (units: ns, us, ms, s, m, h)
  - environment: RETRY__SBER__MAX_ATTEMPTS: upstream `sber`: max_attempts = 8 is outside 1..=5: 3 is typical; beyond 5, hand off to the durable queue"
    );
}

#[test]
fn an_env_override_can_repair_a_file_value() {
    let text = "[upstreams.a]\nmax_attempts = 9\ndeadline = \"x\"\n";
    let configs = parse_toml(
        text,
        "f.toml",
        env(&[
            ("RETRY__A__MAX_ATTEMPTS", "2"),
            ("RETRY__A__DEADLINE", "3s"),
        ]),
    );
    // A refused file value stays an error; a rule broken by a value is checked on the
    // final value.
    let errors = configs.unwrap_err();
    assert_eq!(positions(&errors), ["3:12 a/deadline"]);
}

#[test]
fn a_deadline_beyond_the_in_memory_window_is_located_at_its_value() {
    let text = "[upstreams.a]\nmax_attempts = 2\ndeadline = \"1h\"\n";
    let errors = parse_toml(text, "f.toml", []).unwrap_err();
    assert_eq!(positions(&errors), ["3:12 a/deadline"]);
    assert!(
        errors.errors()[0]
            .to_string()
            .contains("above the 5s in-memory retry window"),
        "{}",
        errors.errors()[0]
    );
    // Through the environment, located at the variable.
    let errors = parse_toml(
        "[upstreams.a]\n",
        "f.toml",
        env(&[("RETRY__A__DEADLINE", "30m")]),
    )
    .unwrap_err();
    assert_eq!(
        errors.errors()[0]
            .location
            .as_ref()
            .map(|l| l.source.display().to_string()),
        Some("environment: RETRY__A__DEADLINE".to_owned())
    );
}

proptest! {
    /// The example file with random edits (a byte replaced, inserted or deleted, many
    /// times): parsing never panics, and every error it reports points inside the file.
    #[test]
    fn mutated_example_files_never_panic_and_errors_stay_located(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<u8>()), 1..40),
    ) {
        let mut bytes = EXAMPLE.as_bytes().to_vec();
        for (at, kind, byte) in edits {
            let byte = if byte.is_ascii() { byte } else { b"\"[]=.\n#'"[usize::from(byte) % 8] };
            match kind {
                0 if !bytes.is_empty() => { let i = at.index(bytes.len()); bytes[i] = byte; }
                1 => { let i = at.index(bytes.len() + 1); bytes.insert(i, byte); }
                _ if !bytes.is_empty() => { let i = at.index(bytes.len()); bytes.remove(i); }
                _ => {}
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        let lines = text.lines().count() + 1;
        if let Err(errors) = parse_toml(&text, "f.toml", []) {
            prop_assert!(!errors.errors().is_empty());
            for e in errors.errors() {
                let at = e.location.as_ref();
                prop_assert!(at.is_some(), "an error without a location: {e}");
                let at = at.unwrap();
                prop_assert!(!at.has_position() || (1..=lines).contains(&at.line), "{e}");
            }
        }
    }

    #[test]
    fn never_panics_on_arbitrary_text(text in "\\PC*") {
        let _ = parse_toml(&text, "f.toml", []);
    }

    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse_toml(&text, "f.toml", []);
    }

    #[test]
    fn never_panics_on_toml_shaped_input(
        lines in proptest::collection::vec(
            "(\\[upstreams(\\.[a-z\"é-]{0,6}){0,3}\\]|[a-z_.]{0,20} ?= ?(\"[0-9a-zé.]{0,6}\"|-?[0-9.]{0,25}|true|\\[\\]|\\{\\})|\\PC{0,10})",
            0..12,
        ),
        env_value in "\\PC{0,12}",
    ) {
        let text = lines.join("\n");
        let env = vec![
            ("RETRY__A__MAX_ATTEMPTS".to_owned(), env_value.clone()),
            ("RETRY__A__BUDGET__WINDOW".to_owned(), env_value),
        ];
        let _ = parse_toml(&text, "f.toml", env);
    }

    #[test]
    fn every_error_of_a_file_has_a_position_inside_it(
        key in "[a-z_]{1,20}",
        value in "(\"[0-9a-z.]{0,8}\"|-?[0-9]{1,22}|[0-9]\\.[0-9]{1,3}|true)",
    ) {
        let text = format!("[upstreams.a]\n{key} = {value}\n");
        if let Err(errors) = parse_toml(&text, "f.toml", []) {
            for e in errors.errors() {
                let at = e.location.as_ref().unwrap();
                prop_assert!((1..=3).contains(&at.line), "{e}");
            }
        }
    }
}
