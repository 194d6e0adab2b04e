//! Partitions: the part of an upstream's traffic a quota applies to (a tenant, an API key).
//!
//! A 429 says "this caller is over its quota", not "this upstream is overloaded": the upstream
//! answered at once and serves other callers. So the throttle, the breaker and the budget's
//! judgment of the upstream count a 429 as the upstream working, and one tenant's quota never
//! refuses another tenant's calls. The pushback belongs to whoever is over quota:
//!
//! - **Without a partition** (the default), it belongs to the call: the call's retry waits
//!   for the `Retry-After` the 429 carried (or its backoff), and no other call is affected.
//!   The retry then goes at the pace of the upstream's answers, as the throttle lets its
//!   waiting calls go: the calls that met a spell of 429s each waited their own
//!   `Retry-After` and come back together, on top of the calls that keep coming.
//! - **With a partition** (`#[retry(.., partition = tenant)]`,
//!   [`RetryCall::partition`](crate::RetryCall::partition), the tower layer's
//!   `RetryLayer::partition_by`), it belongs to the partition:
//!   until the `Retry-After` the 429 carried (or the upstream's initial backoff without one),
//!   every retry of that partition's calls waits (and durable replays of it), and goes after
//!   it, spread over as long again as it waited (so the held retries go about as they came,
//!   not together); a retry whose deadline comes before the pushback ends fails at once with
//!   [`Error::Throttled`](crate::Error::Throttled), sending nothing. An attempt of the
//!   partition the upstream accepts meanwhile ends the pushback: the quota serves it again
//!   (an upstream that answers 429 to some requests at random is not holding the partition
//!   back). Either way, the held retries then go at the pace of the upstream's answers, as the
//!   throttle lets its waiting calls go, and so do the retries of the calls that met the
//!   quota themselves (each honoured its own `Retry-After`, so those that met it during a
//!   spell of 429s all come back a `Retry-After` later, on top of the calls that keep coming):
//!   the backlog the quota built is a burst to an upstream with a capacity, whatever ended
//!   it. Other partitions' calls go as before.
//!
//! A call's first attempt is never held by the pushback, as gRPC's server pushback and the
//! AWS SDKs' retry quota delay retries and never a first attempt. A first attempt is the
//! traffic the caller brings, one request a call, what a client without retries sends; what
//! the pushback saves the quota is the retries. Holding first attempts too would hold the
//! partition's callers for the whole `Retry-After` after the quota serves them again (many
//! servers send the same conservative `Retry-After` until the instant the quota lifts), and
//! the first of them the upstream accepts is what ends the pushback early.
//!
//! Memory is bounded whatever the number of partitions: each upstream keeps [`SLOTS`] pushback
//! times, one word each, allocated at its first 429 with a partition. A partition maps to one
//! slot, tagged with its hash: a partition whose 429 lands on a slot another holds takes it
//! over, so the other forgets its pushback early (its calls go, meet the 429 again and take it
//! back), and a partition never waits on another's pushback.

use std::hash::{Hash, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::window::Tick;

/// The part of an upstream's traffic a call belongs to, for the upstream's quotas: see the
/// [module docs](self). Made from any hashable value (a tenant id, an API key): only a hash of
/// it is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Partition(u64);

impl Partition {
    /// The partition of `value`. The same value always gives the same partition (a fixed,
    /// unkeyed hash: a partition is not a secret and nothing outside the process sees it).
    pub fn of<T: Hash + ?Sized>(value: &T) -> Partition {
        #[allow(deprecated)]
        let mut hasher = std::hash::SipHasher::new();
        value.hash(&mut hasher);
        Partition(hasher.finish())
    }

    fn slot(self) -> usize {
        (self.0 % SLOTS as u64) as usize
    }

    /// The tag kept beside its pushback: the hash's high bits.
    fn tag(self) -> u64 {
        self.0 >> (64 - TAG_BITS)
    }
}

/// Pushback times kept per upstream.
pub const SLOTS: usize = 256;

const TAG_BITS: u32 = 24;
const UNTIL_BITS: u32 = 64 - TAG_BITS;
const UNTIL_MASK: u64 = (1 << UNTIL_BITS) - 1;

/// One upstream's partitions' pushbacks: until when each partition's calls hold their attempts,
/// in milliseconds after the upstream's window origin (40 bits: 34 years).
#[derive(Debug, Default)]
pub(crate) struct Quotas {
    slots: OnceLock<Box<[AtomicU64]>>,
}

impl Quotas {
    /// Holds `partition`'s attempts until `until` (a later pushback it already has stands).
    pub(crate) fn push_back(&self, partition: Partition, until: Tick) {
        let slots = self
            .slots
            .get_or_init(|| (0..SLOTS).map(|_| AtomicU64::new(0)).collect());
        let slot = &slots[partition.slot()];
        let until_ms = (until.nanos() / 1_000_000 + 1).min(UNTIL_MASK);
        let word = partition.tag() << UNTIL_BITS | until_ms;
        let _ = slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
            let same = held >> UNTIL_BITS == partition.tag();
            (!same || held & UNTIL_MASK < until_ms).then_some(word)
        });
    }

    /// The upstream accepted an attempt of `partition`: its quota serves it again, and its
    /// pushback, if it holds one, ends.
    #[inline]
    pub(crate) fn accepted(&self, partition: Partition) {
        let Some(slots) = self.slots.get() else {
            return;
        };
        let slot = &slots[partition.slot()];
        let held = slot.load(Ordering::Relaxed);
        if held >> UNTIL_BITS == partition.tag() && held & UNTIL_MASK != 0 {
            let _ = slot.compare_exchange(held, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// How long `partition`'s calls still hold their attempts at `now`, if they do.
    #[inline]
    pub(crate) fn held(&self, partition: Partition, now: Tick) -> Option<Duration> {
        let held = self.slots.get()?[partition.slot()].load(Ordering::Relaxed);
        if held >> UNTIL_BITS != partition.tag() {
            return None;
        }
        let until_ns = (held & UNTIL_MASK).checked_sub(1)? * 1_000_000;
        let left = until_ns.checked_sub(now.nanos())?;
        (left > 0).then(|| Duration::from_nanos(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn a_partitions_pushback_holds_it_alone_until_it_ends() {
        let origin = Instant::now();
        let at = |ms: u64| Tick::at(origin, origin + Duration::from_millis(ms));
        let quotas = Quotas::default();
        let (a, b) = (Partition::of("tenant-a"), Partition::of("tenant-b"));
        assert_eq!(quotas.held(a, at(0)), None, "nothing allocated yet");
        quotas.push_back(a, at(1000));
        assert_eq!(quotas.held(a, at(400)), Some(Duration::from_millis(600)));
        assert_eq!(quotas.held(b, at(400)), None);
        assert_eq!(quotas.held(a, at(1000)), None);
        // An earlier pushback does not shorten a later one.
        quotas.push_back(a, at(500));
        assert_eq!(quotas.held(a, at(600)), Some(Duration::from_millis(400)));
        assert_eq!(
            Partition::of("tenant-a"),
            a,
            "the same value, the same partition"
        );
    }

    #[test]
    fn an_accepted_answer_ends_the_partitions_pushback_alone() {
        let origin = Instant::now();
        let at = |ms: u64| Tick::at(origin, origin + Duration::from_millis(ms));
        let quotas = Quotas::default();
        let (a, b) = (Partition::of(&1u64), Partition::of(&2u64));
        quotas.accepted(a);
        quotas.push_back(a, at(1000));
        quotas.push_back(b, at(1000));
        quotas.accepted(a);
        assert_eq!(quotas.held(a, at(10)), None);
        assert!(quotas.held(b, at(10)).is_some());
    }

    proptest::proptest! {
        /// However many partitions share the slots, a partition is held only by its own
        /// pushback, and the memory stays the slots.
        #[test]
        fn a_partition_never_waits_on_anothers_pushback(
            pushed in proptest::collection::vec(0u32..5_000, 1..2_000),
            asked in 5_000u32..10_000,
        ) {
            let origin = Instant::now();
            let at = |ms: u64| Tick::at(origin, origin + Duration::from_millis(ms));
            let quotas = Quotas::default();
            for tenant in &pushed {
                quotas.push_back(Partition::of(tenant), at(60_000));
            }
            proptest::prop_assert_eq!(quotas.held(Partition::of(&asked), at(0)), None);
            proptest::prop_assert_eq!(quotas.slots.get().map(|s| s.len()), Some(SLOTS));
        }
    }
}
