//! The breaker's states: their names in traces and metrics, and their encoding in one byte.

/// The breaker's state.
///
/// Closed on purpose (not `#[non_exhaustive]`): the three states of a circuit breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Attempts flow; outcomes are counted.
    Closed,
    /// Attempts fail fast.
    Open,
    /// A few probe attempts are let through.
    HalfOpen,
}

impl BreakerState {
    /// The stable name used in traces and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// The states as the breaker stores them, in one atomic byte.
pub(super) const CLOSED: u8 = 0;
pub(super) const OPEN: u8 = 1;
pub(super) const HALF_OPEN: u8 = 2;
