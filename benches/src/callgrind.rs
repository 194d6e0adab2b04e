//! Instruction counts under callgrind: the figure that does not move with the load of a shared
//! machine. A program is run twice under `valgrind --tool=callgrind`, doing `n1` and then `n2`
//! operations after the same set-up and warm-up; instructions per operation =
//! `(collected(n2) - collected(n1)) / (n2 - n1)`, which cancels start-up, set-up and warm-up.
//!
//! Set `FIGURES_CALLGRIND_DIR` to keep each run's profile there (for `callgrind_annotate`).

use std::path::Path;
use std::process::Command;

/// Whether `valgrind` can be run.
pub fn available() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}

/// Instructions per operation of `program args(n)`, from runs at `n1 < n2` operations.
/// `label` names the kept profiles.
pub fn per_op(
    program: &Path,
    args: impl Fn(u64) -> Vec<String>,
    (n1, n2): (u64, u64),
    label: &str,
) -> Result<f64, String> {
    let low = collected(program, &args(n1), &format!("{label}-{n1}"))?;
    let high = collected(program, &args(n2), &format!("{label}-{n2}"))?;
    Ok((high as f64 - low as f64) / (n2 - n1) as f64)
}

/// The instructions callgrind collected over one run of `program args`.
fn collected(program: &Path, args: &[String], label: &str) -> Result<u64, String> {
    let out_file = match std::env::var_os("FIGURES_CALLGRIND_DIR") {
        Some(dir) => Path::new(&dir)
            .join(format!("callgrind.{}.out", label.replace('/', "-")))
            .display()
            .to_string(),
        None => "/dev/null".to_owned(),
    };
    let out = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={out_file}"))
        .arg(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run valgrind (is it installed?): {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "{} {args:?} failed under callgrind: {stderr}",
            program.display()
        ));
    }
    parse_collected(&stderr).ok_or_else(|| format!("no `Collected` line from callgrind: {stderr}"))
}

/// The count on callgrind's `==pid== Collected : N` line.
fn parse_collected(stderr: &str) -> Option<u64> {
    stderr.lines().find_map(|line| {
        let (_, rest) = line.split_once("Collected :")?;
        rest.trim().parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_collected_count_is_read_from_callgrinds_summary() {
        let stderr =
            "==7== Events    : Ir\n==7== Collected : 123456\n==7==\n==7== I refs: 123,456\n";
        assert_eq!(parse_collected(stderr), Some(123_456));
        assert_eq!(parse_collected("==7== I refs: 1\n"), None);
    }
}
