//! What a worker did, counted: [`WorkerStats`], and the outcome of one attempt that adds to it.

/// What a worker did (one [`Worker::tick`](crate::Worker::tick), or a whole [`Worker::run`](crate::Worker::run)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Expired leases taken back.
    pub rescued: u64,
    /// Tasks claimed.
    pub claimed: u64,
    /// Attempts that succeeded.
    pub succeeded: u64,
    /// Attempts that failed and were scheduled again.
    pub retried: u64,
    /// Tasks failed (permanent error or last attempt).
    pub failed: u64,
    /// Results not written, or claimed tasks not run, because the lease had been taken over.
    pub lost_leases: u64,
    /// Leases given back unfinished (due again at once, the attempt not counted): at shutdown,
    /// or claimed too long ago for the attempt to end within the lease.
    pub released: u64,
    /// Alerts delivered.
    pub alerted: u64,
    /// Store errors logged (the affected leases expire and are rescued).
    pub store_errors: u64,
}

impl WorkerStats {
    pub(super) fn absorb(&mut self, other: WorkerStats) {
        self.rescued += other.rescued;
        self.claimed += other.claimed;
        self.succeeded += other.succeeded;
        self.retried += other.retried;
        self.failed += other.failed;
        self.lost_leases += other.lost_leases;
        self.released += other.released;
        self.alerted += other.alerted;
        self.store_errors += other.store_errors;
    }
}

/// How one claimed attempt ended.
pub(super) enum Outcome {
    Succeeded,
    Retried,
    Failed,
    LeaseLost,
    /// Not run: claimed too long ago to finish within its lease, and given back.
    Released,
    StoreError,
}

impl Outcome {
    pub(super) fn stats(self) -> WorkerStats {
        let mut s = WorkerStats::default();
        match self {
            Outcome::Succeeded => s.succeeded = 1,
            Outcome::Retried => s.retried = 1,
            Outcome::Failed => s.failed = 1,
            Outcome::LeaseLost => s.lost_leases = 1,
            Outcome::Released => s.released = 1,
            Outcome::StoreError => s.store_errors = 1,
        }
        s
    }
}
