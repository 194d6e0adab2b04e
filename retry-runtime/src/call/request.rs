//! What the call sends: its method, the safety that follows from it and the key, and the
//! body's replayability, lowered by what the attempts report.

use crate::engine::Safety;
use crate::key::IdempotencyKey;
use crate::replay::Replayability;

/// The request a call sends, as the loop needs it.
#[derive(Debug)]
pub(super) struct Request {
    method: http::Method,
    safety: Safety,
    key: Option<IdempotencyKey>,
    /// The declared body replayability, lowered by what the attempts reported.
    replay: Replayability,
}

impl Request {
    /// A request of `method` with `key`, `safety` and a body that replays as `replay`.
    pub(super) fn new(
        method: http::Method,
        safety: Safety,
        key: Option<IdempotencyKey>,
        replay: Replayability,
    ) -> Self {
        Request {
            method,
            safety,
            key,
            replay,
        }
    }

    /// The HTTP method.
    #[inline]
    pub(super) fn method(&self) -> &http::Method {
        &self.method
    }

    /// Whether it is safe to repeat.
    #[inline]
    pub(super) fn safety(&self) -> Safety {
        self.safety
    }

    /// The idempotency key every attempt carries.
    #[inline]
    pub(super) fn key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    /// The body's replayability, as far as known.
    #[inline]
    pub(super) fn replay(&self) -> Replayability {
        self.replay
    }

    /// Lowers the body's replayability to `replay` if that is weaker; never raises it.
    #[inline]
    pub(super) fn lower_replay(&mut self, replay: Replayability) {
        self.replay = self.replay.min(replay);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replayability_only_goes_down() {
        let mut request = Request::new(
            http::Method::GET,
            Safety::Read,
            None,
            Replayability::Replayable,
        );
        request.lower_replay(Replayability::OneShot);
        request.lower_replay(Replayability::Replayable);
        assert_eq!(request.replay(), Replayability::OneShot);
    }
}
