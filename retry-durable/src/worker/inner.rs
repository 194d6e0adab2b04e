//! What a worker is made of, shared by its clones and its attempt tasks: read-only settings
//! and dependencies, and the two pieces that keep state of their own (the schedule's
//! randomness, the completer's queue).

use std::collections::HashMap;
use std::sync::Arc;

use super::completer::Completer;
use super::config::WorkerConfig;
use super::schedule::Schedule;
use crate::clock::Clock;
use crate::handler::{AlertHook, Handler};

/// The `tracing` target of every event the worker emits.
pub(super) const TARGET: &str = "retry_runtime::durable";

pub(super) struct Inner<S> {
    pub(super) store: S,
    pub(super) handlers: HashMap<String, Arc<dyn Handler>>,
    /// The registered operations, sorted: what the worker claims.
    pub(super) operations: Vec<String>,
    pub(super) alert: Arc<dyn AlertHook>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) config: WorkerConfig,
    /// The lease owner name this worker writes.
    pub(super) id: String,
    /// Decides retry times after failed attempts and rescued leases.
    pub(super) schedule: Schedule,
    /// Records successes in batches.
    pub(super) completer: Completer<S>,
}
