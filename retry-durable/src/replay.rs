//! A `#[retry(durable = ...)]` function's [`Replay`] as one of the worker's handlers.

use retry_runtime::durable::{HandlerFuture, Replay, TaskContext};

use crate::handler::Handler;
use crate::store::DurableStore;
use crate::worker::WorkerBuilder;

impl Handler for Replay {
    fn call(&self, task: TaskContext) -> HandlerFuture {
        Replay::call(self, task)
    }
}

impl<S: DurableStore> WorkerBuilder<S> {
    /// Registers a `#[retry(durable = ...)]` function's replay under its operation name.
    pub fn replay(self, replay: Replay) -> Self {
        self.handler(replay.operation(), replay)
    }
}
