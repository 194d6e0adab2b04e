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
//! `503` at once, counted as failed in the `shed` column. The bound is as large as the
//! operations a user can keep in flight (the load times the user's 15 s timeout, so no
//! operation is shed at the default load) unless the open-file limit is smaller.
//!
//! At start the lab raises its soft limit to the hard one (`setrlimit`; what `ulimit -n` shows
//! is the soft limit) and fails with a message naming `ulimit -n` when even that is too small.

use super::LabConfig;
use super::load::USER_TIMEOUT;

/// Descriptors one operation in flight holds: the user's connection to the API (both ends are
/// in this process). An attempt in progress holds one more connection to the next hop, but the
/// operations that pile up are the ones waiting (in a backoff, or in the catalog's queue behind
/// a connection that carries one request at a time), so the lab counts two per operation and
/// measures what it really held (the peak of open files in its report).
pub const FILES_PER_OPERATION: usize = 2;

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

/// The bound on operations in flight per design and seed, and why it is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlightBound {
    /// Operations each API (one per design and seed) takes at once; it sheds the rest.
    pub per_chain: usize,
    /// The most chains (design x seed) that run at once in one scenario.
    pub chains: usize,
    /// Whether the open-file limit made the bound lower than the load asks for.
    pub limited_by_files: bool,
    /// The open-file limit it was computed for (`None`: unknown, not limited).
    pub limit: Option<u64>,
}

impl InFlightBound {
    /// What one scenario at the bound needs, in descriptors.
    pub fn files_needed(&self) -> usize {
        files_for(self.chains, self.per_chain)
    }

    /// One line for the terminal and the report.
    pub fn describe(&self) -> String {
        let why = if self.limited_by_files {
            format!(
                "set by the open-file limit of {} (the load would keep up to more in flight)",
                self.limit.unwrap_or_default()
            )
        } else {
            "the load times the user's 15 s timeout: nothing is shed unless a design holds its \
             users that long"
                .to_owned()
        };
        format!(
            "in flight: at most {} operations per design and seed, {} side by side ({why}); \
             beyond that the API answers 503 at once, counted as failed (the shed column)",
            self.per_chain, self.chains
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

/// The bound for `config` under the open-file `limit` (`None`: unknown, the load's own bound).
/// `max_in_flight` overrides the load's bound (never the file limit).
pub fn bound(
    config: &LabConfig,
    max_in_flight: Option<usize>,
    limit: Option<u64>,
) -> Result<InFlightBound, TooFewFiles> {
    let chains = config
        .scenarios
        .iter()
        .map(|s| {
            let designs = if config.isolate && s.workers(config.load).is_some() {
                1
            } else {
                config.designs_in(*s).len()
            };
            designs * config.seeds.max(1) as usize
        })
        .max()
        .unwrap_or(1)
        .max(1);
    let wanted = max_in_flight
        .unwrap_or_else(|| (config.load * USER_TIMEOUT.as_secs_f64()).ceil() as usize)
        .max(1);
    let Some(limit) = limit else {
        return Ok(InFlightBound {
            per_chain: wanted,
            chains,
            limited_by_files: false,
            limit: None,
        });
    };
    let room = (limit as usize).saturating_sub(FILES_RESERVED + chains * FILES_PER_CHAIN)
        / (chains * FILES_PER_OPERATION);
    if room < MIN_BOUND.min(wanted) {
        return Err(TooFewFiles {
            needed: files_for(chains, MIN_BOUND.min(wanted)),
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
    fn the_default_load_is_never_shed_within_a_common_limit() {
        let b = bound(&config(40.0), None, Some(20_000)).unwrap();
        assert_eq!(b.chains, 15, "five designs x three seeds");
        assert_eq!(b.per_chain, 40 * 15);
        assert!(!b.limited_by_files);
        assert!(b.files_needed() <= 20_000);
    }

    #[test]
    fn a_high_load_is_bounded_by_the_file_limit() {
        let b = bound(&config(1000.0), None, Some(20_000)).unwrap();
        assert!(b.limited_by_files);
        assert!(b.files_needed() <= 20_000, "{}", b.files_needed());
        assert!(b.per_chain >= MIN_BOUND);
        assert!(b.describe().contains("open-file limit of 20000"));
    }

    #[test]
    fn too_small_a_limit_says_what_to_raise_it_to() {
        let e = bound(&config(1000.0), None, Some(1_000)).unwrap_err();
        assert!(e.needed > 1_000);
        let text = e.to_string();
        assert!(text.contains(&format!("ulimit -n {}", e.needed)), "{text}");
    }

    #[test]
    fn an_explicit_bound_is_kept_unless_the_files_forbid_it() {
        let b = bound(&config(40.0), Some(100), Some(20_000)).unwrap();
        assert_eq!(b.per_chain, 100);
        let b = bound(&config(40.0), Some(100_000), Some(20_000)).unwrap();
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
