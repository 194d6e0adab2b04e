//! The odds that the throttle refuses an attempt, from the window's counts (see "Who is
//! refused" in the [module docs](super#who-is-refused)).

/// The refusal probability at `k` of a retry or a hedge of a call that sent `own` of the
/// window's `sent` attempts: the call's own failures are what a retry is for, so the upstream
/// is judged on what the other calls met; with none, a lone call's retry is not refused here
/// (it goes at its backoff, while the upstream has not failed everything for the hold: see
/// [`holds_at`](super::Throttle::holds_at), which the loop asks first). No `+ 1` below the fraction,
/// unlike a first attempt's: first attempts keep probing an upstream that accepts nothing,
/// extra work need not.
#[inline]
pub(super) fn extra_refusal(sent: f64, accepted: u64, k: f64, own: u32) -> f64 {
    let others = sent - f64::from(own);
    if others <= 0.0 {
        return 0.0;
    }
    ((others - k * accepted as f64) / others).clamp(0.0, 1.0)
}

/// The refusal probability for `requests` of which `accepted` were accepted, at `k`.
#[inline]
pub(super) fn refusal(requests: f64, accepted: u64, k: f64) -> f64 {
    ((requests - k * accepted as f64) / (requests + 1.0)).clamp(0.0, 1.0)
}
