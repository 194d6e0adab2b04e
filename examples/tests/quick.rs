//! `outage-lab --quick`, as CI runs it: every scenario for two seconds (one after another, three
//! seeds side by side); the binary exits non-zero when an asserted headline property of B or
//! B-tuned does not hold (see `retry_examples::lab::checks`). Counts and rates only, never
//! durations.

use std::process::Command;

#[test]
fn quick_mode_holds_the_headline_properties() {
    let out = std::env::temp_dir().join(format!("outage-lab-quick-{}", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_outage-lab"))
        .arg("--quick")
        .arg("--out")
        .arg(&out)
        .output()
        .expect("the outage-lab binary runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "outage-lab --quick failed ({}):\n{stdout}\n{stderr}",
        run.status
    );
    assert!(
        stdout.contains("headline properties asserted for B and B-tuned: all hold"),
        "{stdout}"
    );
    let json = std::fs::read_to_string(out.join("outage-lab.json")).expect("the JSON report");
    let report: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let cells = report["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 10 * 3, "every scenario under B, B-tuned and C");
    let html = std::fs::read_to_string(out.join("outage-lab.html")).expect("the HTML report");
    assert!(
        html.contains("<svg") && !html.contains("<script"),
        "inline SVG, no script"
    );
    let _ = std::fs::remove_dir_all(&out);
}
