//! The lab's own CPU use, so a reader can tell whether the machine or the designs set the
//! figures: the process's user + system time from `/proc/self/stat` (Linux; elsewhere the
//! report says it was not measured).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// Clock ticks per second of `/proc/self/stat`'s times (`sysconf(_SC_CLK_TCK)`, 100 on every
/// Linux platform Rust supports).
const TICKS_PER_SECOND: u64 = 100;

/// CPU time (user + system) the process has used so far, if the platform says.
pub fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may contain spaces: count fields after its closing paren.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND))
}

/// What the lab's process used while it ran.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuUse {
    /// Wall time of the run.
    pub wall: Duration,
    /// CPU time used during it (`None`: not measurable here).
    pub cpu: Option<Duration>,
    /// The most cores used over any one-second sample.
    pub peak_cores: f64,
    /// Cores available to the process.
    pub cores: usize,
    /// User operations the run started (every scenario, design and seed).
    pub operations: u64,
}

impl CpuUse {
    /// Mean cores used over the run.
    pub fn mean_cores(&self) -> Option<f64> {
        Some(self.cpu?.as_secs_f64() / self.wall.as_secs_f64().max(1e-9))
    }

    /// CPU time per user operation: the lab's whole process (load driver, the designs'
    /// services, the catalog) divided by the operations it ran.
    pub fn per_operation(&self) -> Option<Duration> {
        let ops = u32::try_from(self.operations).ok().filter(|n| *n > 0)?;
        Some(self.cpu? / ops)
    }

    /// One line for the table and the report.
    pub fn describe(&self) -> String {
        match self.mean_cores() {
            Some(mean) => format!(
                "lab CPU: {:.1} core-seconds in {:.1} s of wall time: {:.2} of {} cores on average, \
                 {:.2} at the busiest second{}",
                self.cpu.unwrap_or_default().as_secs_f64(),
                self.wall.as_secs_f64(),
                mean,
                self.cores,
                self.peak_cores,
                self.per_operation().map_or_else(String::new, |per| format!(
                    "; {:.2} ms per operation ({} operations)",
                    per.as_secs_f64() * 1e3,
                    self.operations
                ))
            ),
            None => format!(
                "lab CPU: not measured on this platform ({:.1} s of wall time)",
                self.wall.as_secs_f64()
            ),
        }
    }
}

/// Measures the process's CPU use from now until [`Meter::finish`].
pub struct Meter {
    start: Instant,
    cpu_start: Option<Duration>,
    peak: Arc<Mutex<f64>>,
    sampler: tokio::task::JoinHandle<()>,
}

impl Meter {
    /// Starts measuring (samples once a second on the current runtime).
    pub fn start() -> Self {
        let peak = Arc::new(Mutex::new(0.0));
        let sampler = tokio::spawn({
            let peak = peak.clone();
            async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                tick.tick().await;
                let (mut at, mut cpu) = (Instant::now(), process_cpu());
                loop {
                    tick.tick().await;
                    let (now, now_cpu) = (Instant::now(), process_cpu());
                    if let (Some(a), Some(b)) = (cpu, now_cpu) {
                        let cores = b.saturating_sub(a).as_secs_f64()
                            / now.duration_since(at).as_secs_f64().max(1e-9);
                        let mut p = peak.lock().unwrap();
                        *p = f64::max(*p, cores);
                    }
                    (at, cpu) = (now, now_cpu);
                }
            }
        });
        Meter {
            start: Instant::now(),
            cpu_start: process_cpu(),
            peak,
            sampler,
        }
    }

    /// Stops and returns what was used.
    pub fn finish(self) -> CpuUse {
        self.sampler.abort();
        let cpu = match (self.cpu_start, process_cpu()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        CpuUse {
            wall: self.start.elapsed(),
            cpu,
            peak_cores: *self.peak.lock().unwrap(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            operations: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_cpu_time_is_read_where_proc_exists() {
        if std::path::Path::new("/proc/self/stat").exists() {
            assert!(process_cpu().is_some());
        }
    }
}
