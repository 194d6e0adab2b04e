//! `outage-lab --quick`, as CI runs it: every scenario for two seconds (one after another, three
//! seeds side by side); the binary exits non-zero when an asserted headline property of B or
//! B-tuned does not hold (see `retry_examples::lab::checks`). Counts and rates only, never
//! durations.
//!
//! A failure is final when the lab kept its schedule (exit code 1). When the lab itself fell
//! behind (exit code 2: other processes took the machine, and with it the lab's timeouts), the
//! run cannot judge the library and is repeated, up to three runs in all.

use std::process::{Command, Output};

use retry_examples::lab::scenarios::Scenario;

const ATTEMPTS: usize = 3;
/// The binary's exit code for a failure on a lab that fell behind its schedule.
const INCONCLUSIVE: i32 = 2;

fn quick(out: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outage-lab"))
        .arg("--quick")
        .arg("--out")
        .arg(out)
        .output()
        .expect("the outage-lab binary runs")
}

#[test]
fn quick_mode_holds_the_headline_properties() {
    let out = std::env::temp_dir().join(format!("outage-lab-quick-{}", std::process::id()));
    let mut runs = Vec::new();
    let run = loop {
        let run = quick(&out);
        let inconclusive = run.status.code() == Some(INCONCLUSIVE);
        runs.push(run);
        if !inconclusive || runs.len() == ATTEMPTS {
            break runs.last().expect("one run at least");
        }
    };
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "outage-lab --quick failed ({}, run {} of {ATTEMPTS}):\n{stdout}\n{stderr}",
        run.status,
        runs.len()
    );
    assert!(
        stdout.contains("headline properties asserted for the library's designs (B, B-tuned, B-hedged): all hold"),
        "{stdout}"
    );
    let json = std::fs::read_to_string(out.join("outage-lab.json")).expect("the JSON report");
    let report: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let cells = report["cells"].as_array().expect("cells");
    let html = std::fs::read_to_string(out.join("outage-lab.html")).expect("the HTML report");
    assert_eq!(
        cells.len(),
        Scenario::ALL.len() * 3 + 5,
        "every scenario under B, B-tuned and C, and B-hedged in its five"
    );
    // The long outage's durable tier, in the report: no keyed write lost (also asserted by the
    // binary), the backlog charted.
    assert!(
        stdout.contains("long-outage: keyed writes through a catalog outage"),
        "{stdout}"
    );
    let long: Vec<&serde_json::Value> = cells
        .iter()
        .filter(|c| c["scenario"] == "long-outage" && c["design"] != "C")
        .collect();
    assert_eq!(long.len(), 2, "B and B-tuned");
    for cell in long {
        for run in cell["runs"].as_array().expect("runs") {
            // Completed eventually, or reported unknown with its key: never lost.
            let (done, unknown, ops) = (
                run["completed_eventually"].as_u64(),
                run["ambiguous"].as_u64(),
                run["operations"].as_u64(),
            );
            assert!(done.zip(unknown).map(|(d, u)| d + u) >= ops, "{run}");
            assert_eq!(run["duplicate_side_effects"], 0, "{run}");
            assert!(
                run["deferred"].as_u64() > Some(0),
                "the outage deferred writes: {run}"
            );
        }
    }
    assert!(html.contains("Durable backlog"), "the backlog chart");
    assert!(
        html.contains("<svg") && !html.contains("<script"),
        "inline SVG, no script"
    );
    let _ = std::fs::remove_dir_all(&out);
}
