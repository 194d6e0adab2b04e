//! The table of one registry snapshot: its upstreams by name, and the lookups a miss needs.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::upstream::Upstream;

/// The next snapshot's number, for any registry.
pub(super) fn next_snapshot_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The upstreams of one snapshot of a registry, by name: swapped whole on a reload, never
/// changed in place.
#[derive(Default)]
pub(super) struct Snapshot {
    /// Hashed with FNV-1a: every call looks its upstream up, and SipHash (the default, which
    /// resists collision attacks on untrusted keys) cost more than the rest of the lookup. The
    /// names come from the operator's configuration, not from requests.
    pub(super) upstreams: HashMap<Arc<str>, Arc<Upstream>, fnv::FnvBuildHasher>,
}

/// The most names an [`Error::UnknownUpstream`](crate::Error::UnknownUpstream) lists.
///
/// A miss must stay cheap even with many upstreams and names that come from input: listing and
/// sorting 10,000 names took 25 ms per miss. The error lists the names sharing the longest
/// prefix with the one asked for (ties in name order), found in one pass that copies at most
/// this many; [`Registry::names`](super::Registry::names) lists them all.
pub const KNOWN_IN_ERRORS: usize = 16;

impl Snapshot {
    /// Up to [`KNOWN_IN_ERRORS`] names closest to `name`, sorted.
    pub(super) fn closest_names(&self, name: &str) -> Vec<String> {
        let shared = |k: &str| {
            k.bytes()
                .zip(name.bytes())
                .take_while(|(a, b)| a == b)
                .count()
        };
        // Best first: longest shared prefix, then name order.
        let mut best: Vec<(usize, &str)> = Vec::with_capacity(KNOWN_IN_ERRORS + 1);
        for key in self.upstreams.keys() {
            let candidate = (shared(key), &**key);
            let worse = |a: &(usize, &str), b: &(usize, &str)| b.0.cmp(&a.0).then(a.1.cmp(b.1));
            if best.len() == KNOWN_IN_ERRORS
                && worse(&candidate, best.last().expect("full")).is_ge()
            {
                continue;
            }
            let at = best.partition_point(|held| worse(held, &candidate).is_lt());
            best.insert(at, candidate);
            best.truncate(KNOWN_IN_ERRORS);
        }
        let mut names: Vec<String> = best.into_iter().map(|(_, k)| k.to_owned()).collect();
        names.sort();
        names
    }

    /// Every name, sorted.
    pub(super) fn sorted_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.upstreams.keys().map(|k| k.to_string()).collect();
        names.sort();
        names
    }
}
