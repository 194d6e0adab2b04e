//! The durable queue as the attempt loop sees it: [`HandOff`], one object-safe method, so the
//! [`Registry`](crate::Registry) can hold a queue of any backend and a `#[retry(durable = ...)]`
//! call can hand its work over when its in-memory retries stop on a transient failure.

use std::future::Future;
use std::pin::Pin;

use super::error::DurableError;
use super::queue::{Deferred, DurableQueue};
use super::store::DurableStore;
use super::task::EnqueueOptions;

/// The future [`HandOff::hand_off`] returns.
pub type HandOffFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Deferred, DurableError>> + Send + 'a>>;

/// A durable queue a deferred call is written to. Implemented by every
/// [`DurableQueue`]; register one with [`Registry::set_durable_queue`](crate::Registry::set_durable_queue).
pub trait HandOff: Send + Sync + 'static {
    /// Writes one task (see [`DurableQueue::enqueue`]): a repeated `(operation, key)` returns
    /// the existing task.
    fn hand_off<'a>(
        &'a self,
        operation: &'a str,
        idempotency_key: &'a str,
        payload: &'a [u8],
        options: EnqueueOptions,
    ) -> HandOffFuture<'a>;
}

impl<S: DurableStore> HandOff for DurableQueue<S> {
    fn hand_off<'a>(
        &'a self,
        operation: &'a str,
        idempotency_key: &'a str,
        payload: &'a [u8],
        options: EnqueueOptions,
    ) -> HandOffFuture<'a> {
        Box::pin(self.enqueue(operation, idempotency_key, payload, options))
    }
}
