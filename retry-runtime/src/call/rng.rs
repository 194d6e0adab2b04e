//! The call's random source, drawn from the registry the first time the call needs one: a call
//! that succeeds at once draws none.

use crate::registry::Registry;

/// A random source drawn from the registry on first use.
#[derive(Debug, Default)]
pub(super) struct LazyRng(Option<fastrand::Rng>);

impl LazyRng {
    /// The source, drawn from `registry` if the call has none yet.
    #[inline]
    pub(super) fn get(&mut self, registry: &Registry) -> &mut fastrand::Rng {
        self.0.get_or_insert_with(|| registry.rng())
    }

    /// A uniform number in `[0, 1)`.
    #[inline]
    pub(super) fn f64(&mut self, registry: &Registry) -> f64 {
        self.get(registry).f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_one_source_from_the_registry_and_keeps_it() {
        let seeded = || Registry::builder().seed(7).build().unwrap();
        let (registry, expected) = (seeded(), seeded());
        let mut expected = expected.rng();
        let mut rng = LazyRng::default();
        // Two draws from one source: the registry's first, not a fresh one per draw.
        assert_eq!(rng.f64(&registry), expected.f64());
        assert_eq!(rng.f64(&registry), expected.f64());
    }
}
