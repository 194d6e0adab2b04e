//! The completer: records successes in batches, as many as are waiting per statement.
//!
//! Draining a backlog costs a few statements per batch, not per task: each success goes to a
//! task that writes all the successes waiting for it in one statement (each still fenced on
//! its claim), while the next ones queue.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use retry_runtime::durable::TaskId;
use tokio::sync::{mpsc, oneshot};

use super::config::HAND_OFF_COALESCE;
use crate::clock::Clock;
use crate::store::{Completion, DurableStore};
use crate::task::Fence;

/// The most completions one write records.
const COMPLETION_BATCH: usize = 1024;

/// A successful attempt waiting for the completer, and where to say whether it was recorded
/// (`Ok(false)`: the fence no longer held).
type Pending = (Completion, oneshot::Sender<Result<bool, String>>);

/// Hands successes to the batch writer, starting it on first use (on the runtime the worker
/// runs on). The writer holds the store and clock, not the worker: it ends when this, the
/// queue's last sender, is dropped with the worker.
pub(super) struct Completer<S> {
    store: S,
    clock: Arc<dyn Clock>,
    queue: Mutex<Option<mpsc::UnboundedSender<Pending>>>,
}

impl<S: DurableStore> Completer<S> {
    pub(super) fn new(store: S, clock: Arc<dyn Clock>) -> Self {
        Completer {
            store,
            clock,
            queue: Mutex::new(None),
        }
    }

    /// Records a success: `Ok(true)` when written, `Ok(false)` when the fence no longer held.
    /// While one write is in flight the next successes queue and go together in the next.
    pub(super) async fn record(
        &self,
        fence: &Fence,
        output: Option<Vec<u8>>,
    ) -> Result<bool, String> {
        let completion = Completion {
            fence: fence.clone(),
            output,
        };
        let (reply, written) = oneshot::channel();
        match self.queue().send((completion, reply)) {
            Ok(()) => match written.await {
                Ok(Ok(done)) => Ok(done),
                Ok(Err(message)) => Err(message),
                Err(_) => Err("the completer stopped before recording the success".to_owned()),
            },
            Err(mpsc::error::SendError((completion, _))) => self
                .store
                .complete(fence, completion.output.as_deref(), self.clock.now())
                .await
                .map_err(|e| e.to_string()),
        }
    }

    /// The writer's queue, starting the writer if it is not running.
    fn queue(&self) -> mpsc::UnboundedSender<Pending> {
        let mut slot = self
            .queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(tx) = slot.as_ref().filter(|tx| !tx.is_closed()) {
            return tx.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(complete_batches(
            self.store.clone(),
            Arc::clone(&self.clock),
            rx,
        ));
        *slot = Some(tx.clone());
        tx
    }
}

/// Writes queued successes, as many as are waiting (up to [`COMPLETION_BATCH`]) per statement,
/// each fenced on its claim, and tells each attempt whether its success was recorded.
async fn complete_batches<S: DurableStore>(
    store: S,
    clock: Arc<dyn Clock>,
    mut queue: mpsc::UnboundedReceiver<Pending>,
) {
    let mut batch = Vec::new();
    let started = tokio::time::Instant::now();
    let mut last_write = started.checked_sub(HAND_OFF_COALESCE).unwrap_or(started);
    loop {
        // Successes arriving one by one are written together (see `HAND_OFF_COALESCE`); a
        // drain's large batches take longer than that to write anyway.
        tokio::time::sleep_until(last_write + HAND_OFF_COALESCE).await;
        if queue.recv_many(&mut batch, COMPLETION_BATCH).await == 0 {
            break;
        }
        last_write = tokio::time::Instant::now();
        let (done, replies): (Vec<Completion>, Vec<_>) = batch.drain(..).unzip();
        match store.complete_many(&done, clock.now()).await {
            Ok(written) => {
                let written: HashSet<TaskId> = written.into_iter().collect();
                for (c, reply) in done.iter().zip(replies) {
                    let _ = reply.send(Ok(written.contains(&c.fence.task_id)));
                }
            }
            Err(e) => {
                let message = e.to_string();
                for reply in replies {
                    let _ = reply.send(Err(message.clone()));
                }
            }
        }
    }
}
