//! Measuring in several processes: what the wall-clock sections of `figures` share.
//!
//! A contender's time moves from one process to the next by more than the differences these
//! programs measure (where the stack and the heap land changes how futures' copies meet the
//! cache; plain reqwest read 92 to 150 µs per loopback request in nine processes of one run),
//! and stays put within a process. So a program measures in `N` fresh
//! processes (itself, re-executed with an environment variable set), each printing one line of
//! numbers, and reports every process's figures and their median.

use std::process::Command;

/// The median of `values` (the upper one of an even count); `NaN` for none.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The median of `values[i] / of[i]` (the per-round ratios of two contenders).
pub fn median_ratio(values: &[f64], of: &[f64]) -> f64 {
    median(values.iter().zip(of).map(|(v, o)| v / o).collect())
}

/// One process's figures in the layout [`print_table`] reads: per contender (`times[who]`, its
/// rounds), its median round, then `ratio(who)`. `M` is twice the number of contenders.
pub fn figures<const M: usize>(times: &[Vec<f64>], ratio: impl Fn(usize) -> f64) -> [f64; M] {
    assert_eq!(M, 2 * times.len(), "two figures per contender");
    std::array::from_fn(|i| match i % 2 {
        0 => median(times[i / 2].clone()),
        _ => ratio(i / 2),
    })
}

/// `median (each, ...)`, with `digits` decimals.
pub fn median_and_each(values: Vec<f64>, digits: usize) -> String {
    let each: Vec<String> = values.iter().map(|v| format!("{v:.digits$}")).collect();
    format!("{:.digits$} ({})", median(values), each.join(", "))
}

/// The columns of [`print_table`].
#[derive(Debug, Clone, Copy)]
pub struct Columns<'a> {
    /// What the time column measures, e.g. `ns / call`.
    pub time: &'a str,
    /// Decimals of the times.
    pub time_digits: usize,
    /// What the ratio column measures.
    pub ratio: &'a str,
    /// The contender the ratios are taken against, and what its ratio column reads.
    pub reference: (usize, &'a str),
}

/// Prints a Markdown table, a row per contender in `names`: its time and its ratio, each as the
/// median process and every process's figure. `runs[p]` holds process `p`'s figures, per
/// contender its time then its ratio.
pub fn print_table<const N: usize>(names: &[&str], runs: &[[f64; N]], columns: Columns<'_>) {
    println!(
        "| contender | {}, median process (each process's median round) | {}, median process \
         (each process's median over rounds) |",
        columns.time, columns.ratio
    );
    println!("|---|---|---|");
    for (who, name) in names.iter().enumerate() {
        let column = |i: usize| runs.iter().map(|run| run[2 * who + i]).collect();
        let time = median_and_each(column(0), columns.time_digits);
        let ratio = match columns.reference {
            (reference, reads) if reference == who => reads.to_string(),
            _ => median_and_each(column(1), 3),
        };
        println!("| {name} | {time} | {ratio} |");
    }
}

/// Runs `measure` in `processes` processes and returns each one's numbers. In a child (the
/// environment variable `child` set) it measures once, prints the numbers on one line and
/// exits; with `processes == 1` it measures in place. A child that fails or prints something
/// else is reported, and the program exits with code 1.
pub fn measure_in<const N: usize>(
    child: &str,
    processes: usize,
    measure: impl Fn() -> [f64; N],
) -> Vec<[f64; N]> {
    if std::env::var_os(child).is_some() {
        let line: Vec<String> = measure().iter().map(f64::to_string).collect();
        println!("{}", line.join(" "));
        std::process::exit(0);
    }
    if processes == 1 {
        return vec![measure()];
    }
    let mut runs = Vec::with_capacity(processes);
    for i in 0..processes {
        eprint!("\rprocess {}/{processes}", i + 1);
        match run_child(child) {
            Ok(run) => runs.push(run),
            Err(e) => {
                eprintln!("\n{e}");
                std::process::exit(1);
            }
        }
    }
    eprintln!();
    runs
}

/// Runs one child process and reads its line back.
fn run_child<const N: usize>(child: &str) -> Result<[f64; N], String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let out = Command::new(exe)
        .env(child, "1")
        .output()
        .map_err(|e| format!("cannot run a measuring process: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "a measuring process failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    parse_line(&String::from_utf8_lossy(&out.stdout))
}

/// A child's line: exactly `N` numbers.
fn parse_line<const N: usize>(line: &str) -> Result<[f64; N], String> {
    let numbers: Vec<f64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("a measuring process printed {line:?}: {e}"))?;
    <[f64; N]>::try_from(numbers).map_err(|numbers| {
        format!(
            "a measuring process printed {} numbers, not {N}",
            numbers.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_line_is_exactly_its_numbers() {
        assert_eq!(parse_line::<3>("1 2.5 NaN\n").map(|n| n[1]), Ok(2.5));
        assert!(
            parse_line::<3>("1 2")
                .unwrap_err()
                .contains("2 numbers, not 3")
        );
        assert!(
            parse_line::<2>("1 x")
                .unwrap_err()
                .contains("printed \"1 x\"")
        );
    }

    #[test]
    fn the_median_is_the_middle_value_and_nan_for_none() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median(Vec::new()).is_nan());
        assert_eq!(
            median_and_each(vec![2.0, 1.0, 3.0], 1),
            "2.0 (2.0, 1.0, 3.0)"
        );
        assert_eq!(median_ratio(&[2.0, 9.0, 3.0], &[1.0, 3.0, 3.0]), 2.0);
    }

    #[test]
    fn figures_are_each_contenders_median_round_then_its_ratio() {
        let times = [vec![1.0, 3.0, 2.0], vec![5.0, 4.0, 6.0]];
        let figures: [f64; 4] = figures(&times, |who| who as f64 + 0.5);
        assert_eq!(figures, [2.0, 0.5, 5.0, 1.5]);
    }
}
