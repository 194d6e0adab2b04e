//! The upstream entries a thread used last, and the happy calls they have not counted yet.
//!
//! A call needs its upstream's entry (config, budget, breaker) for as long as it runs. Looking
//! it up in the registry (a snapshot load, a hash, a reference count on a line every thread
//! shares) and counting the call in the budget and the breaker (a compare-and-swap each, and a
//! clock read to find the window's slot) were most of the cost of a call whose first attempt
//! succeeds. So each thread keeps the last few entries it used, and a call *moves* its entry
//! out of that cache and back when it ends: no lookup, no reference count touched.
//!
//! A call whose only attempt succeeded without ever waiting (so nothing read the clock) is not
//! counted at once: the entry adds it to a plain counter, and every [`FLUSH_EVERY`] such calls
//! (or when the entry leaves the cache, or its thread ends) it reads the clock once and counts
//! them all, a deposit each in the budget and a success each in the breaker. A call that reads
//! the clock anyway (it waited, or it failed) counts its thread's batch first, so the breaker
//! judges a failure against every earlier attempt made on that thread. The cost: up to
//! `FLUSH_EVERY - 1` calls on *other* threads are not seen yet, which makes the budget
//! stricter (at most 12 tokens per thread with the default 20 % ratio, against a floor of 100)
//! and the breaker quicker to open while such traffic is light. Calls that wait (every real
//! HTTP request) are counted at once, exactly. The batch was 16; at 64 the clock read and the
//! two counter updates it costs fell from about a tenth of a fast call's time to a thirtieth.
//!
//! The fast first attempt of a lazy call (`first.rs`) does not even move its entry: it *lends*
//! it in place for the one poll it lasts. A lent entry is never taken, moved or evicted, so the
//! slot number the fast path holds stays valid until it gives the entry back.

use std::cell::RefCell;
use std::sync::Arc;

use tokio::time::Instant;

use crate::Error;
use crate::attempt::Attempt;
use crate::breaker::CircuitBreaker;
use crate::call::CallSite;
use crate::registry::{Registry, Upstream};

/// Happy calls counted per clock read.
pub(crate) const FLUSH_EVERY: u32 = crate::budget::HAPPY_BATCH;

/// Entries kept per thread (a service calling more upstreams than this in turn looks some up).
const ENTRIES: usize = 4;

/// This thread's cache (see `thread.rs`).
#[inline]
fn with_cache<R>(f: impl FnOnce(&RefCell<Cache>) -> R) -> Result<R, std::thread::AccessError> {
    crate::thread::with(|thread| f(&thread.cache))
}

/// The entry of a lent slot: there until given back (see the module docs).
#[inline]
fn lent_entry(cache: &mut Cache, slot: usize) -> &mut Entry {
    match cache.slots.get_mut(slot) {
        Some(Some(entry)) if entry.lent => entry,
        _ => unreachable!("a lent entry stays in its slot until given back"),
    }
}

#[derive(Debug)]
pub(crate) struct Cache {
    slots: [Option<Entry>; ENTRIES],
    /// The slot to evict next when every slot is full (round robin, skipping a lent entry).
    evict_next: usize,
}

#[derive(Debug)]
struct Entry {
    registry: u64,
    generation: u64,
    upstream: Arc<Upstream>,
    /// Happy calls not counted yet.
    happy: u32,
    /// The last call's attempt state, for the next call's first attempt.
    spare: Option<Attempt>,
    /// Lent to a fast first attempt in progress on this thread (see the module docs).
    lent: bool,
    /// Whether a first attempt may start without waiting or asking anything of the config
    /// (no bulkhead, time for an attempt): fixed with the upstream's config.
    starts_free: bool,
    /// The address of the `#[retry]` call site that found this entry last (0: none).
    site: usize,
    /// The upstream's name, copied here when short, so a call that finds its entry by name
    /// (the builder's) reads nothing outside the cache.
    name: ShortName,
    /// The upstream's breaker, held here too so the fast path reaches its state in one step
    /// less.
    breaker: Option<Arc<CircuitBreaker>>,
}

impl Entry {
    fn new(registry: u64, generation: u64, upstream: Arc<Upstream>) -> Self {
        let upstream_breaker = upstream.breaker_arc().cloned();
        let name = ShortName::of(upstream.name());
        let config = upstream.config();
        let starts_free = upstream.bulkhead().is_none()
            && config.deadline >= config.min_attempt_budget
            && !config.deadline.is_zero();
        Entry {
            registry,
            generation,
            upstream,
            happy: 0,
            spare: None,
            lent: false,
            starts_free,
            site: 0,
            name,
            breaker: upstream_breaker,
        }
    }
}

/// `a == b`, inlined: upstream names are short, and a call to `memcmp` cost more than the
/// comparison.
#[inline]
fn same_name(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// The longest name an entry holds a copy of.
const SHORT: usize = 24;

/// An upstream's name as its cache entry holds it: copied in when short (most are), else only
/// its length (the name is then read from the upstream). Comparing a copy waits for no chain of
/// loads (entry, upstream, name, bytes), which was a tenth of a builder call's time.
#[derive(Debug)]
struct ShortName {
    len: usize,
    bytes: Option<[u8; SHORT]>,
}

impl ShortName {
    fn of(name: &str) -> Self {
        let bytes = name.as_bytes();
        let short = bytes.len() <= SHORT;
        let copy = short.then(|| {
            let mut copy = [0; SHORT];
            copy.iter_mut()
                .zip(bytes)
                .for_each(|(to, from)| *to = *from);
            copy
        });
        ShortName {
            len: bytes.len(),
            bytes: copy,
        }
    }
}

impl Entry {
    /// Whether this is `name`'s entry.
    #[inline]
    fn is_named(&self, name: &str) -> bool {
        let name = name.as_bytes();
        if name.len() != self.name.len {
            return false;
        }
        match &self.name.bytes {
            Some(copy) => same_name(copy.get(..name.len()).unwrap_or_default(), name),
            None => same_name(self.upstream.name().as_bytes(), name),
        }
    }

    fn flush(&mut self) {
        if self.happy > 0 {
            self.flush_at(Instant::now());
        }
    }

    fn flush_at(&mut self, now: Instant) {
        if self.happy > 0 {
            self.upstream.count_happy(self.happy, now);
            self.happy = 0;
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.flush();
    }
}

impl Cache {
    pub(crate) const EMPTY: Cache = Cache {
        slots: [const { None }; ENTRIES],
        evict_next: 0,
    };

    /// The slot whose entry makes room for another: round robin, never a lent one (at most
    /// one entry is lent at a time, so another is always there).
    fn victim(&mut self) -> usize {
        let mut slot = self.evict_next % ENTRIES;
        if self.slots[slot].as_ref().is_some_and(|e| e.lent) {
            slot = (slot + 1) % ENTRIES;
        }
        self.evict_next = slot + 1;
        slot
    }
}

impl Cache {
    /// Lends `name`'s entry in the registry `(id, generation)` to a fast first attempt, if the
    /// cache holds it, current, and its first attempt can start without asking anything (no
    /// bulkhead to wait for, the breaker if any closed, time for an attempt): it stays where it
    /// is, and the slot returned is its until given back ([`give_back_happy`](Self::give_back_happy),
    /// [`take_lent`]).
    #[inline]
    pub(crate) fn lend(
        &mut self,
        (id, generation): (u64, u64),
        name: &str,
        site: Option<&'static CallSite>,
    ) -> Option<usize> {
        // A `static` call site's address names it for the life of the process: the entry
        // that matched it last is found without comparing names.
        let site = site.map_or(0, |site| std::ptr::from_ref(site) as usize);
        for (slot, entry) in self.slots.iter_mut().enumerate() {
            let Some(entry) = entry else { continue };
            if entry.registry != id {
                continue;
            }
            if site == 0 || entry.site != site {
                if !entry.is_named(name) {
                    continue;
                }
                entry.site = site;
            }
            let free = entry.starts_free
                && entry.generation == generation
                && !entry.lent
                && entry.breaker.as_ref().is_none_or(|b| b.is_closed());
            if !free {
                return None;
            }
            entry.lent = true;
            return Some(slot);
        }
        None
    }

    /// Runs `f` with the lent entry's upstream and spare attempt state.
    pub(crate) fn with_lent<R>(
        &mut self,
        slot: usize,
        f: impl FnOnce(&Arc<Upstream>, &mut Option<Attempt>) -> R,
    ) -> R {
        let entry = lent_entry(self, slot);
        f(&entry.upstream, &mut entry.spare)
    }

    /// Takes the lent entry out, for a call that goes on the full path.
    pub(crate) fn take_lent(&mut self, slot: usize) -> HeldUpstream {
        lent_entry(self, slot).lent = false;
        HeldUpstream {
            entry: self.slots[slot].take(),
        }
    }

    /// Keeps `attempt`, made for the lent entry's call, for its next call if it holds nothing
    /// (else it comes back: its call recycles it when it ends).
    pub(crate) fn park_lent(&mut self, slot: usize, attempt: Attempt) -> Option<Attempt> {
        let entry = lent_entry(self, slot);
        if entry.spare.is_none() && attempt.holds_nothing() {
            entry.spare = Some(attempt);
            return None;
        }
        Some(attempt)
    }

    /// Gives the lent entry back, counting one call whose only attempt succeeded without
    /// reading the clock (see the module docs).
    #[inline]
    pub(crate) fn give_back_happy(&mut self, slot: usize) {
        let entry = lent_entry(self, slot);
        entry.lent = false;
        entry.happy += 1;
        if entry.happy >= FLUSH_EVERY {
            entry.flush();
        }
        // What the full path's end of a call records.
        if cfg!(feature = "metrics") {
            let upstream = &entry.upstream;
            crate::observe::call_finished(upstream.name(), crate::observe::CallKind::of(true, 1));
            if let Some(breaker) = upstream.breaker() {
                crate::observe::breaker_state(upstream.name(), breaker.state());
            }
        }
    }
}

/// Runs `f` with the lent entry's upstream and spare attempt state.
pub(crate) fn with_lent<R>(
    slot: usize,
    f: impl FnOnce(&Arc<Upstream>, &mut Option<Attempt>) -> R,
) -> R {
    let lent = with_cache(|cache| cache.borrow_mut().with_lent(slot, f));
    match lent {
        Ok(r) => r,
        Err(_) => unreachable!("a lent entry's thread is running"),
    }
}

/// Takes the lent entry out of the cache for a call that goes on the full way.
pub(crate) fn take_lent(slot: usize) -> HeldUpstream {
    match with_cache(|cache| cache.borrow_mut().take_lent(slot)) {
        Ok(held) => held,
        Err(_) => unreachable!("a lent entry's thread is running"),
    }
}

/// Gives the lent entry back as it is (its attempt panicked).
pub(crate) fn unlend(slot: usize) {
    let _ = with_cache(|cache| {
        if let Ok(mut cache) = cache.try_borrow_mut()
            && let Some(Some(entry)) = cache.slots.get_mut(slot)
        {
            entry.lent = false;
        }
    });
}

/// A call's upstream entry, held until the call ends and then given back to its thread's
/// cache (whichever thread that is by then).
#[derive(Debug)]
pub(crate) struct HeldUpstream {
    entry: Option<Entry>,
}

impl HeldUpstream {
    /// The entry of `name` in `registry`: from this thread's cache when it is there and
    /// current, else looked up.
    pub(crate) fn take(registry: &Registry, name: &str) -> Result<Self, Error> {
        let (id, generation) = registry.generation();
        let cached = with_cache(|cache| {
            let mut cache = cache.try_borrow_mut().ok()?;
            cache
                .slots
                .iter_mut()
                .find_map(|slot| slot.take_if(|e| !e.lent && e.registry == id && e.is_named(name)))
        })
        .ok()
        .flatten();
        // A stale entry (the registry was reloaded since) counts what it holds as it drops.
        let entry = match cached {
            Some(entry) if entry.generation == generation => entry,
            _ => Entry::new(id, generation, registry.upstream(name)?),
        };
        Ok(HeldUpstream { entry: Some(entry) })
    }

    /// The upstream.
    pub(crate) fn get(&self) -> &Arc<Upstream> {
        match &self.entry {
            Some(entry) => &entry.upstream,
            None => unreachable!("an upstream is held until it is dropped"),
        }
    }

    /// The last call's attempt state, to reuse.
    pub(crate) fn take_spare(&mut self) -> Option<Attempt> {
        self.entry.as_mut().and_then(|e| e.spare.take())
    }

    /// Keeps a call's last attempt state for the next call. One that holds an open span or a
    /// key is cleared first (a span must close when its call ends; a key is not kept).
    pub(crate) fn park(&mut self, attempt: Attempt) {
        match &mut self.entry {
            Some(entry) if attempt.holds_nothing() => entry.spare = Some(attempt),
            _ => attempt.recycle(),
        }
    }

    /// Counts the happy calls not counted yet, as of `now` (a call that read the clock anyway).
    pub(crate) fn flush(&mut self, now: Instant) {
        if let Some(entry) = &mut self.entry {
            entry.flush_at(now);
        }
    }

    /// Counts one call whose only attempt succeeded without reading the clock; see the module
    /// docs.
    #[inline]
    pub(crate) fn count_happy(&mut self) {
        if let Some(entry) = &mut self.entry {
            entry.happy += 1;
            if entry.happy >= FLUSH_EVERY {
                entry.flush();
            }
        }
    }
}

impl Drop for HeldUpstream {
    fn drop(&mut self) {
        let Some(entry) = self.entry.take() else {
            return;
        };
        // A free slot, or an entry not lent makes room (and counts what it holds as it drops);
        // with no cache left (the thread is ending) or one in use, the entry just drops.
        let _ = with_cache(|cache| {
            if let Ok(mut cache) = cache.try_borrow_mut() {
                let slot = match cache.slots.iter().position(Option::is_none) {
                    Some(free) => free,
                    None => cache.victim(),
                };
                cache.slots[slot] = Some(entry);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UpstreamConfig;
    use crate::breaker::BreakerConfig;

    fn registry() -> Registry {
        Registry::builder()
            .upstream(
                "up",
                UpstreamConfig::new().with_breaker(Some(BreakerConfig::new())),
            )
            .build()
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn an_entry_is_reused_until_a_reload_and_counts_happy_calls_in_batches() {
        let registry = registry();
        let first = HeldUpstream::take(&registry, "up").unwrap();
        let ptr = Arc::as_ptr(first.get());
        drop(first);
        let mut again = HeldUpstream::take(&registry, "up").unwrap();
        assert_eq!(Arc::as_ptr(again.get()), ptr, "taken from the cache");
        let budget_before = again.get().budget().available();
        for _ in 0..FLUSH_EVERY - 1 {
            again.count_happy();
        }
        assert_eq!(
            again.get().budget().available(),
            budget_before,
            "not counted until a batch is full"
        );
        again.count_happy();
        let deposits = FLUSH_EVERY as u64 / 5; // 20 % of the calls, in whole tokens
        assert_eq!(again.get().budget().available(), budget_before + deposits);
        drop(again);

        registry
            .replace([("up".to_owned(), UpstreamConfig::new().with_breaker(None))])
            .unwrap();
        let fresh = HeldUpstream::take(&registry, "up").unwrap();
        assert_ne!(Arc::as_ptr(fresh.get()), ptr, "a reload is seen");
        assert!(fresh.get().breaker().is_none(), "with the new config");
    }

    #[tokio::test(start_paused = true)]
    async fn calls_not_yet_counted_are_counted_when_the_entry_leaves_the_cache() {
        let registry = registry();
        let mut held = HeldUpstream::take(&registry, "up").unwrap();
        let budget = held.get().budget() as *const _;
        for _ in 0..10 {
            held.count_happy();
        }
        let before = held.get().budget().available();
        drop(held);
        // Fill the cache with other registries' entries until ours is pushed out.
        let others: Vec<Registry> = (0..ENTRIES).map(|_| registry_with("other")).collect();
        for other in &others {
            drop(HeldUpstream::take(other, "other").unwrap());
        }
        let held = HeldUpstream::take(&registry, "up").unwrap();
        assert_eq!(held.get().budget() as *const _, budget, "the same budget");
        assert_eq!(
            held.get().budget().available(),
            before + 2,
            "10 calls: 2 tokens"
        );
    }

    #[tokio::test]
    async fn an_attempt_state_waits_for_the_next_call_only_if_it_holds_nothing() {
        let registry = registry();
        let mut held = HeldUpstream::take(&registry, "up").unwrap();
        let plain = crate::attempt::tests::attempt();
        let ptr = Arc::as_ptr(&plain.state);
        held.park(plain);
        drop(held);
        let mut held = HeldUpstream::take(&registry, "up").unwrap();
        let spare = held.take_spare().expect("kept with the entry");
        assert_eq!(Arc::as_ptr(&spare.state), ptr);

        let mut keyed = crate::attempt::tests::attempt();
        keyed.facts_mut().key = Some(crate::IdempotencyKey::new("k").unwrap());
        held.park(keyed);
        assert!(held.take_spare().is_none(), "a key is not kept");
    }

    #[test]
    fn an_unknown_upstream_is_an_error_not_a_cached_default() {
        let registry = registry();
        assert!(matches!(
            HeldUpstream::take(&registry, "nope"),
            Err(Error::UnknownUpstream { .. })
        ));
    }

    #[test]
    fn each_upstream_is_found_by_its_whole_name_short_or_long() {
        let long = "x".repeat(SHORT);
        let names = [
            "a".to_owned(),
            "b".to_owned(),
            format!("{long}1"),
            format!("{long}2"),
        ];
        let mut builder = Registry::builder();
        for name in &names {
            builder = builder.upstream(name, UpstreamConfig::new());
        }
        let registry = builder.build().unwrap();
        for _ in 0..3 {
            for name in &names {
                let held = HeldUpstream::take(&registry, name).unwrap();
                assert_eq!(
                    held.get().name(),
                    name,
                    "the entry named so, from the cache"
                );
            }
        }
        for unknown in ["c", "", &long, &format!("{long}3"), &format!("{long}10")] {
            assert!(
                HeldUpstream::take(&registry, unknown).is_err(),
                "{unknown:?} is not an upstream here"
            );
        }
    }

    fn registry_with(name: &str) -> Registry {
        Registry::builder()
            .upstream(name, UpstreamConfig::new())
            .build()
            .unwrap()
    }
}
