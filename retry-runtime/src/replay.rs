//! Body replayability: whether a request body can be sent again.

use std::fmt;

/// Whether a request body can be produced again for another attempt.
///
/// Closed on purpose (not `#[non_exhaustive]`): a body can be produced again or not, and an
/// integration that reports it must place every body on this order.
///
/// Ordered from weakest to strongest, so the replayability of a composite body (multipart) is
/// the minimum of its parts: see [`Replayability::weakest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Replayability {
    /// A single stream instance: once read it is gone. Never retried.
    OneShot,
    /// A file or resource supplier that can be reopened for each attempt.
    Reopenable,
    /// Immutable bytes, or a DTO with a deterministic codec (no body at all counts as this).
    #[default]
    Replayable,
}

impl Replayability {
    /// The replayability of a body made of `parts` (multipart): as weak as its weakest part.
    /// An empty body is [`Replayability::Replayable`].
    pub fn weakest(parts: impl IntoIterator<Item = Replayability>) -> Replayability {
        parts.into_iter().min().unwrap_or(Replayability::Replayable)
    }

    /// `true` when another attempt can send the body again.
    pub const fn can_replay(self) -> bool {
        !matches!(self, Replayability::OneShot)
    }

    /// The stable lower-case name used in traces.
    pub const fn as_str(self) -> &'static str {
        match self {
            Replayability::OneShot => "one_shot",
            Replayability::Reopenable => "reopenable",
            Replayability::Replayable => "replayable",
        }
    }
}

impl fmt::Display for Replayability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Replayability::*;
    use super::*;

    #[test]
    fn multipart_is_as_weak_as_its_weakest_part() {
        assert_eq!(Replayability::weakest([Replayable, Reopenable]), Reopenable);
        assert_eq!(
            Replayability::weakest([Replayable, OneShot, Reopenable]),
            OneShot
        );
        assert_eq!(Replayability::weakest([Replayable, Replayable]), Replayable);
        assert_eq!(Replayability::weakest([]), Replayable);
    }

    #[test]
    fn only_one_shot_cannot_replay() {
        assert!(Replayable.can_replay());
        assert!(Reopenable.can_replay());
        assert!(!OneShot.can_replay());
    }
}
