//! A `#[retry]` function's call site: what the expansion fixes about its calls, and the
//! upstream entry it last looked up.
//!
//! Every call of the function needs its upstream's entry (config, budget, breaker). The site
//! keeps the last one it found with the number of the registry snapshot it was found in, so a
//! call looks it up by name (hash, probe, compare) only after a reload, or when the function is
//! called through another registry than last time.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;

use crate::error::Error;
use crate::registry::Registry;
use crate::upstream::Upstream;

/// What `#[retry]` fixes about its calls when it expands: the upstream, the method and the
/// operation name. One `static` per annotated function.
#[derive(Debug)]
pub struct CallSite {
    pub(crate) upstream: &'static str,
    pub(crate) method: http::Method,
    pub(crate) operation: &'static str,
    /// Time kept back from the deadline for the end of the call: a durable call's hand-off
    /// (see `CallSite::durable`), zero otherwise.
    pub(crate) reserve: Duration,
    last: ArcSwapOption<Found>,
}

/// An upstream entry, and the registry snapshot it was looked up in.
#[derive(Debug)]
struct Found {
    snapshot: u64,
    upstream: Arc<Upstream>,
}

impl CallSite {
    /// A call site of `upstream`, sending `method`, naming its own scope `operation`.
    pub const fn new(
        upstream: &'static str,
        method: http::Method,
        operation: &'static str,
    ) -> Self {
        CallSite {
            upstream,
            method,
            operation,
            reserve: Duration::ZERO,
            last: ArcSwapOption::const_empty(),
        }
    }

    /// A call site of a `durable = ...` function: its attempts end `HAND_OFF_RESERVE` before
    /// the deadline. (Without the `durable` feature the expansion is refused before this
    /// matters, with a message naming the feature.)
    #[cfg_attr(not(feature = "durable"), allow(unused_mut))]
    pub const fn durable(mut self) -> Self {
        #[cfg(feature = "durable")]
        {
            self.reserve = crate::hand_off::HAND_OFF_RESERVE;
        }
        self
    }

    /// The site's upstream in `registry`: the entry found last time while `registry` still
    /// holds the snapshot it was found in, else looked up by name (and kept).
    pub(crate) fn upstream_in(&self, registry: &Registry) -> Result<Arc<Upstream>, Error> {
        // Read before the lookup: the entry kept is then never older than the number it is
        // kept with (at worst newer, when a reload lands in between).
        let snapshot = registry.snapshot_number();
        if let Some(found) = &*self.last.load()
            && found.snapshot == snapshot
        {
            return Ok(found.upstream.clone());
        }
        let upstream = registry.upstream(self.upstream)?;
        self.last.store(Some(Arc::new(Found {
            snapshot,
            upstream: upstream.clone(),
        })));
        Ok(upstream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UpstreamConfig;

    fn registry(attempts: u32) -> Registry {
        Registry::builder()
            .upstream("up", UpstreamConfig::new().with_max_attempts(attempts))
            .build()
            .expect("registry")
    }

    /// The `max_attempts` of the entry `site` finds in `registry`.
    fn attempts(site: &CallSite, registry: &Registry) -> u32 {
        site.upstream_in(registry)
            .expect("found")
            .config()
            .max_attempts
    }

    #[test]
    fn a_site_finds_its_upstream_again_until_the_registry_reloads_or_changes() {
        static SITE: CallSite = CallSite::new("up", http::Method::GET, "op");
        let first = registry(2);
        let found = SITE.upstream_in(&first).expect("found");
        let again = SITE.upstream_in(&first).expect("kept");
        assert!(
            Arc::ptr_eq(&found, &again),
            "the same entry, not looked up again"
        );

        // A reload replaces the entry: the site sees the new one at once.
        let reloaded = UpstreamConfig::new().with_max_attempts(1);
        first
            .replace([("up".to_owned(), reloaded)])
            .expect("reload");
        assert_eq!(attempts(&SITE, &first), 1);

        // Another registry is looked up in, not served the first one's entry.
        let other = registry(3);
        assert_eq!(attempts(&SITE, &other), 3);
        assert_eq!(attempts(&SITE, &first), 1);

        // A name the registry does not hold is the lookup's clear error, every time.
        static MISSING: CallSite = CallSite::new("nope", http::Method::GET, "op");
        for _ in 0..2 {
            assert!(matches!(
                MISSING.upstream_in(&first),
                Err(Error::UnknownUpstream { .. })
            ));
        }
    }
}
