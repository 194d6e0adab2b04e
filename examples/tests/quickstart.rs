//! The README's first screen is this crate's `quickstart` binary: the README shows its code and
//! configuration verbatim, and these tests run it as a new user would, against a local upstream.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};

fn quickstart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("quickstart")
}

/// The fenced blocks of `text` in the given language, in order.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let fence = format!("```{lang}\n");
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(&fence) {
        let body = &rest[start + fence.len()..];
        let end = body.find("```\n").expect("a closed fence");
        found.push(body[..end].to_owned());
        rest = &body[end..];
    }
    found
}

/// What `?` in the quick start's `main` prints for [`BROKEN`]; the README shows it.
const BROKEN_REPORT: &str = "Error: 3 configuration error(s):
  - upstreams.toml:2:16: upstream `payments`: max_attempts = 9 is outside 1..=5: 3 is typical; beyond 5, hand off to the durable queue
  - upstreams.toml:3:1: upstream `payments`: unknown key `timeout` in [upstreams.payments]: valid keys: max_attempts, initial_backoff, multiplier, max_backoff, jitter, backoff, attempt_timeout, deadline, min_attempt_budget, transient_500, idempotency_header, dedups_idempotency_key, propagate, bulkhead, budget, throttle, breaker, hedge
  - upstreams.toml:4:19: upstream `payments`: `initial_backoff` = \"100\" is not a valid duration: it has no unit: write \"100ms\" or \"100s\"
";

/// A broken `upstreams.toml`, as the README describes it.
const BROKEN: &str =
    "[upstreams.payments]\nmax_attempts = 9\ntimeout = \"1s\"\ninitial_backoff = \"100\"\n";

#[test]
fn the_readme_shows_the_quickstart_verbatim() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README.md");
    let main = std::fs::read_to_string(quickstart_dir().join("main.rs")).unwrap();
    let config = std::fs::read_to_string(quickstart_dir().join("upstreams.toml")).unwrap();
    assert!(
        blocks(&readme, "rust").contains(&main),
        "README.md's rust block differs from examples/quickstart/main.rs: copy the file into it"
    );
    assert!(
        blocks(&readme, "toml").contains(&config),
        "README.md's toml block differs from examples/quickstart/upstreams.toml"
    );
    assert!(
        blocks(&readme, "text").contains(&BROKEN_REPORT.to_owned()),
        "README.md shows another report of a broken upstreams.toml than the binary prints"
    );
}

#[derive(Default)]
struct Seen {
    reads: usize,
    charges: Vec<Option<String>>,
}

type Shared = Arc<Mutex<Seen>>;

/// The payments upstream: the first read is a 503, the second answers; every charge is a 422.
async fn upstream() -> (String, Shared) {
    let seen = Shared::default();
    let app = axum::Router::new()
        .route(
            "/payments/{id}",
            get(|State(seen): State<Shared>| async move {
                let mut seen = seen.lock().unwrap();
                seen.reads += 1;
                match seen.reads {
                    1 => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
                    _ => (StatusCode::OK, "settled"),
                }
            }),
        )
        .route(
            "/charges",
            post(
                |State(seen): State<Shared>, headers: HeaderMap| async move {
                    let key = headers
                        .get("idempotency-key")
                        .map(|k| k.to_str().unwrap().to_owned());
                    seen.lock().unwrap().charges.push(key);
                    (StatusCode::UNPROCESSABLE_ENTITY, "card expired")
                },
            ),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

async fn quickstart(dir: &Path, url: &str) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_quickstart"))
        .current_dir(dir)
        .env("PAYMENTS_URL", url)
        .env_remove("RUST_LOG")
        .output()
        .await
        .expect("the quickstart binary runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_retries_a_503_and_a_declined_charge_logs_no_warning() {
    let (url, seen) = upstream().await;
    let out = quickstart(&quickstart_dir(), &url).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("pay-1 is settled"), "{stdout}");
    assert!(stdout.contains("declined: card expired"), "{stdout}");
    assert!(
        stdout.contains("INFO") && stdout.contains("decision=\"retry\""),
        "the 503 was retried, and said so at INFO: {stdout}"
    );
    // A 422 the error declares permanent is the upstream's answer, not a mistake in the adapter.
    assert!(!stdout.contains("WARN"), "{stdout}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.reads, 2);
    assert_eq!(
        seen.charges,
        [Some("\"charge-42\"".to_owned())],
        "a permanent 422 is sent once, with its key (a structured-field string on the wire)"
    );
}

#[tokio::test]
async fn a_broken_upstreams_toml_prints_every_mistake_located() {
    let dir = std::env::temp_dir().join(format!("retry-quickstart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("upstreams.toml"), BROKEN).unwrap();
    let out = quickstart(&dir, "http://127.0.0.1:9").await;
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    assert_eq!(String::from_utf8_lossy(&out.stderr), BROKEN_REPORT);
}
