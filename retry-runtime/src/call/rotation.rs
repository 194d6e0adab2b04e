//! Connection rotation: free retries for attempts a server turned away on purpose.
//!
//! An attempt lost to connection rotation ([`Classify::connection_rotated`]: a GOAWAY with
//! `NO_ERROR`, `REFUSED_STREAM`, a request hyper handed back unsent or its dispatch task dropped
//! while the request waited for a stream) is not counted by the
//! breaker, and when the engine would retry it (a read, a keyed write, or any method with
//! evidence `NotSent`: an unkeyed write after a GOAWAY stays ambiguous) it is retried in the
//! manner of gRPC's transparent retries: **at once**, **without a budget token** and **not
//! counted** in the call's attempts or the operation's allowance, while the upstream makes
//! progress. The bound: a call's first two rotations in a row are free; a later one is free only
//! if some attempt to the upstream succeeded since the call's rotation before last (the
//! upstream's success count, kept by its budget). A server rotating connections serves requests
//! between rotations; one that turns every request away does not, and its rotations become
//! ordinary retries (backoff, token, attempt limit), so the budget stops the storm. Every
//! attempt still needs the minimum attempt budget before the deadline, and `max_attempts = 1`
//! turns rotation retries off with the others.
//!
//! Why two and not one: one HTTP/2 connection carries every concurrent request, and a GOAWAY
//! turns away all of them but the few the server accepted (with nginx's `keepalive_requests 3`
//! and 200 concurrent requests, 197 at once; hyper opens one connection at a time, so a request
//! can be turned away by some 65 connections in a row). The successes on the connection before
//! last are certain to have completed by the time the next GOAWAY arrives; those on the last
//! connection race with its GOAWAY.
//!
//! [`Classify::connection_rotated`]: crate::Classify::connection_rotated

use super::state::Call;
use super::step::Step;
use crate::decision::Failure;

impl Call<'_> {
    /// The attempt just settled was lost to connection rotation: counts it, and says whether a
    /// retry would be a free one: the call's first two rotations are, a later one only if the
    /// upstream had a successful attempt since the call's rotation before last.
    pub(super) fn rotation_is_free(&mut self) -> bool {
        self.on_rotated();
        self.rotations.seen(self.upstream.budget().progress())
    }

    /// The engine retries an attempt lost to rotation, and the retry is free: at once,
    /// spending nothing.
    pub(super) fn free_rotation_retry<T, E>(&mut self, failure: &Failure) -> Step<T, E> {
        self.rotations.granted_free();
        // What the caller is told if the retry cannot begin (shutdown, no time left).
        self.outcome.retrying_after(*failure);
        self.on_free_rotation(failure);
        Step::Retry
    }

    /// A retry that spends is granted: the retry granted last is not a free one.
    #[inline]
    pub(super) fn retry_paid(&mut self) {
        self.rotations.granted_paid();
    }
}
