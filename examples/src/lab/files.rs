//! The open files the lab needs, and the bound on operations in flight that keeps it within
//! the process's limit.
//!
//! Every operation in flight holds sockets: the user's connection to the API (both ends are in
//! this process) and, while an attempt runs, one to the next hop. A design that holds its users
//! for seconds (A waits up to 13 s for a dead catalog) at a high `--load` would hold thousands
//! of them per design and seed, and a run of every design and seed side by side then runs out
//! of file descriptors ("Too many open files"). A real service does not grow without end: its
//! server has a bound, and sheds what arrives beyond it. So does the lab's API: each design and
//! seed takes at most [`InFlightBound::per_chain`] operations at once and answers the rest
//! `503` at once, counted as failed in the `shed` column. The bound is, per scenario, as large
//! as the operations that can be in flight at once (every operation of a run shorter than the
//! user's 15 s timeout, with a margin, so none is shed at the default load) unless the
//! open-file limit is smaller, shared by the designs and seeds that run side by side.
//!
//! At start the lab raises its soft limit to the hard one (`setrlimit`; what `ulimit -n` shows
//! is the soft limit) and fails with a message naming `ulimit -n` when even that is too small.
//! A scenario starts beside earlier ones still finishing only if what it may open fits beside
//! what the lab holds then; at a load the limit bounds, the scenarios run one after another.

use super::LabConfig;
use super::load::USER_TIMEOUT;
use super::scenarios::Scenario;

/// Descriptors one operation in flight holds: the user's connection to the API (both ends are
/// in this process) and, while an attempt runs, a connection to the next hop, and in design A
/// the middle's work for attempts the API already abandoned. Measured: design A alone at
/// `--load 1000` against a dead catalog held 11,971 files for at most 3,678 operations in
/// flight (3.3 each; 17,130 for 4,046 while every accepted connection also held a duplicate
/// of its socket); 4 keeps a margin.
pub const FILES_PER_OPERATION: usize = 4;

/// The margin over the operations a run can have in flight (Poisson arrivals).
const MARGIN: f64 = 1.2;

/// The share of the open-file limit the bound may fill: the rest is for what the lab does not
/// count per operation (idle pooled connections, connections being opened or closed).
const USABLE: f64 = 0.75;

/// Descriptors a running chain holds besides its operations: three listeners, idle pooled
/// connections, a durable queue's files.
pub const FILES_PER_CHAIN: usize = 32;

/// Descriptors the process holds besides its chains (the runtime, the terminal, the report).
pub const FILES_RESERVED: usize = 256;

/// The smallest bound that still measures anything: below it the lab refuses to run.
pub const MIN_BOUND: usize = 16;

/// The process's open-file limit (`RLIMIT_NOFILE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimit {
    /// The soft limit, after raising it.
    pub soft: u64,
    /// The hard limit (the most the soft one can be raised to without privileges).
    pub hard: u64,
    /// The soft limit before the lab raised it (`None`: unchanged).
    pub raised_from: Option<u64>,
}

/// Raises the soft open-file limit to the hard one, and returns both (`None`: not on this
/// platform).
#[cfg(unix)]
// `rlim_t` is `u64` on Linux, not on every Unix.
#[allow(clippy::unnecessary_cast)]
pub fn raise_limit() -> Option<FileLimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes into the struct we own and reads nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    let before = limit.rlim_cur as u64;
    let mut raised_from = None;
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: `setrlimit` reads the struct we own; raising the soft limit up to the hard
        // one needs no privilege, and failing leaves the limit as it was.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
            raised_from = Some(before);
        }
    }
    Some(FileLimit {
        soft: limit.rlim_cur as u64,
        hard: limit.rlim_max as u64,
        raised_from,
    })
}

/// Raises the soft open-file limit to the hard one (`None`: not on this platform).
#[cfg(not(unix))]
pub fn raise_limit() -> Option<FileLimit> {
    None
}

/// Descriptors the process has open now (`None`: not measurable here).
pub fn open_now() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count())
}

/// The most descriptors open at once, counted on a thread of its own until
/// [`PeakFiles::finish`].
///
/// Counting lists `/proc/self/fd`, an entry per open file: at the tens of thousands a high
/// `--load` holds it takes tens of milliseconds. On the runtime it would stall the
/// operations queued behind it, and every half second it cost 4-5 % of the lab's CPU, so the
/// counts run beside the runtime and are spaced to take at most 1 % of a core (every
/// [`PEAK_EVERY`] while the count is cheap).
pub struct PeakFiles {
    peak: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How often the open files are counted while counting is cheap.
pub const PEAK_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// Counting may take this share of the sampler's time, at most.
const PEAK_COST_SHARE: u32 = 100;

impl PeakFiles {
    /// Starts counting (`None`: the open files cannot be counted on this platform).
    pub fn start() -> Option<Self> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let peak = std::sync::Arc::new(AtomicUsize::new(open_now()?));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let counted = peak.clone();
        let thread = std::thread::Builder::new()
            .name("lab-files".into())
            .spawn(move || {
                loop {
                    let began = std::time::Instant::now();
                    if let Some(n) = open_now() {
                        counted.fetch_max(n, Ordering::Relaxed);
                    }
                    let pause = PEAK_EVERY.max(began.elapsed() * PEAK_COST_SHARE);
                    match stopped.recv_timeout(pause) {
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                }
            })
            .ok()?;
        Some(PeakFiles {
            peak,
            stop,
            thread: Some(thread),
        })
    }

    /// Stops counting and returns the most files seen open at once.
    pub fn finish(mut self) -> usize {
        let _ = self.stop.send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let last = open_now().unwrap_or(0);
        self.peak
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(last)
    }
}

/// The bound on operations in flight per design and seed in one scenario, and why it is what
/// it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlightBound {
    /// Operations each API (one per design and seed) takes at once; it sheds the rest.
    pub per_chain: usize,
    /// The chains (design x seed) that run side by side in the scenario.
    pub chains: usize,
    /// Whether the open-file limit made the bound lower than the load asks for.
    pub limited_by_files: bool,
    /// The open-file limit it was computed for (`None`: unknown, not limited).
    pub limit: Option<u64>,
}

impl InFlightBound {
    /// What the scenario at the bound needs, in descriptors.
    pub fn files_needed(&self) -> usize {
        files_for(self.chains, self.per_chain)
    }
}

/// The bounds of a run's scenarios, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounds(pub Vec<(Scenario, InFlightBound)>);

impl Bounds {
    /// The bound of `scenario`.
    pub fn of(&self, scenario: Scenario) -> Option<InFlightBound> {
        self.0.iter().find(|(s, _)| *s == scenario).map(|(_, b)| *b)
    }

    /// One line for the terminal and the report.
    pub fn describe(&self) -> String {
        let lowest = self.0.iter().map(|(_, b)| b.per_chain).min().unwrap_or(0);
        let highest = self.0.iter().map(|(_, b)| b.per_chain).max().unwrap_or(0);
        let limited: Vec<&str> = self
            .0
            .iter()
            .filter(|(_, b)| b.limited_by_files)
            .map(|(s, _)| s.name())
            .collect();
        let range = if lowest == highest {
            format!("{lowest}")
        } else {
            format!("{lowest}-{highest}")
        };
        let why = if limited.is_empty() {
            "every operation a run can have in flight: nothing is shed unless a design holds its \
             users longer than the run"
                .to_owned()
        } else {
            format!(
                "lowered to fit the open-file limit in {} of {} scenarios",
                limited.len(),
                self.0.len()
            )
        };
        format!(
            "in flight: at most {range} operations per design and seed ({why}); beyond that the \
             API answers 503 at once, counted as failed (the shed column)"
        )
    }
}

fn files_for(chains: usize, per_chain: usize) -> usize {
    FILES_RESERVED + chains * (FILES_PER_CHAIN + per_chain * FILES_PER_OPERATION)
}

/// Why the lab cannot run within the open-file limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooFewFiles {
    /// Descriptors the run needs at the smallest useful bound.
    pub needed: usize,
    /// The limit.
    pub limit: u64,
}

impl std::fmt::Display for TooFewFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "this run needs about {} open files and the process may open {} (its hard limit): \
             raise it with `ulimit -n {}` (as root, or in /etc/security/limits.conf), or run \
             fewer designs and seeds side by side (--design, --seeds)",
            self.needed, self.limit, self.needed
        )
    }
}

impl std::error::Error for TooFewFiles {}

/// The bounds of every scenario of `config` under the open-file `limit` (`None`: unknown).
pub fn bounds(config: &LabConfig, limit: Option<u64>) -> Result<Bounds, TooFewFiles> {
    config
        .scenarios
        .iter()
        .map(|s| Ok((*s, bound(config, *s, limit)?)))
        .collect::<Result<Vec<_>, _>>()
        .map(Bounds)
}

/// The bound of `scenario` under the open-file `limit` (`None`: unknown, not limited).
/// [`LabConfig::max_in_flight`] overrides what the load asks for (never the file limit).
pub fn bound(
    config: &LabConfig,
    scenario: Scenario,
    limit: Option<u64>,
) -> Result<InFlightBound, TooFewFiles> {
    let designs = if config.isolate && scenario.isolated() {
        1
    } else {
        config.designs_in(scenario).len()
    };
    let chains = (designs * config.seeds.max(1) as usize).max(1);
    let held = scenario
        .run_length(config.duration)
        .min(USER_TIMEOUT)
        .as_secs_f64();
    let wanted = config
        .max_in_flight
        .unwrap_or_else(|| (config.load * held * MARGIN).ceil() as usize)
        .max(1);
    let Some(limit) = limit else {
        return Ok(InFlightBound {
            per_chain: wanted,
            chains,
            limited_by_files: false,
            limit: None,
        });
    };
    let usable = (limit as f64 * USABLE) as usize;
    let room = usable.saturating_sub(FILES_RESERVED + chains * FILES_PER_CHAIN)
        / (chains * FILES_PER_OPERATION);
    if room < MIN_BOUND.min(wanted) {
        return Err(TooFewFiles {
            needed: (files_for(chains, MIN_BOUND.min(wanted)) as f64 / USABLE).ceil() as usize,
            limit,
        });
    }
    Ok(InFlightBound {
        per_chain: wanted.min(room),
        chains,
        limited_by_files: room < wanted,
        limit: Some(limit),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(load: f64) -> LabConfig {
        LabConfig {
            load,
            ..LabConfig::default()
        }
    }

    #[test]
    fn the_default_load_keeps_every_operation_a_run_can_hold_within_a_common_limit() {
        let bounds = bounds(&config(40.0), Some(20_000)).unwrap();
        let slow_tail = bounds.of(Scenario::SlowTail).unwrap();
        assert_eq!(slow_tail.chains, 15, "five designs x three seeds");
        // Every operation of a 4 s run at 40/s, with a margin.
        assert_eq!(slow_tail.per_chain, 192);
        for (s, b) in &bounds.0 {
            assert!(b.files_needed() <= 20_000, "{s}: {b:?}");
            // A longer run (a fault that clears runs 5 s more; the long outage twice as
            // long) may be lowered below its margin, never below the operations its
            // fault span brings less 10 % (no default run has shed one).
            let span = match s {
                Scenario::LongOutage => 8.0,
                _ => 4.0,
            };
            match s.clears() {
                true => assert!(b.per_chain as f64 >= 0.9 * 40.0 * span, "{s}: {b:?}"),
                false => assert!(!b.limited_by_files, "{s}: {b:?}"),
            }
        }
    }

    #[test]
    fn a_high_load_is_bounded_by_the_file_limit() {
        let bounds = bounds(&config(1000.0), Some(20_000)).unwrap();
        for (s, b) in &bounds.0 {
            assert!(b.files_needed() <= 20_000, "{s}: {}", b.files_needed());
            assert!(b.per_chain >= MIN_BOUND);
        }
        assert!(bounds.of(Scenario::Always503).unwrap().limited_by_files);
        assert!(bounds.describe().contains("open-file limit"));
    }

    #[test]
    fn too_small_a_limit_says_what_to_raise_it_to() {
        let e = bounds(&config(1000.0), Some(1_000)).unwrap_err();
        assert!(e.needed > 1_000);
        let text = e.to_string();
        assert!(text.contains(&format!("ulimit -n {}", e.needed)), "{text}");
    }

    #[test]
    fn an_explicit_bound_is_kept_unless_the_files_forbid_it() {
        let mut c = config(40.0);
        c.max_in_flight = Some(100);
        assert_eq!(
            bound(&c, Scenario::Always503, Some(20_000))
                .unwrap()
                .per_chain,
            100
        );
        c.max_in_flight = Some(100_000);
        let b = bound(&c, Scenario::Always503, Some(20_000)).unwrap();
        assert!(b.limited_by_files && b.per_chain < 100_000);
    }

    #[test]
    fn the_limit_is_read_and_never_lowered() {
        if let Some(limit) = raise_limit() {
            assert!(limit.soft <= limit.hard);
            assert!(limit.raised_from.is_none_or(|before| before <= limit.soft));
        }
    }
}
