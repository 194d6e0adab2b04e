//! The rotations one call has seen: the state `rotation` keeps for its free retries.

/// The rotations one call has seen.
#[derive(Debug, Default)]
pub(super) struct Rotations {
    /// Free rotation retries granted so far (attempts not counted against the limit).
    free: u32,
    /// Whether the retry granted last was a free one (it spent no allowance to give back).
    granted_free: bool,
    /// The upstream's progress when this call saw its last two rotations (older, newer).
    marks: [Option<u64>; 2],
}

impl Rotations {
    /// Notes a rotation seen when the upstream's progress was `progress`: whether a retry of it
    /// is free (the call's first two are; a later one only if the upstream progressed since the
    /// rotation before last).
    pub(super) fn seen(&mut self, progress: u64) -> bool {
        let [older, newer] = self.marks;
        self.marks = [newer, Some(progress)];
        older.is_none_or(|mark| progress > mark)
    }

    /// A free retry is granted.
    pub(super) fn granted_free(&mut self) {
        self.free += 1;
        self.granted_free = true;
    }

    /// A retry that spends is granted.
    pub(super) fn granted_paid(&mut self) {
        self.granted_free = false;
    }

    /// Free retries granted so far.
    pub(super) fn free(&self) -> u32 {
        self.free
    }

    /// Whether the retry granted last was a free one.
    pub(super) fn last_was_free(&self) -> bool {
        self.granted_free
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_rotations_in_a_row_are_free_then_only_after_progress() {
        let mut rotations = Rotations::default();
        assert!(rotations.seen(5));
        assert!(rotations.seen(5));
        assert!(
            !rotations.seen(5),
            "no progress since the rotation before last"
        );
        assert!(rotations.seen(6), "progress since the rotation before last");
    }

    #[test]
    fn a_paid_retry_clears_the_free_flag_and_keeps_the_count() {
        let mut rotations = Rotations::default();
        rotations.granted_free();
        assert!(rotations.last_was_free());
        rotations.granted_paid();
        assert!(!rotations.last_was_free());
        assert_eq!(rotations.free(), 1);
    }
}
