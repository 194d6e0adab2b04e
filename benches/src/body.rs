//! The attempt bodies every in-process contender runs: they wait once, as every real request
//! does, and are plain named futures, so each library (tower's `ServiceFn` included) wraps
//! exactly the same code.

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};

use crate::BenchError;

/// Returns `Pending` once (waking its task at once), then `Ready`: one trip through the
/// scheduler, the cheapest stand-in for I/O (what `tokio::task::yield_now` does, without
/// tokio's deferred-wake list).
#[derive(Debug, Default)]
pub struct WaitOnce {
    waited: bool,
}

impl Future for WaitOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.waited {
            return Poll::Ready(());
        }
        self.waited = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A successful attempt that waits once: [`WaitOnce`], then `Ok(1)`.
#[derive(Debug, Default)]
pub struct Work {
    wait: WaitOnce,
}

/// The body of a successful attempt.
pub fn work() -> Work {
    Work::default()
}

impl Future for Work {
    type Output = Result<u64, BenchError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.wait).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Ok(black_box(1))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Attempts of [`flaky`] so far, in this process.
static TRIES: AtomicU32 = AtomicU32::new(0);

/// An attempt that waits once, then fails with a 503 twice in every three attempts: the
/// first two attempts of an operation fail and the third succeeds, as long as every
/// operation makes exactly three (each contender checks its result).
#[derive(Debug)]
pub struct Flaky {
    wait: WaitOnce,
    succeeds: bool,
}

/// The body of the failure path.
pub fn flaky() -> Flaky {
    let attempt = TRIES.fetch_add(1, Ordering::Relaxed) + 1;
    Flaky {
        wait: WaitOnce::default(),
        succeeds: attempt.is_multiple_of(3),
    }
}

impl Future for Flaky {
    type Output = Result<u64, BenchError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.wait).poll(cx) {
            Poll::Ready(()) if self.succeeds => Poll::Ready(Ok(black_box(1))),
            Poll::Ready(()) => Poll::Ready(Err(BenchError::Status(503))),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_waits_once_and_succeeds() {
        let mut work = std::pin::pin!(work());
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(work.as_mut().poll(&mut cx).is_pending());
        assert!(matches!(work.poll(&mut cx), Poll::Ready(Ok(1))));
    }

    #[tokio::test]
    async fn flaky_fails_twice_then_succeeds() {
        // Other tests in this process do not call `flaky`: the count starts at zero.
        let outcomes: Vec<bool> = {
            let mut v = Vec::new();
            for _ in 0..6 {
                v.push(flaky().await.is_ok());
            }
            v
        };
        assert_eq!(outcomes, [false, false, true, false, false, true]);
    }
}
