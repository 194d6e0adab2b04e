//! `figures check` runs every case the instruction-count sections measure, natively and a few
//! times each: a contender that panics, or a case a section names that the probe does not know,
//! fails here instead of in the next measurement.

use std::process::Command;

#[test]
fn every_case_of_figures_runs() {
    let out = Command::new(env!("CARGO_BIN_EXE_figures"))
        .arg("check")
        .output()
        .expect("run figures");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "figures check failed:\n{}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The sections' cases, not an empty list: the HTTP, in-process, failure and many-upstream
    // families all ran.
    for family in [
        "http/",
        "wait/",
        "fail/",
        "http-fail/",
        "upstreams/",
        "alone/",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("ok {family}"))),
            "no {family} case ran:\n{stdout}"
        );
    }
}
