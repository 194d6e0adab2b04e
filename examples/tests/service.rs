//! The service example runs as documented: its read is answered 200 after the adapter retried
//! the catalog's 503, and its keyed write sent twice runs once, the second answer a replay.

use std::process::Command;

#[test]
fn the_service_example_answers_after_one_retry() {
    let out = Command::new(env!("CARGO_BIN_EXE_service"))
        .output()
        .expect("the service binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("GET /items/7 -> 200 item 7 (catalog request 2)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("POST /orders/7 -> 201 order 7 created (execution 1)\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("POST /orders/7 -> 201 order 7 created (execution 1) (replayed)"),
        "{stdout}"
    );
}
