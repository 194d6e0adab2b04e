//! The rotations one call has seen: the state `rotation` keeps for its free retries.

/// The rotations one call has seen.
#[derive(Debug, Default)]
pub(super) struct Rotations {
    /// Free rotation retries granted so far (attempts not counted against the limit).
    pub(super) free: u32,
    /// Whether the retry granted last was a free one (it spent no allowance to give back).
    pub(super) granted_free: bool,
    /// The upstream's progress when this call saw its last two rotations (older, newer).
    pub(super) marks: [Option<u64>; 2],
}
